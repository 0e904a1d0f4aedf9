package execstate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// A running execution's state is stored again with every event the engine
// applies to it. Large members of the contexts it holds (a map's list of
// 10,000 items, read at each item) are kept beside it instead, each once,
// under <execution>.part.<digest> in the same bucket: the state names them
// (JSONValue.parts) and its readers put them back. An ended execution's
// state holds its contexts whole.

// PartMin is the size of a context member's JSON text over which a running
// execution's stored state keeps it apart.
const PartMin = 8 << 10

// PartKey is the key, in the executions' bucket, of the member of
// execution id's state whose text has digest. An execution id holds no dot,
// so no part's key is an execution's.
func PartKey(id, digest string) string { return id + ".part." + digest }

// Digest names a part by its text.
func Digest(raw []byte) string {
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// Contexts calls fn with each context st holds: the execution's, each
// line's and its node input, those parked at joins and those of lines that
// ended.
func Contexts(st *novav1.ExecutionState, fn func(v **novav1.JSONValue)) {
	fn(&st.Context)
	fn(&st.NodeInput)
	for _, l := range st.Branches {
		fn(&l.Context)
		fn(&l.NodeInput)
	}
	for _, js := range st.Joins {
		for _, r := range js.Arrived {
			fn(&r.Context)
		}
		for _, a := range js.Activations {
			for _, r := range a.Arrived {
				fn(&r.Context)
			}
		}
	}
	for _, r := range st.Ended {
		fn(&r.Context)
	}
}

// Parts is what reading a stored state learned of its parts: the digests
// it names, and the stored form of each context it put back, so that
// storing the state again does not split an unchanged context again.
type Parts struct {
	// Named are the digests the stored state names.
	Named  map[string]bool
	stored map[*novav1.JSONValue]*novav1.JSONValue
}

// Expand puts back the members st's contexts keep apart, each read by
// get(digest), and reports what it put back. A state with none costs a
// look at each context.
func Expand(st *novav1.ExecutionState, get func(digest string) ([]byte, error)) (*Parts, error) {
	p := &Parts{}
	var err error
	Contexts(st, func(v **novav1.JSONValue) {
		stored := *v
		if err != nil || len(stored.GetParts()) == 0 {
			return
		}
		o := jsonvalue.OwnObject(&novav1.JSONValue{Raw: stored.Raw})
		for _, part := range stored.Parts {
			raw, gerr := get(part.Digest)
			if gerr != nil {
				err = fmt.Errorf("context member %q of execution %s (part %s): %w", part.Key, st.ExecutionId, part.Digest, gerr)
				return
			}
			o[part.Key] = raw
			if p.Named == nil {
				p.Named = map[string]bool{}
			}
			p.Named[part.Digest] = true
		}
		whole := o.Proto()
		if p.stored == nil {
			p.stored = map[*novav1.JSONValue]*novav1.JSONValue{}
		}
		p.stored[whole] = stored
		*v = whole
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Compact replaces each context of st with its stored form, keeping its
// members over partMin apart (partMin <= 0: none, as for an ended execution). It
// returns the parts the stored form names (digest: text) and a function
// that puts st's contexts back as they were. A context several fields
// share gets one stored form, so MarshalState still sees them shared.
func Compact(st *novav1.ExecutionState, p *Parts, partMin int) (named map[string][]byte, restore func()) {
	named = map[string][]byte{}
	type slot struct {
		at  **novav1.JSONValue
		was *novav1.JSONValue
	}
	var slots []slot
	done := map[*novav1.JSONValue]*novav1.JSONValue{}
	Contexts(st, func(v **novav1.JSONValue) {
		whole := *v
		if whole == nil || partMin <= 0 || len(whole.Raw) <= partMin {
			return
		}
		stored, ok := done[whole]
		if !ok {
			stored = compactOne(whole, p, partMin, named)
			done[whole] = stored
		}
		if stored != whole {
			slots = append(slots, slot{v, whole})
			*v = stored
		}
	})
	return named, func() {
		for i := len(slots) - 1; i >= 0; i-- {
			*slots[i].at = slots[i].was
		}
	}
}

// compactOne is the stored form of context whole, adding the parts it
// names to named.
func compactOne(whole *novav1.JSONValue, p *Parts, partMin int, named map[string][]byte) *novav1.JSONValue {
	if p != nil {
		if stored, ok := p.stored[whole]; ok {
			// Read from a stored state and not changed since: its parts
			// are stored already.
			for _, part := range stored.Parts {
				named[part.Digest] = nil
			}
			return stored
		}
	}
	o := jsonvalue.OwnObject(whole)
	var parts []*novav1.JSONPart
	for _, k := range o.Keys() {
		raw := o[k]
		if len(raw) <= partMin {
			continue
		}
		d := Digest(raw)
		parts = append(parts, &novav1.JSONPart{Key: k, Digest: d})
		if _, ok := named[d]; !ok || named[d] == nil {
			named[d] = raw
		}
		delete(o, k)
	}
	if len(parts) == 0 {
		return whole
	}
	return &novav1.JSONValue{Raw: o.Bytes(), Parts: parts}
}
