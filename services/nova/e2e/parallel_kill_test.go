package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/bench/loadgen"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/nova/client"
)

// Branches under kill -9 of the whole `nova dev`: a fan-out and a map are
// in the middle of their work when it is killed; after the restart both
// end with every branch and every item, each item's result once, and no
// item whose completion was recorded before the kill runs again.

// runLog counts, per path, the runs that reached their last line (each
// node's code calls it as it ends).
type runLog struct {
	mu   sync.Mutex
	runs map[string]int
}

func (l *runLog) count(path string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.runs[path]
}

func (l *runLog) total(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for p, c := range l.runs {
		if strings.HasPrefix(p, prefix) {
			n += c
		}
	}
	return n
}

func startRunLog(t *testing.T) (host string, l *runLog) {
	l = &runLog{runs: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.runs[r.URL.Path]++
		l.mu.Unlock()
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u.Host, l
}

// itemsCompleted reads the map node's item visits recorded before the
// time before: their positions, by node.completed event.
func itemsCompleted(ctx context.Context, js jetstream.JetStream, id string, before time.Time) (map[int32]bool, error) {
	cons, err := bus.NewEventReader(ctx, js, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.EventSubject(id, bus.KindNodeCompleted)}})
	if err != nil {
		return nil, err
	}
	done := map[int32]bool{}
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(500 * time.Millisecond))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
			return done, nil
		}
		if err != nil {
			return nil, err
		}
		var nc novav1.NodeCompleted
		if md, err := msg.Metadata(); err != nil || !md.Timestamp.Before(before) {
			continue
		}
		if decodeMsg(msg, &nc) == nil && nc.Item != nil && nc.Status == "success" {
			done[*nc.Item] = true
		}
	}
}

func TestBranchesSurviveKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nova and kills `nova dev`")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	host, runs := startRunLog(t)
	const items, branches = 20, 6
	mapDef := parse(t, fmt.Sprintf(`
name: kill-map
nodes:
  - {id: start, type: start}
  - id: each
    type: map
    items: xs
    concurrency: 4
    output: ys
    network: true
    allow_hosts: ["%[1]s"]
    code: |
      import time, requests
      time.sleep(0.3)
      context["result"] = context["item"] * 2
      requests.get("http://%[1]s/item/%%d" %% context["index"], timeout=10).raise_for_status()
  - {id: done, type: end}
edges: [{from: start, to: each}, {from: each, to: done}]
`, host))
	var fan strings.Builder
	fmt.Fprintf(&fan, "name: kill-fan-out\nnodes:\n  - {id: start, type: start}\n  - {id: join, type: join}\n  - {id: done, type: end}\n")
	for i := range branches {
		fmt.Fprintf(&fan, `  - id: b%[1]d
    type: action
    network: true
    allow_hosts: ["%[2]s"]
    code: |
      import time, requests
      time.sleep(%[3]d * 0.3)
      context["b%[1]d"] = True
      requests.get("http://%[2]s/branch/%[1]d", timeout=10).raise_for_status()
`, i, host, i)
	}
	fan.WriteString("edges:\n  - {from: join, to: done}\n")
	for i := range branches {
		fmt.Fprintf(&fan, "  - {from: start, to: b%d}\n  - {from: b%d, to: join}\n", i, i)
	}
	fanDef := parse(t, fan.String())

	proc, natsURL := startNovaDev(t)
	b, err := loadgen.Connect(ctx, natsURL, "kill-branches")
	if err != nil {
		t.Fatalf("%v\n%s", err, proc.Describe())
	}
	c := client.New(b, nil)
	xs := make([]int, items)
	for i := range xs {
		xs[i] = i + 1
	}
	mapExec, err := c.Start(ctx, mapDef, "", map[string]any{"xs": xs})
	if err != nil {
		t.Fatal(err)
	}
	fanExec, err := c.Start(ctx, fanDef, "", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	// Kill once a third of the items and some branches have run.
	for runs.total("/item/") < items/3 || runs.total("/branch/") < 2 {
		if ctx.Err() != nil {
			t.Fatalf("items ran %d, branches %d before the deadline\n%s", runs.total("/item/"), runs.total("/branch/"), proc.Describe())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	ranBefore := map[string]int{}
	for i := range items {
		ranBefore[fmt.Sprintf("/item/%d", i)] = runs.count(fmt.Sprintf("/item/%d", i))
	}
	c.Close()
	b.Close()
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	b, err = loadgen.Connect(ctx, natsURL, "kill-branches-after")
	if err != nil {
		t.Fatalf("%v\n%s", err, proc.Describe())
	}
	defer b.Close()
	// The items whose completion the engine recorded before the kill.
	recorded, err := itemsCompleted(ctx, b.JetStream(), mapExec.ID, killed)
	if err != nil {
		t.Fatal(err)
	}

	var wc novav1.WorkflowCompleted
	if err := firstEvent(ctx, b.JetStream(), bus.EventSubject(mapExec.ID, bus.KindWorkflowCompleted), &wc); err != nil {
		t.Fatalf("map: %v\n%s", err, proc.Describe())
	}
	if wc.Status != "succeeded" {
		t.Fatalf("map: %s %q", wc.Status, wc.Error)
	}
	got, _ := jsonvalue.MustObject(wc.Context).Decoded()
	ys, _ := got["ys"].([]any)
	if len(ys) != items {
		t.Fatalf("map: %d results, want %d", len(ys), items)
	}
	for i, y := range ys {
		if fmt.Sprint(y) != fmt.Sprint(2*(i+1)) {
			t.Errorf("map: ys[%d] = %v, want %d", i, y, 2*(i+1))
		}
	}
	again := 0
	for i := range items {
		path := fmt.Sprintf("/item/%d", i)
		n := runs.count(path)
		if n == 0 {
			t.Errorf("item %d never ran to its end", i)
		}
		if n > 1 {
			again++
		}
		if recorded[int32(i)] && n != ranBefore[path] {
			t.Errorf("item %d, recorded as completed before the kill, ran again after it (%d runs)", i, n)
		}
	}
	t.Logf("map: %d items recorded before the kill, %d ran to their end twice (in flight at the kill, their result lost with it)",
		len(recorded), again)

	if err := firstEvent(ctx, b.JetStream(), bus.EventSubject(fanExec.ID, bus.KindWorkflowCompleted), &wc); err != nil {
		t.Fatalf("fan-out: %v\n%s", err, proc.Describe())
	}
	got, _ = jsonvalue.MustObject(wc.Context).Decoded()
	if wc.Status != "succeeded" {
		t.Fatalf("fan-out: %s %q", wc.Status, wc.Error)
	}
	for i := range branches {
		if got[fmt.Sprintf("b%d", i)] != true {
			t.Errorf("fan-out: branch b%d lost (context %v)", i, got)
		}
		if runs.count(fmt.Sprintf("/branch/%d", i)) == 0 {
			t.Errorf("fan-out: branch b%d never ran to its end", i)
		}
	}
}
