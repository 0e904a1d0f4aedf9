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
//     audit service idle before each phase; the medians compared.
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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
	"github.com/novaflow/nova/services/gateway/gateway"
	"github.com/novaflow/nova/services/graph-engine/engine"
	"github.com/novaflow/nova/services/nova/client"
	"github.com/novaflow/nova/services/nova/internal/loadgen"
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
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("benchgateway", flag.ExitOnError)
	fs.StringVar(&cfg.bin, "bin", "bin", "directory of the nova binary (make build)")
	fs.IntVar(&cfg.latency, "latency", 100, "workflows one at a time, each way")
	fs.IntVar(&cfg.starts, "starts", 500, "starts per throughput phase (the audit service records each before the next phase; it slows as its store grows)")
	fs.IntVar(&cfg.rounds, "rounds", 3, "throughput phases each way, alternately")
	fs.IntVar(&cfg.inFlight, "in-flight", 32, "starts in flight in the throughput phases")
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
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = loadgen.FreePort(); err != nil {
			return err
		}
	}
	gw := fmt.Sprintf("http://127.0.0.1:%d", ports[2])
	dev := &loadgen.Proc{Name: "nova dev", Path: filepath.Join(bin, "nova"), Log: filepath.Join(dir, "nova-dev.log"),
		Args: []string{"dev", "--data-dir", filepath.Join(dir, "data"), "--nats-port", fmt.Sprint(ports[0]),
			"--mongo-port", fmt.Sprint(ports[1]), "--gateway-addr", strings.TrimPrefix(gw, "http://")},
		// The key's rate limit is lifted: the benchmark measures the path,
		// not the limiter's refusals.
		Env: loadgen.BaseEnv("NOVA_GATEWAY_KEYS_FILE="+keysFile, "NOVA_GATEWAY_RATE=1000000", "NOVA_GATEWAY_BURST=1000000")}
	if err := dev.Start(); err != nil {
		return err
	}
	defer dev.Stop()
	url := fmt.Sprintf("nats://127.0.0.1:%d", ports[0])
	if err := loadgen.WaitDial(ctx, url); err != nil {
		return err
	}
	if err := loadgen.WaitDial(ctx, strings.TrimPrefix(gw, "http://")); err != nil {
		return err
	}
	b, err := bus.Connect(ctx, url, bus.WithName("benchgateway"), bus.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	defer b.Close()
	if err := loadgen.WaitServices(ctx, b.JetStream()); err != nil {
		return err
	}
	h := &httpClient{base: gw, key: key, c: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	for _, def := range []string{codeWorkflow, emptyWorkflow} {
		if _, err := h.do(ctx, "POST", "/v1/workflows", "application/yaml", def, http.StatusCreated); err != nil {
			return err
		}
	}
	c := client.New(b, nil)
	fmt.Printf("benchgateway: nova dev (pid %d) with its gateway at %s\n\n", dev.Pid(), gw)

	// Latency, alternately, after a warm-up of each.
	viaNATS := func() (time.Duration, error) {
		start := time.Now()
		e, err := c.Start(ctx, nil, "bench-chain-3", map[string]any{"n": 1})
		if err != nil {
			return 0, err
		}
		wc, err := e.Wait(ctx)
		if err != nil {
			return 0, err
		}
		if wc.GetStatus() != "succeeded" {
			return 0, fmt.Errorf("execution %s %s: %s", wc.GetExecutionId(), wc.GetStatus(), wc.GetError())
		}
		return time.Since(start), nil
	}
	viaHTTP := func() (time.Duration, error) {
		start := time.Now()
		body, err := h.do(ctx, "POST", "/v1/executions?wait=60s", "application/json",
			`{"workflow": "bench-chain-3", "context": {"n": 1}}`, http.StatusOK)
		if err != nil {
			return 0, err
		}
		var done struct{ Status string }
		if err := json.Unmarshal(body, &done); err != nil || done.Status != "succeeded" {
			return 0, fmt.Errorf("completion %s", body)
		}
		return time.Since(start), nil
	}
	for range 5 {
		if _, err := viaNATS(); err != nil {
			return err
		}
		if _, err := viaHTTP(); err != nil {
			return err
		}
	}
	var natsLat, httpLat []time.Duration
	for range cfg.latency {
		d, err := viaNATS()
		if err != nil {
			return err
		}
		natsLat = append(natsLat, d)
		if d, err = viaHTTP(); err != nil {
			return err
		}
		httpLat = append(httpLat, d)
	}

	// Starts per second.
	empty := func(i int) *novav1.StartWorkflow {
		initial, _ := jsonvalue.ObjectOf(map[string]any{"n": i})
		return &novav1.StartWorkflow{ExecutionId: uuid.NewString(), WorkflowName: "bench-empty", Context: initial.Proto()}
	}
	publish := func(ctx context.Context, i int) error {
		s := empty(i)
		return b.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), "start-"+s.ExecutionId, bus.TypeWorkflowStart, s,
			map[string]string{"executionid": s.ExecutionId})
	}
	post := func(ctx context.Context, i int) error {
		_, err := h.do(ctx, "POST", "/v1/executions", "application/json",
			fmt.Sprintf(`{"workflow": "bench-empty", "context": {"n": %d}}`, i), http.StatusAccepted)
		return err
	}
	idle := func() error {
		if err := loadgen.WaitIdle(ctx, b.JetStream(), bus.StreamCommands, engine.ConsumerCommands); err != nil {
			return err
		}
		// The audit service records what the last phase started; it may
		// lag the engine by minutes on a busy machine.
		for range 5 {
			if err = loadgen.WaitIdle(ctx, b.JetStream(), bus.StreamEvents, auditservice.Consumer); err == nil {
				return nil
			}
		}
		return err
	}
	var natsRates, httpRates []float64
	for range cfg.rounds {
		for _, p := range []struct {
			start func(context.Context, int) error
			rates *[]float64
		}{{publish, &natsRates}, {post, &httpRates}} {
			if err := idle(); err != nil {
				return err
			}
			rate, err := startRate(ctx, cfg.starts, cfg.inFlight, p.start)
			if err != nil {
				return err
			}
			*p.rates = append(*p.rates, rate)
		}
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LATENCY, 3-NODE CODE WORKFLOW, ONE AT A TIME\tRUNS\tP50\tP90")
	fmt.Fprintf(tw, "NATS: start event, then its completion (baseline)\t%d\t%s\t%s\n", len(natsLat),
		round(loadgen.Percentile(natsLat, 0.5)), round(loadgen.Percentile(natsLat, 0.9)))
	fmt.Fprintf(tw, "HTTP: POST /v1/executions?wait\t%d\t%s\t%s\n", len(httpLat),
		round(loadgen.Percentile(httpLat, 0.5)), round(loadgen.Percentile(httpLat, 0.9)))
	fmt.Fprintf(tw, "added by the gateway (p50 HTTP - p50 NATS)\t\t%s\t\n",
		round(loadgen.Percentile(httpLat, 0.5)-loadgen.Percentile(natsLat, 0.5)))
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "STARTS PER SECOND, %d IN FLIGHT, START-TO-END WORKFLOW\tSTARTS\tEACH ROUND\tMEDIAN\n", cfg.inFlight)
	fmt.Fprintf(tw, "NATS: publish the start event (baseline)\t%d\t%s\t%.0f/s\n", cfg.starts, rates(natsRates), median(natsRates))
	fmt.Fprintf(tw, "HTTP: POST /v1/executions (202)\t%d\t%s\t%.0f/s\n", cfg.starts, rates(httpRates), median(httpRates))
	fmt.Fprintf(tw, "gateway / NATS (medians)\t\t\t%.0f%%\n", 100*median(httpRates)/median(natsRates))
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

// startRate starts n workflows, inFlight at a time, and returns how many
// were accepted per second.
func startRate(ctx context.Context, n, inFlight int, start func(context.Context, int) error) (float64, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, inFlight)
	began := time.Now()
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
	elapsed := time.Since(began)
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return float64(n) / elapsed.Seconds(), nil
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
