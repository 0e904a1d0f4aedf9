// Package abusesuite is the sandbox's abuse suite: hostile Python programs
// sent to a sandbox service over NATS, as the graph engine sends node code,
// each trying one isolation property the sandbox promises: no network, no
// secret of the service's environment, the memory, disk, process and output
// limits, no process outliving its run, nothing left for the next run, two
// runs blind to each other, and a large context value by reference.
//
// services/sandbox/service runs it against the service in process in each
// Mode; deploy/test/images against the sandbox image in a container run
// with the Helm chart's security context.
package abusesuite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/valueref"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/sandbox/isolation/isolationtest"
)

// Target is a sandbox service that consumes nova.cmd.sandbox, run with
// Mode.Env's settings (or Mode.Config's runner), its warm zygotes ready.
type Target struct {
	// Client sends the programs and reads their results.
	Client *Client
	// Mode is the runner's mode of the service.
	Mode Mode
	// HostLoopback is the address at which the service's own network
	// reaches the host's loopback interface, where the suite listens:
	// 127.0.0.1 in process, 10.0.2.2 from a container on slirp4netns with
	// allow_host_loopback.
	HostLoopback string
	// OwnPorts are ports the service listens on in its own network
	// namespace, on 127.0.0.1 there (a container's health port).
	OwnPorts []int
	// Alive counts the processes, wherever the service runs, whose command
	// line (/proc/<pid>/cmdline) is cmdline and that are not dying:
	// HostProcesses for a service on this machine, in this process or in a
	// rootful container.
	Alive func(cmdline string) int
}

