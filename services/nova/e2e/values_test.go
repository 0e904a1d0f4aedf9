package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/valueref"
)

// TestLargeValuesTravelByReference: a 5 MiB context value, made by a node or
// given by the producer, reaches the next node whole while every event and
// every audit document carries only a reference.
func TestLargeValuesTravelByReference(t *testing.T) {
	e := startEnv(t)
	const size = 5 << 20
	def := parse(t, `
name: large-values
nodes:
  - {id: start, type: start}
  - id: make
    type: action
    code: |
      context["blob"] = "x" * (5 * 1024 * 1024)
  - id: measure
    type: action
    code: |
      import hashlib
      for key in ("blob", "given"):
          value = context[key]
          context[key + "_len"] = len(value)
          context[key + "_sha256"] = hashlib.sha256(value.encode()).hexdigest()
  - {id: done, type: end}
edges:
  - {from: start, to: make}
  - {from: make, to: measure}
  - {from: measure, to: done}
`)
	given := strings.Repeat("y", size)
	wc := e.run(def, map[string]any{"given": given})
	if wc.Status != "succeeded" {
		t.Fatalf("status %q, error %q; want succeeded", wc.Status, wc.Error)
	}
	ctx := ctxMap(wc.Context)
	for key, value := range map[string]string{"blob": strings.Repeat("x", size), "given": given} {
		sum := sha256.Sum256([]byte(value))
		if ctx[key+"_len"] != float64(size) || ctx[key+"_sha256"] != hex.EncodeToString(sum[:]) {
			t.Errorf("the next node saw %s with length %v and sha256 %v; want %d and %x",
				key, ctx[key+"_len"], ctx[key+"_sha256"], size, sum)
		}
		// The context itself holds a reference to the JSON of the value.
		ref, ok := valueref.AsRef(ctx[key])
		if !ok {
			t.Errorf("final context[%q] is not a reference map: %.200v", key, ctx[key])
			continue
		}
		encoded, _ := json.Marshal(value)
		encSum := sha256.Sum256(encoded)
		if ref.Size != int64(len(encoded)) || ref.SHA256 != hex.EncodeToString(encSum[:]) {
			t.Errorf("context[%q] = reference of size %d, sha256 %s; want %d, %x", key, ref.Size, ref.SHA256, len(encoded), encSum)
		}
		got, err := e.values.Get(e.ctx, ref)
		if err != nil || string(got) != string(encoded) {
			t.Errorf("reading the reference of %q back: %.40v, %v; want the value", key, got, err)
		}
	}

	// Every audit document of the execution is small: snapshots hold references.
	e.auditIdle()
	client, err := mongo.Connect(options.Client().ApplyURI(e.s.MongoURI()))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(e.ctx)
	db := client.Database("nova")
	const maxDoc = 64 << 10
	for coll, filter := range map[string]bson.D{
		chainstore.ExecutionsCollection: {{Key: "_id", Value: wc.ExecutionId}},
		chainstore.ChainCollection:      {{Key: "execution_id", Value: wc.ExecutionId}},
		chainstore.StepsCollection:      {{Key: "execution_id", Value: wc.ExecutionId}},
	} {
		cur, err := db.Collection(coll).Find(e.ctx, filter)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for cur.Next(e.ctx) {
			n++
			if len(cur.Current) > maxDoc {
				t.Errorf("%s document %v is %d bytes, want under %d", coll, cur.Current.Lookup("_id"), len(cur.Current), maxDoc)
			}
		}
		if err := cur.Err(); err != nil {
			t.Fatal(err)
		}
		cur.Close(e.ctx)
		if n == 0 {
			t.Errorf("no %s documents for the execution", coll)
		}
	}
	nodes := e.chain(wc.ExecutionId)
	checkChain(t, def, wc, nodes)
	if _, ok := valueref.AsRef(nodeDoc(t, nodes, "measure", 1).InputContext["blob"]); !ok {
		t.Errorf("measure's input snapshot does not hold blob as a reference")
	}
}

