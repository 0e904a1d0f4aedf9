package runner

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/novaflow/nova/services/sandbox/isolation/isolationtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newTestRunner builds a Runner over a private work dir and checks, when the test
// ends, that every per-execution directory was removed. A warm runner
// (cfg.Zygotes > 0) is returned once its zygotes are ready and closed at the end.
func newTestRunner(t testing.TB, cfg Config) *Runner {
	t.Helper()
	r := startTestRunner(t, cfg)
	waitWarm(t, r, r.WarmSize())
	return r
}

// startTestRunner is newTestRunner without waiting for the zygotes: they are
// still starting when it returns.
func startTestRunner(t testing.TB, cfg Config) *Runner {
	t.Helper()
	if _, err := exec.LookPath("/usr/bin/bwrap"); err != nil {
		t.Skip("bubblewrap is not installed (/usr/bin/bwrap); install the bubblewrap package to run sandbox tests")
	}
	cfg.WorkDir = isolationtest.WorkDir(t)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func waitWarm(t testing.TB, r *Runner, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d zygotes to be ready", n), func() bool { return r.WarmReady() >= n })
}

// waitFor waits up to 30 s for cond.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// modes are the ways every behaviour is tested: a bubblewrap per run, forked
// from a warm zygote, and forked from a light one (its full zygote stopped,
// so that every program falls back to the light zygote, whatever it imports).
var modes = []struct {
	name    string
	zygotes int
	light   bool
}{{"cold", 0, false}, {"warm", 1, false}, {"warm-light", 1, true}}

// newModeRunner is newTestRunner for one of the modes: a light one runs
// every program on its light zygote.
func newModeRunner(t testing.TB, cfg Config, zygotes int, light bool) *Runner {
	t.Helper()
	cfg.Zygotes, cfg.LightZygotes = zygotes, -1
	if light {
		cfg.LightZygotes = 1
	}
	r := newTestRunner(t, cfg)
	if light {
		r.pool.close()
	}
	return r
}

// forEachMode runs f against a cold, a warm and a warm light runner built from cfg.
func forEachMode(t *testing.T, cfg Config, f func(t *testing.T, r *Runner)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			f(t, newModeRunner(t, cfg, m.zygotes, m.light))
		})
	}
}

func run(t *testing.T, r *Runner, req Request) Result {
	t.Helper()
	res, err := r.Run(context.Background(), req)
	if err != nil {
		t.Fatalf("Run: %v (stderr: %s)", err, res.Stderr)
	}
	if want := r.pool != nil; res.Warm != want && res.ErrorKind != KindRuntimeUnavailable {
		t.Fatalf("run warm = %v, want %v", res.Warm, want)
	}
	return res
}

// sameJSON compares values the way a consumer of the JSON would see them.
func sameJSON(t *testing.T, got any, want string) bool {
	t.Helper()
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatalf("marshal %v: %v", got, err)
	}
	var g, w any
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	return reflect.DeepEqual(g, w)
}

func wantSuccess(t *testing.T, res Result, updates string, deleted ...string) {
	t.Helper()
	if res.Status != StatusSuccess {
		t.Fatalf("status %q (%s: %s)\n%s\nstderr: %s", res.Status, res.ErrorKind, res.Error, res.Traceback, res.Stderr)
	}
	if !sameJSON(t, res.Updates, updates) {
		t.Errorf("updates = %s, want %s", res.Updates, updates)
	}
	if len(res.Deleted) != len(deleted) || (len(deleted) > 0 && !reflect.DeepEqual(res.Deleted, deleted)) {
		t.Errorf("deleted = %q, want %q", res.Deleted, deleted)
	}
}

func wantError(t *testing.T, res Result, kind, message string) {
	t.Helper()
	if res.Status != StatusError || res.ErrorKind != kind {
		t.Fatalf("got %s/%q (%s), want error/%q\nstderr: %s", res.Status, res.ErrorKind, res.Error, kind, res.Stderr)
	}
	if !strings.Contains(res.Error, message) {
		t.Errorf("error = %q, want it to contain %q", res.Error, message)
	}
	if res.Updates != nil || res.Deleted != nil {
		t.Errorf("a failed run reported updates %s / deletions %v", res.Updates, res.Deleted)
	}
}

