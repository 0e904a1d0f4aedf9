// Command benchgateway measures what the HTTP gateway adds to starting a
// workflow, against a producer on NATS, on one `nova dev` in the same run:
//
//   - latency: a 3-node code workflow started and waited for, one at a
//     time, alternately through POST /v1/executions?wait and over NATS
//     (the start event, then its completion, as `nova run --remote` does);
//     p50/p90 of each and the p50 the gateway adds;
//   - starts per second: a start-to-end workflow (no node to run) started
//     at 32 in flight through POST /v1/executions (202) and by publishing
//     the start event, alternately for some rounds, the engine and the
//     audit service idle before each phase; the medians compared. The
//     sustained rate counts a start when its workflow completed (first
//     start to last completion: what the deployment keeps up with); the
//     accepted rate when the producer got its answer (the engine falls
//     behind, the stream keeps the backlog). The CPU of nova dev and of the
//     producer per start is measured until the audit service recorded
//     the phase.
//
// `make bench-gateway` builds the binaries and runs it; -h lists the knobs.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/novaflow/nova/bench/loadgen"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
	"github.com/novaflow/nova/services/gateway/gateway"
	"github.com/novaflow/nova/services/nova/client"
)

const codeWorkflow = `name: bench-chain-3
nodes:
  - {id: start, type: start}
  - {id: a, type: action, code: "context['x'] = 1"}
  - {id: b, type: action, code: "context['x'] = 2"}
  - {id: c, type: action, code: "context['x'] = 3"}
  - {id: done, type: end}
edges:
  - {from: start, to: a}
  - {from: a, to: b}
  - {from: b, to: c}
  - {from: c, to: done}
`

const emptyWorkflow = `name: bench-empty
nodes:
  - {id: start, type: start}
  - {id: done, type: end}
edges:
  - {from: start, to: done}
`

type config struct {
	bin      string
	latency  int
	starts   int
	rounds   int
	inFlight int
	pprof    string
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("benchgateway", flag.ExitOnError)
	fs.StringVar(&cfg.bin, "bin", "bin", "directory of the nova binary (make build)")
	fs.IntVar(&cfg.latency, "latency", 100, "workflows one at a time, each way")
	fs.IntVar(&cfg.starts, "starts", 500, "starts per throughput phase (the audit service records each before the next phase; it slows as its store grows)")
	fs.IntVar(&cfg.rounds, "rounds", 3, "throughput phases each way, alternately")
	fs.IntVar(&cfg.inFlight, "in-flight", 32, "starts in flight in the throughput phases")
	fs.StringVar(&cfg.pprof, "pprof", "", "serve nova dev's Go profiles at `address` (nova dev --pprof)")
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "benchgateway: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	bin, err := filepath.Abs(cfg.bin)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "nova-benchgateway-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	key, hash, err := gateway.NewKey()
	if err != nil {
		return err
	}
	keysFile := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(keysFile, fmt.Appendf(nil, "- {name: bench, sha256: %s, scopes: [admin]}\n", hash), 0o600); err != nil {
		return err
	}
	dev, natsURL, gw, err := startDev(bin, dir, keysFile, cfg.pprof)
	if err != nil {
		return err
	}
	defer dev.Stop()
	b, err := connectWhenReady(ctx, dev, natsURL, gw)
	if err != nil {
		return err
	}
	defer b.Close()
	h := &httpClient{base: gw, key: key, c: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	for _, def := range []string{codeWorkflow, emptyWorkflow} {
		if _, err := h.do(ctx, "POST", "/v1/workflows", "application/yaml", def, http.StatusCreated); err != nil {
			return err
		}
	}
	bn := &bench{cfg: cfg, dev: dev, bus: b, http: h, client: client.New(b, nil)}
	fmt.Printf("benchgateway: nova dev (pid %d) with its gateway at %s\n\n", dev.Pid(), gw)
	natsLat, httpLat, err := bn.measureLatency(ctx)
	if err != nil {
		return err
	}
	phases, err := bn.measureStarts(ctx)
	if err != nil {
		return err
	}
	return printResults(cfg, natsLat, httpLat, phases)
}

// startDev starts nova dev on free ports with the keys of keysFile, and
// returns it with its NATS URL and its gateway's base URL.
func startDev(bin, dir, keysFile, pprof string) (dev *loadgen.Proc, natsURL, gw string, err error) {
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = loadgen.FreePort(); err != nil {
			return nil, "", "", err
		}
	}
	gw = fmt.Sprintf("http://127.0.0.1:%d", ports[2])
	dev = &loadgen.Proc{Name: "nova dev", Path: filepath.Join(bin, "nova"), Log: filepath.Join(dir, "nova-dev.log"),
		Args: []string{"dev", "--data-dir", filepath.Join(dir, "data"), "--nats-port", fmt.Sprint(ports[0]),
			"--mongo-port", fmt.Sprint(ports[1]), "--gateway-addr", strings.TrimPrefix(gw, "http://")},
		// The key's rate limit is lifted: the benchmark measures the path,
		// not the limiter's refusals.
		Env: loadgen.BaseEnv("NOVA_GATEWAY_KEYS_FILE="+keysFile, "NOVA_GATEWAY_RATE=1000000", "NOVA_GATEWAY_BURST=1000000")}
	if pprof != "" {
		dev.Args = append(dev.Args, "--pprof", pprof)
	}
	if err := dev.Start(); err != nil {
		return nil, "", "", err
	}
	return dev, fmt.Sprintf("nats://127.0.0.1:%d", ports[0]), gw, nil
}

