package flow

import (
	"encoding/base64"
	"strconv"
	"strings"
)

// Map items' results are kept by the shell in a KV bucket of their own until
// their map finishes (package engine, mapresults.go); the transition names
// them there: <execution>.<node>.<visit>.<index>, the node id in unpadded
// base64url.

// MapResult is an item's result to keep before the state is stored.
type MapResult struct {
	Key   string
	Value []byte
}

// mapResultsPrefix is the key prefix of the results of a map node's visit.
func mapResultsPrefix(execution, node string, visit int32) string {
	return execution + "." + base64.RawURLEncoding.EncodeToString([]byte(node)) + "." + strconv.Itoa(int(visit))
}

func mapItemKey(execution, node string, visit, index int32) string {
	return mapResultsPrefix(execution, node, visit) + "." + strconv.Itoa(int(index))
}

// ItemOfKey is the item index key names under prefix.
func ItemOfKey(prefix, key string) (int32, bool) {
	rest, ok := strings.CutPrefix(key, prefix+".")
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(rest, 10, 32)
	return int32(i), err == nil
}