func TestRun(t *testing.T) {
	forEachMode(t, Config{}, testRun)
}

func testRun(t *testing.T, r *Runner) {
	big := strings.Repeat("0123456789abcdef", 5<<20/16)

	tests := []struct {
		name  string
		req   Request
		check func(t *testing.T, res Result)
	}{
		{
			name:  "simple update",
			req:   Request{Code: "context['x'] = 1"},
			check: func(t *testing.T, res Result) { wantSuccess(t, res, `{"x": 1}`) },
		},
		{
			name:  "reads the context and computes",
			req:   Request{Code: "context['discount'] = context['total'] * 0.1", Context: obj(t, map[string]any{"total": 1500})},
			check: func(t *testing.T, res Result) { wantSuccess(t, res, `{"discount": 150}`) },
		},
		{
			name: "unchanged keys are not updates, a bool is not an int",
			req: Request{
				Code:    "context['flag'] = True\ncontext['same'] = {'a': [1, 2]}",
				Context: obj(t, map[string]any{"flag": 1, "same": map[string]any{"a": []any{1, 2}}, "other": "kept"}),
			},
			check: func(t *testing.T, res Result) { wantSuccess(t, res, `{"flag": true}`) },
		},
		{
			name:  "deletion",
			req:   Request{Code: "del context['a']\ncontext.pop('b')", Context: obj(t, map[string]any{"a": 1, "b": 2, "c": 3})},
			check: func(t *testing.T, res Result) { wantSuccess(t, res, `{}`, "a", "b") },
		},
		{
			name: "original protocol line, the last one wins over the diff",
			req: Request{
				Code: `import json
context['x'] = 1
context['y'] = 1
print(json.dumps({"status": "success", "context_updates": {"y": 0}}))
print(json.dumps({"status": "success", "context_updates": {"y": 2, "z": [1, 2]}, "message": "ok"}))
print("done")
print({"status": 200})`,
			},
			check: func(t *testing.T, res Result) { wantSuccess(t, res, `{"x": 1, "y": 2, "z": [1, 2]}`) },
		},
		{
			name: "protocol line puts back a deleted key",
			req: Request{
				Code:    `del context['a']` + "\n" + `print('{"context_updates": {"a": 5}}')`,
				Context: obj(t, map[string]any{"a": 1}),
			},
			check: func(t *testing.T, res Result) { wantSuccess(t, res, `{"a": 5}`) },
		},
		{
			name: "protocol status error",
			req:  Request{Code: `print(json.dumps({"status": "error", "message": "no rows to process"}))`},
			check: func(t *testing.T, res Result) {
				wantError(t, res, KindCodeError, "no rows to process")
			},
		},
		{
			name: "raised exception",
			req: Request{Code: `def check(amount):
    if amount <= 0:
        raise ValueError("amount must be positive")
check(context["amount"])`, Context: obj(t, map[string]any{"amount": -5})},
			check: func(t *testing.T, res Result) {
				wantError(t, res, KindCodeError, "ValueError: amount must be positive")
				for _, want := range []string{`File "<node>", line 3, in check`, `File "<node>", line 4`, `raise ValueError("amount must be positive")`} {
					if !strings.Contains(res.Traceback, want) {
						t.Errorf("traceback lacks %q:\n%s", want, res.Traceback)
					}
				}
				if strings.Contains(res.Traceback, "runner.py") {
					t.Errorf("traceback shows the runner's frames:\n%s", res.Traceback)
				}
			},
		},
		{
			name: "syntax error",
			req:  Request{Code: "x = 1\nif x\n    pass"},
			check: func(t *testing.T, res Result) {
				wantError(t, res, KindCodeError, "SyntaxError")
				if !strings.Contains(res.Traceback, `File "<node>", line 2`) {
					t.Errorf("traceback lacks the line:\n%s", res.Traceback)
				}
			},
		},
		{
			name:  "sys.exit with a non-zero code",
			req:   Request{Code: "import sys\nsys.exit(2)"},
			check: func(t *testing.T, res Result) { wantError(t, res, KindCodeError, "SystemExit: 2") },
		},
		{
			name:  "sys.exit(0) keeps the updates",
			req:   Request{Code: "import sys\ncontext['x'] = 1\nsys.exit(0)"},
			check: func(t *testing.T, res Result) { wantSuccess(t, res, `{"x": 1}`) },
		},
		{
			name: "non-serializable values are named",
			req:  Request{Code: "import datetime as dt\ncontext['ok'] = 1\ncontext['when'] = dt.datetime(2024, 1, 1)\ncontext['tags'] = {'a'}"},
			check: func(t *testing.T, res Result) {
				wantError(t, res, KindCodeError, `context values are not JSON-serializable: "when" (datetime), "tags" (set)`)
			},
		},
		{
			name: "NaN is not JSON",
			req:  Request{Code: "context['ratio'] = float('nan')\ncontext['nested'] = {'v': [float('inf')]}"},
			check: func(t *testing.T, res Result) {
				wantError(t, res, KindCodeError, `"ratio" (NaN or Infinity), "nested" (NaN or Infinity)`)
			},
		},
		{
			name:  "a DataFrame and bytes are not JSON",
			req:   Request{Code: "import pandas as pd\ncontext['df'] = pd.DataFrame({'a': [1]})\ncontext['raw'] = b'x'"},
			check: func(t *testing.T, res Result) { wantError(t, res, KindCodeError, `"df" (DataFrame), "raw" (bytes)`) },
		},
		{
			name:  "rebinding context to something else",
			req:   Request{Code: "context = [1]"},
			check: func(t *testing.T, res Result) { wantError(t, res, KindCodeError, "context must be a dict") },
		},
		{
			name:  "memory limit",
			req:   Request{Code: "x = bytearray(2 << 30)"},
			check: func(t *testing.T, res Result) { wantError(t, res, KindLimit, "MemoryError") },
		},
		{
			name:  "other languages are unavailable",
			req:   Request{Code: "context.x = 1", Language: "javascript"},
			check: func(t *testing.T, res Result) { wantError(t, res, KindRuntimeUnavailable, `"javascript"`) },
		},
		{
			name: "stdout and stderr are captured apart",
			req:  Request{Code: "import sys\nprint('to out')\nprint('to err', file=sys.stderr)\nimport subprocess\nsubprocess.run(['echo', 'from child'])"},
			check: func(t *testing.T, res Result) {
				wantSuccess(t, res, `{}`)
				if res.Stdout != "to out\nfrom child\n" || res.Stderr != "to err\n" {
					t.Errorf("stdout %q, stderr %q", res.Stdout, res.Stderr)
				}
			},
		},
		{
			name: "a 5 MiB value round trips",
			req:  Request{Code: "context['copy'] = context['big'][::-1][::-1] + '!'", Context: obj(t, map[string]any{"big": big})},
			check: func(t *testing.T, res Result) {
				if res.Status != StatusSuccess {
					t.Fatalf("%s: %s", res.ErrorKind, res.Error)
				}
				if got, _ := decoded(t, res.Updates["copy"]).(string); got != big+"!" {
					t.Errorf("copy has %d bytes, want %d", len(got), len(big)+1)
				}
				if _, ok := res.Updates["big"]; ok {
					t.Error("the unchanged big value was reported as an update")
				}
			},
		},
		{
			name: "printing 5 MiB is capped",
			req:  Request{Code: "print('x' * (5 << 20))\ncontext['after'] = True"},
			check: func(t *testing.T, res Result) {
				wantSuccess(t, res, `{"after": true}`)
				if int64(len(res.Stdout)) != 1<<20 || res.StdoutDropped != 5<<20+1-1<<20 {
					t.Errorf("stdout kept %d bytes, dropped %d", len(res.Stdout), res.StdoutDropped)
				}
			},
		},
		{
			name: "the libraries of the issue import",
			req: Request{Code: `import fitz, pandas, requests, PIL.Image, bs4, lxml.etree, openpyxl, pypdf
context['rows'] = len(pandas.DataFrame({'a': [1, 2, 3]}))
context['pdf'] = fitz.open().is_pdf
context['soup'] = bs4.BeautifulSoup('<p>hi</p>', 'lxml').p.text
context['xlsx'] = openpyxl.Workbook().active.title
context['pypdf'] = pypdf.PdfWriter().__class__.__name__
context['img'] = PIL.Image.new('RGB', (2, 3)).size[1]`},
			check: func(t *testing.T, res Result) {
				wantSuccess(t, res, `{"rows": 3, "pdf": true, "soup": "hi", "xlsx": "Sheet", "pypdf": "PdfWriter", "img": 3}`)
			},
		},
		{
			name:  "the prelude provides json",
			req:   Request{Code: "context['s'] = json.dumps([1, 2])"},
			check: func(t *testing.T, res Result) { wantSuccess(t, res, `{"s": "[1, 2]"}`) },
		},
		{
			name:  "the working directory is the private /tmp",
			req:   Request{Code: "import os\ncontext['cwd'] = os.getcwd()\nopen('f.txt', 'w').write('x')"},
			check: func(t *testing.T, res Result) { wantSuccess(t, res, `{"cwd": "/tmp"}`) },
		},
		{
			name:  "the system is read-only",
			req:   Request{Code: "try:\n    open('/usr/evil', 'w')\n    context['wrote'] = True\nexcept OSError as e:\n    context['wrote'] = False"},
			check: func(t *testing.T, res Result) { wantSuccess(t, res, `{"wrote": false}`) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, r, tt.req)
			if res.SandboxID == "" {
				t.Error("no sandbox id")
			}
			tt.check(t, res)
		})
	}
}

