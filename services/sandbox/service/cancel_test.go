package service_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sys/unix"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/eventjson"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/sandbox/abusesuite"
	"github.com/novaflow/nova/services/sandbox/isolation/isolationtest"
	"github.com/novaflow/nova/services/sandbox/runner"
)

// cancelModes are the runner's ways to run a program: cold (a bubblewrap
// per program), on the light zygote, and on a full one.
var cancelModes = []struct {
	name         string
	zygotes      int
	lightZygotes int
}{
	{name: "cold"},
	{name: "warm", zygotes: 1},
	{name: "warm-full", zygotes: 1, lightZygotes: -1},
}

// cancelRig sends programs of any execution to the sandbox service of h and
// cancels executions as the graph engine does.
type cancelRig struct {
	t       testing.TB
	h       *abusesuite.Client
	results *nats.Subscription
	pending map[string]*nats.Msg
}

func newCancelRig(t *testing.T, zygotes, light int) *cancelRig {
	t.Helper()
	h := startService(t, runner.Config{Zygotes: zygotes, LightZygotes: light, MaxProcesses: 64})
	results, err := h.Bus().Conn().SubscribeSync(bus.EventFilter(bus.KindSandboxResult))
	if err != nil {
		t.Fatal(err)
	}
	return &cancelRig{t: t, h: h, results: results, pending: map[string]*nats.Msg{}}
}

var cancelSeq atomic.Int64

// on is c reporting its failures to t.
func (c *cancelRig) on(t testing.TB) *cancelRig {
	cp := *c
	cp.t = t
	return &cp
}

// send publishes a program of execution and returns its step id.
func (c *cancelRig) send(execution, code string, timeout float64) string {
	c.t.Helper()
	step := execution + "/node/" + strconv.FormatInt(cancelSeq.Add(1), 10)
	req := &novav1.ExecuteCode{ExecutionId: execution, NodeId: "node", StepId: step, Code: code, TimeoutSeconds: timeout, Stage: "TASK"}
	if err := c.h.Bus().PublishProto(context.Background(), bus.CommandSubject(bus.AgentSandbox), step, bus.TypeSandboxExecute, req, nil); err != nil {
		c.t.Fatal(err)
	}
	return step
}

// cancel publishes the cancellation of execution as the graph engine does.
func (c *cancelRig) cancel(execution string) {
	c.t.Helper()
	if err := c.h.Bus().PublishProto(context.Background(), bus.EventSubject(execution, bus.KindExecutionCancelled), execution+"/cancelled",
		bus.TypeExecutionCancelled, &novav1.ExecutionCancelled{ExecutionId: execution, RequestedBy: "test"},
		map[string]string{bus.ExtensionExecutionID: execution}); err != nil {
		c.t.Fatal(err)
	}
}

// await returns the result of step and when it arrived.
func (c *cancelRig) await(step string, within time.Duration) (*novav1.CodeExecuted, time.Time) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	id := step + "/result"
	for {
		if m, ok := c.pending[id]; ok {
			delete(c.pending, id)
			var out novav1.CodeExecuted
			if err := eventjson.Unmarshal(m.Data, &out); err != nil {
				c.t.Fatal(err)
			}
			return &out, time.Now()
		}
		m, err := c.results.NextMsg(time.Until(deadline))
		if err != nil {
			c.t.Fatalf("no result for %s: %v", step, err)
		}
		if got := m.Header.Get("Nats-Msg-Id"); got == id {
			var out novav1.CodeExecuted
			if err := eventjson.Unmarshal(m.Data, &out); err != nil {
				c.t.Fatal(err)
			}
			return &out, time.Now()
		} else if _, dup := c.pending[got]; dup {
			c.t.Fatalf("result %s published twice", got)
		} else {
			c.pending[got] = m
		}
	}
}

