package execstate

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// bigList is the JSON text of a list of n numbers.
func bigList(n int) string {
	xs := make([]string, n)
	for i := range xs {
		xs[i] = fmt.Sprint(i)
	}
	return "[" + strings.Join(xs, ",") + "]"
}

// TestPartsRoundTrip stores a running state whose context holds a large
// list: the stored state leaves the list out and names it once, though
// the execution, its line and the line's node input share the context;
// reading it back (with the part) gives the contexts as they were, and
// storing it again unchanged names the same part without splitting anew.
func TestPartsRoundTrip(t *testing.T) {
	list := bigList(5000)
	ctx := &novav1.JSONValue{Raw: []byte(`{"n":1,"xs":` + list + `}`)}
	line := &novav1.Branch{Id: "b1", Context: ctx, NodeInput: ctx}
	st := &novav1.ExecutionState{ExecutionId: "e1", Context: ctx, Branches: []*novav1.Branch{line},
		Ended: []*novav1.Branch{{Context: &novav1.JSONValue{Raw: []byte(`{"small":true}`)}}}}

	named, restore := Compact(st, nil, PartMin)
	if len(named) != 1 {
		t.Fatalf("the stored state names %d parts, want 1: %v", len(named), named)
	}
	d := Digest([]byte(list))
	if !bytes.Equal(named[d], []byte(list)) {
		t.Fatalf("part %s is not the list", d)
	}
	if st.Context == ctx || st.Context != line.Context || line.Context != line.NodeInput {
		t.Fatal("the shared context did not get one stored form")
	}
	if got := string(st.Context.Raw); got != `{"n":1}` {
		t.Fatalf("stored context %s, want the list left out", got)
	}
	data, err := proto.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	restore()
	if st.Context != ctx || line.Context != ctx || line.NodeInput != ctx {
		t.Fatal("restore did not put the contexts back")
	}
	if len(data) > 1024 {
		t.Fatalf("the stored state is %d bytes, the list %d", len(data), len(list))
	}

	var back novav1.ExecutionState
	if err := proto.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	reads := 0
	p, err := Expand(&back, func(digest string) ([]byte, error) {
		reads++
		if digest != d {
			return nil, fmt.Errorf("no part %s", digest)
		}
		return []byte(list), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if reads != 3 || !p.Named[d] {
		t.Fatalf("%d reads, named %v", reads, p.Named)
	}
	for _, v := range []*novav1.JSONValue{back.Context, back.Branches[0].Context, back.Branches[0].NodeInput} {
		if !bytes.Equal(v.Raw, ctx.Raw) || len(v.Parts) != 0 {
			t.Fatalf("read back %.60s (parts %v), want %.60s", v.Raw, v.Parts, ctx.Raw)
		}
	}
	// Unchanged since read: stored as read, the part not stored again.
	was := back.Context
	named, restore = Compact(&back, p, PartMin)
	if raw, ok := named[d]; !ok || raw != nil {
		t.Fatalf("an unchanged context names %v, want its part as stored already", named)
	}
	restore()
	if back.Context != was {
		t.Fatal("restore did not put the context back")
	}
}

// TestPartsEndedWhole: an ended execution's state (partMin 0) and small
// contexts are stored as they are.
func TestPartsEndedWhole(t *testing.T) {
	big := &novav1.JSONValue{Raw: []byte(`{"xs":` + bigList(5000) + `}`)}
	st := &novav1.ExecutionState{Context: big}
	named, restore := Compact(st, nil, 0)
	if len(named) != 0 || st.Context != big {
		t.Fatalf("an ended state names %d parts", len(named))
	}
	restore()
	small := &novav1.JSONValue{Raw: []byte(`{"xs":[1,2,3]}`)}
	st = &novav1.ExecutionState{Context: small}
	if named, _ := Compact(st, nil, PartMin); len(named) != 0 || st.Context != small {
		t.Fatal("a small context was split")
	}
}

// TestPartsMissing: a part that cannot be read is an error naming the
// member and the execution.
func TestPartsMissing(t *testing.T) {
	st := &novav1.ExecutionState{ExecutionId: "e9", Context: &novav1.JSONValue{Raw: []byte(`{}`),
		Parts: []*novav1.JSONPart{{Key: "xs", Digest: "abc"}}}}
	_, err := Expand(st, func(string) ([]byte, error) { return nil, fmt.Errorf("key not found") })
	if err == nil || !strings.Contains(err.Error(), `"xs"`) || !strings.Contains(err.Error(), "e9") {
		t.Fatalf("err = %v", err)
	}
}
