package validator_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/devstack/devstacktest"
	"github.com/novaflow/nova/pkg/runtimeinfo"
	"github.com/novaflow/nova/pkg/service"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/code-validator/validator"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go v1.55 races in ObjectStore.Put (valueref's large values):
		// its publisher's cleanup can clear the status channel before the
		// goroutine it started reads it, which then waits on a nil channel.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		// nats-server keeps process-wide helpers alive after Shutdown.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*diskIO).loop"),
	)
}

// The agent as the engine sees it: ValidateCode on nova.cmd.code-validator
// through the embedded NATS, CodeValidated on
// nova.evt.<exec>.result.code-validator; first before the sandbox has
// published its runtime, then after.
func TestServiceThroughTheBus(t *testing.T) {
	info := sandboxRuntime(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	b := devstacktest.Bus(ctx, t, "code-validator-test")
	results, err := b.Conn().SubscribeSync(bus.EventSubject("exec-1", bus.ResultKind(bus.AgentCodeValidator)))
	if err != nil {
		t.Fatal(err)
	}

	runtime := runtimeinfo.NewCache(b.JetStream())
	runtime.RetryMissing = 0 // look again at every command: the test publishes in between
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	svc, err := validator.Start(ctx, validator.Config{Workers: 2}, service.NewEnv(b, nil, quiet, 1), validator.WithRuntime(runtime))
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- svc.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	send := func(step string, spec *novav1.TaskSpec, code string, keys ...string) *novav1.CodeValidated {
		t.Helper()
		cmd := &novav1.ValidateCode{
			Ref:         &novav1.StepRef{ExecutionId: "exec-1", NodeId: "n1", StepId: "exec-1/n1/1/" + step, Visit: 1, Attempt: 1},
			Spec:        spec,
			Code:        code,
			Stage:       validator.StageTask,
			ContextKeys: keys,
		}
		if err := b.PublishProto(ctx, bus.CommandSubject(bus.AgentCodeValidator), cmd.Ref.StepId, bus.TypeCodeValidate, cmd, nil); err != nil {
			t.Fatal(err)
		}
		m, err := results.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("waiting for the result of %s: %v", step, err)
		}
		if want := cmd.Ref.StepId + "/result"; m.Header.Get("Nats-Msg-Id") != want {
			t.Errorf("result id %q, want %q", m.Header.Get("Nats-Msg-Id"), want)
		}
		res := decodeResult(t, m)
		if res.Ref.GetStepId() != cmd.Ref.StepId || res.Ref.GetAttempt() != 1 {
			t.Errorf("ref not echoed: %+v", res.Ref)
		}
		if res.Outcome.GetStatus() != "success" {
			t.Errorf("outcome %+v", res.Outcome)
		}
		return res
	}
	action := &novav1.TaskSpec{Task: "Calculate discount", NodeType: "action"}

	// 1. Nothing published yet: imports cannot be checked, and the outcome says so.
	res := send("1", action, "import tensorflow\ncontext['discount'] = context['total'] * 0.1\n", "total")
	if !res.Valid || len(res.Findings) != 0 || !strings.Contains(res.Outcome.Error, "installed-module check was skipped") {
		t.Errorf("before the runtime is published: valid %v, findings %v, outcome %+v", res.Valid, res.Findings, res.Outcome)
	}

	// 2. The sandbox publishes its runtime; the next command is checked against it.
	if err := runtimeinfo.Publish(ctx, b.JetStream(), info); err != nil {
		t.Fatal(err)
	}
	res = send("2", action, "import tensorflow\ncontext['discount'] = context['totals'] * 0.1\n", "total")
	if res.Valid || res.Outcome.Error != "" || res.Outcome.DurationMs <= 0 {
		t.Errorf("after publishing: valid %v, outcome %+v", res.Valid, res.Outcome)
	}
	rules := map[string]*novav1.Finding{}
	for _, f := range res.Findings {
		rules[f.Rule] = f
	}
	if f := rules[validator.RuleMissingModule]; f == nil || f.Line != 1 || !strings.Contains(f.Message, "'tensorflow'") {
		t.Errorf("missing-module finding: %v", res.Findings)
	}
	if f := rules[validator.RuleUnknownContextKey]; f == nil || f.Line != 2 || !strings.Contains(f.Message, "did you mean context['total']?") {
		t.Errorf("unknown-context-key finding: %v", res.Findings)
	}

	// 3. A decision node that never decides.
	decision := &novav1.TaskSpec{Task: "Route by total", NodeType: "decision", DecisionValues: []string{"big", "small"}}
	res = send("3", decision, "context['is_big'] = context['total'] > 1000\n", "total")
	if res.Valid || len(res.Findings) != 1 || res.Findings[0].Rule != validator.RuleNoBranchDecision ||
		!strings.Contains(res.Findings[0].Message, "'big', 'small'") {
		t.Errorf("decision without branch_decision: %v", res.Findings)
	}

	// 4. Good code passes.
	res = send("4", decision, "import fitz\ncontext['branch_decision'] = 'big' if context['total'] > 1000 else 'small'\n", "total")
	if !res.Valid || len(res.Findings) != 0 {
		t.Errorf("good decision code: %v", res.Findings)
	}

	// 5. JavaScript is not Python's to judge.
	js := &novav1.TaskSpec{Task: "Calculate discount", NodeType: "action", Language: "javascript"}
	res = send("5", js, "module.exports = ({total}) => ({discount: total * 0.1})", "total")
	if !res.Valid || len(res.Findings) != 0 || !strings.Contains(res.Outcome.Error, "not checked statically") {
		t.Errorf("javascript: valid %v, findings %v, outcome %+v", res.Valid, res.Findings, res.Outcome)
	}
}

func decodeResult(t *testing.T, m *nats.Msg) *novav1.CodeValidated {
	t.Helper()
	ev, err := bus.DecodeNATS(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type() != bus.TypeCodeValidated {
		t.Fatalf("result type %q", ev.Type())
	}
	var res novav1.CodeValidated
	if err := bus.Decode(*ev, &res); err != nil {
		t.Fatal(err)
	}
	return &res
}