// connectWhenReady waits until dev's NATS, gateway and services answer,
// and connects to its bus.
func connectWhenReady(ctx context.Context, dev *loadgen.Proc, natsURL, gw string) (*bus.Bus, error) {
	// Until it is ready, a nova dev that exits (a port taken, a data dir
	// locked) ends the waiting at once, and the error says so with the
	// last line of its log.
	running, cancel := dev.WhileRunning(ctx)
	defer cancel()
	if err := loadgen.WaitDial(running, natsURL); err != nil {
		return nil, loadgen.ExitedError(ctx, running, err)
	}
	if err := loadgen.WaitDial(running, strings.TrimPrefix(gw, "http://")); err != nil {
		return nil, loadgen.ExitedError(ctx, running, err)
	}
	b, err := bus.Connect(running, natsURL, bus.WithName("benchgateway"), bus.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, loadgen.ExitedError(ctx, running, err)
	}
	if err := loadgen.WaitServices(running, b.JetStream()); err != nil {
		b.Close()
		return nil, loadgen.ExitedError(ctx, running, err)
	}
	return b, nil
}

// bench is one nova dev and the two ways of starting workflows on it: its
// bus (the baseline) and its gateway.
type bench struct {
	cfg    config
	dev    *loadgen.Proc
	bus    *bus.Bus
	http   *httpClient
	client *client.Client
}

// measureLatency times the 3-node workflow one at a time, alternately
// over NATS and through the gateway, after a warm-up of each.
func (bn *bench) measureLatency(ctx context.Context) (natsLat, httpLat []time.Duration, err error) {
	for range 5 {
		if _, err := bn.runViaNATS(ctx); err != nil {
			return nil, nil, err
		}
		if _, err := bn.runViaHTTP(ctx); err != nil {
			return nil, nil, err
		}
	}
	for range bn.cfg.latency {
		d, err := bn.runViaNATS(ctx)
		if err != nil {
			return nil, nil, err
		}
		natsLat = append(natsLat, d)
		if d, err = bn.runViaHTTP(ctx); err != nil {
			return nil, nil, err
		}
		httpLat = append(httpLat, d)
	}
	return natsLat, httpLat, nil
}

// runViaNATS publishes the 3-node workflow's start event and waits for its
// completion, as nova run --remote does.
func (bn *bench) runViaNATS(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	e, err := bn.client.Start(ctx, nil, "bench-chain-3", map[string]any{"n": 1})
	if err != nil {
		return 0, err
	}
	wc, err := e.Wait(ctx)
	if err != nil {
		return 0, err
	}
	if wc.GetStatus() != execution.StatusSucceeded {
		return 0, fmt.Errorf("execution %s %s: %s", wc.GetExecutionId(), wc.GetStatus(), wc.GetError())
	}
	return time.Since(start), nil
}

// runViaHTTP starts the 3-node workflow with POST /v1/executions?wait.
func (bn *bench) runViaHTTP(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	body, err := bn.http.do(ctx, "POST", "/v1/executions?wait=60s", "application/json",
		`{"workflow": "bench-chain-3", "context": {"n": 1}}`, http.StatusOK)
	if err != nil {
		return 0, err
	}
	var done struct{ Status string }
	if err := json.Unmarshal(body, &done); err != nil || done.Status != execution.StatusSucceeded {
		return 0, fmt.Errorf("completion %s", body)
	}
	return time.Since(start), nil
}

