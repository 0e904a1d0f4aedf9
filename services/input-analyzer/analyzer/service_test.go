package analyzer_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/novaflow/nova/pkg/agent"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/devstack/devstacktest"
	"github.com/novaflow/nova/pkg/service"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/input-analyzer/analyzer"
)

// The agent as the engine sees it: a command on nova.cmd.input-analyzer
// through the embedded NATS, the result on nova.evt.<exec>.result.input-analyzer.
func TestServiceThroughTheBus(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	b := devstacktest.Bus(ctx, t, "analyzer-test")
	srv, client := modelServer(t, `
rules:
  - match: {agent: input-analyzer}
    respond: {content: '`+goodAnswer+`'}
`)
	results, err := b.Conn().SubscribeSync(bus.EventSubject("exec-1", bus.ResultKind(bus.AgentInputAnalyzer)))
	if err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	svc, err := analyzer.Start(ctx, analyzer.Config{Workers: 2}, service.NewEnv(b, nil, quiet, 1), agent.WithLLM(client))
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

	simple := command(t, "Calculate discount (10% if total > 1000)", "", map[string]any{"total": 1500, "email_password": "hunter2-secret"})
	simple.Ref.StepId = "exec-1/discount/1/1"
	complexCmd := command(t, "Extract the invoice total", "", map[string]any{"pdf_data_b64": pdfB64(200 << 10), "email_password": "hunter2-secret"})
	complexCmd.Ref.StepId = "exec-1/extract/1/1"
	for _, cmd := range []*novav1.AnalyzeInput{simple, complexCmd} {
		if err := b.PublishProto(ctx, bus.CommandSubject(bus.AgentInputAnalyzer), cmd.Ref.StepId, bus.TypeInputAnalyze, cmd, nil); err != nil {
			t.Fatal(err)
		}
	}

	got := map[string]*novav1.InputAnalyzed{}
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
	if r := got[simple.Ref.StepId]; r == nil || r.NeedsAnalysis || !r.DecidedWithoutModel || len(r.Outcome.ModelCalls) != 0 {
		t.Errorf("simple: %+v", r)
	}
	if r := got[complexCmd.Ref.StepId]; r == nil || !r.NeedsAnalysis || r.Complexity != "high" || len(r.Outcome.ModelCalls) != 1 || !r.Outcome.ModelCalls[0].Scripted {
		t.Errorf("complex: %+v", r)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("the model received %d requests, want 1 (the simple context is decided without it)", len(reqs))
	}
	if strings.Contains(string(reqs[0].Body), "hunter2-secret") || strings.Contains(string(reqs[0].Body), "JVBERi0") {
		t.Error("the prompt carries a secret or the PDF's bytes")
	}
}

func decodeResult(t *testing.T, m *nats.Msg) *novav1.InputAnalyzed {
	t.Helper()
	ev, err := bus.DecodeNATS(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type() != bus.TypeInputAnalyzed {
		t.Fatalf("result type %q", ev.Type())
	}
	var res novav1.InputAnalyzed
	if err := bus.Decode(*ev, &res); err != nil {
		t.Fatal(err)
	}
	return &res
}