func TestRunLimits(t *testing.T) {
	cfg := Config{MemoryBytes: 256 << 20, FileSizeBytes: 1 << 20, DiskBytes: 4 << 20, MaxResultBytes: 1 << 20, MaxOutputBytes: 10,
		OutputLimitBytes: 1 << 20, MaxProcesses: 32, CPUTime: time.Second}
	forEachMode(t, cfg, testRunLimits)
}

func testRunLimits(t *testing.T, r *Runner) {
	tests := []struct {
		name, code, kind, limit, message string
		timeout                          time.Duration
	}{
		{name: "memory", code: "x = 'y' * (512 << 20)", kind: KindLimit, limit: LimitMemory, message: "MemoryError"},
		{name: "file size", code: "open('/tmp/f', 'wb').write(b'0' * (2 << 20))", kind: KindLimit, limit: LimitFileSize, message: "File too large"},
		{name: "disk", code: "for i in range(8):\n    open(f'/tmp/f{i}', 'wb').write(b'0' * (900 << 10))", kind: KindLimit, limit: LimitDisk, message: "No space left"},
		{name: "result size", code: "context['big'] = 'z' * (2 << 20)", kind: KindLimit, limit: LimitOutput, message: "result limit"},
		{name: "output", code: "while True:\n    print('x' * 4096)", kind: KindLimit, limit: LimitOutput, message: "output limit"},
		{name: "cpu time", code: "while True:\n    pass", kind: KindLimit, limit: LimitCPUTime, message: "CPU time"},
		{name: "processes", code: "import subprocess\nps = [subprocess.Popen(['sleep', '5']) for _ in range(64)]", kind: KindLimit, limit: LimitProcesses, message: "process limit"},
		{name: "wall time", code: "import time\ntime.sleep(60)", kind: KindTimeout, limit: LimitWallTime, message: "timeout after 4s", timeout: 4 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Each limit but the wall time's is met long before the
			// timeout, which is there for a machine so busy that
			// starting Python or 64 processes takes seconds.
			res := run(t, r, Request{Code: "print('partial', flush=True)\n" + tt.code, Timeout: cmp.Or(tt.timeout, 20*time.Second)})
			wantError(t, res, tt.kind, tt.message)
			if res.Limit != tt.limit {
				t.Errorf("limit %q, want %q", res.Limit, tt.limit)
			}
			if !strings.HasPrefix(res.Stdout, "partial") {
				t.Errorf("partial output lost: %q", res.Stdout)
			}
		})
	}
	t.Run("within the limits", func(t *testing.T) {
		res := run(t, r, Request{Code: "x = 'y' * (64 << 20)\nopen('/tmp/f', 'wb').write(b'0' * 1000)\nprint('0123456789abc')\ncontext['n'] = len(x)"})
		wantSuccess(t, res, `{"n": 67108864}`)
		if res.Stdout != "0123456789" || res.StdoutDropped != 4 {
			t.Errorf("stdout %q, dropped %d", res.Stdout, res.StdoutDropped)
		}
	})
}

