package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/devstack/devstacktest"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// TestDLQ lists, shows and replays real dead letters: a small command the
// sandbox refused and a 900 KiB one whose dead letter keeps an excerpt.
func TestDLQ(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	b := devstacktest.Bus(ctx, t, "dlq-test")
	t.Setenv("NATS_URL", b.Conn().ConnectedUrl())

	// The sandbox refuses everything, as it refuses a command it cannot read.
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- b.Consume(cctx, bus.Consumer{Stream: bus.StreamCommands, Durable: bus.AgentSandbox,
			Filters: []string{bus.CommandSubject(bus.AgentSandbox)}, MaxDeliver: 1},
			func(context.Context, event.Event) error { return bus.Permanent(errors.New("cannot run this command")) })
	}()
	small := &novav1.ExecuteCode{ExecutionId: "exec-1", NodeId: "n", StepId: "exec-1/n/1/1", Code: "context['x'] = 1"}
	large := &novav1.ExecuteCode{ExecutionId: "exec-2", NodeId: "n", StepId: "exec-2/n/1/1", Code: strings.Repeat("x", 900<<10)}
	for _, cmd := range []*novav1.ExecuteCode{small, large} {
		if err := b.PublishProto(ctx, bus.CommandSubject(bus.AgentSandbox), cmd.StepId, bus.TypeSandboxExecute, cmd, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitDeadLetters(t, ctx, b, 2)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := cmdDLQ(ctx, args, &out, &errOut)
		return code, out.String(), errOut.String()
	}

	code, out, errOut := run("list", "--json")
	var views []deadLetterView
	if code != exitOK || json.Unmarshal([]byte(out), &views) != nil || len(views) != 2 {
		t.Fatalf("list --json: exit %d, %s %s", code, out, errOut)
	}
	smallSeq, largeSeq := views[0].Seq, views[1].Seq
	if views[0].Consumer != bus.AgentSandbox || views[0].Truncated || !views[1].Truncated || views[1].KeptAt == 0 ||
		!strings.Contains(views[0].Reason, "cannot run this command") {
		t.Errorf("list: %+v", views)
	}
	code, out, _ = run("list")
	if code != exitOK || strings.Count(out, "\n") != 3 || !strings.Contains(out, "(cut)") || strings.Contains(out, ".original") {
		t.Errorf("list: exit %d\n%s", code, out)
	}

	code, out, _ = run("show", strconv.FormatUint(largeSeq, 10))
	if code != exitOK || !strings.Contains(out, "the whole message is kept at NOVA_DLQ sequence") || !strings.Contains(out, "cannot run this command") {
		t.Errorf("show large: exit %d\n%s", code, out)
	}

	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{"replay the large one", []string{"replay", strconv.FormatUint(largeSeq, 10)}, exitOK, "replayed dead letter"},
		{"replay it again", []string{"replay", strconv.FormatUint(largeSeq, 10)}, exitInvalid, "use --again"},
		{"replay the small one", []string{"replay", strconv.FormatUint(smallSeq, 10)}, exitOK, "replayed dead letter"},
		{"replay it again, on purpose", []string{"replay", "--again", strconv.FormatUint(smallSeq, 10)}, exitOK, "replayed dead letter"},
		{"not a dead letter", []string{"replay", strconv.FormatUint(views[1].KeptAt, 10)}, exitInvalid, "not a dead letter"},
		{"no such sequence", []string{"show", "999"}, exitInvalid, "no dead letter at NOVA_DLQ sequence 999"},
		{"bad sequence", []string{"show", "x"}, exitInvalid, "SEQ must be a positive number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := run(tt.args...)
			if code != tt.wantCode || !strings.Contains(out+errOut, tt.wantOut) {
				t.Errorf("nova dlq %v: exit %d, want %d with %q\n%s%s", tt.args, code, tt.wantCode, tt.wantOut, out, errOut)
			}
		})
	}

	// The replays are the original commands, byte for byte: the large one,
	// the small one, and the small one again.
	c, err := b.JetStream().Consumer(ctx, bus.StreamCommands, bus.AgentSandbox)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 3 {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("replayed commands: %v (got %v)", err, got)
		}
		_ = m.Ack()
		ev, err := bus.DecodeNATS(m.Headers(), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		var cmd novav1.ExecuteCode
		if err := bus.Decode(*ev, &cmd); err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.ID()+":"+strconv.Itoa(len(cmd.Code)))
	}
	want := []string{large.StepId + ":" + strconv.Itoa(len(large.Code)), small.StepId + ":" + strconv.Itoa(len(small.Code)), small.StepId + ":" + strconv.Itoa(len(small.Code))}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("replayed %v, want %v", got, want)
	}
	code, out, _ = run("list")
	if code != exitOK || strings.Count(out, " yes ") != 2 || strings.Contains(out, "replayed.") {
		t.Errorf("list after replays: exit %d\n%s", code, out)
	}
}

func waitDeadLetters(t *testing.T, ctx context.Context, b *bus.Bus, n uint64) {
	t.Helper()
	for {
		s, err := b.JetStream().Stream(ctx, bus.StreamDeadLetters)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter("nova.dlq.*"))
		if err != nil {
			t.Fatal(err)
		}
		var got uint64
		for _, c := range info.State.Subjects {
			got += c
		}
		if got >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d dead letters, want %d", got, n)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
