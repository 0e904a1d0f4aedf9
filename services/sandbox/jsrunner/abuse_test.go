package jsrunner

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/novaflow/nova/services/sandbox/isolation/isolationtest"
	"github.com/novaflow/nova/services/sandbox/runner"
)

// Hostile JavaScript: every case must end contained, with a clear result, and
// the runner must go on serving.

// hostProcesses lists host processes whose command line contains token, an
// isolationtest.SleepMarker, so that they are the test's own.
func hostProcesses(t *testing.T, token string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), token) {
			found = append(found, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

// assertServing checks that the runner still runs ordinary code.
func assertServing(t *testing.T, r *Runner) {
	t.Helper()
	res := run(t, r, runner.Request{Code: `context['x'] = 1`})
	if res.Status != runner.StatusSuccess || !sameJSON(t, res.Updates, `{"x": 1}`) {
		t.Fatalf("runner no longer serving: %s %s %s", res.Status, res.Error, res.Stderr)
	}
}

func TestAbuseInfiniteLoop(t *testing.T) {
	r := newTestRunner(t, Config{})
	// A child sleeps with a token in its command line, so that the host can look
	// for it once the run is over.
	token := isolationtest.SleepMarker(41)
	code := `
console.log('started')
require('child_process').spawn('sleep', ['` + token + `'], { detached: true, stdio: 'ignore' }).unref()
console.log('looping')
while (true) {}`
	start := time.Now()
	// 4 s: time enough to start Node and spawn the child on a machine that
	// runs another make test beside this one (1.5 s was not).
	res := run(t, r, runner.Request{Code: code, Timeout: 4 * time.Second})
	elapsed := time.Since(start)
	if res.ErrorKind != runner.KindTimeout || res.Limit != runner.LimitWallTime {
		t.Fatalf("kind %q limit %q error %q; want a wall_time timeout", res.ErrorKind, res.Limit, res.Error)
	}
	if elapsed > 9*time.Second {
		t.Errorf("the run took %v for a 4s timeout", elapsed)
	}
	if want := []string{"started", "looping"}; strings.Join(res.Logs, ",") != strings.Join(want, ",") {
		t.Errorf("logs %q, want the partial logs %q", res.Logs, want)
	}
	if left := hostProcesses(t, token); len(left) > 0 {
		t.Errorf("processes of the sandbox outlived it: %v", left)
	}
	assertServing(t, r)
}

func TestAbuseProcessExit(t *testing.T) {
	r := newTestRunner(t, Config{})
	tests := []struct {
		name, code string
		status     string
		exitCode   int
		error      string
		updates    string
	}{
		{name: "exit 0 keeps the context", code: "context.a = 1\nprocess.exit(0)\ncontext.b = 2", status: runner.StatusSuccess, updates: `{"a": 1}`},
		{name: "exit 3", code: "process.exit(3)", status: runner.StatusError, exitCode: 3, error: "process.exit(3) called", updates: `{}`},
		{name: "exit caught by the code still ends the run", code: "try { process.exit(4) } catch (e) {}\nreturn 'went on'", status: runner.StatusError, exitCode: 4, error: "process.exit(4)", updates: `{}`},
		{name: "exit from a timer", code: "setTimeout(() => process.exit(2), 10)\nreturn new Promise(() => {})", status: runner.StatusError, exitCode: 2, error: "process.exit(2)", updates: `{}`},
		{name: "process.reallyExit", code: "process.reallyExit(5)", status: runner.StatusError, exitCode: 5, error: "process.exit(5)", updates: `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, r, runner.Request{Code: tt.code})
			if res.Status != tt.status || !res.Exited || res.ExitCode != tt.exitCode {
				t.Fatalf("status %s exited %v code %d error %q; want %s, exited with %d", res.Status, res.Exited, res.ExitCode, res.Error, tt.status, tt.exitCode)
			}
			if !strings.Contains(res.Error, tt.error) {
				t.Errorf("error %q, want %q", res.Error, tt.error)
			}
			if !sameJSON(t, res.Updates, tt.updates) && !(tt.updates == `{}` && res.Updates == nil) {
				t.Errorf("updates %s, want %s", jsonOf(t, res.Updates), tt.updates)
			}
		})
	}
	t.Run("killing the parent", func(t *testing.T) {
		// The parent is the sandbox's init, which its own namespace cannot kill.
		res := run(t, r, runner.Request{Code: "try { process.kill(process.ppid, 'SIGKILL') } catch (e) { return e.code }\nreturn 'still running'"})
		if res.Status != runner.StatusSuccess || decoded(t, res.Value) != "still running" {
			t.Errorf("status %s kind %s error %q value %s", res.Status, res.ErrorKind, res.Error, res.Value)
		}
	})
	t.Run("killing its own process", func(t *testing.T) {
		res := run(t, r, runner.Request{Code: "console.log('bye')\nprocess.kill(process.pid, 'SIGKILL')"})
		if res.Status != runner.StatusError || !strings.Contains(res.Error, "SIGKILL") {
			t.Errorf("status %s kind %s error %q; want an error naming SIGKILL", res.Status, res.ErrorKind, res.Error)
		}
		if len(res.Logs) != 1 || res.Logs[0] != "bye" {
			t.Errorf("logs %q", res.Logs)
		}
	})
	assertServing(t, r)
}

func TestAbuseHostFiles(t *testing.T) {
	r := newTestRunner(t, Config{})
	secretDir := t.TempDir()
	secretFile := filepath.Join(secretDir, "secret.txt")
	if err := os.WriteFile(secretFile, []byte("host-secret-5521"), 0o644); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	code := fmt.Sprintf(`
const fs = require('fs')
const cp = require('child_process')
const tryRead = (p) => { try { return fs.readFileSync(p, 'utf8') } catch (e) { return e.code } }
const sh = (c) => { try { return cp.execSync(c, { stdio: ['ignore', 'pipe', 'pipe'] }).toString() } catch (e) { return 'failed: ' + e.status + ' ' + e.stderr } }
return {
  shadow: tryRead('/etc/shadow'),
  passwd: tryRead('/etc/passwd'),
  shadowShell: sh('cat /etc/shadow'),
  hostFile: tryRead(%q),
  repo: tryRead(%q),
  pids: fs.readdirSync('/proc').filter((n) => /^\d+$/.test(n)).length,
  ps: sh('ls /proc | grep -c "^[0-9]"'),
  root: fs.readdirSync('/').sort(),
  writeUsr: (() => { try { fs.writeFileSync('/usr/x', 'x'); return 'written' } catch (e) { return e.code } })(),
}`, secretFile, filepath.Join(wd, "jsrunner.go"))
	res := run(t, r, runner.Request{Code: code})
	if res.Status != runner.StatusSuccess {
		t.Fatalf("status %s: %s\n%s", res.Status, res.Error, res.Stack)
	}
	v, _ := decoded(t, res.Value).(map[string]any)
	for _, k := range []string{"shadow", "passwd", "hostFile", "repo"} {
		if v[k] != "ENOENT" {
			t.Errorf("%s: %v, want ENOENT", k, v[k])
		}
	}
	if s, _ := v["shadowShell"].(string); !strings.HasPrefix(s, "failed:") || strings.Contains(s, "root:") {
		t.Errorf("cat /etc/shadow through a child process: %q", s)
	}
	if n := fmt.Sprint(v["pids"]); n != "2" && n != "3" {
		t.Errorf("the sandbox sees %s processes; want only its own (bwrap's init and node)", n)
	}
	if v["writeUsr"] != "EROFS" && v["writeUsr"] != "EACCES" {
		t.Errorf("writing /usr: %v", v["writeUsr"])
	}
	if s := jsonOf(t, v["root"]); strings.Contains(s, "work") || strings.Contains(s, "root") || strings.Contains(s, "home") {
		t.Errorf("root of the sandbox shows host directories: %s", s)
	}
}

func TestAbuseEnvironment(t *testing.T) {
	const secret = "sk-test-must-not-leak-8861"
	t.Setenv("OPENAI_API_KEY", secret)
	r := newTestRunner(t, Config{})
	code := `
const fs = require('fs')
const read = (p) => { try { return fs.readFileSync(p, 'latin1') } catch (e) { return e.code } }
return {
  env: process.env,
  self: read('/proc/self/environ'),
  init: read('/proc/1/environ'),
  parent: read('/proc/' + process.ppid + '/environ'),
  shell: require('child_process').execSync('env').toString(),
}`
	res := run(t, r, runner.Request{Code: code})
	if res.Status != runner.StatusSuccess {
		t.Fatalf("status %s: %s", res.Status, res.Error)
	}
	all := jsonOf(t, res.Value)
	if strings.Contains(all, secret) || strings.Contains(all, "OPENAI_API_KEY") {
		t.Errorf("the service's environment reached the code: %s", all)
	}
	env := decoded(t, res.Value).(map[string]any)["env"].(map[string]any)
	for k := range env {
		if k != "PWD" && !slices.ContainsFunc(sandboxEnv(), func(kv string) bool { return strings.HasPrefix(kv, k+"=") }) {
			t.Errorf("variable %s in the sandbox; want only the sandbox's own %v", k, sandboxEnv())
		}
	}
}

func TestAbuseNetwork(t *testing.T) {
	r := newTestRunner(t, Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted sync.WaitGroup
	defer func() {
		ln.Close()
		accepted.Wait()
	}()
	accepted.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Errorf("the sandbox reached the host's loopback port")
			c.Close()
		}
	})
	port := ln.Addr().(*net.TCPAddr).Port
	code := fmt.Sprintf(`
const net = require('net')
const dial = (host, port) => new Promise((resolve) => {
  const s = net.connect({ host, port, timeout: 2000 })
  s.on('connect', () => { s.destroy(); resolve('connected') })
  s.on('timeout', () => { s.destroy(); resolve('timeout') })
  s.on('error', (e) => resolve(e.code))
})
const viaAxios = await require('axios').get('http://127.0.0.1:%d/', { timeout: 2000 }).then(() => 'reached', (e) => e.code)
return { loopback: await dial('127.0.0.1', %d), outside: await dial('1.1.1.1', 80), viaAxios }`, port, port)
	res := run(t, r, runner.Request{Code: code})
	if res.Status != runner.StatusSuccess {
		t.Fatalf("status %s: %s", res.Status, res.Error)
	}
	v, _ := decoded(t, res.Value).(map[string]any)
	if v["loopback"] != "ECONNREFUSED" || v["viaAxios"] != "ECONNREFUSED" {
		t.Errorf("host loopback: %v", v)
	}
	if o := v["outside"]; o == "connected" || o == "timeout" {
		t.Errorf("outside address: %v, want the network to be unreachable", o)
	}
}

func TestAbuseOrphanChildren(t *testing.T) {
	r := newTestRunner(t, Config{})
	token := isolationtest.SleepMarker(43)
	code := `
const { spawn } = require('child_process')
spawn('/bin/sh', ['-c', 'sleep ` + token + ` & sleep ` + token + `'], { detached: true, stdio: 'ignore' }).unref()
return 'left children behind'`
	res := run(t, r, runner.Request{Code: code})
	if res.Status != runner.StatusSuccess {
		t.Fatalf("status %s: %s", res.Status, res.Error)
	}
	if left := hostProcesses(t, token); len(left) > 0 {
		t.Errorf("children outlived the run: %v", left)
	}
}

func TestAbuseForkBomb(t *testing.T) {
	r := newTestRunner(t, Config{MaxProcesses: 64})
	token := isolationtest.SleepMarker(44)
	code := `
const { spawn } = require('child_process')
let failed = 0
for (let i = 0; i < 5000; i++) {
  try { spawn('sleep', ['` + token + `'], { stdio: 'ignore' }).on('error', () => { failed++ }) } catch (e) { failed++ }
}
await new Promise((resolve) => setTimeout(resolve, 200))
return { failed }`
	res := run(t, r, runner.Request{Code: code, Timeout: 5 * time.Second})
	t.Logf("fork bomb: %s %s %s %s", res.Status, res.ErrorKind, res.Error, res.Value)
	// Either the process limit stopped it, or the clock did; what counts is that
	// it is contained.
	if res.Status == runner.StatusSuccess {
		if v, _ := decoded(t, res.Value).(map[string]any); fmt.Sprint(v["failed"]) == "0" {
			t.Errorf("5000 processes started without failure: %s", res.Value)
		}
	}
	if left := hostProcesses(t, token); len(left) > 0 {
		t.Errorf("%d processes outlived the run", len(left))
	}
	assertServing(t, r)
}

func TestAbuseOutput(t *testing.T) {
	r := newTestRunner(t, Config{MaxOutputBytes: 64 << 10})
	code := `
const mib = 'x'.repeat(1 << 20)
for (let i = 0; i < 1024; i++) console.log(mib) // 1 GiB
const chunk = Buffer.alloc(1 << 20, 'y')
for (let i = 0; i < 64; i++) process.stdout.write(chunk)
return 'done'`
	start := time.Now()
	res := run(t, r, runner.Request{Code: code, Timeout: 20 * time.Second})
	if res.Status != runner.StatusSuccess || decoded(t, res.Value) != "done" {
		t.Fatalf("status %s %s, value %s", res.Status, res.Error, res.Value)
	}
	logBytes := 0
	for _, l := range res.Logs {
		logBytes += len(l)
	}
	if logBytes > 64<<10 || res.LogsDropped < 1<<30-64<<10 {
		t.Errorf("logs kept %d bytes and dropped %d; want at most 64 KiB kept and the rest counted", logBytes, res.LogsDropped)
	}
	if len(res.Stdout) != 64<<10 || res.StdoutDropped != 64<<20-64<<10 {
		t.Errorf("stdout kept %d bytes and dropped %d", len(res.Stdout), res.StdoutDropped)
	}
	t.Logf("1 GiB of console output and 64 MiB of stdout in %v", time.Since(start))
}

func TestAbuseResultTooBig(t *testing.T) {
	r := newTestRunner(t, Config{MaxResultBytes: 1 << 20})
	res := run(t, r, runner.Request{Code: `return 'z'.repeat(2 << 20)`})
	if res.ErrorKind != runner.KindLimit || res.Limit != runner.LimitOutput {
		t.Errorf("kind %q limit %q error %q; want the output limit", res.ErrorKind, res.Limit, res.Error)
	}
}

func TestAbuseMemory(t *testing.T) {
	r := newTestRunner(t, Config{MemoryBytes: 256 << 20})
	tests := []struct{ name, code string }{
		{"JavaScript heap", "const keep = []\nwhile (true) keep.push(new Array(1e6).fill(1.5))"},
		{"buffers outside the heap", "const keep = []\nfor (let i = 0; i < 64; i++) keep.push(Buffer.alloc(16 << 20, 1))\nreturn keep.length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, r, runner.Request{Code: tt.code, Timeout: 20 * time.Second})
			if res.ErrorKind != runner.KindLimit || res.Limit != runner.LimitMemory {
				t.Errorf("kind %q limit %q error %q; want the memory limit", res.ErrorKind, res.Limit, res.Error)
			}
		})
	}
	assertServing(t, r)
}

func TestAbuseFiles(t *testing.T) {
	r := newTestRunner(t, Config{FileSizeBytes: 1 << 20, DiskBytes: 4 << 20})
	t.Run("a file past the size limit", func(t *testing.T) {
		res := run(t, r, runner.Request{Code: `require('fs').writeFileSync('/tmp/big', Buffer.alloc(2 << 20))`})
		if res.ErrorKind != runner.KindLimit || res.Limit != runner.LimitFileSize {
			t.Errorf("kind %q limit %q error %q; want the file size limit", res.ErrorKind, res.Limit, res.Error)
		}
	})
	t.Run("fill the disk", func(t *testing.T) {
		res := run(t, r, runner.Request{Code: `for (let i = 0; ; i++) require('fs').writeFileSync('/tmp/f' + i, Buffer.alloc(512 << 10))`})
		if res.ErrorKind != runner.KindLimit || res.Limit != runner.LimitDisk {
			t.Errorf("kind %q limit %q error %q; want the disk limit", res.ErrorKind, res.Limit, res.Error)
		}
	})
	t.Run("a file does not reach the next execution", func(t *testing.T) {
		res := run(t, r, runner.Request{Code: `require('fs').writeFileSync('/tmp/left-behind', 'x'); return require('fs').readdirSync('/tmp')`})
		if !sameJSON(t, res.Value, `["left-behind"]`) {
			t.Fatalf("first run: %s %s %s", res.Status, res.Error, res.Value)
		}
		res = run(t, r, runner.Request{Code: `return require('fs').readdirSync('/tmp')`})
		if !sameJSON(t, res.Value, `[]`) {
			t.Errorf("second run sees %s", res.Value)
		}
	})
}

func TestAbuseConcurrentRunsAreApart(t *testing.T) {
	r := newTestRunner(t, Config{})
	code := `
const fs = require('fs')
fs.writeFileSync('/tmp/mine-' + context.id, 'x')
await new Promise((resolve) => setTimeout(resolve, 300))
return { files: fs.readdirSync('/tmp'), pids: fs.readdirSync('/proc').filter((n) => /^\d+$/.test(n)).length }`
	results := make([]Result, 2)
	var wg sync.WaitGroup
	for i := range results {
		ctx := obj(t, map[string]any{"id": i})
		wg.Go(func() {
			res, err := r.Run(context.Background(), runner.Request{Code: code, Context: ctx})
			if err != nil {
				t.Errorf("Run: %v", err)
			}
			results[i] = res
		})
	}
	wg.Wait()
	for i, res := range results {
		want := fmt.Sprintf(`{"files": ["mine-%d"], "pids": 2}`, i)
		if res.Status != runner.StatusSuccess || !sameJSON(t, res.Value, want) {
			t.Errorf("run %d: %s %s %s; want %s", i, res.Status, res.Error, jsonOf(t, res.Value), want)
		}
	}
}
