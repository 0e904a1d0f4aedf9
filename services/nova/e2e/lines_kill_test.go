package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/bench/loadgen"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/nova/client"
)

// Composed shapes under kill -9 of the whole `nova dev`: nested forks and
// a map whose item 13 fails are in the middle of their work when it is
// killed; after the restart the nested forks end with the causal merge,
// the map fails with the execution's context, each ends once, and no visit
// of either is left without its end.

// openVisits are the visits of execution id whose node.started has no
// node.completed, and how many workflow.completed events it has.
func openVisits(ctx context.Context, js jetstream.JetStream, id string) (open []string, completions int, err error) {
	cons, err := bus.NewEventReader(ctx, js, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{
		bus.EventSubject(id, bus.KindNodeStarted), bus.EventSubject(id, bus.KindNodeCompleted), bus.EventSubject(id, bus.KindWorkflowCompleted)}})
	if err != nil {
		return nil, 0, err
	}
	key := func(node string, visit int32, item *int32) string {
		if item != nil {
			return fmt.Sprintf("%s#%d[%d]", node, visit, *item)
		}
		return fmt.Sprintf("%s#%d", node, visit)
	}
	started := map[string]bool{}
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(500 * time.Millisecond))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
			break
		}
		if err != nil {
			return nil, 0, err
		}
		var ns novav1.NodeStarted
		var nc novav1.NodeCompleted
		switch {
		case msg.Headers().Get("ce-type") == bus.TypeNodeStarted && decodeMsg(msg, &ns) == nil:
			started[key(ns.NodeId, ns.Visit, ns.Item)] = true
		case msg.Headers().Get("ce-type") == bus.TypeNodeCompleted && decodeMsg(msg, &nc) == nil:
			delete(started, key(nc.NodeId, nc.Visit, nc.Item))
		case msg.Headers().Get("ce-type") == bus.TypeWorkflowCompleted:
			completions++
		}
	}
	for k := range started {
		open = append(open, k)
	}
	return open, completions, nil
}

func TestComposedShapesSurviveKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nova and kills `nova dev`")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	host, runs := startRunLog(t)
	call := func(path string) string {
		return fmt.Sprintf("requests.get('http://%s/%s', timeout=10).raise_for_status()", host, path)
	}
	nested := parse(t, fmt.Sprintf(`
name: kill-nested
nodes:
  - {id: start, type: start}
  - {id: s1, type: action, network: true, allow_hosts: ["%[1]s"], code: "import requests\ncontext['k'] = 1\n%[2]s"}
  - {id: a, type: action, network: true, allow_hosts: ["%[1]s"], code: "import time, requests\ntime.sleep(1.5)\ncontext['a_done'] = True\n%[3]s"}
  - {id: s2, type: action, network: true, allow_hosts: ["%[1]s"], code: "import requests\ncontext['k'] = 2\ncontext['m'] = 1\n%[4]s"}
  - {id: b1, type: action, network: true, allow_hosts: ["%[1]s"], code: "import time, requests\ntime.sleep(0.3)\n%[5]s"}
  - {id: b2, type: action, network: true, allow_hosts: ["%[1]s"], code: "import time, requests\ntime.sleep(0.3)\n%[6]s"}
  - {id: join, type: join}
  - {id: end, type: end}
edges:
  - {from: start, to: s1}
  - {from: s1, to: a}
  - {from: s1, to: s2}
  - {from: s2, to: b1}
  - {from: s2, to: b2}
  - {from: a, to: join}
  - {from: b1, to: join}
  - {from: b2, to: join}
  - {from: join, to: end}
`, host, call("nested/s1"), call("nested/a"), call("nested/s2"), call("nested/b1"), call("nested/b2")))
	failing := parse(t, fmt.Sprintf(`
name: kill-failing-map
nodes:
  - {id: start, type: start}
  - id: each
    type: map
    items: orders
    concurrency: 4
    network: true
    allow_hosts: ["%[1]s"]
    code: |
      import time, requests
      if context['index'] == 13:
          raise ValueError('item 13 is broken')
      time.sleep(0.4)
      context['result'] = context['item']
      requests.get("http://%[1]s/item/%%d" %% context["index"], timeout=10).raise_for_status()
  - {id: end, type: end}
edges: [{from: start, to: each}, {from: each, to: end}]
`, host))

	proc, natsURL := startNovaDev(t)
	b, err := loadgen.Connect(ctx, natsURL, "kill-shapes")
	if err != nil {
		t.Fatalf("%v\n%s", err, proc.Describe())
	}
	c := client.New(b, nil)
	orders := make([]int, 20)
	for i := range orders {
		orders[i] = 100 + i
	}
	nestedExec, err := c.Start(ctx, nested, "", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	// The catalog is large enough that the running state keeps it apart
	// (<execution>.part.<digest>), shared by the map's line and its items'.
	catalog := make([]int, 3000)
	for i := range catalog {
		catalog[i] = i
	}
	mapExec, err := c.Start(ctx, failing, "", map[string]any{"orders": orders, "catalog": catalog})
	if err != nil {
		t.Fatal(err)
	}
	// Kill while the inner branches have run and a is still asleep, and a
	// few items have run.
	for runs.count("/nested/b1") == 0 || runs.count("/nested/b2") == 0 || runs.total("/item/") < 4 {
		if ctx.Err() != nil {
			t.Fatalf("nested ran %d, items %d before the deadline\n%s", runs.total("/nested/"), runs.total("/item/"), proc.Describe())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if keys, err := partsOf(ctx, b, mapExec.ID); err != nil || len(keys) == 0 {
		t.Fatalf("map: the running state keeps no part (%v): the catalog was to be kept apart", err)
	}
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	b.Close()
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	b, err = loadgen.Connect(ctx, natsURL, "kill-shapes-after")
	if err != nil {
		t.Fatalf("%v\n%s", err, proc.Describe())
	}
	defer b.Close()

	var wc novav1.WorkflowCompleted
	if err := firstEvent(ctx, b.JetStream(), bus.EventSubject(nestedExec.ID, bus.KindWorkflowCompleted), &wc); err != nil {
		t.Fatalf("nested: %v\n%s", err, proc.Describe())
	}
	got, _ := jsonvalue.MustObject(wc.Context).Decoded()
	if wc.Status != "succeeded" || fmt.Sprint(got["k"]) != "2" || fmt.Sprint(got["m"]) != "1" || got["a_done"] != true {
		t.Errorf("nested: %s %q, context %v; want k 2, m 1, a_done", wc.Status, wc.Error, got)
	}
	for _, n := range []string{"s1", "a", "s2", "b1", "b2"} {
		if runs.count("/nested/"+n) == 0 {
			t.Errorf("nested: %s never ran to its end", n)
		}
	}

	if err := firstEvent(ctx, b.JetStream(), bus.EventSubject(mapExec.ID, bus.KindWorkflowCompleted), &wc); err != nil {
		t.Fatalf("map: %v\n%s", err, proc.Describe())
	}
	got, _ = jsonvalue.MustObject(wc.Context).Decoded()
	if cat, _ := got["catalog"].([]any); wc.Status != "failed" || got["orders"] == nil || got["index"] != nil || len(cat) != len(catalog) {
		t.Errorf("map: %s %q, context %.300v; want failed with the execution's context, its catalog whole", wc.Status, wc.Error, got)
	}
	for {
		// The state that ends is stored after the completion, the parts
		// removed after it.
		left, err := partsOf(ctx, b, mapExec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("map: parts left after its end: %v", left)
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, id := range []string{nestedExec.ID, mapExec.ID} {
		open, completions, err := openVisits(ctx, b.JetStream(), id)
		if err != nil {
			t.Fatal(err)
		}
		if len(open) > 0 || completions != 1 {
			t.Errorf("execution %s: visits without their end %v, %d completions; want none and one", id, open, completions)
		}
	}
}

// partsOf lists the keys of execution id's context members kept beside its
// state.
func partsOf(ctx context.Context, b *bus.Bus, id string) ([]string, error) {
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketExecutions)
	if err != nil {
		return nil, err
	}
	keys, err := kv.ListKeysFiltered(ctx, execution.PartKey(id, ">"))
	if err != nil {
		return nil, err
	}
	var out []string
	for k := range keys.Keys() {
		out = append(out, k)
	}
	return out, nil
}