// countSleeps counts host processes whose command line is exactly `sleep arg`
// and that are not being killed: a process with SIGKILL pending never runs
// again (warm runs return once everything of theirs has it, without waiting
// for the kernel to free their memory). arg is an isolationtest.SleepMarker,
// so that only the caller's sleeps are counted.
func countSleeps(t *testing.T, arg string) int {
	t.Helper()
	want := []byte("sleep\x00" + arg + "\x00")
	paths, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range paths {
		if b, err := os.ReadFile(p + "/cmdline"); err == nil && bytes.Equal(b, want) && !dying(p) {
			n++
		}
	}
	return n
}

// dying reports whether the process at /proc/<pid> has SIGKILL pending or
// has exited.
func dying(proc string) bool {
	b, err := os.ReadFile(proc + "/status")
	if err != nil {
		return true
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return true
			}
		case "SigPnd", "ShdPnd":
			if mask, err := strconv.ParseUint(v, 16, 64); err == nil && mask&(1<<(unix.SIGKILL-1)) != 0 {
				return true
			}
		}
	}
	return false
}

// countSleeps counts the sleeps of its marker, running ones only: not another
// test's sleep beside them, nor one that was killed.
func TestCountSleepsSeesItsMarkerOnly(t *testing.T) {
	mine, other := isolationtest.SleepMarker(30), isolationtest.SleepMarker(30)
	start := func(arg string) *exec.Cmd {
		cmd := exec.Command("sleep", arg)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	sleep := start(mine)
	start(other)
	if n := countSleeps(t, mine); n != 1 {
		t.Fatalf("%d `sleep %s` counted, want the 1 started", n, mine)
	}
	if err := sleep.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = sleep.Wait()
	if n := countSleeps(t, mine); n != 0 {
		t.Errorf("%d `sleep %s` counted after it was killed", n, mine)
	}
	if n := countSleeps(t, other); n != 1 {
		t.Errorf("%d `sleep %s` counted, want the 1 still running", n, other)
	}
}

func TestRunTimeoutKillsEverything(t *testing.T) {
	forEachMode(t, Config{}, testRunTimeoutKillsEverything)
}

func testRunTimeoutKillsEverything(t *testing.T, r *Runner) {
	// Each case's sleeps carry a marker of their own in place of SLEEP
	// (isolationtest.SleepMarker), so that the count after the run is of this
	// run's processes only: other tests, and other copies of this one, run
	// sleeps beside it.
	tests := []struct {
		name   string
		code   string
		sleeps bool
		// limit is the run's timeout (default 3s): a program needs time
		// enough to start, and to start its children, on a loaded machine
		// (1s was too little with another make test beside this one).
		limit time.Duration
	}{
		{
			name: "busy loop",
			code: "print('started', flush=True)\nwhile True: pass",
		},
		{
			name:   "child process then busy loop",
			sleeps: true,
			code:   "import subprocess\np = subprocess.Popen(['sleep', 'SLEEP'])\nprint('started', p.poll() is None)\nwhile True: pass",
		},
		{
			name:   "child in its own session and a forked grandchild",
			sleeps: true,
			code: `import os, subprocess, time
subprocess.Popen(['sleep', 'SLEEP'], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    os.execvp('sleep', ['sleep', 'SLEEP'])
print('started', True)
time.sleep(60)`,
		},
		{
			name:   "background child detached from the output, left by a finished program",
			sleeps: true,
			code: `import subprocess
p = subprocess.Popen(['sleep', 'SLEEP'], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
print('started', p.poll() is None)`,
		},
		{
			name:   "many detached children of a finished program",
			sleeps: true,
			code: `import subprocess
ps = [subprocess.Popen(['sleep', 'SLEEP'], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(100)]
print('started', all(p.poll() is None for p in ps))`,
			limit: 15 * time.Second,
		},
		{
			name:   "background child left by a finished program",
			sleeps: true,
			code:   "import subprocess\np = subprocess.Popen(['sleep', 'SLEEP'])\nprint('started', p.poll() is None)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			marker := isolationtest.SleepMarker(30)
			code := strings.ReplaceAll(tt.code, "SLEEP", marker)
			limit := cmp.Or(tt.limit, 3*time.Second)
			res := run(t, r, Request{Code: code, Timeout: limit})
			if !strings.HasPrefix(res.Stdout, "started") || strings.Contains(res.Stdout, "False") {
				t.Fatalf("the program did not start as expected: stdout %q, stderr %q", res.Stdout, res.Stderr)
			}
			if tt.sleeps {
				if n := countSleeps(t, marker); n > 0 {
					t.Errorf("%d `sleep %s` processes survived the run", n, marker)
				}
			}
			if !strings.Contains(tt.name, "loop") && !strings.Contains(tt.name, "session") {
				wantSuccess(t, res, `{}`)
				return
			}
			wantError(t, res, KindTimeout, "timeout after "+limit.String())
			if res.Duration > limit+3*time.Second {
				t.Errorf("a %s timeout took %s", limit, res.Duration)
			}
		})
	}
}

