// Command benchrestart measures how long `nova dev` takes to come back
// after a kill -9 with many ended executions' states kept in its
// executions bucket: until its NATS server answers a read of the bucket,
// and until a 3-node workflow started at the kill completes (the engine,
// the sandbox and the audit service up again). With 0 states, in the same
// run, the baseline.
//
// Each case starts `nova dev` on a fresh data dir, runs one workflow, and
// writes that workflow's ended state under -states more keys, three
// writes a key as the engine writes them (running, running, ended with a
// week's TTL). Then, two ways to be killed:
//
//   - steady: nova dev is stopped and started again (so the server has
//     written each stream's state, as it does every 2 minutes), takes
//     -tail more states (2.5 minutes at a workflow a second) and is
//     killed: what a restart after a week of running reads.
//   - fresh: killed right after the writes, before the server first wrote
//     the bucket's state: the restart reads every state kept.
//   - stopped: as steady, but stopped with SIGTERM instead of killed: the
//     baseline of a restart that reads no writes again.
//
// It prints the sequences the server's linear scan of the bucket's TTLs
// covered, from nova dev's log.
//
// `make bench-restart` builds the binaries and runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/bench/loadgen"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

type config struct {
	bin    string
	states []int
	tail   int
	keep   bool
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("benchrestart", flag.ExitOnError)
	fs.StringVar(&cfg.bin, "bin", "bin", "directory of the nova binary (make build)")
	states := fs.String("states", "0,10000,100000", "numbers of ended executions' states kept at the kill")
	fs.IntVar(&cfg.tail, "tail", 150, "states written after the server last wrote its state, in the steady case")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the data dirs and nova dev's logs")
	_ = fs.Parse(os.Args[1:])
	for _, f := range strings.Split(*states, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			fmt.Fprintf(os.Stderr, "benchrestart: -states %q: want numbers from 0\n", *states)
			os.Exit(2)
		}
		cfg.states = append(cfg.states, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "benchrestart: %v\n", err)
		os.Exit(1)
	}
}

type result struct {
	states  int
	kill    string
	ready   time.Duration
	first   time.Duration
	scanned string
}

func run(ctx context.Context, cfg config) error {
	def, err := workflow.Parse([]byte(loadgen.Chain(3)))
	if err != nil {
		return err
	}
	bin, err := filepath.Abs(cfg.bin)
	if err != nil {
		return err
	}
	fmt.Printf("nova dev restarted after kill -9: until the bucket answers, until a workflow started at the kill completes\n")
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "states kept\tkilled\tready\tfirst workflow\tTTL scan (seqs)")
	for _, n := range cfg.states {
		for _, kill := range []string{"steady", "fresh", "stopped"} {
			r, err := restartCase(ctx, cfg, bin, def, n, kill)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "%d\t%s\t%v\t%v\t%s\n", r.states, r.kill, r.ready.Round(time.Millisecond), r.first.Round(time.Millisecond), r.scanned)
			_ = w.Flush()
		}
	}
	return w.Flush()
}

// restartCase runs one case: n states, killed steady or fresh, or stopped
// (SIGTERM) at the same moment as steady.
func restartCase(ctx context.Context, cfg config, bin string, def *novav1.WorkflowDefinition, n int, kill string) (result, error) {
	r := result{states: n, kill: kill}
	dir, err := os.MkdirTemp("", "benchrestart-")
	if err != nil {
		return r, err
	}
	if cfg.keep {
		fmt.Fprintf(os.Stderr, "benchrestart: %d %s in %s\n", n, r.kill, dir)
	} else {
		defer os.RemoveAll(dir)
	}
	proc, natsPort, _, err := loadgen.NovaDev(bin, dir)
	if err != nil {
		return r, err
	}
	defer proc.Stop()
	url := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)

	b, err := up(ctx, proc, url)
	if err != nil {
		return r, err
	}
	state, err := oneWorkflow(ctx, b, def)
	if err == nil {
		err = writeStates(ctx, b.JetStream(), "kept", n, state)
	}
	b.Close()
	if err != nil {
		return r, err
	}
	if kill != "fresh" {
		proc.Stop()
		if b, err = up(ctx, proc, url); err != nil {
			return r, err
		}
		err = writeStates(ctx, b.JetStream(), "tail", cfg.tail, state)
		b.Close()
		if err != nil {
			return r, err
		}
	}
	if kill == "stopped" {
		proc.Stop()
	} else if err := proc.Kill(); err != nil {
		return r, err
	}
	logged, err := os.Stat(proc.Log)
	if err != nil {
		return r, err
	}

	start := time.Now()
	if err := proc.Start(); err != nil {
		return r, err
	}
	running, cancel := proc.WhileRunning(ctx)
	defer cancel()
	if err := loadgen.WaitDial(running, url); err != nil {
		return r, loadgen.ExitedError(ctx, running, err)
	}
	b, err = bus.Connect(running, url, bus.WithName("benchrestart"), bus.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return r, loadgen.ExitedError(ctx, running, err)
	}
	defer b.Close()
	if err := readBucket(running, b.JetStream(), n); err != nil {
		return r, loadgen.ExitedError(ctx, running, err)
	}
	r.ready = time.Since(start)
	load := loadgen.NewLoad(b, def, 1)
	load.Run(running, 1)
	if load.Completed.Load() != 1 {
		return r, loadgen.ExitedError(ctx, running, errors.New("the workflow started at the restart did not complete"))
	}
	r.first = time.Since(start)
	r.scanned, err = ttlScan(proc.Log, logged.Size())
	return r, err
}