// publishStart starts the start-to-end workflow by publishing its start
// event.
func (bn *bench) publishStart(ctx context.Context, i int) error {
	initial, _ := jsonvalue.ObjectOf(map[string]any{"n": i})
	s := &novav1.StartWorkflow{ExecutionId: uuid.NewString(), WorkflowName: "bench-empty", Context: initial.Proto()}
	return bn.bus.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), "start-"+s.ExecutionId, bus.TypeWorkflowStart, s,
		map[string]string{bus.ExtensionExecutionID: s.ExecutionId})
}

// postStart starts the start-to-end workflow with POST /v1/executions.
func (bn *bench) postStart(ctx context.Context, i int) error {
	_, err := bn.http.do(ctx, "POST", "/v1/executions", "application/json",
		fmt.Sprintf(`{"workflow": "bench-empty", "context": {"n": %d}}`, i), http.StatusAccepted)
	return err
}

// waitIdle waits until the engine and the audit service have handled
// everything started so far.
func (bn *bench) waitIdle(ctx context.Context) error {
	js := bn.bus.JetStream()
	if err := loadgen.WaitIdle(ctx, js, bus.StreamCommands, bus.ConsumerEngineCommands); err != nil {
		return err
	}
	// The audit service records what the last phase started; it may
	// lag the engine by minutes on a busy machine.
	var err error
	for range 5 {
		if err = loadgen.WaitIdle(ctx, js, bus.StreamEvents, auditservice.Consumer); err == nil {
			return nil
		}
	}
	return err
}

// measureStarts runs the throughput phases, alternately over NATS and
// through the gateway, and returns each way's figures by "nats" and "http".
func (bn *bench) measureStarts(ctx context.Context) (map[string]*phaseFigures, error) {
	// Every completion is counted: the phases run one after another, each
	// on an idle engine, so the completions seen in a phase are its own.
	var completed atomic.Int64
	sub, err := bn.bus.Conn().Subscribe(bus.EventFilter(bus.KindWorkflowCompleted), func(*nats.Msg) { completed.Add(1) })
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, err
	}
	phases := map[string]*phaseFigures{"nats": {}, "http": {}}
	for range bn.cfg.rounds {
		for _, p := range []struct {
			start func(context.Context, int) error
			fig   *phaseFigures
		}{{bn.publishStart, phases["nats"]}, {bn.postStart, phases["http"]}} {
			if err := bn.runPhase(ctx, p.start, p.fig, &completed); err != nil {
				return nil, err
			}
		}
	}
	return phases, nil
}

// runPhase makes cfg.starts starts with start on an idle nova dev, waits
// for their completions (counted in completed), and adds the phase's rates
// and CPU per start to fig.
func (bn *bench) runPhase(ctx context.Context, start func(context.Context, int) error, fig *phaseFigures, completed *atomic.Int64) error {
	if err := bn.waitIdle(ctx); err != nil {
		return err
	}
	before, err := cpuNow(bn.dev.Pid())
	if err != nil {
		return err
	}
	completed.Store(0)
	began := time.Now()
	if err := startAll(ctx, bn.cfg.starts, bn.cfg.inFlight, start); err != nil {
		return err
	}
	accepted := time.Since(began)
	for completed.Load() < int64(bn.cfg.starts) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(time.Millisecond)
	}
	ran := time.Since(began)
	// What the phase cost: until the audit service recorded it too.
	if err := bn.waitIdle(ctx); err != nil {
		return err
	}
	after, err := cpuNow(bn.dev.Pid())
	if err != nil {
		return err
	}
	n := float64(bn.cfg.starts)
	fig.accepted = append(fig.accepted, n/accepted.Seconds())
	fig.sustained = append(fig.sustained, n/ran.Seconds())
	fig.devCPU = append(fig.devCPU, float64(after.dev-before.dev)/float64(time.Millisecond)/n)
	fig.producerCPU = append(fig.producerCPU, float64(after.self-before.self)/float64(time.Millisecond)/n)
	return nil
}

