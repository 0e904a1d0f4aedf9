package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/devstack/devstacktest"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// dlqRig is a bus on an embedded server that NATS_URL names, and run, which
// runs nova dlq with args and returns its exit code, stdout and stderr.
func dlqRig(t *testing.T, name string) (context.Context, *bus.Bus, func(args ...string) (int, string, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	b := devstacktest.Bus(ctx, t, name)
	t.Setenv("NATS_URL", b.Conn().ConnectedUrl())
	return ctx, b, func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := cmdDLQ(ctx, args, &out, &errOut)
		return code, out.String(), errOut.String()
	}
}

// TestDLQ lists, shows and replays real dead letters of a sandbox that
// refuses every command: a small one, a 900 KiB one whose whole message is
// kept beside its dead letter, and a 900 KiB one whose whole message could
// not be kept and is gone from its work-queue stream.
func TestDLQ(t *testing.T) {
	ctx, b, run := dlqRig(t, "dlq-test")
	js := b.JetStream()
	dlqStream, err := js.Stream(ctx, bus.StreamDeadLetters)
	if err != nil {
		t.Fatal(err)
	}

	if code, out, errOut := run("list"); code != exitOK || out != "no dead letters\n" {
		t.Errorf("list of an empty queue: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := run("list", "--json"); code != exitOK || strings.TrimSpace(out) != "[]" {
		t.Errorf("list --json of an empty queue: exit %d\n%s%s", code, out, errOut)
	}

	small := &novav1.ExecuteCode{ExecutionId: "exec-1", NodeId: "n", StepId: "exec-1/n/1/1", Code: "context['x'] = 1"}
	large := &novav1.ExecuteCode{ExecutionId: "exec-2", NodeId: "n", StepId: "exec-2/n/1/1", Code: strings.Repeat("x", 900<<10)}
	lost := &novav1.ExecuteCode{ExecutionId: "exec-3", NodeId: "n", StepId: "exec-3/n/1/1", Code: strings.Repeat("y", 900<<10)}
	// The commands as they were stored, before the sandbox reads them.
	originals := map[string]*jetstream.RawStreamMsg{}
	publish := func(cmd *novav1.ExecuteCode) {
		t.Helper()
		if err := b.PublishProto(ctx, bus.CommandSubject(bus.AgentSandbox), cmd.StepId, bus.TypeSandboxExecute, cmd, nil); err != nil {
			t.Fatal(err)
		}
		raw, err := js.Stream(ctx, bus.StreamCommands)
		if err != nil {
			t.Fatal(err)
		}
		if originals[cmd.StepId], err = raw.GetLastMsgForSubject(ctx, bus.CommandSubject(bus.AgentSandbox)); err != nil {
			t.Fatal(err)
		}
	}
	publish(small)
	publish(large)
	refuseCommands(t, ctx, b, 2)

	// A dead-letter stream that takes no message of 900 KiB: the whole
	// message of the next one cannot be kept, its dead letter keeps an
	// excerpt, and the command leaves its work queue.
	setMaxMsgSize(t, ctx, b, 128<<10)
	publish(lost)
	refuseCommands(t, ctx, b, 3)
	setMaxMsgSize(t, ctx, b, -1)

	code, out, errOut := run("list", "--json")
	var views []deadLetterView
	if code != exitOK || json.Unmarshal([]byte(out), &views) != nil || len(views) != 3 {
		t.Fatalf("list --json: exit %d, %s %s", code, out, errOut)
	}
	smallDL, largeDL, lostDL := views[0], views[1], views[2]
	for i, tc := range []struct {
		step      string
		truncated bool
		kept      bool
	}{{small.StepId, false, false}, {large.StepId, true, true}, {lost.StepId, true, false}} {
		v := views[i]
		orig := originals[tc.step]
		if v.Consumer != bus.AgentSandbox || v.Subject != bus.CommandSubject(bus.AgentSandbox) || v.Stream != bus.StreamCommands ||
			v.StreamSequence != orig.Sequence || v.ID != bus.DeadLetterID(bus.AgentSandbox, bus.StreamCommands, orig.Sequence) ||
			v.Size != uint64(len(orig.Data)) || v.Truncated != tc.truncated || (v.KeptAt != 0) != tc.kept ||
			v.Deliveries != 1 || !strings.Contains(v.Reason, "cannot run this command") || v.Replayed != nil {
			t.Errorf("list --json, dead letter of %s: %+v", tc.step, v)
		}
	}

	code, out, _ = run("list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 4 || !strings.HasPrefix(lines[0], "SEQ") || strings.Count(out, "(cut)") != 2 ||
		strings.Contains(out, ".original") || strings.Count(out, " no ") != 3 {
		t.Errorf("list: exit %d\n%s", code, out)
	}
	for i, v := range views {
		if !strings.HasPrefix(lines[i+1], strconv.FormatUint(v.Seq, 10)+" ") {
			t.Errorf("list line %d does not start with SEQ %d:\n%s", i+1, v.Seq, out)
		}
	}
	if code, out, _ = run("list", "--consumer", "audit"); code != exitOK || out != "no dead letters\n" {
		t.Errorf("list --consumer audit: exit %d\n%s", code, out)
	}
	code, out, _ = run("list", "--consumer", bus.AgentSandbox, "--limit", "1", "--json")
	var newest []deadLetterView
	if code != exitOK || json.Unmarshal([]byte(out), &newest) != nil || len(newest) != 1 || newest[0].Seq != lostDL.Seq {
		t.Errorf("list --limit 1 shows the newest: exit %d\n%s", code, out)
	}

	seq := func(v deadLetterView) string { return strconv.FormatUint(v.Seq, 10) }
	shows := []struct {
		name string
		seq  string
		want []string
	}{
		{"small", seq(smallDL), []string{smallDL.ID, "cannot run this command", "replayed:   no", "ce-id: " + small.StepId,
			`"executionId": "exec-1"`, "  data (" + strconv.Itoa(len(originals[small.StepId].Data)) + " B):"}},
		{"large", seq(largeDL), []string{largeDL.ID, "cannot run this command", fmt.Sprintf(
			"the first %d of %d bytes; the whole message is kept at NOVA_DLQ sequence %d", bus.DeadLetterExcerpt, largeDL.Size, largeDL.KeptAt)}},
		{"lost", seq(lostDL), []string{lostDL.ID, fmt.Sprintf(
			"the first %d of %d bytes; the whole message is gone: it is no longer in NOVA_CMD at sequence %d and no copy was kept, so only this excerpt is left",
			bus.DeadLetterExcerpt, lostDL.Size, lostDL.StreamSequence)}},
	}
	for _, tt := range shows {
		t.Run("show "+tt.name, func(t *testing.T) {
			code, out, errOut := run("show", tt.seq)
			for _, want := range tt.want {
				if code != exitOK || !strings.Contains(out, want) {
					t.Errorf("show %s: exit %d, want %q in\n%s%s", tt.seq, code, want, out, errOut)
				}
			}
		})
	}
	code, out, _ = run("show", "--json", seq(lostDL))
	var shown deadLetterView
	if code != exitOK || json.Unmarshal([]byte(out), &shown) != nil || !shown.OriginalGone || shown.DataText == "" {
		t.Errorf("show --json of the lost one: exit %d\n%.500s", code, out)
	}

	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"replay the large one", []string{"replay", seq(largeDL)}, exitOK, "to nova.cmd.sandbox, NOVA_CMD sequence"},
		{"replay it again", []string{"replay", seq(largeDL)}, exitInvalid, "use --again to replay it once more"},
		{"replay the small one", []string{"replay", seq(smallDL)}, exitOK, "to nova.cmd.sandbox, NOVA_CMD sequence"},
		{"replay it again, on purpose", []string{"replay", "--again", seq(smallDL)}, exitOK, "Nats-Msg-Id replay:" + smallDL.ID + ":2"},
		{"replay one whose message is gone", []string{"replay", seq(lostDL)}, exitFailed,
			fmt.Sprintf("(NOVA_CMD sequence %d) cannot be replayed: only an excerpt of the message is left", lostDL.StreamSequence)},
		{"replay a kept original", []string{"replay", strconv.FormatUint(largeDL.KeptAt, 10)}, exitInvalid, "nova.dlq.sandbox.original) is not a dead letter"},
		{"show no such sequence", []string{"show", "999"}, exitInvalid, "no dead letter at NOVA_DLQ sequence 999"},
		{"show a bad sequence", []string{"show", "x"}, exitInvalid, "SEQ must be a positive number"},
		{"no command", nil, exitInvalid, "Usage:"},
		{"unknown command", []string{"purge"}, exitInvalid, `unknown command "purge"`},
		{"replay without SEQ", []string{"replay"}, exitInvalid, "want exactly one SEQ"},
		{"show two", []string{"show", "1", "2"}, exitInvalid, "want exactly one SEQ"},
		{"list with an argument", []string{"list", "1"}, exitInvalid, `unexpected argument "1"`},
		{"unknown flag", []string{"list", "--all"}, exitInvalid, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := run(tt.args...)
			if code != tt.wantCode || !strings.Contains(out+errOut, tt.want) {
				t.Errorf("nova dlq %v: exit %d, want %d with %q\n%s%s", tt.args, code, tt.wantCode, tt.want, out, errOut)
			}
		})
	}

	// The replays are the original commands, body and headers, with their
	// own Nats-Msg-Id: the large one, the small one, and the small one again.
	cons, err := js.Consumer(ctx, bus.StreamCommands, bus.AgentSandbox)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		step, msgID string
	}{
		{large.StepId, "replay:" + largeDL.ID},
		{small.StepId, "replay:" + smallDL.ID},
		{small.StepId, "replay:" + smallDL.ID + ":2"},
	} {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("replay of %s: %v", want.step, err)
		}
		_ = m.Ack()
		orig := originals[want.step]
		if m.Subject() != orig.Subject || !bytes.Equal(m.Data(), orig.Data) {
			t.Errorf("replay of %s: %s, %d bytes, want the %d bytes of %s as they were", want.step, m.Subject(), len(m.Data()), len(orig.Data), orig.Subject)
		}
		if got := m.Headers().Get(jetstream.MsgIDHeader); got != want.msgID {
			t.Errorf("replay of %s: Nats-Msg-Id %q, want %q", want.step, got, want.msgID)
		}
		if got, wantH := withoutMsgID(m.Headers()), withoutMsgID(orig.Header); !maps.EqualFunc(got, wantH, slices.Equal) {
			t.Errorf("replay of %s: headers\n%v\nwant\n%v", want.step, got, wantH)
		}
	}
	if m, err := cons.Next(jetstream.FetchMaxWait(500 * time.Millisecond)); err == nil {
		t.Errorf("a replay too many: %s %s", m.Subject(), m.Headers().Get(jetstream.MsgIDHeader))
	}

	// The replay records are in the dead-letter stream but are not dead letters.
	marker, err := dlqStream.GetLastMsgForSubject(ctx, replayedPrefix+seq(smallDL))
	if err != nil {
		t.Fatal(err)
	}
	var rec replayRecord
	if err := json.Unmarshal(marker.Data, &rec); err != nil || rec.Subject != bus.CommandSubject(bus.AgentSandbox) ||
		rec.Stream != bus.StreamCommands || rec.Sequence == 0 || rec.Times != 2 || time.Since(rec.At) > time.Minute {
		t.Errorf("replay record of the small one: %s", marker.Data)
	}
	if code, out, errOut := run("show", strconv.FormatUint(marker.Sequence, 10)); code != exitInvalid || !strings.Contains(errOut, "is not a dead letter") {
		t.Errorf("show a replay record: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = run("list")
	if code != exitOK || strings.Count(strings.TrimSpace(out), "\n") != 3 || strings.Count(out, " yes ") != 2 || strings.Contains(out, "replayed.") {
		t.Errorf("list after the replays: exit %d\n%s", code, out)
	}
	if code, out, _ = run("show", seq(smallDL)); code != exitOK || !strings.Contains(out, "to nova.cmd.sandbox (NOVA_CMD sequence") || !strings.Contains(out, "2 time(s)") {
		t.Errorf("show after the replays: exit %d\n%s", code, out)
	}

	// replay --all: what was replayed before is left alone unless --again;
	// one that cannot be replayed fails the command, after the others.
	for _, tt := range []struct {
		args     []string
		wantCode int
		want     []string
	}{
		{[]string{"replay", "--all", "--subject", "nova.evt.>"}, exitOK, []string{"replayed 0 dead letter(s)\n"}},
		{[]string{"replay", "--all"}, exitFailed, []string{"replayed 0 dead letter(s); 2 replayed before left alone",
			"1 dead letter(s) could not be replayed", "only an excerpt of the message is left"}},
		{[]string{"replay", "--all", "--again", "--subject", "nova.cmd.*", "--consumer", bus.AgentSandbox}, exitFailed,
			[]string{"Nats-Msg-Id replay:" + largeDL.ID + ":2", "Nats-Msg-Id replay:" + smallDL.ID + ":3", "replayed 2 dead letter(s)"}},
		{[]string{"replay", "--subject", "nova.cmd.*", seq(smallDL)}, exitInvalid, []string{"use them with --all"}},
		{[]string{"replay", "--all", "--subject", "nova..cmd"}, exitInvalid, []string{"is not a NATS subject filter"}},
		{[]string{"replay", "--all", seq(smallDL)}, exitInvalid, []string{"unexpected argument"}},
	} {
		code, out, errOut := run(tt.args...)
		for _, w := range tt.want {
			if code != tt.wantCode || !strings.Contains(out+errOut, w) {
				t.Errorf("nova dlq %v: exit %d, want %d with %q\n%s%s", tt.args, code, tt.wantCode, w, out, errOut)
			}
		}
	}
	for _, want := range []string{"replay:" + smallDL.ID + ":3", "replay:" + largeDL.ID + ":2"} { // oldest first
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("replay %s: %v", want, err)
		}
		_ = m.Ack()
		if got := m.Headers().Get(jetstream.MsgIDHeader); got != want {
			t.Errorf("replay --all: Nats-Msg-Id %q, want %q", got, want)
		}
	}
}