// settled waits until the commands stream holds no command: each was acked.
func (c *cancelRig) settled() {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := c.h.Bus().JetStream().Stream(context.Background(), bus.StreamCommands)
		if err != nil {
			c.t.Fatal(err)
		}
		if info, err := s.Info(context.Background()); err == nil && info.State.Msgs == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatal("a command was not acked")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sleeper is a program that starts a child that sleeps a while (its
// command line carries marker, so the host can find it) and sleeps itself.
func sleeper(marker string) string {
	return fmt.Sprintf("import subprocess, time\nsubprocess.Popen(['sleep', %q])\ntime.sleep(60)", marker)
}

// newMarker is a sleep time no other process of the host has on its
// command line, another copy of this test's included.
func newMarker() string {
	return isolationtest.SleepMarker(600)
}

// tree is the processes of a running program, seen from the host: the
// program's child found by its marker, the program (its parent), and the
// pid namespace that holds all of the sandbox's processes. The pidfds wait
// for their exit without mistaking a recycled pid for them.
type tree struct {
	child, main     int
	childFD, mainFD int
	pidns           string
}

// findTree waits until the child with marker runs and returns its tree.
func findTree(t testing.TB, marker string, within time.Duration) *tree {
	t.Helper()
	want := "sleep\x00" + marker + "\x00"
	deadline := time.Now().Add(within)
	for {
		paths, _ := filepath.Glob("/proc/[0-9]*")
		for _, p := range paths {
			if b, err := os.ReadFile(p + "/cmdline"); err != nil || string(b) != want {
				continue
			}
			child, _ := strconv.Atoi(filepath.Base(p))
			main := statusField(child, "PPid")
			ns, _ := os.Readlink(p + "/ns/pid")
			tr := &tree{child: child, main: main, pidns: ns, childFD: -1, mainFD: -1}
			var err error
			if tr.childFD, err = unix.PidfdOpen(child, 0); err != nil {
				t.Fatalf("pidfd of %d: %v", child, err)
			}
			if tr.mainFD, err = unix.PidfdOpen(main, 0); err != nil {
				t.Fatalf("pidfd of %d: %v", main, err)
			}
			t.Cleanup(tr.close)
			return tr
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program's child %q did not start within %s", marker, within)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (tr *tree) close() {
	for _, fd := range []*int{&tr.childFD, &tr.mainFD} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// gone waits until the program and its child have exited and returns when
// the last of them did (to the poll's precision).
func (tr *tree) gone(deadline time.Time) (time.Time, error) {
	fds := []unix.PollFd{{Fd: int32(tr.childFD), Events: unix.POLLIN}, {Fd: int32(tr.mainFD), Events: unix.POLLIN}}
	exited := make([]bool, len(fds))
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			return time.Time{}, fmt.Errorf("processes still running: program %d exited %v, child %d exited %v", tr.main, exited[1], tr.child, exited[0])
		}
		var poll []unix.PollFd
		var which []int
		for i, fd := range fds {
			if !exited[i] {
				poll, which = append(poll, fd), append(which, i)
			}
		}
		n, err := unix.Poll(poll, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return time.Time{}, err
		}
		now := time.Now()
		if n == 0 {
			continue
		}
		for k, p := range poll {
			if p.Revents != 0 {
				exited[which[k]] = true
			}
		}
		if !slices.Contains(exited, false) {
			return now, nil
		}
	}
}

// aliveInNamespace lists the host's processes in pid namespace ns that are
// neither dead nor being killed.
func aliveInNamespace(ns string) []int {
	var alive []int
	paths, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range paths {
		if link, err := os.Readlink(p + "/ns/pid"); err != nil || link != ns {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(p))
		if countAliveAt(p) {
			alive = append(alive, pid)
		}
	}
	return alive
}

// countAliveAt tells whether the process at /proc path p is neither a
// zombie nor has SIGKILL pending.
func countAliveAt(p string) bool {
	status, err := os.ReadFile(p + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return false
			}
		case "SigPnd", "ShdPnd":
			if mask, _ := strconv.ParseUint(v, 16, 64); mask&(1<<8) != 0 {
				return false
			}
		}
	}
	return true
}

// statusField reads a numeric field of /proc/<pid>/status (0 if absent).
func statusField(pid int, field string) int {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == field {
			fs := strings.Fields(v)
			if len(fs) > 0 {
				n, _ := strconv.Atoi(fs[0])
				return n
			}
		}
	}
	return 0
}

