package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	auditservice "github.com/novaflow/nova/services/audit/service"
	"github.com/novaflow/nova/services/nova/client"
	"github.com/novaflow/nova/services/nova/stack"
)

// exportWorkflow is a code workflow named name whose middle node runs code.
func exportWorkflow(t *testing.T, name, code string) string {
	t.Helper()
	return `name: ` + name + `
nodes:
  - {id: start, type: start}
  - {id: total, type: action, code: "` + code + `"}
  - {id: end, type: end}
edges:
  - {from: start, to: total}
  - {from: total, to: end}
`
}

// TestChainExportRoundTrip runs workflows, exports them with `nova chain
// export` (all of them, one workflow's, a span of start times) and reads
// the export back with `nova chain --from-file`, which prints each
// execution as `nova chain` prints it from the store, text and JSON.
func TestChainExportRoundTrip(t *testing.T) {
	ctx := t.Context()
	s, err := stack.Start(ctx, stack.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Errorf("close stack: %v", err)
		}
	}()
	b, err := s.Connect(ctx, "export-test")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := client.New(b, nil)
	defer c.Close()
	initial, err := jsonvalue.ParseObject([]byte(`{"amount": 150.0, "invoice_id": 9007199254740993}`))
	if err != nil {
		t.Fatal(err)
	}

	// One after another, so that they start in this order.
	runs := []struct{ workflow, code, status string }{
		{"export-a", "context['total'] = context['amount'] * 2", "succeeded"},
		{"export-b", "raise ValueError('no invoice')", "failed"},
		{"export-a", "context['total'] = context['amount'] * 3", "succeeded"},
		{"export-b", "context['total'] = 1", "succeeded"},
	}
	var ids []string
	for _, r := range runs {
		def, err := workflow.Parse([]byte(exportWorkflow(t, r.workflow, r.code)))
		if err != nil {
			t.Fatal(err)
		}
		exec, err := c.Start(ctx, def, "", initial)
		if err != nil {
			t.Fatal(err)
		}
		wc, err := exec.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if wc.GetStatus() != r.status {
			t.Fatalf("%s: %s (%s), want %s", r.workflow, wc.GetStatus(), wc.GetError(), r.status)
		}
		ids = append(ids, exec.ID)
	}
	if err := c.WaitConsumerIdle(ctx, bus.StreamEvents, auditservice.Consumer); err != nil {
		t.Fatal(err)
	}
	store := []string{"--mongo", s.MongoURI()}
	chain := func(args ...string) (code int, stdout, stderr string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code = cmdChain(ctx, args, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	// exported runs nova chain export and returns its lines' execution ids.
	export := func(args ...string) (lines []string, ids []string) {
		t.Helper()
		code, out, errOut := chain(append(append([]string{"export"}, store...), args...)...)
		if code != exitOK {
			t.Fatalf("nova chain export %v: exit %d\n%s", args, code, errOut)
		}
		lines = strings.SplitAfter(out, "\n")
		if lines[len(lines)-1] != "" {
			t.Fatalf("nova chain export %v: the last line does not end: %q", args, lines[len(lines)-1])
		}
		lines = lines[:len(lines)-1]
		ids = []string{}
		for _, l := range lines {
			var v struct {
				Execution struct {
					ExecutionID string `json:"execution_id"`
				} `json:"execution"`
				Nodes []json.RawMessage `json:"nodes"`
			}
			if err := json.Unmarshal([]byte(l), &v); err != nil || v.Execution.ExecutionID == "" || len(v.Nodes) == 0 {
				t.Fatalf("nova chain export %v: a line is not an execution (%v): %s", args, err, l)
			}
			ids = append(ids, v.Execution.ExecutionID)
		}
		if want := strings.Contains(errOut, "nova chain export: "); !want {
			t.Errorf("nova chain export %v says nothing of what it exported: %q", args, errOut)
		}
		return lines, ids
	}
	newestFirst := func(of ...int) []string {
		var out []string
		for _, i := range slices.Backward(of) {
			out = append(out, ids[i])
		}
		return out
	}

	lines, all := export()
	if want := newestFirst(0, 1, 2, 3); !slices.Equal(all, want) {
		t.Fatalf("exported %v, want one line per execution, newest first: %v", all, want)
	}
	for i, id := range all {
		code, out, errOut := chain(append(store, id, "--json")...)
		if code != exitOK {
			t.Fatalf("nova chain --json %s: exit %d\n%s", id, code, errOut)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(out)); err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSuffix(lines[i], "\n"); got != compact.String() {
			t.Errorf("the export of %s is not what nova chain --json prints, on one line:\n%s\nwant\n%s", id, got, compact.String())
		}
	}
	if !strings.Contains(lines[0], `"amount":150.0`) || !strings.Contains(lines[0], `"invoice_id":9007199254740993`) {
		t.Errorf("the export's numbers are not exact: %s", lines[0])
	}

	started := func(i int) string {
		t.Helper()
		doc, err := s.Store.Execution(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		return doc.StartedAt.Format(time.RFC3339Nano)
	}
	for _, tt := range []struct {
		name string
		args []string
		want []string
	}{
		{"workflow", []string{"--workflow", "export-a"}, newestFirst(0, 2)},
		{"since is inclusive", []string{"--since", started(1)}, newestFirst(1, 2, 3)},
		{"until is exclusive", []string{"--until", started(1)}, newestFirst(0)},
		{"since, until and workflow", []string{"--since", started(1), "--until", started(3), "--workflow", "export-b"}, newestFirst(1)},
		{"dates", []string{"--since", "2000-01-01", "--until", time.Now().AddDate(0, 0, 2).Format(time.DateOnly)}, newestFirst(0, 1, 2, 3)},
		{"nothing", []string{"--until", "2000-01-01"}, []string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, got := export(tt.args...); !slices.Equal(got, tt.want) {
				t.Errorf("exported %v, want %v", got, tt.want)
			}
		})
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--since", "yesterday"}, `--since: "yesterday" is neither an RFC 3339 time`},
		{[]string{"--since", "2026-11-02", "--until", "2026-11-01"}, "--until 2026-11-01 is not after --since 2026-11-02"},
		{[]string{"out.jsonl"}, `unexpected argument "out.jsonl"`},
	} {
		if code, _, errOut := chain(append([]string{"export"}, tt.args...)...); code != exitInvalid || !strings.Contains(errOut, tt.want) {
			t.Errorf("nova chain export %v: exit %d, %q; want %d and %q", tt.args, code, errOut, exitInvalid, tt.want)
		}
	}

	file := filepath.Join(t.TempDir(), "export.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	var every string
	for _, id := range all {
		for _, asJSON := range []bool{false, true} {
			args := []string{id}
			if asJSON {
				args = append(args, "--json")
			}
			_, fromStore, _ := chain(append(store, args...)...)
			code, fromFile, errOut := chain(append([]string{"--from-file", file}, args...)...)
			if code != exitOK || fromFile != fromStore {
				t.Errorf("nova chain --from-file %v: exit %d\n%s%s\nwant what nova chain %v prints:\n%s", args, code, fromFile, errOut, args, fromStore)
			}
			if !asJSON {
				every += fromStore
			}
		}
	}
	if code, out, errOut := chain("--from-file", file); code != exitOK || out != every {
		t.Errorf("nova chain --from-file of the whole file: exit %d\n%s%s\nwant each execution as nova chain prints it:\n%s", code, out, errOut, every)
	}
	if !strings.Contains(every, "error: ") || !strings.Contains(every, "context changed: total") {
		t.Errorf("the chains compared show no error nor context change:\n%s", every)
	}

	broken := filepath.Join(t.TempDir(), "broken.jsonl")
	if err := os.WriteFile(broken, []byte(lines[0]+"\n"+lines[1][:len(lines[1])/2]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--from-file", broken}, broken + ", line 3: not an execution"},
		{[]string{"--from-file", file, "no-such-execution"}, "execution no-such-execution is not in " + file},
		{[]string{"--from-file", filepath.Join(t.TempDir(), "none.jsonl")}, "none.jsonl: no such file"},
		{[]string{"--from-file", file, all[0], all[1]}, "want at most one EXECUTION_ID"},
	} {
		if code, _, errOut := chain(tt.args...); code != exitInvalid || !strings.Contains(errOut, tt.want) {
			t.Errorf("nova chain %v: exit %d, %q; want %d and %q", tt.args, code, errOut, exitInvalid, tt.want)
		}
	}
}