// printResults prints the latency and throughput tables, the gateway
// against the NATS baseline.
func printResults(cfg config, natsLat, httpLat []time.Duration, phases map[string]*phaseFigures) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LATENCY, 3-NODE CODE WORKFLOW, ONE AT A TIME\tRUNS\tP50\tP90")
	fmt.Fprintf(tw, "NATS: start event, then its completion (baseline)\t%d\t%s\t%s\n", len(natsLat),
		round(loadgen.Percentile(natsLat, 0.5)), round(loadgen.Percentile(natsLat, 0.9)))
	fmt.Fprintf(tw, "HTTP: POST /v1/executions?wait\t%d\t%s\t%s\n", len(httpLat),
		round(loadgen.Percentile(httpLat, 0.5)), round(loadgen.Percentile(httpLat, 0.9)))
	fmt.Fprintf(tw, "added by the gateway (p50 HTTP - p50 NATS)\t\t%s\t\n",
		round(loadgen.Percentile(httpLat, 0.5)-loadgen.Percentile(natsLat, 0.5)))
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "STARTS OF A START-TO-END WORKFLOW, %d PER PHASE, %d IN FLIGHT, %d PHASES EACH WAY\tNATS (BASELINE)\tHTTP\tHTTP / NATS\n",
		cfg.starts, cfg.inFlight, cfg.rounds)
	nf, hf := phases["nats"], phases["http"]
	fmt.Fprintf(tw, "sustained starts/s: started and completed, first start to last completion (median)\t%.0f/s\t%.0f/s\t%.0f%%\n",
		median(nf.sustained), median(hf.sustained), 100*median(hf.sustained)/median(nf.sustained))
	fmt.Fprintf(tw, "  each phase\t%s\t%s\t\n", rates(nf.sustained), rates(hf.sustained))
	fmt.Fprintf(tw, "accepted starts/s: answered by JetStream or the gateway, the engine lagging behind (median)\t%.0f/s\t%.0f/s\t%.0f%%\n",
		median(nf.accepted), median(hf.accepted), 100*median(hf.accepted)/median(nf.accepted))
	fmt.Fprintf(tw, "  each phase\t%s\t%s\t\n", rates(nf.accepted), rates(hf.accepted))
	fmt.Fprintf(tw, "CPU ms per start, nova dev (bus, gateway, engine, audit, store), until the audit recorded it (median)\t%.3f\t%.3f\t%+.3f\n",
		median(nf.devCPU), median(hf.devCPU), median(hf.devCPU)-median(nf.devCPU))
	fmt.Fprintf(tw, "CPU ms per start, the producer (NATS publisher or HTTP client) (median)\t%.3f\t%.3f\t%+.3f\n",
		median(nf.producerCPU), median(hf.producerCPU), median(hf.producerCPU)-median(nf.producerCPU))
	return tw.Flush()
}

func rates(rs []float64) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%.0f/s", r)
	}
	return strings.Join(parts, " ")
}

func median(rs []float64) float64 {
	s := slices.Clone(rs)
	slices.Sort(s)
	return s[len(s)/2]
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

// startAll starts n workflows, inFlight at a time.
func startAll(ctx context.Context, n, inFlight int, start func(context.Context, int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, inFlight)
	for range inFlight {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > n {
					return
				}
				if err := start(ctx, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// phaseFigures are the throughput phases' figures of one way of starting.
type phaseFigures struct {
	accepted, sustained []float64 // starts per second
	devCPU, producerCPU []float64 // CPU ms per start
}

// cpuSample is the CPU used so far by nova dev (every service, the bus and
// the store run in it) and by this process (the producer).
type cpuSample struct{ dev, self time.Duration }

func cpuNow(devPid int) (cpuSample, error) {
	var s cpuSample
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", devPid))
	if err != nil {
		return s, err
	}
	// utime and stime, in USER_HZ (100 on Linux), after the command name.
	f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+2:]))
	if len(f) < 13 {
		return s, fmt.Errorf("/proc/%d/stat: %q", devPid, st)
	}
	for _, v := range f[11:13] {
		t, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return s, err
		}
		s.dev += time.Duration(t) * time.Second / 100
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return s, err
	}
	s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return s, nil
}

type httpClient struct {
	base, key string
	c         *http.Client
}

func (h *httpClient) do(ctx context.Context, method, path, contentType, body string, want int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, h.base+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+h.key)
	req.Header.Set("Content-Type", contentType)
	resp, err := h.c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, resp.Body); err != nil {
		return nil, err
	}
	if resp.StatusCode != want {
		return nil, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, buf.Bytes())
	}
	return buf.Bytes(), nil
}
