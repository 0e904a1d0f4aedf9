package service_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/devstack/devstacktest"
	"github.com/novaflow/nova/pkg/eventjson"
	"github.com/novaflow/nova/pkg/valueref"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/sandbox/runner"
	"github.com/novaflow/nova/services/sandbox/service"
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

const secret = "sk-test-abuse-4f1c9e"

// harness is the sandbox service on an embedded NATS, as the engine sees it:
// ExecuteCode on nova.cmd.sandbox in, CodeExecuted on nova.evt.<exec>.result.sandbox out.
type harness struct {
	t       *testing.T
	b       *bus.Bus
	values  *valueref.Store
	results *nats.Subscription

	mu      sync.Mutex
	seq     int
	pending map[string]*nats.Msg // results that came while waiting for another
	// run tells this harness's steps from another's on the same NATS:
	// the stream drops a command whose id it saw in the last two minutes.
	run string
}

func startService(t *testing.T, cfg runner.Config) *harness {
	t.Helper()
	if _, err := exec.LookPath("/usr/bin/bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	quiet := slog.New(slog.DiscardHandler)
	b := devstacktest.Bus(ctx, t, "sandbox-abuse-test")
	h := newHarness(t, b)

	work, err := os.MkdirTemp("", "nova-abuse-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.Chmod(work, 0o711); err != nil {
		t.Fatal(err)
	}
	cfg.WorkDir, cfg.Logger = work, quiet
	r, err := runner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for r.WarmReady() < r.WarmSize() {
		if time.Now().After(deadline) {
			t.Fatal("zygotes not ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	done := make(chan error, 1)
	go func() {
		done <- service.Run(ctx, service.Deps{Bus: b, Runner: r, Values: h.values, Logger: quiet, Workers: 2})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("service.Run: %v", err)
		}
		r.Close()
	})
	return h
}

// newHarness opens the value store and the results subscription on b.
func newHarness(t *testing.T, b *bus.Bus) *harness {
	t.Helper()
	values, err := valueref.Open(t.Context(), b.JetStream(), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	results, err := b.Conn().SubscribeSync(bus.EventSubject("abuse", bus.KindSandboxResult))
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, b: b, values: values, results: results, pending: map[string]*nats.Msg{}, run: strconv.FormatInt(time.Now().UnixNano(), 36)}
}

// execute sends one program and returns its result and the raw event.
func (h *harness) execute(req *novav1.ExecuteCode) (*novav1.CodeExecuted, []byte) {
	h.t.Helper()
	return h.await(h.send(req))
}

// send publishes one program and returns its step id.
func (h *harness) send(req *novav1.ExecuteCode) string {
	h.t.Helper()
	h.mu.Lock()
	h.seq++
	req.ExecutionId, req.NodeId = "abuse", "node"
	req.StepId = "abuse/node/" + h.run + "-" + strconv.Itoa(h.seq)
	h.mu.Unlock()
	if req.Stage == "" {
		req.Stage = "TASK"
	}
	if err := h.b.PublishProto(context.Background(), bus.CommandSubject(bus.AgentSandbox), req.StepId, bus.TypeSandboxExecute, req, nil); err != nil {
		h.t.Fatal(err)
	}
	return req.StepId
}

// await returns the result of one step; results of concurrent steps may come
// in any order.
func (h *harness) await(step string) (*novav1.CodeExecuted, []byte) {
	h.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		h.mu.Lock()
		m, ok := h.pending[step+"/result"]
		delete(h.pending, step+"/result")
		h.mu.Unlock()
		if ok {
			var out novav1.CodeExecuted
			if err := eventjson.Unmarshal(m.Data, &out); err != nil {
				h.t.Fatal(err)
			}
			return &out, m.Data
		}
		m, err := h.results.NextMsg(time.Until(deadline))
		if err != nil {
			h.t.Fatalf("no result for %s: %v", step, err)
		}
		h.mu.Lock()
		h.pending[m.Header.Get("Nats-Msg-Id")] = m
		h.mu.Unlock()
	}
}

// stillServing runs an ordinary program.
func (h *harness) stillServing() {
	h.t.Helper()
	ctx := obj(h.t, map[string]any{"total": 1500}).Proto()
	res, _ := h.execute(&novav1.ExecuteCode{Code: "context['discount'] = context['total'] * 0.1", Context: ctx})
	if res.Status != "success" || string(updatesOf(h.t, res)["discount"]) != "150.0" {
		h.t.Fatalf("the service no longer serves: %s %s: %s", res.Status, res.ErrorKind, res.Error)
	}
}

// connectService is the harness for a sandbox service that already
// consumes nova.cmd.sandbox on the NATS at url: the sandbox image in a
// container (deploy/test/images), run with the secret in its environment
// and the limits and zygotes of the "warm" mode below.
func connectService(t *testing.T, url string) *harness {
	t.Helper()
	b, err := bus.Connect(t.Context(), url, bus.WithName("sandbox-abuse-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return newHarness(t, b)
}

// The abuse suite: every isolation property the sandbox promises, each
// tried by a program. With NOVA_ABUSE_NATS_URL set it runs against the
// sandbox service listening there instead of one in this process.
func TestAbuse(t *testing.T) {
	if url := os.Getenv("NOVA_ABUSE_NATS_URL"); url != "" {
		t.Run("external", func(t *testing.T) { testAbuse(t, connectService(t, url), true) })
		return
	}
	t.Setenv("OPENAI_API_KEY", secret)
	cfg := runner.Config{
		MemoryBytes:      256 << 20,
		DiskBytes:        16 << 20,
		MaxProcesses:     64,
		MaxOutputBytes:   64 << 10,
		OutputLimitBytes: 8 << 20,
	}
	// "warm" runs what imports only standard modules (most of the abuse
	// below) on its light zygote, "warm-full" everything on full ones.
	for _, mode := range []struct {
		name         string
		zygotes      int
		lightZygotes int
	}{{"cold", 0, 0}, {"warm", 2, 0}, {"warm-full", 2, -1}} {
		t.Run(mode.name, func(t *testing.T) {
			c := cfg
			c.Zygotes, c.LightZygotes = mode.zygotes, mode.lightZygotes
			testAbuse(t, startService(t, c), mode.zygotes > 0)
		})
	}
}

func testAbuse(t *testing.T, h *harness, warm bool) {
	hostPort := listen(t)
	type want struct {
		status, kind, limit, error string
		updates                    map[string]any // a subset of the context updates
		stdoutPrefix               string
		within                     time.Duration
		check                      func(t *testing.T, res *novav1.CodeExecuted)
	}
	// A warm job's process is pid 1 of the job's namespace, which no signal
	// from inside ends: kill -9 -1 reaches every other process. A cold run's
	// pid 1 is bubblewrap's, so the kill ends the program.
	killAll := want{status: "error", kind: "code_error", error: "killed by SIGKILL"}
	if warm {
		killAll = want{status: "success", updates: map[string]any{"alive": true, "child": json.Number("-9")}}
	}
	cases := []struct {
		name    string
		code    string
		timeout float64
		want    want
	}{
		{
			name: "connect to an outside address",
			code: "import socket\nsocket.create_connection(('203.0.113.1', 80), timeout=20)",
			want: want{status: "error", kind: "code_error", error: "Network is unreachable", within: 5 * time.Second},
		},
		{
			name: "connect to a loopback port of the host",
			code: fmt.Sprintf("import socket\nsocket.create_connection(('127.0.0.1', %d), timeout=5)", hostPort.port),
			want: want{status: "error", kind: "code_error", error: "Connection refused", check: func(t *testing.T, _ *novav1.CodeExecuted) {
				if n := hostPort.accepted(); n > 0 {
					t.Errorf("the host's listener accepted %d connections from the sandbox", n)
				}
			}},
		},
		{
			name: "read /etc/shadow",
			code: "context['shadow'] = open('/etc/shadow').read()",
			want: want{status: "error", kind: "code_error", error: "No such file or directory: '/etc/shadow'"},
		},
		{
			name: "read /proc/1/environ and the service's environment",
			code: `import os, glob
found = {'env': dict(os.environ)}
for p in glob.glob('/proc/*/environ') + ['/proc/1/environ', '/proc/self/environ']:
    try:
        found[p] = open(p, 'rb').read().decode(errors='replace')
    except OSError as e:
        found[p] = repr(e)
context['found'] = found`,
			want: want{status: "success", check: func(t *testing.T, res *novav1.CodeExecuted) {
				env := decodedUpdates(t, res)["found"].(map[string]any)["env"].(map[string]any)
				if _, ok := env["OPENAI_API_KEY"]; ok {
					t.Error("OPENAI_API_KEY is in the code's environment")
				}
			}},
		},
		{
			name: "fork bomb",
			code: "import os\nwhile True:\n    os.fork()",
			want: want{status: "error", kind: "limit", limit: "processes", error: "process limit 64"},
		},
		{
			name: "allocate past the memory limit",
			code: "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))",
			want: want{status: "error", kind: "limit", limit: "memory", error: "MemoryError"},
		},
		{
			name:    "infinite loop",
			code:    "print('looping', flush=True)\nwhile True:\n    pass",
			timeout: 2,
			want:    want{status: "error", kind: "timeout", limit: "wall_time", error: "timeout after 2s", stdoutPrefix: "looping", within: 6 * time.Second},
		},
		{
			name: "sleep in a child that outlives the parent",
			code: "import subprocess\nsubprocess.Popen(['sleep', '33.25'], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\ncontext['started'] = True",
			want: want{status: "success", updates: map[string]any{"started": true}, within: 5 * time.Second, check: func(t *testing.T, _ *novav1.CodeExecuted) {
				if n := countAlive("sleep\x0033.25\x00"); n > 0 {
					t.Errorf("%d sleep processes outlived the run", n)
				}
			}},
		},
		{
			name: "print 1 GiB",
			code: "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)\ncontext['printed'] = True",
			want: want{status: "error", kind: "limit", limit: "output", error: "output limit", stdoutPrefix: "xxxx", within: 20 * time.Second,
				check: func(t *testing.T, res *novav1.CodeExecuted) {
					if len(res.Stdout) != 64<<10 || res.StdoutDroppedBytes < 7<<20 {
						t.Errorf("kept %d bytes of stdout, counted %d dropped", len(res.Stdout), res.StdoutDroppedBytes)
					}
				}},
		},
		{
			name: "fill the disk",
			code: "with open('/tmp/fill', 'wb') as f:\n    while True:\n        f.write(b'0' * (1 << 20))",
			want: want{status: "error", kind: "limit", limit: "disk", error: "No space left on device"},
		},
		{
			name: "kill the parent process",
			code: "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(1, signal.SIGKILL)\ncontext['alive'] = True",
			want: want{status: "success", updates: map[string]any{"alive": true}},
		},
		{
			name: "kill every process of the sandbox",
			// kill -9 -1 from a child process, as Python (the sandbox's
			// images have no procps, so no kill command).
			code: "import subprocess, sys\nchild = subprocess.Popen(['sleep', '30'])\nsubprocess.run([sys.executable, '-c', 'import os, signal; os.kill(-1, signal.SIGKILL)'])\ncontext['alive'] = True\ncontext['child'] = child.wait(5)",
			want: killAll,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			res, raw := h.execute(&novav1.ExecuteCode{Code: tc.code, TimeoutSeconds: tc.timeout})
			took := time.Since(start)
			w := tc.want
			if res.Status != w.status || res.ErrorKind != w.kind || res.Limit != w.limit || !strings.Contains(res.Error, w.error) {
				t.Errorf("got %s/%s limit %q: %q\nwant %s/%s limit %q: %q\nstdout %.200q stderr %.300q", res.Status, res.ErrorKind, res.Limit, res.Error,
					w.status, w.kind, w.limit, w.error, res.Stdout, res.Stderr)
			}
			got := decodedUpdates(t, res)
			for k, v := range w.updates {
				if got[k] != v {
					t.Errorf("update %s = %v, want %v", k, got[k], v)
				}
			}
			if !strings.HasPrefix(res.Stdout, w.stdoutPrefix) {
				t.Errorf("partial output lost: %.100q", res.Stdout)
			}
			if w.within > 0 && took > w.within {
				t.Errorf("took %s, want within %s", took, w.within)
			}
			if bytes.Contains(raw, []byte(secret)) {
				t.Errorf("the service's secret reached the result")
			}
			if w.check != nil {
				w.check(t, res)
			}
			h.stillServing()
		})
	}

	t.Run("write a file and look for it from the next execution", func(t *testing.T) {
		res, _ := h.execute(&novav1.ExecuteCode{Code: "import os\nopen('/tmp/left', 'w').write('x')\nopen('left-here', 'w').write('x')\ncontext['cwd'] = os.getcwd()"})
		if res.Status != "success" {
			t.Fatalf("%s: %s", res.ErrorKind, res.Error)
		}
		res, _ = h.execute(&novav1.ExecuteCode{Code: "import os\ncontext['seen'] = os.listdir('/tmp') + os.listdir('.')"})
		if seen := decodedUpdates(t, res)["seen"]; res.Status != "success" || len(seen.([]any)) != 0 {
			t.Errorf("the next execution sees %v (%s %s)", seen, res.ErrorKind, res.Error)
		}
	})

	t.Run("two executions at once cannot see each other", func(t *testing.T) {
		first := `import socket, subprocess, time
open('/tmp/first', 'w').write('x')
srv = socket.socket(); srv.bind(('127.0.0.1', 6000)); srv.listen()
subprocess.Popen(['sleep', '33.5'])
time.sleep(2)
context['first'] = True`
		second := `import os, socket, time
time.sleep(0.8)
def reach():
    try:
        socket.create_connection(('127.0.0.1', 6000), timeout=1).close()
        return True
    except OSError:
        return False
cmdlines = []
for p in os.listdir('/proc'):
    if p.isdigit():
        try:
            cmdlines.append(open(f'/proc/{p}/cmdline').read())
        except OSError:
            pass
context['seen'] = {'files': os.listdir('/tmp'), 'tcp': reach(), 'sleep': any('33.5' in c for c in cmdlines)}`
		// Two workers take them at once.
		stepA, stepB := h.send(&novav1.ExecuteCode{Code: first}), h.send(&novav1.ExecuteCode{Code: second})
		a, _ := h.await(stepA)
		b, _ := h.await(stepB)
		if a.Status != "success" || b.Status != "success" {
			t.Fatalf("%s %s / %s %s", a.ErrorKind, a.Error, b.ErrorKind, b.Error)
		}
		seen := decodedUpdates(t, b)["seen"].(map[string]any)
		if len(seen["files"].([]any)) != 0 || seen["tcp"] != false || seen["sleep"] != false {
			t.Errorf("the second execution saw the first: %v", seen)
		}
	})

	t.Run("a 20 MiB context value passed by reference", func(t *testing.T) {
		big := strings.Repeat("0123456789abcdef", 20<<20/16)
		sum := sha256.Sum256([]byte(big))
		values := obj(t, map[string]any{"big": big})
		if err := h.values.Shrink(context.Background(), values); err != nil {
			t.Fatal(err)
		}
		if _, ok := valueref.RawRef(values["big"]); !ok {
			t.Fatalf("the value did not become a reference: %.100s", values["big"])
		}
		res, _ := h.execute(&novav1.ExecuteCode{Context: values.Proto(), Code: "import hashlib\ncontext['sha256'] = hashlib.sha256(context['big'].encode()).hexdigest()\ncontext['size'] = len(context['big'])"})
		got := decodedUpdates(t, res)
		if res.Status != "success" || got["sha256"] != hex.EncodeToString(sum[:]) || got["size"] != json.Number(strconv.Itoa(len(big))) {
			t.Errorf("%s %s: got %v", res.ErrorKind, res.Error, got)
		}
	})
}

// listener is a port of the host the sandbox must not reach.
type listener struct {
	port int
	mu   sync.Mutex
	n    int
}

func (l *listener) accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

func listen(t *testing.T) *listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &listener{port: ln.Addr().(*net.TCPAddr).Port}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.mu.Lock()
			l.n++
			l.mu.Unlock()
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return l
}

// countAlive counts host processes with this exact command line that are not
// being killed (SIGKILL pending) or dead.
func countAlive(cmdline string) int {
	paths, _ := filepath.Glob("/proc/[0-9]*")
	n := 0
	for _, p := range paths {
		b, err := os.ReadFile(p + "/cmdline")
		if err != nil || string(b) != cmdline {
			continue
		}
		status, err := os.ReadFile(p + "/status")
		if err != nil {
			continue
		}
		dying := false
		for _, line := range strings.Split(string(status), "\n") {
			k, v, _ := strings.Cut(line, ":")
			v = strings.TrimSpace(v)
			switch k {
			case "State":
				dying = dying || strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X")
			case "SigPnd", "ShdPnd":
				mask, _ := strconv.ParseUint(v, 16, 64)
				dying = dying || mask&(1<<8) != 0 // SIGKILL
			}
		}
		if !dying {
			n++
		}
	}
	return n
}
