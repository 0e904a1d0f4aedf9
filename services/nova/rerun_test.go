package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
	"github.com/novaflow/nova/services/nova/client"
	"github.com/novaflow/nova/services/nova/stack"
)

// rerunLimit fails at check while final_total is over limit.
const rerunLimit = `
name: rerun-limit
nodes:
  - {id: start, type: start}
  - {id: total, type: action, code: 'context["final_total"] = context["total"] * 0.9'}
  - id: check
    type: action
    code: |
      if context["final_total"] > context["limit"]:
          raise ValueError("final_total %s is over the limit %s" % (context["final_total"], context["limit"]))
      context["approved"] = True
  - {id: done, type: end}
edges:
  - {from: start, to: total}
  - {from: total, to: check}
  - {from: check, to: done}
`

// rerunWaits waits at node approve for a signal nobody sends.
const rerunWaits = `
name: rerun-waits
nodes:
  - {id: start, type: start}
  - {id: approve, type: wait, signal: approve, timeout: 1h}
  - {id: done, type: end}
edges:
  - {from: start, to: approve}
  - {from: approve, to: done}
`

// nova rerun refuses wrong arguments before it connects to anything.
func TestRerunArguments(t *testing.T) {
	t.Setenv("NATS_URL", "nats://127.0.0.1:1")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "want exactly one EXECUTION_ID"},
		{[]string{"a", "b"}, "want exactly one EXECUTION_ID"},
		{[]string{"a", "--timeout", "-1s"}, "--timeout must not be negative"},
		{[]string{"a", "--from", ""}, "--from must name a node"},
		{[]string{"a", "--set", "limit"}, `--set "limit": want key=value`},
		{[]string{"a", "--no-such-flag"}, "flag provided but not defined"},
	} {
		code, out, errOut := runCLI(t.Context(), cmdRerun, c.args...)
		if code != exitInvalid || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("nova rerun %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
}

// TestRerun runs a workflow that fails at its check, and reruns it with
// nova rerun: from the failed node with a context change, from an earlier
// node, without waiting; what cannot be rerun is refused, naming why,
// before anything is sent.
func TestRerun(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{DataDir: t.TempDir(), Modules: []string{stack.Audit, stack.Sandbox, stack.GraphEngine}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Errorf("close stack: %v", err)
		}
	}()
	t.Setenv("NATS_URL", s.NATSURL())
	b, err := s.Connect(ctx, "rerun-test")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := client.New(b, nil)
	defer c.Close()
	run := func(yamlText, initial, want string) string {
		t.Helper()
		def, err := workflow.Parse([]byte(yamlText))
		if err != nil {
			t.Fatal(err)
		}
		wc, err := c.Run(ctx, def, initial)
		if err != nil {
			t.Fatal(err)
		}
		if wc.GetStatus() != want {
			t.Fatalf("%s: %s (%s), want %s", def.GetName(), wc.GetStatus(), wc.GetError(), want)
		}
		return wc.GetExecutionId()
	}
	orig := run(rerunLimit, `{"total": 1500, "limit": 1000}`, "failed")
	fine := run(rerunLimit, `{"total": 10, "limit": 1000}`, "succeeded")
	auditIdle := func() {
		t.Helper()
		if err := c.WaitConsumerIdle(ctx, bus.StreamEvents, auditservice.Consumer); err != nil {
			t.Fatal(err)
		}
	}
	auditIdle()
	rerun := func(args ...string) (int, string, string) {
		return runCLI(ctx, cmdRerun, append(args, "--mongo", s.MongoURI())...)
	}
	lastCommand := func() uint64 {
		st, err := b.JetStream().Stream(ctx, bus.StreamCommands)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}

	t.Run("refused", func(t *testing.T) {
		waits, err := workflow.Parse([]byte(rerunWaits))
		if err != nil {
			t.Fatal(err)
		}
		running, err := c.Start(ctx, waits, "", "{}")
		if err != nil {
			t.Fatal(err)
		}
		// Running once the engine has begun it.
		for st, err := engineState(ctx, b, running.ID); st == nil; st, err = engineState(ctx, b, running.ID) {
			if err != nil || ctx.Err() != nil {
				t.Fatalf("execution %s never ran: %v", running.ID, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		commands := lastCommand()
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"no-such-execution"}, `no execution "no-such-execution" in the chain of work`},
			{[]string{orig, "--from", "nowhere"}, `never reached node "nowhere" (it ran start, total, check)`},
			{[]string{fine}, "has no failed node; name the node to rerun from"},
			{[]string{orig, "--newest"}, `workflow "rerun-limit" is not registered; leave out --newest`},
			{[]string{running.ID}, "execution " + running.ID + " is running: cancel it"},
		} {
			code, out, errOut := rerun(tc.args...)
			if code != exitInvalid || out != "" || !strings.Contains(errOut, tc.want) {
				t.Errorf("nova rerun %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, out, errOut, tc.want)
			}
		}
		if got := lastCommand(); got != commands {
			t.Errorf("a command was sent for a refused rerun")
		}
	})

	t.Run("from the failed node", func(t *testing.T) {
		code, out, errOut := rerun(orig, "--set", "limit=2000")
		if code != exitOK {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		for _, want := range []string{"rerun of   " + orig + " from node check\n", "carried    start, total\n",
			"status     succeeded\n", "path       start -> total -> check -> done\n", `"limit": 2000`, `"final_total": 1350.0`} {
			if !strings.Contains(out, want) {
				t.Errorf("stdout %q does not say %q", out, want)
			}
		}
		id := strings.TrimSpace(strings.TrimPrefix(strings.SplitN(out, "\n", 2)[0], "execution"))
		auditIdle()
		doc, err := s.Store.Execution(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		origDoc, err := s.Store.Execution(ctx, orig)
		if err != nil {
			t.Fatal(err)
		}
		if doc.RerunOf != orig || doc.RerunFrom != "check" || !slices.Contains(origDoc.Reruns, id) {
			t.Errorf("rerun %s: rerun_of %q from %q; the original's reruns %v", id, doc.RerunOf, doc.RerunFrom, origDoc.Reruns)
		}
	})

	t.Run("from a node, as JSON", func(t *testing.T) {
		code, out, errOut := rerun(orig, "--from", "total", "--set", "total=100", "--json")
		var res rerunResult
		if code != exitOK || json.Unmarshal([]byte(out), &res) != nil {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		got, err := jsonvalue.ParseObject(res.Context)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != "succeeded" || res.RerunOf != orig || res.From != "total" || !slices.Equal(res.CarriedOver, []string{"start"}) ||
			string(got["final_total"]) != "90.0" {
			t.Errorf("result %s", out)
		}
	})

	t.Run("a rerun that fails", func(t *testing.T) {
		code, out, _ := rerun(orig, "--set", "limit=1")
		if code != exitFailed || !strings.Contains(out, "status     failed\n") || !strings.Contains(out, "over the limit 1") {
			t.Errorf("exit %d, stdout %q", code, out)
		}
	})

	t.Run("an end the audit store records late", func(t *testing.T) {
		if err := s.StopModule(stack.Audit); err != nil {
			t.Fatal(err)
		}
		late := run(rerunLimit, `{"total": 1500, "limit": 1000}`, "failed")
		restarted := make(chan error, 1)
		go func() {
			time.Sleep(time.Second)
			restarted <- s.StartModule(ctx, stack.Audit)
		}()
		code, out, errOut := rerun(late, "--set", "limit=2000")
		if err := <-restarted; err != nil {
			t.Fatal(err)
		}
		if code != exitOK || !strings.Contains(out, "status     succeeded\n") {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})

	t.Run("without waiting", func(t *testing.T) {
		code, out, errOut := rerun(orig, "--set", "limit=2000", "--no-wait", "--json")
		var res rerunResult
		if code != exitOK || json.Unmarshal([]byte(out), &res) != nil || res.Status != "running" || res.From != "check" {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		done, stop, err := bus.First[novav1.WorkflowCompleted](ctx, b, bus.EventSubject(res.ExecutionID, bus.KindWorkflowCompleted))
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		select {
		case wc := <-done:
			if wc.GetStatus() != "succeeded" {
				t.Errorf("rerun %s: %s", res.ExecutionID, wc.GetStatus())
			}
		case <-ctx.Done():
			t.Fatalf("rerun %s did not end: %v", res.ExecutionID, ctx.Err())
		}
	})
}