// The service may be pid 1 of its container, the reaper of every orphan: a run
// must not leave zombies behind there either.
func TestRunLeavesNoZombieForTheReaper(t *testing.T) {
	forEachMode(t, Config{}, testRunLeavesNoZombieForTheReaper)
}

func testRunLeavesNoZombieForTheReaper(t *testing.T, r *Runner) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("cannot become a child subreaper: %v", err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	for i := range 10 {
		wantSuccess(t, run(t, r, Request{Code: "import subprocess\nsubprocess.Popen(['true'])"}), `{}`)
		if z := zombieChildren(t); len(z) > 0 {
			t.Fatalf("run %d left zombie children %v", i, z)
		}
	}
}

func zombieChildren(t *testing.T) []string {
	t.Helper()
	var zombies []string
	for _, p := range processStats(t) {
		if p.state == "Z" && p.ppid == os.Getpid() {
			zombies = append(zombies, p.line)
		}
	}
	return zombies
}

// procStat is what a test reads of a host process in /proc/<pid>/stat.
type procStat struct {
	pid, ppid int
	state     string
	line      string
}

// processStats reads every host process's /proc/<pid>/stat; a process that
// ends meanwhile is left out.
func processStats(t *testing.T) []procStat {
	t.Helper()
	paths, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var stats []procStat
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// Fields after the command name (which may hold spaces and
		// parentheses): state ppid ...
		fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(fields) < 2 {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		ppid, _ := strconv.Atoi(fields[1])
		stats = append(stats, procStat{pid: pid, ppid: ppid, state: fields[0], line: string(b)})
	}
	return stats
}

