package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/execution/execstate"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// A running execution's stored state keeps its contexts' large members
// apart, each under <execution>.part.<digest> in BucketExecutions
// (execstate.Compact): a map of 10,000 items then reads and writes a state
// of a few hundred bytes at each item, not its list of 50 KB. A part is
// stored before the first state that names it, and removed once a stored
// state no longer does (an ended execution's state holds its contexts
// whole), so a crash in between leaves at worst a part no state names,
// never a state whose part is missing.

// partCacheBytes bounds the parts an engine keeps in memory.
const partCacheBytes = 32 << 20

// partCache keeps the parts the engine read or wrote last, by digest, up
// to maxBytes of them: a map's items read the same list at each event.
type partCache struct {
	mu       sync.Mutex
	maxBytes int
	bytes    int
	order    []string
	parts    map[string][]byte
}

func newPartCache(maxBytes int) *partCache {
	return &partCache{maxBytes: maxBytes, parts: map[string][]byte{}}
}

func (c *partCache) get(digest string) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	raw, ok := c.parts[digest]
	return raw, ok
}

func (c *partCache) put(digest string, raw []byte) {
	if c == nil || len(raw) > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.parts[digest]; ok {
		return
	}
	for c.bytes+len(raw) > c.maxBytes && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		c.bytes -= len(c.parts[old])
		delete(c.parts, old)
	}
	c.parts[digest] = raw
	c.order = append(c.order, digest)
	c.bytes += len(raw)
}

// expandParts puts back the context members execution id's stored state st
// keeps apart.
func (e *Engine) expandParts(ctx context.Context, id string, st *novav1.ExecutionState) (*execstate.Parts, error) {
	return execstate.Expand(st, func(digest string) ([]byte, error) {
		if raw, ok := e.parts.get(digest); ok {
			return raw, nil
		}
		entry, err := e.execs.Get(ctx, execution.PartKey(id, digest))
		if err != nil {
			return nil, err
		}
		if execstate.Digest(entry.Value()) != digest {
			return nil, fmt.Errorf("part %s of execution %s does not hold the text it names", digest, id)
		}
		e.parts.put(digest, entry.Value())
		return entry.Value(), nil
	})
}

// compactParts gives st's contexts their stored form (execstate.Compact;
// an ended execution's are stored whole) and stores the parts it names
// that read (nil for a new execution) did not. It returns the digests the
// stored form names and what puts st's contexts back.
func (e *Engine) compactParts(ctx context.Context, st *novav1.ExecutionState, read *execstate.Parts) (map[string][]byte, func(), error) {
	partMin := execstate.PartMin
	if st.GetStatus() != statusRunning {
		partMin = 0
	}
	named, restore := execstate.Compact(st, read, partMin)
	for digest, raw := range named {
		if raw == nil || (read != nil && read.Named[digest]) {
			continue
		}
		if _, err := e.execs.Put(ctx, execution.PartKey(st.ExecutionId, digest), raw); err != nil {
			restore()
			return nil, nil, fmt.Errorf("keep a context member of execution %s apart: %w", st.ExecutionId, err)
		}
		e.parts.put(digest, raw)
	}
	return named, restore, nil
}

// dropParts removes the parts the state read named and the one stored
// since does not. A failure is logged: the part is then left unread.
func (e *Engine) dropParts(ctx context.Context, id string, read *execstate.Parts, named map[string][]byte) {
	if read == nil {
		return
	}
	for digest := range read.Named {
		if _, ok := named[digest]; ok {
			continue
		}
		key := execution.PartKey(id, digest)
		if err := e.execs.Purge(ctx, key, jetstream.PurgeTTL(stateMarkerTTL)); err != nil {
			e.log.WarnContext(ctx, "could not remove a context member no state names", "key", key, "error", err)
		}
	}
}
