package outputvalidator_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/novaflow/nova/pkg/agent"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/devstack/devstacktest"
	"github.com/novaflow/nova/pkg/service"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/output-validator/outputvalidator"
)

// The agent as the engine sees it: a command on nova.cmd.output-validator
// through the embedded NATS, the result on nova.evt.<exec>.result.output-validator.
func TestServiceThroughTheBus(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	b := devstacktest.Bus(ctx, t, "output-validator-test")
	srv, client := modelServer(t, content(`{"valid": true, "reason": "discount and final_total are correct"}`))
	results, err := b.Conn().SubscribeSync(bus.EventSubject("exec-1", bus.ResultKind(bus.AgentOutputValidator)))
	if err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	svc, err := outputvalidator.Start(ctx, outputvalidator.Config{Workers: 2}, service.NewEnv(b, nil, quiet, 1), agent.WithLLM(client))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		done <- svc.Run(runCtx)
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	failing := command(t, discountTask, map[string]any{"total": 1500}, map[string]any{"discount": nil})
	failing.Ref.StepId = "exec-1/discount/1/6"
	passing := command(t, discountTask, map[string]any{"total": 1500, "email_password": "hunter2-secret"}, map[string]any{"discount": 150, "final_total": 1350})
	passing.Ref.StepId = "exec-1/discount/2/6"
	for _, cmd := range []*novav1.ValidateOutput{failing, passing} {
		if err := b.PublishProto(ctx, bus.CommandSubject(bus.AgentOutputValidator), cmd.Ref.StepId, bus.TypeOutputValidate, cmd, nil); err != nil {
			t.Fatal(err)
		}
	}

	got := map[string]*novav1.OutputValidated{}
	for len(got) < 2 {
		m, err := results.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("waiting for results (have %d): %v", len(got), err)
		}
		res := decodeResult(t, m)
		if want := res.Ref.StepId + "/result"; m.Header.Get("Nats-Msg-Id") != want {
			t.Errorf("result id %q, want %q", m.Header.Get("Nats-Msg-Id"), want)
		}
		got[res.Ref.StepId] = res
	}
	if r := got[failing.Ref.StepId]; r == nil || r.Valid || r.ModelConsulted || !slices.Equal(r.FailedChecks, []string{"none_result"}) {
		t.Errorf("failing: %+v", r)
	}
	if r := got[passing.Ref.StepId]; r == nil || !r.Valid || !r.ModelConsulted || r.Outcome.Status != "success" || len(r.Outcome.ModelCalls) != 1 {
		t.Errorf("passing: %+v", r)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("the model received %d requests, want 1 (a failed check does not ask it)", len(reqs))
	}
	if strings.Contains(string(reqs[0].Body), "hunter2-secret") {
		t.Error("the prompt carries a secret")
	}
}

func decodeResult(t *testing.T, m *nats.Msg) *novav1.OutputValidated {
	t.Helper()
	ev, err := bus.DecodeNATS(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type() != bus.TypeOutputValidated {
		t.Fatalf("result type %q", ev.Type())
	}
	var res novav1.OutputValidated
	if err := bus.Decode(*ev, &res); err != nil {
		t.Fatal(err)
	}
	return &res
}