// Run runs every case against the target, each a subtest of t.
func Run(t *testing.T, tg Target) {
	if tg.Client == nil || tg.Alive == nil {
		t.Fatal("abusesuite: a Target needs a Client and Alive")
	}
	c := tg.Client
	limits := Limits()
	hostPort := listen(t)
	// The sleeps the cases look for after their runs carry markers of this
	// run's own: other tests, or another run of the suite, sleep beside it.
	outlives, apart := isolationtest.SleepMarker(33), isolationtest.SleepMarker(33)
	// Programs reach the host's loopback at HostLoopback only through the
	// service's network: on the host's own loopback the sandbox's empty
	// network namespace has its own loopback, where nothing listens; from
	// elsewhere it has no route at all.
	hostRefusal := "Network is unreachable"
	if ip := net.ParseIP(tg.HostLoopback); ip != nil && ip.IsLoopback() {
		hostRefusal = "Connection refused"
	}
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
	if tg.Mode.Warm() {
		killAll = want{status: "success", updates: map[string]any{"alive": true, "child": json.Number("-9")}}
	}
	type abuse struct {
		name    string
		code    string
		timeout float64
		want    want
	}
	cases := []abuse{
		{
			name: "connect to an outside address",
			code: "import socket\nsocket.create_connection(('203.0.113.1', 80), timeout=20)",
			want: want{status: "error", kind: "code_error", error: "Network is unreachable", within: 5 * time.Second},
		},
		{
			name: "connect to a loopback port of the host",
			code: fmt.Sprintf("import socket\nsocket.create_connection((%q, %d), timeout=5)", tg.HostLoopback, hostPort.port),
			want: want{status: "error", kind: "code_error", error: hostRefusal, check: func(t *testing.T, _ *novav1.CodeExecuted) {
				if n := hostPort.accepted(); n > 0 {
					t.Errorf("the host's listener accepted %d connections from the sandbox", n)
				}
			}},
		},
	}
	for _, port := range tg.OwnPorts {
		cases = append(cases, abuse{
			name: fmt.Sprintf("connect to the service's own port %d", port),
			code: fmt.Sprintf("import socket\nsocket.create_connection(('127.0.0.1', %d), timeout=5)", port),
			want: want{status: "error", kind: "code_error", error: "Connection refused"},
		})
	}
	if len(tg.OwnPorts) == 0 {
		t.Log("the service has no network namespace of its own here, only the host's, which the host loopback case tries: no case connects to a port of its own")
	}
	cases = append(cases, []abuse{
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
			// Every Secret in the result is caught below, whichever file
			// it came from.
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
			want: want{status: "error", kind: "limit", limit: "processes", error: fmt.Sprintf("process limit %d", limits.MaxProcesses)},
		},
		{
			name: "allocate past the memory limit",
			code: "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))",
			want: want{status: "error", kind: "limit", limit: "memory", error: "MemoryError"},
		},
		{
			// 4 s: time to start Python and print on a machine that runs
			// another make test beside this one (2 s was not).
			name:    "infinite loop",
			code:    "print('looping', flush=True)\nwhile True:\n    pass",
			timeout: 4,
			want:    want{status: "error", kind: "timeout", limit: "wall_time", error: "timeout after 4s", stdoutPrefix: "looping", within: 9 * time.Second},
		},
		{
			name: "sleep in a child that outlives the parent",
			code: "import subprocess\nsubprocess.Popen(['sleep', '" + outlives + "'], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\ncontext['started'] = True",
			want: want{status: "success", updates: map[string]any{"started": true}, within: 5 * time.Second, check: func(t *testing.T, _ *novav1.CodeExecuted) {
				if n := tg.Alive("sleep\x00" + outlives + "\x00"); n > 0 {
					t.Errorf("%d sleep processes outlived the run", n)
				}
			}},
		},
		{
			name: "print 1 GiB",
			code: "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)\ncontext['printed'] = True",
			want: want{status: "error", kind: "limit", limit: "output", error: "output limit", stdoutPrefix: "xxxx", within: 20 * time.Second,
				check: func(t *testing.T, res *novav1.CodeExecuted) {
					if int64(len(res.Stdout)) != limits.MaxOutputBytes || res.StdoutDroppedBytes < limits.OutputLimitBytes-1<<20 {
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
	}...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			res, raw := c.Execute(t, &novav1.ExecuteCode{Code: tc.code, TimeoutSeconds: tc.timeout})
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
			if bytes.Contains(raw, []byte(Secret)) {
				t.Errorf("the service's secret reached the result")
			}
			if w.check != nil {
				w.check(t, res)
			}
			c.StillServing(t)
		})
	}

	t.Run("write a file and look for it from the next execution", func(t *testing.T) {
		res, _ := c.Execute(t, &novav1.ExecuteCode{Code: "import os\nopen('/tmp/left', 'w').write('x')\nopen('left-here', 'w').write('x')\ncontext['cwd'] = os.getcwd()"})
		if res.Status != "success" {
			t.Fatalf("%s: %s", res.ErrorKind, res.Error)
		}
		res, _ = c.Execute(t, &novav1.ExecuteCode{Code: "import os\ncontext['seen'] = os.listdir('/tmp') + os.listdir('.')"})
		if seen := decodedUpdates(t, res)["seen"]; res.Status != "success" || len(seen.([]any)) != 0 {
			t.Errorf("the next execution sees %v (%s %s)", seen, res.ErrorKind, res.Error)
		}
	})

	t.Run("two executions at once cannot see each other", func(t *testing.T) {
		first := `import socket, subprocess, time
open('/tmp/first', 'w').write('x')
srv = socket.socket(); srv.bind(('127.0.0.1', 6000)); srv.listen()
subprocess.Popen(['sleep', 'SLEEP'])
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
context['seen'] = {'files': os.listdir('/tmp'), 'tcp': reach(), 'sleep': any('SLEEP' in c for c in cmdlines)}`
		first, second = strings.ReplaceAll(first, "SLEEP", apart), strings.ReplaceAll(second, "SLEEP", apart)
		// Two workers take them at once.
		stepA, stepB := c.Send(t, &novav1.ExecuteCode{Code: first}), c.Send(t, &novav1.ExecuteCode{Code: second})
		// The first's sleep, alive while it runs, shows that Alive sees
		// the sandbox's processes, so that its 0 after a run means none
		// is left.
		sleep := "sleep\x00" + apart + "\x00"
		counted := false
		for deadline := time.Now().Add(time.Minute); !counted && time.Now().Before(deadline); {
			counted = tg.Alive(sleep) > 0
			if !counted && c.arrived(stepA, 10*time.Millisecond) {
				counted = tg.Alive(sleep) > 0
				break
			}
		}
		if !counted {
			t.Errorf("the first execution's sleep was never counted while it ran: Alive does not see this target's processes, so no check of processes left alive holds")
		}
		a, _ := c.Await(t, stepA)
		b, _ := c.Await(t, stepB)
		if a.Status != "success" || b.Status != "success" {
			t.Fatalf("%s %s / %s %s", a.ErrorKind, a.Error, b.ErrorKind, b.Error)
		}
		seen := decodedUpdates(t, b)["seen"].(map[string]any)
		if len(seen["files"].([]any)) != 0 || seen["tcp"] != false || seen["sleep"] != false {
			t.Errorf("the second execution saw the first: %v", seen)
		}
		if n := tg.Alive(sleep); n > 0 {
			t.Errorf("%d sleep processes of the first execution outlived it", n)
		}
	})

	t.Run("a 20 MiB context value passed by reference", func(t *testing.T) {
		big := strings.Repeat("0123456789abcdef", 20<<20/16)
		sum := sha256.Sum256([]byte(big))
		values := obj(t, map[string]any{"big": big})
		if err := c.Values().Shrink(context.Background(), values); err != nil {
			t.Fatal(err)
		}
		if _, ok := valueref.RawRef(values["big"]); !ok {
			t.Fatalf("the value did not become a reference: %.100s", values["big"])
		}
		res, _ := c.Execute(t, &novav1.ExecuteCode{Context: values.Proto(), Code: "import hashlib\ncontext['sha256'] = hashlib.sha256(context['big'].encode()).hexdigest()\ncontext['size'] = len(context['big'])"})
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

// HostProcesses counts this machine's processes with this exact command
// line that are not being killed (SIGKILL pending) or dead. It sees a
// rootful container's processes too, whatever their user namespace.
func HostProcesses(cmdline string) int {
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
