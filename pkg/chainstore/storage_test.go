package chainstore_test

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/novaflow/nova/pkg/chainstore"
)

// An AI node's ai_metadata repeats its code (generated_code) beside the
// node's code_executed; the store keeps the code once, and every reader
// gets ai_metadata as the event told it. One whose generated_code differs
// from what ran keeps both.
func TestAINodeCodeStoredOnce(t *testing.T) {
	for _, mode := range readModes {
		t.Run(mode.name, func(t *testing.T) {
			ctx, s := openStore(t, mode.opt)
			code := "context['category'] = 'travel'"
			same := invoiceRun(t, "same")
			same.nodes[0].AiMetadata = mustStruct(t, map[string]any{"model": "gpt-test", "generated_code": code})
			same.nodes[0].CodeExecuted = code
			other := invoiceRun(t, "other")
			other.nodes[0].AiMetadata = mustStruct(t, map[string]any{"model": "gpt-test", "generated_code": "x = 1"})
			for _, e := range []events{same, other} {
				if errs := s.RecordAll(ctx, e.all()); errs != nil {
					t.Fatal(errs)
				}
			}
			for id, want := range map[string]string{"same": code, "other": "x = 1"} {
				chain, err := s.Chain(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				var got any = "(no classify node)"
				for _, n := range chain {
					if n.NodeID == "classify" {
						got = n.AIMetadata["generated_code"]
					}
				}
				if got != want {
					t.Errorf("%s: ai_metadata.generated_code read back %q, want %q", id, got, want)
				}
			}
			raw, err := rawDB(t).Collection(chainstore.ChainCollection).FindOne(ctx, bson.D{{Key: "_id", Value: "same/classify/1"}}).Raw()
			if err != nil {
				t.Fatal(err)
			}
			ai, ok := raw.Lookup("ai_metadata").DocumentOK()
			if _, err := ai.LookupErr("model"); !ok || err != nil {
				t.Fatalf("stored ai_metadata %v: want the model in it", raw.Lookup("ai_metadata"))
			}
			if _, err := ai.LookupErr("generated_code"); err == nil {
				t.Errorf("stored ai_metadata %v: want it without generated_code, the node's code_executed", ai)
			}
		})
	}
}

// What a document holds twice is stored once: a node visit's timestamp
// (its completed_at) and a step's chain_of_work_id (its visit's _id, from
// the step's execution_id, node_id and visit). Chain gives both back.
func TestDerivedFieldsStoredOnce(t *testing.T) {
	for _, mode := range readModes {
		t.Run(mode.name, func(t *testing.T) {
			ctx, s := openStore(t, mode.opt)
			e := invoiceRun(t, "derived")
			if errs := s.RecordAll(ctx, e.all()); errs != nil {
				t.Fatal(errs)
			}
			db := rawDB(t)
			node, err := db.Collection(chainstore.ChainCollection).FindOne(ctx, bson.D{{Key: "_id", Value: "derived/classify/1"}}).Raw()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := node.LookupErr("timestamp"); err == nil {
				t.Errorf("stored node visit has timestamp %v beside completed_at %v", node.Lookup("timestamp"), node.Lookup("completed_at"))
			}
			cur, err := db.Collection(chainstore.StepsCollection).Find(ctx, bson.D{})
			if err != nil {
				t.Fatal(err)
			}
			for cur.Next(ctx) {
				if _, err := cur.Current.LookupErr("chain_of_work_id"); err == nil {
					t.Errorf("stored step %v has chain_of_work_id", cur.Current.Lookup("_id"))
				}
			}
			chain, err := s.Chain(ctx, "derived")
			if err != nil {
				t.Fatal(err)
			}
			steps := 0
			for _, n := range chain {
				if n.Timestamp == nil || n.CompletedAt == nil || !n.Timestamp.Equal(*n.CompletedAt) {
					t.Errorf("%s: timestamp %v, want completed_at %v", n.ID, n.Timestamp, n.CompletedAt)
				}
				for _, st := range n.Steps {
					steps++
					if st.ChainOfWorkID != n.ID {
						t.Errorf("step %s: chain_of_work_id %q, want %q", st.ID, st.ChainOfWorkID, n.ID)
					}
				}
			}
			if len(chain) != 2 || steps != 2 {
				t.Errorf("read %d node visits and %d steps, want 2 and 2", len(chain), steps)
			}
		})
	}
}
