package engine

import "sync"

// stateCache keeps the state this replica last stored for each running
// execution, with its revision, so that the next event of the execution
// starts from it instead of reading the bucket again: a read is a request
// and a reply on the bus per transition. The bucket stays the truth: the
// store that follows is a compare-and-set at the cached revision, and when
// another replica moved the execution on it fails, the entry is dropped and
// the state is read again.
type stateCache struct {
	mu       sync.Mutex
	entries  map[string]cachedState
	bytes    int
	maxBytes int
}

type cachedState struct {
	revision uint64
	data     []byte
}

// stateCacheBytes bounds the states kept: at some 1 KiB a state, tens of
// thousands of executions in flight.
const stateCacheBytes = 32 << 20

func newStateCache(maxBytes int) *stateCache {
	return &stateCache{entries: map[string]cachedState{}, maxBytes: maxBytes}
}

// get returns the state of id stored last by this replica, if kept.
func (c *stateCache) get(id string) (cachedState, bool) {
	if c == nil {
		return cachedState{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.entries[id]
	return s, ok
}

// put keeps data as the state of id at revision; a state larger than a
// sixteenth of the bound is not kept. Over the bound, entries are dropped
// in no particular order (the map's) until it fits.
func (c *stateCache) put(id string, revision uint64, data []byte) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(id)
	if len(data) > c.maxBytes/16 {
		return
	}
	for k := range c.entries {
		if c.bytes+len(data) <= c.maxBytes {
			break
		}
		c.dropLocked(k)
	}
	c.entries[id] = cachedState{revision: revision, data: data}
	c.bytes += len(data)
}

// drop forgets the state of id: it ended, or another replica stored a newer one.
func (c *stateCache) drop(id string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(id)
}

func (c *stateCache) dropLocked(id string) {
	if s, ok := c.entries[id]; ok {
		c.bytes -= len(s.data)
		delete(c.entries, id)
	}
}
