package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/syncbuf"
	"github.com/novaflow/nova/services/nova/client"
	"github.com/novaflow/nova/services/nova/stack"
)

// startDev runs `nova dev` with args on fresh ports and data dir until the
// test ends, and returns what it printed once it printed want.
func startDev(t *testing.T, ctx context.Context, want *regexp.Regexp, args ...string) (m []string, stderr *syncbuf.Buffer) {
	t.Helper()
	devCtx, stop := context.WithCancel(ctx)
	var stdout syncbuf.Buffer
	stderr = &syncbuf.Buffer{}
	exit := make(chan int, 1)
	dir := t.TempDir() // removed after nova dev stopped (cleanups run last first)
	go func() {
		exit <- cmdDev(devCtx, append([]string{"--data-dir", dir, "--nats-port", "0", "--mongo-port", "0"}, args...), &stdout, stderr)
	}()
	t.Cleanup(func() {
		stop()
		if code := <-exit; code != exitOK {
			t.Errorf("nova dev exited %d\n%s", code, stderr.String())
		}
	})
	for m == nil {
		select {
		case code := <-exit:
			exit <- code
			t.Fatalf("nova dev exited %d before it was ready\n%s%s", code, stdout.String(), stderr.String())
		case <-ctx.Done():
			t.Fatalf("nova dev did not print %s:\n%s", want, stdout.String())
		case <-time.After(50 * time.Millisecond):
		}
		m = want.FindStringSubmatch(stdout.String())
	}
	return m, stderr
}