// TestDLQConnect: without NATS_URL, nova dlq opens the embedded server of
// its data directory, unless a NATS server (nova dev) answers on its port,
// which may be serving that directory, or another process holds the
// directory's lock.
func TestDLQConnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	t.Setenv("NATS_URL", "")
	dev, err := devstack.StartNATS(ctx, devstack.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Shutdown()
	devAddr := strings.TrimPrefix(dev.URL(), "nats://")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := l.Addr().String()
	_ = l.Close()

	// A stack on another port holds its data dir's lock.
	heldDir := t.TempDir()
	held, err := devstack.LockDataDir(heldDir)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()

	tests := []struct {
		name    string
		dataDir string
		devAddr string
		wantErr string
	}{
		{"nova dev runs", t.TempDir(), devAddr, "set NATS_URL=nats://" + devAddr},
		{"nova dev serves the data dir on another port", heldDir, nobody, fmt.Sprintf("process %d serves %s", os.Getpid(), heldDir)},
		{"nothing runs", t.TempDir(), nobody, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, closeBus, err := connectNATS(ctx, tt.dataDir, tt.devAddr, "nova-dlq", "dead letters")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("connectNATS: %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer closeBus()
			// A fresh server has no dead-letter stream, and no dead letters.
			var out, errOut bytes.Buffer
			if code := (&dlq{b: b}).list(ctx, "", 0, false, &out, &errOut); code != exitOK || out.String() != "no dead letters\n" {
				t.Errorf("list: exit %d\n%s%s", code, out.String(), errOut.String())
			}
		})
	}
}

