package flow

import (
	"bytes"
	"hash/maphash"
	"maps"
	"sync"

	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Contexts keeps the large contexts this engine's transitions read last,
// split into their members, by their text. Every event an execution gets
// reads its context again from the stored state, and a map's list makes
// the context as large as the map: without it each item's event split
// the whole list (twice), so an item cost more the larger its map. A hit
// costs a hash and a comparison of the text.
type Contexts struct {
	mu      sync.Mutex
	seed    maphash.Seed
	entries []contextEntry
	next    int
}

type contextEntry struct {
	sum uint64
	raw []byte
	o   jsonvalue.Object
}

// NewContexts keeps at most n contexts.
func NewContexts(n int) *Contexts {
	return &Contexts{seed: maphash.MakeSeed(), entries: make([]contextEntry, 0, n)}
}

// contextCacheMin is the size under which splitting a context costs less
// than looking it up.
const contextCacheMin = 4 << 10

// object is the context v holds, split into its members (a copy the
// caller may change).
func (c *Contexts) object(v *novav1.JSONValue) jsonvalue.Object {
	raw := v.GetRaw()
	if c == nil || len(raw) < contextCacheMin {
		return jsonvalue.OwnObject(v)
	}
	sum := maphash.Bytes(c.seed, raw)
	c.mu.Lock()
	for _, e := range c.entries {
		if e.sum == sum && bytes.Equal(e.raw, raw) {
			o := maps.Clone(e.o)
			c.mu.Unlock()
			return o
		}
	}
	c.mu.Unlock()
	o := jsonvalue.OwnObject(v)
	e := contextEntry{sum: sum, raw: raw, o: maps.Clone(o)}
	c.mu.Lock()
	if len(c.entries) < cap(c.entries) {
		c.entries = append(c.entries, e)
	} else {
		c.entries[c.next] = e
		c.next = (c.next + 1) % len(c.entries)
	}
	c.mu.Unlock()
	return o
}