// TestDevServesTheHTTPAPI runs `nova dev` and uses the HTTP API it prints:
// the key it made for the run starts a workflow and waits for it, and no
// key is refused.
func TestDevServesTheHTTPAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	m, stderr := startDev(t, ctx, regexp.MustCompile(`HTTP API (http://\S+)\n\s+NOVA_API_KEY=(\S+)`), "--gateway-addr", "127.0.0.1:0")
	url, key := m[1], m[2]
	if strings.Contains(stderr.String(), key) {
		t.Errorf("the key reached the logs:\n%s", stderr.String())
	}

	body := `{"definition": {"name": "dev-api", "nodes": [{"id": "start", "type": "start"},
		{"id": "double", "type": "action", "code": "context['y'] = context['x'] * 2"}, {"id": "end", "type": "end"}],
		"edges": [{"from": "start", "to": "double"}, {"from": "double", "to": "end"}]}, "context": {"x": 21}}`
	post := func(key string) *http.Response {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/executions?wait=60s", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post("")
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no key: status %d, want 401", resp.StatusCode)
	}
	resp = post(key)
	defer resp.Body.Close()
	var got struct {
		Status  string         `json:"status"`
		Context map[string]any `json:"context"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || got.Status != "succeeded" || got.Context["y"] != 42.0 {
		t.Errorf("start and wait: status %d, execution %+v; want 200, succeeded with y=42", resp.StatusCode, got)
	}
}

// TestRunShowsProgressAndWatchFollows: `nova run --progress` shows each
// node as it starts and ends, and `nova watch` replays the execution.
func TestRunShowsProgressAndWatchFollows(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	m, _ := startDev(t, ctx, regexp.MustCompile(`NATS_URL=(\S+)`), "--gateway-addr", "off")
	t.Setenv("NATS_URL", m[1])
	file := filepath.Join(t.TempDir(), "progress.yaml")
	def := `name: progress
nodes:
  - {id: start, type: start}
  - {id: double, type: action, code: "context['y'] = context['x'] * 2"}
  - {id: add_one, type: action, code: "context['z'] = context['y'] + 1"}
  - {id: end, type: end}
edges:
  - {from: start, to: double}
  - {from: double, to: add_one}
  - {from: add_one, to: end}
`
	if err := os.WriteFile(file, []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := cmdRun(ctx, []string{file, "--remote", "--progress", "--set", "x=21"}, &out, &errOut); code != exitOK {
		t.Fatalf("nova run: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	lines := regexp.MustCompile(`(?m)^  [▶✓✗] \S+ +\S+`).FindAllString(out.String(), -1)
	for i := range lines {
		lines[i] = strings.Join(strings.Fields(lines[i]), " ")
	}
	want := []string{"✓ start succeeded", "▶ double started", "✓ double succeeded",
		"▶ add_one started", "✓ add_one succeeded", "✓ end succeeded"}
	if !slices.Equal(lines, want) {
		t.Errorf("progress lines %q\nwant %q\n%s", lines, want, out.String())
	}
	if !strings.Contains(out.String(), "status     succeeded") || strings.Index(out.String(), "✓ end") > strings.Index(out.String(), "status ") {
		t.Errorf("the summary comes after every node's line:\n%s", out.String())
	}
	id := regexp.MustCompile(`execution  (\S+)`).FindStringSubmatch(out.String())
	if id == nil {
		t.Fatalf("no execution id in\n%s", out.String())
	}

	out.Reset()
	errOut.Reset()
	if code := cmdWatch(ctx, []string{id[1]}, &out, &errOut); code != exitOK {
		t.Fatalf("nova watch: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	for _, w := range append(want, "workflow   progress", "execution  "+id[1], "status     succeeded") {
		if !strings.Contains(strings.Join(strings.Fields(out.String()), " "), strings.Join(strings.Fields(w), " ")) {
			t.Errorf("nova watch does not show %q:\n%s", w, out.String())
		}
	}

	// Once its events are purged (KeepEnded after the end), nova watch
	// shows its nodes and outcome from the engine's state, and says so.
	b, err := bus.Connect(ctx, m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	events, err := b.JetStream().Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Purge(ctx, jetstream.WithPurgeSubject(bus.ExecutionFilter(id[1]))); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	if code := cmdWatch(ctx, []string{id[1]}, &out, &errOut); code != exitOK {
		t.Fatalf("nova watch, events purged: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	for _, w := range []string{"workflow   progress", "execution  " + id[1], "✓ add_one succeeded", "✓ double succeeded", "status     succeeded"} {
		if !strings.Contains(strings.Join(strings.Fields(out.String()), " "), strings.Join(strings.Fields(w), " ")) {
			t.Errorf("nova watch, events purged, does not show %q:\n%s", w, out.String())
		}
	}
	if !strings.Contains(errOut.String(), "no longer kept") || !strings.Contains(errOut.String(), "nova chain "+id[1]) {
		t.Errorf("nova watch, events purged, does not say so: %s", errOut.String())
	}

	// An execution that failed at its start (its workflow is not
	// registered) shows its failure and why, also once its events are
	// purged: the engine keeps its state as any ended execution's.
	failed, err := client.New(b, nil).Start(ctx, nil, "no-such-workflow", nil)
	if err != nil {
		t.Fatal(err)
	}
	if wc, err := failed.Wait(ctx); err != nil || wc.GetStatus() != "failed" {
		t.Fatalf("start of an unregistered workflow: %v (%v), want failed", wc, err)
	}
	if err := events.Purge(ctx, jetstream.WithPurgeSubject(bus.ExecutionFilter(failed.ID))); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	code := cmdWatch(ctx, []string{failed.ID}, &out, &errOut)
	shown := strings.Join(strings.Fields(out.String()), " ")
	if code != exitFailed || !strings.Contains(shown, "workflow no-such-workflow") || !strings.Contains(shown, "status failed") ||
		!strings.Contains(shown, `workflow "no-such-workflow" is not registered`) {
		t.Errorf("nova watch of an execution that failed at its start: exit %d\n%s%s", code, out.String(), errOut.String())
	}

	out.Reset()
	errOut.Reset()
	if code := cmdWatch(ctx, []string{"no-such-execution"}, &out, &errOut); code != exitFailed || !strings.Contains(errOut.String(), `no execution "no-such-execution"`) {
		t.Errorf("watch of an unknown execution: exit %d\n%s%s", code, out.String(), errOut.String())
	}
}

// nova dev refuses settings it cannot honour, naming them, before it starts
// anything.
func TestDevRefusesBadSettings(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--zygote-idle", "-1s"}, "--zygote-idle -1s: want a duration of 0 or more"},
		{[]string{"--cluster", "2"}, "--cluster 2: a NATS cluster needs 3 or more servers"},
		{[]string{"--sandbox-workers", "0"}, "--sandbox-workers 0: want 1 or more programs at once"},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"--data-dir", t.TempDir()}, tc.args...)
		if code := cmdDev(t.Context(), args, &stdout, &stderr); code != exitInvalid || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("nova dev %v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr.String(), exitInvalid, tc.want)
		}
	}
}

// nova dev's sandbox runs one program per CPU it may use unless told
// otherwise: by the flag, or the sandbox's own variable.
func TestDevSandboxWorkers(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name string
		env  string
		args []string
		want int
	}{
		{"one per CPU", "", nil, runtime.GOMAXPROCS(0)},
		{"the variable", "7", nil, 7},
		{"the flag wins", "7", []string{"--sandbox-workers", "12"}, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NOVA_SANDBOX_WORKERS", tc.env)
			f, ok := parseDevFlags(append([]string{"--data-dir", t.TempDir()}, tc.args...), io.Discard)
			if !ok {
				t.Fatal("flags refused")
			}
			opts, _, err := devStackOptions(f, log)
			if err != nil {
				t.Fatal(err)
			}
			if got := opts.Sandbox.RunWorkers(); got != tc.want {
				t.Errorf("sandbox workers %d, want %d", got, tc.want)
			}
		})
	}
	// The engine's workers: two per CPU, at least 8, unless NOVA_WORKERS.
	for env, want := range map[string]int{"": max(8, 2*runtime.GOMAXPROCS(0)), "5": 5} {
		t.Setenv("NOVA_WORKERS", env)
		f, ok := parseDevFlags([]string{"--data-dir", t.TempDir()}, io.Discard)
		if !ok {
			t.Fatal("flags refused")
		}
		opts, _, err := devStackOptions(f, log)
		if err != nil {
			t.Fatal(err)
		}
		var banner strings.Builder
		printDevRunning(&banner, &stack.Stack{}, opts, "", false)
		if line := fmt.Sprintf("engine   %d events at once per consumer", want); !strings.Contains(banner.String(), line) {
			t.Errorf("NOVA_WORKERS=%q: the banner does not say %q:\n%s", env, line, banner.String())
		}
	}
}