// refuseCommands runs a sandbox that refuses every command until there are
// n dead letters.
func refuseCommands(t *testing.T, ctx context.Context, b *bus.Bus, n uint64) {
	t.Helper()
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- b.Consume(cctx, bus.Consumer{Stream: bus.StreamCommands, Durable: bus.AgentSandbox,
			Filters: []string{bus.CommandSubject(bus.AgentSandbox)}, MaxDeliver: 1},
			func(context.Context, event.Event) error { return bus.Permanent(errors.New("cannot run this command")) })
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}()
	s, err := b.JetStream().Stream(ctx, bus.StreamDeadLetters)
	if err != nil {
		t.Fatal(err)
	}
	for {
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

// setMaxMsgSize bounds the messages the dead-letter stream takes (-1: no bound).
func setMaxMsgSize(t *testing.T, ctx context.Context, b *bus.Bus, n int32) {
	t.Helper()
	s, err := b.JetStream().Stream(ctx, bus.StreamDeadLetters)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgSize = n
	if _, err := b.JetStream().UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

// withoutMsgID is h without the headers a replay sets (its Nats-Msg-Id,
// the consumer it is for).
func withoutMsgID(h nats.Header) nats.Header {
	h = maps.Clone(h)
	delete(h, jetstream.MsgIDHeader)
	delete(h, bus.ReplayForHeader)
	return h
}

// TestDLQReplayHarmless: a replayed command of an execution that ended (or
// whose state is gone) is skipped and said so, unless --force; --dry-run
// says what would go where and sends nothing; a replayed event reaches the
// consumer that dead-lettered it, not the other consumers of its subject.
func TestDLQReplayHarmless(t *testing.T) {
	ctx, b, run := dlqRig(t, "dlq-replay-test")
	js := b.JetStream()
	states, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.BucketExecutions})
	if err != nil {
		t.Fatal(err)
	}
	for id, status := range map[string]string{"ended-1": "succeeded", "running-1": "running"} {
		data, err := proto.Marshal(&novav1.ExecutionState{ExecutionId: id, Status: status})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := states.Put(ctx, id, data); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"ended-1", "running-1", "gone-1"} {
		cmd := &novav1.ExecuteCode{ExecutionId: id, NodeId: "n", StepId: id + "/n/1/1", Code: "context['x'] = 1"}
		if err := b.PublishProto(ctx, bus.CommandSubject(bus.AgentSandbox), cmd.StepId, bus.TypeSandboxExecute, cmd,
			map[string]string{bus.ExtensionExecutionID: id}); err != nil {
			t.Fatal(err)
		}
	}
	refuseCommands(t, ctx, b, 3)
	code, out, errOut := run("list", "--json")
	var views []deadLetterView
	if code != exitOK || json.Unmarshal([]byte(out), &views) != nil || len(views) != 3 {
		t.Fatalf("list --json: exit %d, %s %s", code, out, errOut)
	}
	seq := func(i int) string { return strconv.FormatUint(views[i].Seq, 10) }
	cmds, err := js.Stream(ctx, bus.StreamCommands)
	if err != nil {
		t.Fatal(err)
	}
	lastCmd := func() uint64 {
		info, err := cmds.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}

	before := lastCmd()
	code, out, errOut = run("replay", "--all", "--dry-run")
	for _, want := range []string{
		"skipped dead letter " + seq(0) + " (nova.cmd.sandbox, consumer sandbox): execution ended-1 ended (succeeded)",
		"would replay dead letter " + seq(1) + ": ", " to nova.cmd.sandbox, for consumer sandbox",
		"skipped dead letter " + seq(2) + " (nova.cmd.sandbox, consumer sandbox): execution gone-1 has no state",
		"would replay 1 dead letter(s); 2 command(s) of executions that ended skipped (--force replays them)",
	} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("replay --all --dry-run: exit %d, want %q\n%s%s", code, want, out, errOut)
		}
	}
	if after := lastCmd(); after != before {
		t.Errorf("--dry-run published %d command(s)", after-before)
	}

	code, out, errOut = run("replay", "--all")
	if code != exitOK || !strings.Contains(out, "replayed dead letter "+seq(1)+": ") || !strings.Contains(out, "replayed 1 dead letter(s); 2 command(s)") {
		t.Errorf("replay --all: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = run("replay", seq(0))
	if code != exitInvalid || !strings.Contains(errOut, "dead letter "+seq(0)+" not replayed: execution ended-1 ended (succeeded); --force replays it anyway") {
		t.Errorf("replay of an ended execution's command: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut = run("replay", "--force", seq(0)); code != exitOK || !strings.Contains(out, "replayed dead letter "+seq(0)) {
		t.Errorf("replay --force: exit %d\n%s%s", code, out, errOut)
	}
	// What went out: running-1's command, then ended-1's (forced), each for
	// the consumer that dead-lettered it.
	cons, err := js.Consumer(ctx, bus.StreamCommands, bus.AgentSandbox)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"running-1", "ended-1"} {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("replay of %s's command: %v", want, err)
		}
		_ = m.Ack()
		if got := m.Headers().Get("ce-" + bus.ExtensionExecutionID); got != want || m.Headers().Get(bus.ReplayForHeader) != bus.AgentSandbox {
			t.Errorf("replayed command of %q (for %q), want %s's for the sandbox", got, m.Headers().Get(bus.ReplayForHeader), want)
		}
	}
	if lastCmd() != before+2 {
		t.Errorf("%d commands replayed, want 2", lastCmd()-before)
	}

	// An event two consumers dead-lettered, replayed from one's dead letter.
	subject := bus.EventSubject("running-1", bus.KindSandboxResult)
	if err := b.PublishProto(ctx, subject, "result-1", bus.TypeSandboxExecuted, &novav1.CodeExecuted{ExecutionId: "running-1"}, nil); err != nil {
		t.Fatal(err)
	}
	type seen struct {
		name string
		id   string
	}
	got := make(chan seen, 16)
	refuse := true
	consume := func(name string) (stop func()) {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- b.Consume(cctx, bus.Consumer{Stream: bus.StreamEvents, Durable: name, Filters: []string{bus.EventFilter("result.>")}, MaxDeliver: 1},
				func(_ context.Context, ev event.Event) error {
					if refuse {
						return bus.Permanent(errors.New("cannot apply this result"))
					}
					got <- seen{name, ev.ID()}
					return nil
				})
		}()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	stopOne, stopTwo := consume("c-one"), consume("c-two")
	dlqStream, err := js.Stream(ctx, bus.StreamDeadLetters)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"c-one", "c-two"} {
		for {
			if _, err := dlqStream.GetLastMsgForSubject(ctx, bus.DeadLetterSubject(c)); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("no dead letter of %s", c)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	stopOne()
	stopTwo()
	code, out, errOut = run("list", "--consumer", "c-one", "--json")
	var one []deadLetterView
	if code != exitOK || json.Unmarshal([]byte(out), &one) != nil || len(one) != 1 {
		t.Fatalf("list --consumer c-one: exit %d, %s %s", code, out, errOut)
	}
	refuse = false
	stopOne, stopTwo = consume("c-one"), consume("c-two")
	defer stopOne()
	defer stopTwo()
	if code, out, errOut = run("replay", strconv.FormatUint(one[0].Seq, 10)); code != exitOK || !strings.Contains(out, "for consumer c-one") {
		t.Fatalf("replay of c-one's dead letter: exit %d\n%s%s", code, out, errOut)
	}
	events, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	replayed, err := events.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s.name != "c-one" || s.id != "result-1" {
			t.Errorf("the replay reached %s (%s), want c-one", s.name, s.id)
		}
	case <-ctx.Done():
		t.Fatal("c-one did not get the replayed event")
	}
	// c-two acknowledges it unread.
	for {
		c, err := js.Consumer(ctx, bus.StreamEvents, "c-two")
		if err != nil {
			t.Fatal(err)
		}
		if info, err := c.Info(ctx); err == nil && info.AckFloor.Stream >= replayed.Sequence {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("c-two did not settle the replayed event")
		case <-time.After(50 * time.Millisecond):
		}
	}
	select {
	case s := <-got:
		t.Errorf("the replay reached %s too", s.name)
	default:
	}
}
