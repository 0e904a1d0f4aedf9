package flow

import (
	"github.com/novaflow/nova/pkg/codecache/cacheentry"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Cache match levels (AIRun.cache_match, ai_metadata.cache_match).
const (
	matchExact    = "exact"
	matchSemantic = "semantic"
)

// CacheEffects are what a transition decided about the cache; the engine
// applies them once the state that decided them is stored.
type CacheEffects struct {
	Puts              map[string]CachePut
	Deletes           []CacheDelete
	Hits              map[string]int64 // by match
	Misses, Evictions int64
}

// CachePut stores an entry, and indexes it in its semantic group when Group
// is set and its task's embedding is kept.
type CachePut struct {
	Entry *cacheentry.Entry
	Group string
}

// CacheDelete evicts an entry, and its member of Group's index.
type CacheDelete struct {
	Key, Group string
}

// SemanticQuery is what the semantic level compares: a task, within Group.
type SemanticQuery struct {
	Group, Task string
	// Allowance is what the node's budget leaves for the embeddings call.
	Allowance *novav1.Allowance
}

// SemanticResult is what the semantic level found after an exact miss.
type SemanticResult struct {
	// Entry and Match are the hit, nil and zero for a miss.
	Entry *cacheentry.Entry
	Match cacheentry.Match
	// Ranking is what the comparison found.
	Ranking cacheentry.Ranking
	// Call is the embeddings call the lookup made (nil when the embedding
	// was kept or no call was made).
	Call *novav1.ModelCall
	// Note says why nothing could be compared ("" when it was).
	Note string
	// Quiet: the level is known to be off; the lookup leaves no step.
	Quiet bool
}
