package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sashabaranov/go-openai"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/agent"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/internal/natstest"
	"github.com/novaflow/nova/pkg/llm"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats-server keeps process-wide helpers alive after Shutdown.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*diskIO).loop"),
	)
}

var spec = agent.Spec{
	Name:        bus.AgentInputAnalyzer,
	Verb:        "analyze",
	CommandType: bus.TypeInputAnalyze,
	ResultType:  bus.TypeInputAnalyzed,
	Workers:     2,
}

// modelServer is a chat-completions API that answers at once for the
// model "quick" and holds every other call until its caller goes away.
type modelServer struct {
	*httptest.Server
	calls   atomic.Int32
	started chan struct{}
	aborted chan time.Time
}

func newModelServer(t *testing.T) *modelServer {
	t.Helper()
	s := &modelServer{started: make(chan struct{}, 8), aborted: make(chan time.Time, 8)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		var body struct {
			Model string `json:"model"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		if body.Model == "quick" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"1","object":"chat.completion","model":"quick","choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`))
			return
		}
		s.started <- struct{}{}
		<-r.Context().Done()
		s.aborted <- time.Now()
	}))
	t.Cleanup(s.Close)
	return s
}

// harness serves the agent on an embedded NATS with a handler that asks
// the model named by the command's spec, and collects what it publishes.
type harness struct {
	t        *testing.T
	b        *bus.Bus
	results  *nats.Subscription
	returned chan error // what each model call returned
}

func start(t *testing.T, model *modelServer) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b, err := bus.Connect(ctx, natstest.URL(t), bus.WithName("agent-test"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	results, err := b.Conn().SubscribeSync(bus.EventFilter(bus.ResultKind(spec.Name)))
	if err != nil {
		t.Fatal(err)
	}
	client, err := llm.New(llm.Config{APIKey: "test", BaseURL: model.URL + "/v1", Agent: spec.Name, MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, b: b, results: results, returned: make(chan error, 8)}
	done := make(chan error, 1)
	go func() {
		done <- agent.Serve(ctx, b, nil, spec,
			func() *novav1.AnalyzeInput { return &novav1.AnalyzeInput{} },
			func(ctx context.Context, cmd *novav1.AnalyzeInput) (proto.Message, error) {
				_, err := client.Chat(ctx, llm.Request{
					Model:    cmd.GetSpec().GetModel(),
					Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "decide"}},
				})
				h.returned <- err
				if err != nil {
					return nil, err
				}
				return &novav1.InputAnalyzed{Ref: cmd.GetRef(), Outcome: &novav1.AgentOutcome{Status: "success"}}, nil
			})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		b.Close()
	})
	return h
}

func (h *harness) send(execution, step, model string) {
	h.t.Helper()
	cmd := &novav1.AnalyzeInput{
		Ref:  &novav1.StepRef{ExecutionId: execution, NodeId: "node", StepId: step},
		Spec: &novav1.TaskSpec{Model: model},
	}
	if err := h.b.PublishProto(context.Background(), bus.CommandSubject(spec.Name), step+"/cmd", spec.CommandType, cmd, nil); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) cancel(execution string) {
	h.t.Helper()
	if err := h.b.PublishProto(context.Background(), bus.EventSubject(execution, bus.KindExecutionCancelled), execution+"/cancelled",
		bus.TypeExecutionCancelled, &novav1.ExecutionCancelled{ExecutionId: execution, RequestedBy: "test"},
		map[string]string{bus.ExtensionExecutionID: execution}); err != nil {
		h.t.Fatal(err)
	}
}

// served sends a command that the model answers at once and waits for its
// result: the agent is serving, its watch of cancellations in place.
func (h *harness) served(execution string) {
	h.t.Helper()
	h.send(execution, execution+"/quick", "quick")
	m, err := h.results.NextMsg(10 * time.Second)
	if err != nil {
		h.t.Fatalf("no result of a quick step: %v", err)
	}
	if got := m.Header.Get("Nats-Msg-Id"); got != execution+"/quick/result" {
		h.t.Fatalf("result %s, want that of the quick step", got)
	}
	if err := <-h.returned; err != nil {
		h.t.Fatal(err)
	}
}

// noResult fails if anything was published as a result.
func (h *harness) noResult() {
	h.t.Helper()
	if m, err := h.results.NextMsg(200 * time.Millisecond); err == nil {
		h.t.Fatalf("published %s for a cancelled execution", m.Header.Get("Nats-Msg-Id"))
	}
}

// commandsSettled waits until the commands stream holds no message: each
// was acked for good.
func (h *harness) commandsSettled() {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := h.b.JetStream().Stream(context.Background(), bus.StreamCommands)
		if err != nil {
			h.t.Fatal(err)
		}
		info, err := s.Info(context.Background())
		if err == nil && info.State.Msgs == 0 {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatal("a command was not acked")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCancellationAbortsTheModelCall(t *testing.T) {
	model := newModelServer(t)
	h := start(t, model)
	h.served("other")

	h.send("exec-1", "exec-1/step", "slow")
	select {
	case <-model.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the model was not called")
	}
	cancelled := time.Now()
	h.cancel("exec-1")
	select {
	case err := <-h.returned:
		if !errors.Is(err, bus.ErrExecutionCancelled) && !errors.Is(err, context.Canceled) {
			t.Fatalf("the model call returned %v, want it cancelled", err)
		}
	case <-time.After(time.Second):
		t.Fatal("the model call went on after its execution was cancelled")
	}
	select {
	case at := <-model.aborted:
		t.Logf("model call aborted %s after the cancellation", at.Sub(cancelled))
	case <-time.After(time.Second):
		t.Fatal("the model's server did not see the call go away")
	}
	h.commandsSettled()
	h.noResult()
	if n := model.calls.Load(); n != 2 {
		t.Fatalf("%d model calls, want 2 (no retry)", n)
	}
}

func TestCommandOfACancelledExecutionIsAckedWithoutTheModel(t *testing.T) {
	model := newModelServer(t)
	h := start(t, model)
	h.served("other")

	h.cancel("exec-2")
	if err := h.b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	h.send("exec-2", "exec-2/step", "slow")
	h.commandsSettled()
	h.noResult()
	if n := model.calls.Load(); n != 1 {
		t.Fatalf("%d model calls, want only the quick step's", n)
	}
	// Other executions are served as before.
	h.served("another")
}