// TestContextKeysMongoRejects: context keys are the user's, and MongoDB-like
// stores reject field names starting with '$' or containing '.'; the chain of
// work must still be recorded and read back with the keys as written.
func TestContextKeysMongoRejects(t *testing.T) {
	e := startEnv(t)
	def := parse(t, `
name: odd-keys
nodes:
  - {id: start, type: start}
  - id: keys
    type: action
    code: |
      context["invoice.total"] = 1500
      context["$schema"] = "https://example.com/invoice"
      context["nested"] = {"a.b": {"$c": [{"d.e": 1}]}}
  - {id: done, type: end}
edges:
  - {from: start, to: keys}
  - {from: keys, to: done}
`)
	wc := e.run(def, map[string]any{"given.key": "x"})
	if wc.Status != "succeeded" {
		t.Fatalf("status %q, error %q; want succeeded", wc.Status, wc.Error)
	}
	want := map[string]any{
		"invoice.total": 1500.0,
		"$schema":       "https://example.com/invoice",
		"nested":        map[string]any{"a.b": map[string]any{"$c": []any{map[string]any{"d.e": 1.0}}}},
		"given.key":     "x",
	}
	if got := ctxMap(wc.Context); !reflect.DeepEqual(got, want) {
		t.Errorf("final context = %v, want %v", got, want)
	}
	nodes := e.chain(wc.ExecutionId)
	checkChain(t, def, wc, nodes)
	// Compare through JSON, as a reader of the chain of work sees it.
	asJSON := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	if got := nodeDoc(t, nodes, "keys", 1).OutputResult; asJSON(got) != asJSON(want) {
		t.Errorf("keys output_result = %s, want %s", asJSON(got), asJSON(want))
	}
	if got := nodeDoc(t, nodes, "keys", 1).InputContext; asJSON(got) != `{"given.key":"x"}` {
		t.Errorf("keys input_context = %s, want the initial context", asJSON(got))
	}
	exec, err := e.s.Store.Execution(e.ctx, wc.ExecutionId)
	if err != nil {
		t.Fatal(err)
	}
	if asJSON(exec.FinalContext) != asJSON(want) || asJSON(exec.InitialContext) != `{"given.key":"x"}` {
		t.Errorf("execution contexts: initial %s, final %s; want the keys as written", asJSON(exec.InitialContext), asJSON(exec.FinalContext))
	}
}

// TestLargeContextKeptApart: while an execution runs, a large member of its
// context (a list of 5,000 numbers) is stored once beside its state, which
// every event reads and writes, and not in it; every reader of the state
// (nova status, the gateway) still sees the list; the next node gets it
// whole; and once the execution ends its state holds the list again and
// the part is removed.
func TestLargeContextKeptApart(t *testing.T) {
	e := startEnv(t)
	def := parse(t, `
name: large-context
nodes:
  - {id: start, type: start}
  - {id: hold, type: wait, signal: go, timeout: 1h}
  - {id: count, type: action, code: 'context["seen"] = len(context["xs"]) + sum(context["xs"])'}
  - {id: done, type: end}
edges:
  - {from: start, to: hold}
  - {from: hold, to: count}
  - {from: count, to: done}
`)
	const n = 5000
	xs := make([]int, n)
	for i := range xs {
		xs[i] = i
	}
	list, _ := json.Marshal(xs)
	exec, err := e.client.Start(e.ctx, def, "", map[string]any{"xs": xs, "note": "kept in the state"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitingFor(exec.ID, "hold", "signal")
	kv, err := e.bus.JetStream().KeyValue(e.ctx, bus.BucketExecutions)
	if err != nil {
		t.Fatal(err)
	}
	parts := func() []string {
		keys, err := kv.ListKeysFiltered(e.ctx, exec.ID+".part.>")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for k := range keys.Keys() {
			out = append(out, k)
		}
		return out
	}
	// The engine publishes what a transition says before it stores the
	// state: the state follows the node.waiting event a moment later.
	var entry jetstream.KeyValueEntry
	e.eventually(testTimeout/3, "the waiting execution's state stored", func() bool {
		entry, err = kv.Get(e.ctx, exec.ID)
		return err == nil
	})
	if len(entry.Value()) > len(list)/4 {
		t.Errorf("the running state is %d bytes; the list it holds is %d and should be kept apart", len(entry.Value()), len(list))
	}
	keys := parts()
	if len(keys) != 1 {
		t.Fatalf("parts of the running execution: %v; want one (the list)", keys)
	}
	part, err := kv.Get(e.ctx, keys[0])
	if err != nil || string(part.Value()) != string(list) {
		t.Fatalf("the part holds %.60s (%v); want the list", part.Value(), err)
	}
	ctx := ctxMap(e.state(exec.ID).Context)
	if got, _ := ctx["xs"].([]any); len(got) != n || ctx["note"] != "kept in the state" {
		t.Fatalf("the state as read has %d items and note %v; want %d and the note", len(got), ctx["note"], n)
	}

	e.signalExec(exec.ID, "go", map[string]any{})
	wc, err := exec.Wait(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	succeeded(t, wc)
	final := ctxMap(wc.Context)
	if final["seen"] != float64(n+n*(n-1)/2) {
		t.Errorf("count saw %v; want %d (every item)", final["seen"], n+n*(n-1)/2)
	}
	// The completion is published before the state that ends is stored.
	e.eventually(testTimeout/3, "the ended state holds the list whole, and the part is removed", func() bool {
		entry, err := kv.Get(e.ctx, exec.ID)
		return err == nil && strings.Contains(string(entry.Value()), string(list)) && len(parts()) == 0
	})
}
