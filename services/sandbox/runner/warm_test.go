package runner

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/novaflow/nova/services/sandbox/isolation/isolationtest"
)

// One zygote serves every run below, so anything that leaked from one run to
// the next would show.
func TestWarmRunsShareNothing(t *testing.T) {
	forEachZygoteKind(t, testWarmRunsShareNothing)
}

func testWarmRunsShareNothing(t *testing.T, r *Runner) {
	tests := []struct {
		name         string
		first, check string
		want         string
		sleeps       bool
	}{
		{
			name:  "files in /tmp, /dev/shm and the working directory",
			first: "open('/tmp/secret', 'w').write('s')\nopen('/dev/shm/secret', 'w').write('s')\nopen('here', 'w').write('s')",
			check: "import os\ncontext['seen'] = sorted(os.listdir('/tmp') + os.listdir('/dev/shm'))",
			want:  `{"seen": []}`,
		},
		{
			name:   "a process left running",
			first:  "import subprocess\nsubprocess.Popen(['sleep', 'SLEEP'], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)",
			check:  "import os\ncontext['pids'] = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())",
			want:   `{"pids": [1]}`, // its own process, pid 1 of its namespace, and nothing else
			sleeps: true,
		},
		{
			name:  "module state",
			first: "import json, pandas, fitz, sys\njson.x = 1\npandas.DataFrame = None\nsys.modules['fitz'].open = None\nsys.path.append('/tmp')\nimport builtins\nbuiltins.len = None",
			check: "import json, pandas, fitz, sys\ncontext['state'] = [hasattr(json, 'x'), pandas.DataFrame is None, fitz.open is None, '/tmp' in sys.path, len([1])]",
			want:  `{"state": [false, false, false, false, 1]}`,
		},
		{
			name:  "environment",
			first: "import os\nos.environ['LEAK'] = '1'\nos.putenv('LEAK2', '1')",
			check: "import os, subprocess\ncontext['env'] = [os.environ.get('LEAK'), subprocess.run(['sh', '-c', 'echo -n $LEAK$LEAK2'], capture_output=True, text=True).stdout]",
			want:  `{"env": [null, ""]}`,
		},
		{
			name:  "kernel keyrings",
			first: keyctl + "add_key(b'nova-leak', KEY_SPEC_USER_KEYRING)\nadd_key(b'nova-leak', KEY_SPEC_SESSION_KEYRING)",
			check: keyctl + "context['found'] = [search(b'nova-leak', KEY_SPEC_USER_KEYRING), search(b'nova-leak', KEY_SPEC_SESSION_KEYRING)]",
			want:  `{"found": [false, false]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The sleep carries a marker of its own in place of SLEEP, so
			// that the count is of this run's processes only.
			marker := isolationtest.SleepMarker(31)
			wantSuccess(t, run(t, r, Request{Code: strings.ReplaceAll(tt.first, "SLEEP", marker)}), `{}`)
			if tt.sleeps {
				if n := countSleeps(t, marker); n > 0 {
					t.Errorf("%d `sleep %s` survived the run that started them", n, marker)
				}
			}
			wantSuccess(t, run(t, r, Request{Code: tt.check}), tt.want)
		})
	}
}

// forEachZygoteKind runs f against the warm modes: a runner with one full
// zygote and one whose every program runs on its light zygote.
func forEachZygoteKind(t *testing.T, f func(t *testing.T, r *Runner)) {
	for _, m := range modes {
		if m.zygotes > 0 {
			t.Run(m.name, func(t *testing.T) { f(t, newModeRunner(t, Config{}, m.zygotes, m.light)) })
		}
	}
}

// keyctl gives the code add_key and search for the kernel's key rings.
const keyctl = `import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING = -3, -4
def add_key(name, ring):
    assert libc.syscall(248, b'user', name, b'secret', 6, ring) > 0, ctypes.get_errno()
def search(name, ring):
    return libc.syscall(250, 10, ring, b'user', name, 0) > 0
`

// Two runs on the same zygote at once cannot see each other's processes,
// files or loopback.
func TestWarmConcurrentRunsAreApart(t *testing.T) {
	forEachZygoteKind(t, testWarmConcurrentRunsAreApart)
}

func testWarmConcurrentRunsAreApart(t *testing.T, r *Runner) {
	first := `import os, socket, subprocess, time
srv = socket.socket()
srv.bind(('127.0.0.1', 5000))
srv.listen()
abstract = socket.socket(socket.AF_UNIX)
abstract.bind('\0nova-abstract')
abstract.listen()
open('/tmp/mine', 'w').write('a')
open('/dev/shm/mine', 'w').write('a')
subprocess.Popen(['sleep', '32.5'])
time.sleep(2)`
	second := `import os, socket, time
time.sleep(0.7)
def reach(family, addr):
    s = socket.socket(family)
    try:
        s.connect(addr)
        return True
    except OSError:
        return False
context['seen'] = {
    'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit()),
    'files': os.listdir('/tmp') + os.listdir('/dev/shm'),
    'tcp': reach(socket.AF_INET, ('127.0.0.1', 5000)),
    'abstract': reach(socket.AF_UNIX, '\0nova-abstract'),
}`
	var wg sync.WaitGroup
	var a, b Result
	var errA, errB error
	wg.Go(func() { a, errA = r.Run(context.Background(), Request{Code: first}) })
	wg.Go(func() { b, errB = r.Run(context.Background(), Request{Code: second}) })
	wg.Wait()
	if err := errors.Join(errA, errB); err != nil {
		t.Fatal(err)
	}
	if !a.Warm || !b.Warm {
		t.Fatalf("not both warm: %v %v", a.Warm, b.Warm)
	}
	wantSuccess(t, a, `{}`)
	wantSuccess(t, b, `{"seen": {"pids": [1], "files": [], "tcp": false, "abstract": false}}`)
}

// The code runs without any capability, in a user namespace of its own where
// only its uid exists, with no new privileges: what a cold sandbox gives.
func TestWarmRunHasNoPrivilege(t *testing.T) {
	forEachZygoteKind(t, testWarmRunHasNoPrivilege)
}

func testWarmRunHasNoPrivilege(t *testing.T, r *Runner) {
	res := run(t, r, Request{Code: `import os, sys
status = dict(l.split(':\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\t' in l)
context['caps'] = [status[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')]
context['nnp'] = status['NoNewPrivs'].strip()
context['uid_map'] = open('/proc/self/uid_map').read().split()
context['preloaded'] = 'decimal' in sys.modules
try:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    context['mount'] = libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)
except Exception as e:
    context['mount'] = str(e)
try:
    open('/proc/sys/kernel/hostname', 'w').write('x')
    context['sysctl'] = 'written'
except OSError as e:
    context['sysctl'] = 'refused'
`})
	zero := "0000000000000000"
	wantSuccess(t, res, `{"caps": ["`+zero+`", "`+zero+`", "`+zero+`", "`+zero+`", "`+zero+`"], "nnp": "1",
		"uid_map": ["65534", "0", "1"], "preloaded": true, "mount": -1, "sysctl": "refused"}`)
}

// A zygote that dies mid-run fails that run as a sandbox fault; the runner
// goes on serving and a new zygote takes its place.
func TestWarmZygoteCrash(t *testing.T) {
	r := newTestRunner(t, Config{Zygotes: 1, LightZygotes: -1})
	done := make(chan struct{})
	var res Result
	var err error
	go func() {
		defer close(done)
		res, err = r.Run(context.Background(), Request{Code: "import time\nprint('running', flush=True)\ntime.sleep(30)"})
	}()
	deadline := time.Now().Add(10 * time.Second)
	var z *zygote
	for z == nil || z.inflight.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the run did not start on the zygote")
		}
		time.Sleep(20 * time.Millisecond)
		z = r.pool.pick()
	}
	time.Sleep(300 * time.Millisecond)
	z.kill()
	<-done
	if err == nil || res.ErrorKind != KindSandboxFault {
		t.Fatalf("run on a killed zygote: err %v, result %s/%s", err, res.ErrorKind, res.Error)
	}
	// Served at once (cold until the new zygote is ready), then warm again.
	wantSuccess(t, runAny(t, r, Request{Code: "context['x'] = 1"}), `{"x": 1}`)
	waitWarm(t, r, 1)
	wantSuccess(t, run(t, r, Request{Code: "context['x'] = 2"}), `{"x": 2}`)
}

// runAny runs without expecting a mode.
func runAny(t *testing.T, r *Runner, req Request) Result {
	t.Helper()
	res, err := r.Run(context.Background(), req)
	if err != nil {
		t.Fatalf("Run: %v (stderr: %s)", err, res.Stderr)
	}
	return res
}

// Without a ready zygote the run goes cold.
func TestWarmFallsBackToCold(t *testing.T) {
	r := newTestRunner(t, Config{})
	r.pool = newPool(r, 0, false) // a pool without zygotes
	res := runAny(t, r, Request{Code: "context['x'] = 1"})
	wantSuccess(t, res, `{"x": 1}`)
	if res.Warm {
		t.Error("a run without zygotes reported warm")
	}
}

// Every run forked from a zygote that had loaded the random module draws its
// own numbers, not the zygote's sequence.
func TestWarmRunsDrawTheirOwnRandomNumbers(t *testing.T) {
	r := newTestRunner(t, Config{Zygotes: 1, Preload: []string{"random"}})
	seen := map[string]bool{}
	for range 3 {
		res := run(t, r, Request{Code: "import random\ncontext['bits'] = str(random.getrandbits(64))"})
		if res.Status != StatusSuccess {
			t.Fatalf("%s: %s", res.ErrorKind, res.Error)
		}
		bits := string(res.Updates["bits"])
		if seen[bits] {
			t.Fatalf("two runs drew the same random number %s", bits)
		}
		seen[bits] = true
	}
}

// A program whose imports are standard runs on the light zygote, one that
// imports a preloaded library (or imports in a way that cannot be read) on
// the full one, where fitz (preloaded there only) is already loaded.
func TestWarmProgramsGoWhereTheirModulesAre(t *testing.T) {
	r := newTestRunner(t, Config{Zygotes: 1})
	if r.WarmSize() != 2 {
		t.Fatalf("%d zygotes by default, want a full one and a light one", r.WarmSize())
	}
	tests := []struct {
		name, code string
		full       bool
	}{
		{"no import", "", false},
		{"standard modules", "import sys, json, decimal\nfrom collections import OrderedDict", false},
		{"type hints, dataclasses, logging", "from typing import Dict\nfrom dataclasses import dataclass\nimport uuid, copy, logging", false},
		{"a preloaded library", "import sys\nimport pandas as pd", true},
		{"a library after a standard module", "import sys\nfrom fitz import open as fitz_open", true},
		{"a dynamic import", "sys = __import__('sys')", true},
		{"an import it cannot read", "import sys  # the json module is loaded anyway\n# import nothing else", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code := tt.code + "\nimport sys\ncontext['full'] = 'fitz' in sys.modules"
			want := `{"full": false}`
			if tt.full {
				want = `{"full": true}`
			}
			wantSuccess(t, run(t, r, Request{Code: code}), want)
		})
	}
}

// With ZygoteIdle a full zygote that runs no program for that long is
// stopped, its processes gone; programs that would run on it run on the
// light zygote meanwhile, and the first of them starts it again. A zygote
// with a program running is never stopped.
func TestWarmIdleZygoteStopsAndComesBack(t *testing.T) {
	const idle = 400 * time.Millisecond
	r := newTestRunner(t, Config{Zygotes: 1, LightZygotes: 1, ZygoteIdle: idle})
	// __import__ cannot be read for sure: the program goes to the full zygote.
	full := Request{Code: "context['x'] = __import__('json').dumps([1])"}
	z := r.pool.pick()
	wantSuccess(t, run(t, r, full), `{"x": "[1]"}`)

	// A program running on it for several idle periods keeps it.
	wantSuccess(t, run(t, r, Request{Code: "__import__('time').sleep(1.5)\ncontext['slept'] = True"}), `{"slept": true}`)
	if r.pool.pick() != z {
		t.Fatal("the full zygote was stopped while it ran a program")
	}

	waitFor(t, "the idle full zygote to stop", func() bool { return r.pool.readyCount() == 0 })
	waitFor(t, "the stopped zygote's bubblewrap to end", func() bool {
		select {
		case <-z.waited:
			return true
		default:
			return false
		}
	})
	if r.light.readyCount() != 1 {
		t.Fatal("the light zygote was stopped too")
	}

	// Meanwhile its programs run warm on the light zygote; the first starts it.
	wantSuccess(t, run(t, r, full), `{"x": "[1]"}`)
	waitFor(t, "the full zygote to start again", func() bool { return r.pool.readyCount() == 1 })
	if r.pool.pick() == z {
		t.Fatal("the stopped zygote is ready again")
	}
	wantSuccess(t, run(t, r, full), `{"x": "[1]"}`)
}
