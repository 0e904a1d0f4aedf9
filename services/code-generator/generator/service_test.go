package generator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/agent"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/devstack/devstacktest"
	"github.com/novaflow/nova/pkg/runtimeinfo"
	"github.com/novaflow/nova/pkg/service"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/code-generator/generator"
)

// TestServiceOverTheBus runs the agent as deployed: a GenerateCode command on
// nova.cmd.code-generator is answered on nova.evt.<execution>.result.code-generator,
// with the documentation the sandbox published in the object store.
func TestServiceOverTheBus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := devstacktest.Bus(ctx, t, "code-generator-test")
	// What the sandbox does at start-up.
	if err := runtimeinfo.Publish(ctx, b.JetStream(), sandboxRuntime(t)); err != nil {
		t.Fatal(err)
	}

	srv, client := modelServer(t, docsRules()...)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	svc, err := generator.Start(ctx, generator.Config{Workers: 2}, service.NewEnv(b, nil, quiet, 1), agent.WithLLM(client))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		done <- svc.Run(runCtx)
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	cmd := command(t, &novav1.TaskSpec{Task: "Extract the text of the PDF", NodeType: "action"},
		map[string]any{"pdf_data_b64": pdfBase64(t), "email_password": "hunter2-secret"})
	cmd.Ref = &novav1.StepRef{ExecutionId: "exec-bus", NodeId: "extract", StepId: "exec-bus/extract/1/3", Visit: 1, Attempt: 1, StepNumber: 3}
	results, err := b.JetStream().OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.EventSubject("exec-bus", bus.ResultKind(bus.AgentCodeGenerator))},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.PublishProto(ctx, bus.CommandSubject(bus.AgentCodeGenerator), cmd.Ref.StepId, bus.TypeCodeGenerate, cmd,
		map[string]string{"executionid": "exec-bus"}); err != nil {
		t.Fatal(err)
	}

	msg, err := results.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil {
		t.Fatalf("no result: %v", err)
	}
	ev, err := bus.DecodeNATS(msg.Headers(), msg.Data())
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type() != bus.TypeCodeGenerated || ev.ID() != cmd.Ref.StepId+"/result" {
		t.Errorf("result event type %q id %q", ev.Type(), ev.ID())
	}
	var res novav1.CodeGenerated
	if err := bus.Decode(*ev, &res); err != nil {
		t.Fatal(err)
	}
	requireSuccess(t, &res)
	if res.GetRef().GetStepId() != cmd.Ref.StepId || res.GetStage() != generator.StageTask || !strings.Contains(res.GetCode(), "get_text") {
		t.Errorf("result = ref %v stage %q code %q", res.GetRef(), res.GetStage(), res.GetCode())
	}
	if len(res.GetToolCalls()) != 1 || !strings.Contains(res.GetToolCalls()[0].GetResult(), "Page.get_text") {
		t.Errorf("tool calls = %v, want one answered from the published runtime documentation", res.GetToolCalls())
	}
	for _, r := range chats(srv) {
		if strings.Contains(string(r.Body), "hunter2-secret") {
			t.Error("a request carries the secret")
		}
	}
}

// TestSearchWaitsForAFirstIndex: the model asks for documentation while the
// sandbox, just started, is still describing its runtime; the tool waits
// for the index instead of answering that there is none.
func TestSearchWaitsForAFirstIndex(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := devstacktest.Bus(ctx, t, "code-generator-test")
	_, client := modelServer(t, docsRules()...)
	g, err := generator.New(generator.Deps{Bus: b, LLM: client, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	published := make(chan error, 1)
	go func() {
		time.Sleep(1500 * time.Millisecond) // the sandbox's indexer at work
		published <- runtimeinfo.Publish(ctx, b.JetStream(), sandboxRuntime(t))
	}()
	res := generate(t, g, command(t, &novav1.TaskSpec{Task: "Extract the text of the PDF"}, map[string]any{"pdf_data_b64": pdfBase64(t)}))
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	requireSuccess(t, res)
	if len(res.GetToolCalls()) != 1 || !strings.Contains(res.GetToolCalls()[0].GetResult(), "Page.get_text") {
		t.Errorf("tool calls = %v, want one answered from the index published meanwhile", res.GetToolCalls())
	}
}