func TestRunCancelled(t *testing.T) {
	forEachMode(t, Config{}, testRunCancelled)
}

func testRunCancelled(t *testing.T, r *Runner) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	marker := isolationtest.SleepMarker(30)
	res, err := r.Run(ctx, Request{Code: "import subprocess\nsubprocess.Popen(['sleep', '" + marker + "'])\nwhile True: pass", Timeout: time.Minute})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the caller's deadline", err)
	}
	if res.Status != StatusError {
		t.Errorf("status %q", res.Status)
	}
	if n := countSleeps(t, marker); n > 0 {
		t.Errorf("%d child processes survived the cancelled run", n)
	}
}

func TestRunIsolation(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-test-secret")
	forEachMode(t, Config{}, testRunIsolation)
}

func testRunIsolation(t *testing.T, r *Runner) {
	res := run(t, r, Request{Code: `import os
context["env"] = dict(os.environ)
context["environs"] = {}
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            context["environs"][pid] = open(f"/proc/{pid}/environ").read()
        except OSError as e:
            context["environs"][pid] = repr(e)
context["uid"] = os.getuid()
`})
	if res.Status != StatusSuccess {
		t.Fatalf("%s: %s\n%s", res.ErrorKind, res.Error, res.Traceback)
	}
	env, _ := decoded(t, res.Updates["env"]).(map[string]any)
	if len(env) == 0 {
		t.Fatalf("no environment reported: %s", res.Updates)
	}
	allowed := map[string]bool{}
	for _, kv := range sandboxEnv() {
		k, _, _ := strings.Cut(kv, "=")
		allowed[k] = true
	}
	for k := range env {
		// bwrap sets PWD for --chdir; Python adds LC_CTYPE under C.UTF-8.
		if !allowed[k] && k != "PWD" && k != "LC_CTYPE" {
			t.Errorf("the code sees %s", k)
		}
	}
	environs, _ := decoded(t, res.Updates["environs"]).(map[string]any)
	if _, ok := environs["1"]; !ok {
		t.Fatalf("pid 1 not visible: %v", environs)
	}
	if len(environs) > 3 {
		t.Errorf("the code sees %d processes, host processes leak into its pid namespace", len(environs))
	}
	all, _ := json.Marshal(res.Updates)
	if bytes.Contains(all, []byte("sk-test-secret")) {
		t.Errorf("the service's secret reached the code: %s", all)
	}
	if os.Geteuid() == 0 && !sameJSON(t, res.Updates["uid"], `65534`) {
		t.Errorf("sandbox uid = %s, want the unprivileged 65534", res.Updates["uid"])
	}
}