// killWithin is how soon after the cancellation is published the program
// and every process it started must be gone.
const killWithin = time.Second

func TestCancellationKillsTheProgram(t *testing.T) {
	for _, mode := range cancelModes {
		t.Run(mode.name, func(t *testing.T) {
			c := newCancelRig(t, mode.zygotes, mode.lightZygotes)

			t.Run("a running program and its children are killed", func(t *testing.T) {
				c := c.on(t)
				execution := "cancel-running-" + mode.name
				marker := newMarker()
				step := c.send(execution, sleeper(marker), 0)
				tr := findTree(t, marker, 30*time.Second)

				published := time.Now()
				c.cancel(execution)
				res, arrived := c.await(step, 10*time.Second)
				goneAt, err := tr.gone(published.Add(5 * time.Second))
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("cancellation published; process tree gone after %s, result after %s (pid namespace %s)",
					goneAt.Sub(published).Round(time.Microsecond), arrived.Sub(published).Round(time.Microsecond), tr.pidns)
				if took := goneAt.Sub(published); took > killWithin {
					t.Errorf("the process tree was gone %s after the cancellation, want within %s", took, killWithin)
				}
				if res.Status != "error" || res.ErrorKind != "cancelled" || res.Error != "the execution was cancelled" {
					t.Errorf("result %s/%s %q, want error/cancelled %q", res.Status, res.ErrorKind, res.Error, "the execution was cancelled")
				}
				if res.ExecutionId != execution || res.StepId != step {
					t.Errorf("result of %s %s, want %s %s", res.ExecutionId, res.StepId, execution, step)
				}
				if tr.pidns != "" {
					if alive := aliveInNamespace(tr.pidns); len(alive) > 0 {
						t.Errorf("processes %v of the sandbox outlived the cancellation", alive)
					}
				}
				c.settled()
				c.h.StillServing(c.t)
			})

			t.Run("a program of an execution cancelled a moment before does not start", func(t *testing.T) {
				c := c.on(t)
				execution := "cancel-before-" + mode.name
				c.cancel(execution)
				if err := c.h.Bus().Conn().Flush(); err != nil {
					t.Fatal(err)
				}
				marker := newMarker()
				step := c.send(execution, sleeper(marker), 0)
				res, _ := c.await(step, 10*time.Second)
				if res.Status != "error" || res.ErrorKind != "cancelled" || res.Error != "the execution was cancelled" {
					t.Errorf("result %s/%s %q, want error/cancelled", res.Status, res.ErrorKind, res.Error)
				}
				if res.SandboxId != "" {
					t.Errorf("the program ran in sandbox %s", res.SandboxId)
				}
				if n := abusesuite.HostProcesses("sleep\x00" + marker + "\x00"); n > 0 {
					t.Errorf("the program of a cancelled execution started %d children", n)
				}
				c.settled()
				// Another execution's programs run as before.
				step = c.send("cancel-other-"+mode.name, "context['ok'] = True", 0)
				if res, _ := c.await(step, 30*time.Second); res.Status != "success" {
					t.Errorf("another execution: %s %s: %s", res.Status, res.ErrorKind, res.Error)
				}
			})
		})
	}
}