// up starts proc and connects once its services have declared their
// consumers.
func up(ctx context.Context, proc *loadgen.Proc, url string) (*bus.Bus, error) {
	if err := proc.Start(); err != nil {
		return nil, err
	}
	running, cancel := proc.WhileRunning(ctx)
	defer cancel()
	b, err := loadgen.Connect(running, url, "benchrestart")
	if err != nil {
		return nil, loadgen.ExitedError(ctx, running, err)
	}
	return b, nil
}

// oneWorkflow runs def once and returns its ended state as the engine
// stored it.
func oneWorkflow(ctx context.Context, b *bus.Bus, def *novav1.WorkflowDefinition) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	load := loadgen.NewLoad(b, def, 1)
	load.Run(ctx, 1)
	if load.Completed.Load() != 1 {
		return nil, fmt.Errorf("the first workflow did not complete: %w", ctx.Err())
	}
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketExecutions)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, load.IDs[0])
	if err != nil {
		return nil, fmt.Errorf("the first workflow's state: %w", err)
	}
	return e.Value(), nil
}

// writeStates writes n states under keys prefix-i, three writes a key, the
// last with a week's TTL, as the engine writes an execution's state.
func writeStates(ctx context.Context, js jetstream.JetStream, prefix string, n int, state []byte) error {
	for i := range n {
		for w := range 3 {
			m := nats.NewMsg("$KV." + bus.BucketExecutions + "." + stateKey(prefix, i))
			m.Data = state
			if w == 2 {
				m.Header.Set(jetstream.MsgTTLHeader, "604800s")
			}
			if _, err := js.PublishMsgAsync(m); err != nil {
				return err
			}
		}
		if i%1000 == 999 {
			if err := settle(ctx, js); err != nil {
				return err
			}
		}
	}
	return settle(ctx, js)
}

func settle(ctx context.Context, js jetstream.JetStream) error {
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func stateKey(prefix string, i int) string { return fmt.Sprintf("%s-%08d", prefix, i) }

// readBucket reads one kept state (any with n 0) once the server answers.
func readBucket(ctx context.Context, js jetstream.JetStream, n int) error {
	for {
		err := func() error {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			kv, err := js.KeyValue(actx, bus.BucketExecutions)
			if err != nil {
				return err
			}
			if n == 0 {
				_, err = kv.Status(actx)
				return err
			}
			_, err = kv.Get(actx, stateKey("kept", 0))
			return err
		}()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the bucket did not answer: %v: %w", err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

var scanLine = regexp.MustCompile(`TTL state is outdated; attempting to recover using linear scan \(seq (\d+) to (\d+)\)`)

// ttlScan returns the sequences of the executions bucket's TTL scan that
// nova dev logged after offset, or "none".
func ttlScan(log string, offset int64) (string, error) {
	data, err := os.ReadFile(log)
	if err != nil {
		return "", err
	}
	var scans []string
	for _, line := range strings.Split(string(data[offset:]), "\n") {
		if !strings.Contains(line, "KV_"+bus.BucketExecutions) {
			continue
		}
		if m := scanLine.FindStringSubmatch(line); m != nil {
			from, _ := strconv.Atoi(m[1])
			to, _ := strconv.Atoi(m[2])
			scans = append(scans, fmt.Sprintf("%d (%s to %s)", to-from+1, m[1], m[2]))
		}
	}
	if len(scans) == 0 {
		return "none", nil
	}
	return strings.Join(scans, ", "), nil
}