func TestRunTmpIsPrivate(t *testing.T) {
	forEachMode(t, Config{}, testRunTmpIsPrivate)
}

func testRunTmpIsPrivate(t *testing.T, r *Runner) {
	first := run(t, r, Request{Code: "open('/tmp/secret.txt', 'w').write('s3cret')\ncontext['wrote'] = True"})
	wantSuccess(t, first, `{"wrote": true}`)
	second := run(t, r, Request{Code: "import os\ncontext['seen'] = os.path.exists('/tmp/secret.txt')"})
	wantSuccess(t, second, `{"seen": false}`)
}

func TestRunConcurrent(t *testing.T) {
	forEachMode(t, Config{}, testRunConcurrent)
}

func testRunConcurrent(t *testing.T, r *Runner) {
	const n = 8
	results := make([]Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		ctx := obj(t, map[string]any{"n": i})
		wg.Go(func() {
			results[i], errs[i] = r.Run(context.Background(), Request{
				Code:    "import time\nopen('/tmp/mine', 'w').write(str(context['n']))\ntime.sleep(0.3)\ncontext['back'] = int(open('/tmp/mine').read())",
				Context: ctx,
			})
		})
	}
	wg.Wait()
	ids := map[string]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("run %d: %v", i, errs[i])
		}
		wantSuccess(t, results[i], `{"back": `+strconv.Itoa(i)+`}`)
		ids[results[i].SandboxID] = true
	}
	if len(ids) != n {
		t.Errorf("%d distinct sandbox ids for %d runs", len(ids), n)
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{name: "missing bwrap", cfg: Config{Bwrap: "/nonexistent/bwrap"}, want: "bubblewrap"},
		{name: "python outside /usr", cfg: Config{Python: "/root/.pyenv/shims/python3"}, want: "under /usr"},
		{name: "missing python", cfg: Config{Python: "/usr/bin/python-nonexistent"}, want: "python not usable"},
		{name: "missing work dir", cfg: Config{WorkDir: "/nonexistent/work"}, want: "work dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestProtocolScanner(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		want   string // JSON of the context updates, "" for no protocol message
		status string
	}{
		{name: "none", writes: []string{"hello\n", "{not json}\n"}},
		{name: "split across writes", writes: []string{`  {"status": "succ`, `ess", "context_updates": {"a": 1}}`, "\nbye\n"}, want: `{"a":1}`, status: "success"},
		{name: "last line without newline", writes: []string{"x\n" + `{"context_updates": {"b": 12345678901234567890}}`}, want: `{"b":12345678901234567890}`},
		{name: "last of several wins", writes: []string{`{"status": "success", "context_updates": {"a": 1}}` + "\n" + `{"status": "error", "message": "m"}` + "\n"}, want: `null`, status: "error"},
		{name: "unrelated status is not ours", writes: []string{`{"status": 200, "body": "x"}` + "\n" + `{"status": "ok"}` + "\n"}},
		{name: "updates must be an object", writes: []string{`{"status": "success", "context_updates": [1]}` + "\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &capture{max: 4, lines: &protocolScanner{maxLine: 1 << 20}}
			for _, w := range tt.writes {
				if n, err := c.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			c.lines.endLine()
			m := c.lines.last
			if tt.want == "" {
				if m != nil {
					t.Fatalf("found a protocol message %+v", m)
				}
				return
			}
			if m == nil {
				t.Fatal("no protocol message found")
			}
			got, _ := json.Marshal(m.ContextUpdates)
			if string(got) != tt.want || m.Status != tt.status {
				t.Errorf("got %s/%q, want %s/%q", got, m.Status, tt.want, tt.status)
			}
		})
	}
}

func BenchmarkRun(b *testing.B) {
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			r := newModeRunner(b, Config{}, m.zygotes, m.light)
			ctx := context.Background()
			req := Request{Code: "context['x'] = 1", Context: obj(b, map[string]any{"a": "b"})}
			for b.Loop() {
				res, err := r.Run(ctx, req)
				if err != nil || res.Status != StatusSuccess {
					b.Fatalf("%v %+v", err, res)
				}
			}
		})
	}
}

