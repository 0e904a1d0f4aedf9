package jsrunner

import (
	"context"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/novaflow/nova/services/sandbox/runner"
)

// BenchmarkRun measures the JavaScript equivalent of context['x'] = 1 in the
// sandbox next to a plain `node -e` subprocess without isolation, measured in
// the same run. Each reports p50 and p99 in ms and executions per second.
//
//	go test -run '^$' -bench . -benchtime 100x ./jsrunner/
func BenchmarkRun(b *testing.B) {
	r := newTestRunner(b, Config{})
	const code = `context['x'] = 1`

	b.Run("baseline-node-e", func(b *testing.B) {
		measure(b, 1, func() error {
			cmd := exec.Command("/usr/bin/node", "-e", "const context = {}; "+code)
			// The sandbox's environment: variables such as NODE_EXTRA_CA_CERTS
			// would add their own start-up work to the baseline.
			cmd.Env = sandboxEnv()
			return cmd.Run()
		})
	})
	b.Run("sandbox-context-x", func(b *testing.B) {
		measure(b, 1, func() error { return runOK(r, code) })
	})
	b.Run("sandbox-context-x-2-callers", func(b *testing.B) {
		measure(b, 2, func() error { return runOK(r, code) })
	})
}

func runOK(r *Runner, code string) error {
	res, err := r.Run(context.Background(), runner.Request{Code: code})
	if err == nil && res.Status != runner.StatusSuccess {
		err = &benchError{res.Error}
	}
	return err
}

type benchError struct{ msg string }

func (e *benchError) Error() string { return e.msg }

// measure runs fn b.N times over callers goroutines and reports latency
// percentiles and throughput.
func measure(b *testing.B, callers int, fn func() error) {
	b.Helper()
	durations := make([]time.Duration, b.N)
	next := make(chan int)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range callers {
		wg.Go(func() {
			for i := range next {
				t0 := time.Now()
				if err := fn(); err != nil {
					b.Error(err)
				}
				durations[i] = time.Since(t0)
			}
		})
	}
	for i := range b.N {
		next <- i
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(durations)
	pct := func(p float64) float64 {
		return float64(durations[min(int(float64(len(durations))*p), len(durations)-1)]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "exec/s")
}
