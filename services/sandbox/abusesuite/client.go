package abusesuite

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/eventjson"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/valueref"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Client sends programs to a sandbox service as the graph engine does:
// ExecuteCode on nova.cmd.sandbox, CodeExecuted back on
// nova.evt.<execution>.result.sandbox, all of execution "abuse".
type Client struct {
	bus     *bus.Bus
	values  *valueref.Store
	results *nats.Subscription

	mu      sync.Mutex
	seq     int
	pending map[string]*nats.Msg // results that came while waiting for another
	// run tells this client's steps from another's on the same NATS: the
	// stream drops a command whose id it saw in the last two minutes.
	run string
}

// NewClient opens the value store and the results subscription on b; the
// subscription ends with the test.
func NewClient(t testing.TB, b *bus.Bus) *Client {
	t.Helper()
	values, err := valueref.Open(t.Context(), b.JetStream(), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	results, err := b.Conn().SubscribeSync(bus.EventSubject("abuse", bus.KindSandboxResult))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = results.Unsubscribe() })
	return &Client{bus: b, values: values, results: results, pending: map[string]*nats.Msg{}, run: strconv.FormatInt(time.Now().UnixNano(), 36)}
}

// Bus is the bus the client sends on.
func (c *Client) Bus() *bus.Bus { return c.bus }

// Values is the value store of the client's NATS.
func (c *Client) Values() *valueref.Store { return c.values }

// Execute sends one program and returns its result and the raw event.
func (c *Client) Execute(t testing.TB, req *novav1.ExecuteCode) (*novav1.CodeExecuted, []byte) {
	t.Helper()
	return c.Await(t, c.Send(t, req))
}

// Send publishes one program and returns its step id.
func (c *Client) Send(t testing.TB, req *novav1.ExecuteCode) string {
	t.Helper()
	c.mu.Lock()
	c.seq++
	req.ExecutionId, req.NodeId = "abuse", "node"
	req.StepId = "abuse/node/" + c.run + "-" + strconv.Itoa(c.seq)
	c.mu.Unlock()
	if req.Stage == "" {
		req.Stage = "TASK"
	}
	if err := c.bus.PublishProto(context.Background(), bus.CommandSubject(bus.AgentSandbox), req.StepId, bus.TypeSandboxExecute, req, nil); err != nil {
		t.Fatal(err)
	}
	return req.StepId
}

// Await returns the result of one step, failing after a minute without it;
// results of concurrent steps may come in any order.
func (c *Client) Await(t testing.TB, step string) (*novav1.CodeExecuted, []byte) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if m := c.take(step); m != nil {
			var out novav1.CodeExecuted
			if err := eventjson.Unmarshal(m.Data, &out); err != nil {
				t.Fatal(err)
			}
			return &out, m.Data
		}
		if err := c.next(time.Until(deadline)); err != nil {
			t.Fatalf("no result for %s: %v", step, err)
		}
	}
}

// arrived waits up to d for a result and tells whether step's is there
// (it stays for Await).
func (c *Client) arrived(step string, d time.Duration) bool {
	if c.has(step) {
		return true
	}
	_ = c.next(d)
	return c.has(step)
}

func (c *Client) next(d time.Duration) error {
	m, err := c.results.NextMsg(d)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.pending[m.Header.Get("Nats-Msg-Id")] = m
	c.mu.Unlock()
	return nil
}

func (c *Client) has(step string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending[step+"/result"] != nil
}

func (c *Client) take(step string) *nats.Msg {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.pending[step+"/result"]
	delete(c.pending, step+"/result")
	return m
}

// StillServing runs an ordinary program and fails unless it succeeds.
func (c *Client) StillServing(t testing.TB) {
	t.Helper()
	ctx := obj(t, map[string]any{"total": 1500}).Proto()
	res, _ := c.Execute(t, &novav1.ExecuteCode{Code: "context['discount'] = context['total'] * 0.1", Context: ctx})
	if res.Status != "success" || string(updatesOf(t, res)["discount"]) != "150.0" {
		t.Fatalf("the service no longer serves: %s %s: %s", res.Status, res.ErrorKind, res.Error)
	}
}

// obj makes a context from Go values (jsonvalue.ObjectOf).
func obj(t testing.TB, m map[string]any) jsonvalue.Object {
	t.Helper()
	o, err := jsonvalue.ObjectOf(m)
	if err != nil {
		t.Fatalf("context %v: %v", m, err)
	}
	return o
}

// updatesOf is a result's context updates as exact JSON text per key.
func updatesOf(t testing.TB, res *novav1.CodeExecuted) jsonvalue.Object {
	t.Helper()
	o, err := jsonvalue.FromProto(res.GetContextUpdates())
	if err != nil {
		t.Fatalf("context updates %s: %v", res.GetContextUpdates().GetRaw(), err)
	}
	return o
}

// decodedUpdates is updatesOf decoded into Go values (numbers as json.Number).
func decodedUpdates(t testing.TB, res *novav1.CodeExecuted) map[string]any {
	t.Helper()
	m, err := updatesOf(t, res).Decoded()
	if err != nil {
		t.Fatal(err)
	}
	return m
}
