package runner

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/novaflow/nova/pkg/syncbuf"
)

// The supervisor of a job (J) sends its report and exits at once; a message
// of the service ("done" once it has the runner's complete result, or a kill)
// can reach J after its last read. The kernel then flags ECONNRESET on the
// service's end, and reports it on the next read before the queued report.
func TestReadReportAfterReset(t *testing.T) {
	// pair returns the service's end of a job control socket and J's.
	pair := func(t *testing.T) (*net.UnixConn, int) {
		t.Helper()
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fds[0]), "job-control")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn), fds[1]
	}
	// supervisor plays J: the service's message arrives unread, J reports
	// (or not) and exits.
	supervisor := func(t *testing.T, ours *net.UnixConn, theirs int, report string) {
		t.Helper()
		if _, err := ours.Write([]byte(`{"kill":"done"}`)); err != nil {
			t.Fatal(err)
		}
		if report != "" {
			if err := unix.Send(theirs, []byte(report), 0); err != nil {
				t.Fatal(err)
			}
		}
		unix.Close(theirs)
	}
	const report = `{"limit": "", "exit": 0, "cpu": 0.01}`

	t.Run("the kernel reports the reset first", func(t *testing.T) {
		ours, theirs := pair(t)
		supervisor(t, ours, theirs, report)
		// What a single read sees: the condition that failed finished runs.
		if _, err := ours.Read(make([]byte, 4096)); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("first read: %v, want ECONNRESET (the premise of readReport)", err)
		}
	})
	t.Run("report queued before the reset", func(t *testing.T) {
		ours, theirs := pair(t)
		supervisor(t, ours, theirs, report)
		if got := readReport(ours); string(got) != report {
			t.Fatalf("readReport = %q, want %q", got, report)
		}
	})
	t.Run("no report", func(t *testing.T) {
		ours, theirs := pair(t)
		supervisor(t, ours, theirs, "")
		if got := readReport(ours); got != nil {
			t.Fatalf("readReport = %q, want nil", got)
		}
	})
	t.Run("report without a reset", func(t *testing.T) {
		ours, theirs := pair(t)
		if err := unix.Send(theirs, []byte(report), 0); err != nil {
			t.Fatal(err)
		}
		unix.Close(theirs)
		if got := readReport(ours); string(got) != report {
			t.Fatalf("readReport = %q, want %q", got, report)
		}
	})
}

// loadCPU keeps every CPU busy until the test ends: goroutines spinning in
// this process (they delay the goroutines of the runner, as a loaded service
// would be) and busy processes beside it (killed by pid at the end).
func loadCPU(t *testing.T) {
	t.Helper()
	stop := make(chan struct{})
	var spinners sync.WaitGroup
	for range 2 * runtime.GOMAXPROCS(0) {
		spinners.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := 0; i < 100_000; i++ {
				}
			}
		})
	}
	var burners []*exec.Cmd
	t.Cleanup(func() {
		close(stop)
		spinners.Wait()
		for _, c := range burners {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	})
	for range runtime.NumCPU() {
		c := exec.Command("/bin/sh", "-c", "while :; do :; done")
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			t.Fatalf("start a CPU burner: %v", err)
		}
		burners = append(burners, c)
	}
}

// A service that starts on a loaded machine gets work at once: runs go cold
// while the zygotes import, then warm on zygotes still making their first
// spares. Every run of a trivial program must succeed; none may end as a
// sandbox fault (a finished job whose supervisor's report was lost read as a
// zygote that died).
func TestWarmStartUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("stress test")
	}
	logs := &syncbuf.Buffer{}
	loadCPU(t)
	r := startTestRunner(t, Config{Zygotes: 2, Logger: slog.New(slog.NewTextHandler(logs, nil))})

	const concurrent = 40
	const wantWarm = 160
	deadline := time.Now().Add(40 * time.Second)
	var mu sync.Mutex
	runs, warm, faults := 0, 0, 0
	for wave := 0; warm < wantWarm && wave < 20 && time.Now().Before(deadline); wave++ {
		var wg sync.WaitGroup
		for range concurrent {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				res, err := r.Run(ctx, Request{Code: `context["queue"] = "manual-review"`})
				mu.Lock()
				defer mu.Unlock()
				runs++
				if res.Warm {
					warm++
				}
				if err != nil || res.Status != StatusSuccess || string(res.Updates["queue"]) != `"manual-review"` {
					faults++
					if faults <= 5 {
						t.Errorf("wave %d, warm %v: err %v, result %s/%s %q, updates %s, stderr %q",
							wave, res.Warm, err, res.Status, res.ErrorKind, res.Error, res.Updates, res.Stderr)
					}
				}
			})
		}
		wg.Wait()
	}
	t.Logf("%d runs, %d warm, %d failed", runs, warm, faults)
	if warm == 0 {
		t.Fatal("no run was warm: the test exercised nothing of the pool")
	}
	for _, bad := range []string{"Traceback", "sandbox zygote ended", "watchdog"} {
		if strings.Contains(logs.String(), bad) {
			t.Errorf("the log shows %q:\n%s", bad, tail(logs.String(), 4000))
		}
	}
}

// Closing the runner while its zygotes import their modules ends them quietly
// (a zygote that finds the control channel closed leaves without a traceback)
// and soon, whatever the moment.
func TestWarmCloseDuringStartUp(t *testing.T) {
	for _, after := range []time.Duration{0, 25 * time.Millisecond, 50 * time.Millisecond, 75 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			logs := &syncbuf.Buffer{}
			r := startTestRunner(t, Config{Zygotes: 2, Logger: slog.New(slog.NewTextHandler(logs, nil))})
			time.Sleep(after)
			start := time.Now()
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				r.Close()
			}()
			select {
			case <-closed:
			case <-time.After(20 * time.Second):
				t.Fatal("Close did not return within 20s")
			}
			t.Logf("closed %v after the start, in %v (%d ready)", after, time.Since(start).Round(time.Millisecond), r.WarmReady())
			if strings.Contains(logs.String(), "Traceback") {
				t.Errorf("a zygote printed a traceback at shutdown:\n%s", tail(logs.String(), 4000))
			}
		})
	}
}