func TestLimitsFor(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		req       Request
		wall, cpu time.Duration
	}{
		{name: "task default", req: Request{}, wall: 30 * time.Second, cpu: 30 * time.Second},
		{name: "task stage", req: Request{Stage: "TASK"}, wall: 30 * time.Second, cpu: 30 * time.Second},
		{name: "analysis stage", req: Request{Stage: "ANALYSIS"}, wall: 15 * time.Second, cpu: 15 * time.Second},
		{name: "the request's own timeout", req: Request{Stage: "ANALYSIS", Timeout: 3 * time.Second}, wall: 3 * time.Second, cpu: 3 * time.Second},
		{name: "configured", cfg: Config{DefaultTimeout: time.Minute, AnalysisTimeout: 20 * time.Second, CPUTime: 5 * time.Second}, req: Request{Stage: "analysis"}, wall: 20 * time.Second, cpu: 5 * time.Second},
		{name: "no cpu limit", cfg: Config{CPUTime: -1}, req: Request{}, wall: 30 * time.Second, cpu: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Runner{cfg: withDefaults(tt.cfg)}
			l := r.limitsFor(tt.req)
			if l.timeout != tt.wall || l.cpu != tt.cpu {
				t.Errorf("wall %s cpu %s, want %s %s", l.timeout, l.cpu, tt.wall, tt.cpu)
			}
			if l.disk != 256<<20 || l.memory != 1<<30 || l.fileSize != 256<<20 {
				t.Errorf("defaults: %+v", l)
			}
		})
	}
}
