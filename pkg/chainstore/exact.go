package chainstore

import (
	"encoding/json"
	"math"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/redact"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// exactNumberSubtype marks a BSON binary that holds a JSON number's text: a
// number BSON cannot hold exactly on every MongoDB-compatible store, that is
// an integer outside the int64 range (BSON's decimal128 would cap at 34
// digits, and FerretDB has none) or -0.0 (FerretDB on SQLite stores it as
// 0). 0x80 is the first user-defined binary subtype; JSON never produces a
// binary, so the mark is unambiguous.
const exactNumberSubtype = 0x80

// contextDoc is a context as stored: redacted, keys escaped, every integer
// that fits as an int64 and every float as a double, other numbers as
// exact-number binaries. nil stays nil and is stored as null.
func contextDoc(v *novav1.JSONValue) map[string]any { return bsonContext(jsonContext(v)) }

// jsonContext is a context as exact JSON values, secrets hidden.
func jsonContext(v *novav1.JSONValue) map[string]any {
	if v == nil {
		return nil
	}
	return redact.Map(jsonvalue.Map(v))
}

// bsonContext is a context (from jsonContext) as the store keeps it.
func bsonContext(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	b, _ := escapeKeys(toBSON(m)).(map[string]any)
	return b
}

// toBSON turns the numbers of a decoded JSON value (json.Number) into the
// BSON types that hold them exactly.
func toBSON(v any) any {
	switch t := v.(type) {
	case json.Number:
		if jsonvalue.IsInteger(t) {
			if i, ok := jsonvalue.Int64(t); ok {
				return i
			}
			return bson.Binary{Subtype: exactNumberSubtype, Data: []byte(t)}
		}
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil { // out of float64's range: keep the text
			return bson.Binary{Subtype: exactNumberSubtype, Data: []byte(t)}
		}
		if f == 0 && math.Signbit(f) {
			return bson.Binary{Subtype: exactNumberSubtype, Data: []byte("-0.0")}
		}
		return f
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = toBSON(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = toBSON(e)
		}
		return out
	}
	return v
}

// fromBSON turns a stored context back into JSON values with exact numbers:
// a double is written as a float (150.0), an int32 or int64 as an integer,
// an exact-number binary as its text.
func fromBSON(v any) any {
	switch t := v.(type) {
	case float64:
		if math.IsNaN(t) || math.IsInf(t, 0) {
			return t
		}
		return json.Number(jsonvalue.FormatFloat(t))
	case int32:
		return json.Number(strconv.FormatInt(int64(t), 10))
	case int64:
		return json.Number(strconv.FormatInt(t, 10))
	case bson.Binary:
		if t.Subtype == exactNumberSubtype {
			return json.Number(t.Data)
		}
		return t
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = fromBSON(e)
		}
		return out
	case bson.M:
		return fromBSON(map[string]any(t))
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = fromBSON(e)
		}
		return out
	case bson.A:
		return fromBSON([]any(t))
	}
	return v
}

// readContext restores a stored context: keys unescaped, numbers exact.
func readContext(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out, _ := fromBSON(unescapeMap(m)).(map[string]any)
	return out
}