// TestCancelLatency measures, for each mode, how long after its execution's
// cancellation is published a running program and its child are gone, over
// NOVA_SANDBOX_CANCEL_BENCH runs, and as baselines: how long past its
// wall-time limit a run of the same program took to end, by the runner's
// clock (the result's duration less the limit: it kills the same way, and
// ends once the process tree is gone), and how long the process tree takes
// to go after a bare SIGKILL of the sandbox's pid 1 from the test. It prints
// figures (go test -v) and asserts none.
func TestCancelLatency(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("NOVA_SANDBOX_CANCEL_BENCH"))
	if runs <= 0 {
		t.Skip("set NOVA_SANDBOX_CANCEL_BENCH to the number of runs")
	}
	const limit = 500 * time.Millisecond
	for _, mode := range cancelModes {
		t.Run(mode.name, func(t *testing.T) {
			c := newCancelRig(t, mode.zygotes, mode.lightZygotes)
			var cancelGone, cancelResult, timeoutEnded, killGone []time.Duration
			for i := range runs {
				execution := fmt.Sprintf("bench-%s-%d", mode.name, i)

				// The cancellation.
				marker := newMarker()
				step := c.send(execution, sleeper(marker), 0)
				tr := findTree(t, marker, 30*time.Second)
				published := time.Now()
				c.cancel(execution)
				goneAt, err := tr.gone(published.Add(10 * time.Second))
				if err != nil {
					t.Fatal(err)
				}
				_, arrived := c.await(step, 10*time.Second)
				cancelGone = append(cancelGone, goneAt.Sub(published))
				cancelResult = append(cancelResult, arrived.Sub(published))
				tr.close()

				// The wall-time limit: how long past it the run took, by the
				// runner's own clock (the run's duration, which begins a little
				// before the limit's clock, less the limit).
				marker = newMarker()
				step = c.send(execution+"-timeout", sleeper(marker), limit.Seconds())
				tr = findTree(t, marker, 30*time.Second)
				if _, err = tr.gone(time.Now().Add(10 * time.Second)); err != nil {
					t.Fatal(err)
				}
				res, _ := c.await(step, 10*time.Second)
				if res.ErrorKind != runner.KindTimeout {
					t.Fatalf("the limited program ended %s/%s: %s", res.Status, res.ErrorKind, res.Error)
				}
				timeoutEnded = append(timeoutEnded, time.Duration(res.DurationMs*float64(time.Millisecond))-limit)
				tr.close()

				// A bare SIGKILL of the sandbox's pid 1.
				marker = newMarker()
				step = c.send(execution+"-kill", sleeper(marker), 0)
				tr = findTree(t, marker, 30*time.Second)
				init := namespaceInit(tr)
				if init == 0 {
					t.Fatalf("pid 1 of the sandbox of %d not found", tr.child)
				}
				killed := time.Now()
				if err := unix.Kill(init, unix.SIGKILL); err != nil {
					t.Fatal(err)
				}
				goneAt, err = tr.gone(killed.Add(10 * time.Second))
				if err != nil {
					t.Fatal(err)
				}
				killGone = append(killGone, goneAt.Sub(killed))
				c.await(step, 10*time.Second)
				tr.close()
			}
			c.settled()
			report := func(what string, ds []time.Duration) {
				p50, p99, most := percentiles(ds)
				t.Logf("%-9s %-46s n=%d p50=%-10s p99=%-10s max=%s", mode.name, what, len(ds), p50, p99, most)
			}
			report("cancel published -> process tree gone", cancelGone)
			report("cancel published -> result received", cancelResult)
			report("wall-time limit due -> run ended", timeoutEnded)
			report("SIGKILL of the sandbox's pid 1 -> tree gone", killGone)
		})
	}
}

// namespaceInit is the host pid of pid 1 of the pid namespace of tr's
// processes (0 if not found): the last pid of NSpid is 1.
func namespaceInit(tr *tree) int {
	paths, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range paths {
		if link, err := os.Readlink(p + "/ns/pid"); err != nil || link != tr.pidns {
			continue
		}
		status, err := os.ReadFile(p + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			k, v, _ := strings.Cut(line, ":")
			if fs := strings.Fields(v); k == "NSpid" && len(fs) > 1 && fs[len(fs)-1] == "1" {
				pid, _ := strconv.Atoi(fs[0])
				return pid
			}
		}
	}
	return 0
}

// percentiles are the median, the 99th percentile (nearest rank) and the
// largest of ds, rounded to microseconds.
func percentiles(ds []time.Duration) (p50, p99, most time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(q float64) time.Duration {
		i := int(float64(len(s))*q+0.999999) - 1
		return s[min(max(i, 0), len(s)-1)].Round(time.Microsecond)
	}
	return rank(0.50), rank(0.99), s[len(s)-1].Round(time.Microsecond)
}
