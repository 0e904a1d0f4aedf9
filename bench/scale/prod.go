package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/novaflow/nova/bench/loadgen"
	"github.com/novaflow/nova/pkg/devstack"
)

// prodShape is the production shape: the NATS server, the store, the audit
// service, engines graph engines and sandboxes sandboxes, each a process.
type prodShape struct {
	engines, sandboxes int
}

func (s prodShape) String() string {
	return fmt.Sprintf("%d engine%s + %d sandbox%s", s.engines, plural(s.engines, "s"), s.sandboxes, plural(s.sandboxes, "es"))
}

func plural(n int, suffix string) string {
	if n == 1 {
		return ""
	}
	return suffix
}

// parseShapes reads "E:S,E:S".
func parseShapes(text string) ([]prodShape, error) {
	var out []prodShape
	for f := range strings.SplitSeq(text, ",") {
		e, s, ok := strings.Cut(strings.TrimSpace(f), ":")
		ne, err1 := strconv.Atoi(e)
		ns, err2 := strconv.Atoi(s)
		if !ok || err1 != nil || err2 != nil || ne < 1 || ns < 1 {
			return nil, fmt.Errorf("-prod %q: want ENGINES:SANDBOXES pairs of 1 or more, comma-separated", text)
		}
		out = append(out, prodShape{engines: ne, sandboxes: ns})
	}
	return out, nil
}

// layout gives each part of the production shape its CPUs, in the order
// NATS, store with audit, engines, sandboxes; ok is false when they do not
// fit in free CPUs (from CPU 0). With pinned false every part gets "".
type layout struct {
	nats, store string
	engines     []string
	sandboxes   []string
	used        int
}

func planLayout(cfg config, s prodShape, free int, pinned bool) (layout, bool) {
	l := layout{engines: make([]string, s.engines), sandboxes: make([]string, s.sandboxes)}
	if !pinned {
		return l, true
	}
	next := 0
	take := func(n int) string {
		r := cpuRange(next, next+n-1)
		next += n
		return r
	}
	l.nats = take(cfg.natsCores * max(cfg.natsServers, 1))
	l.store = take(1)
	for i := range l.engines {
		l.engines[i] = take(cfg.engineCores)
	}
	for i := range l.sandboxes {
		l.sandboxes[i] = take(cfg.sandboxCores)
	}
	l.used = next
	return l, next <= free
}

// splitCPUs is the i-th of n equal parts of cpus ("a-b"); cpus itself when
// it does not split so, "" for "".
func splitCPUs(cpus string, n, i int) string {
	k := countCPUs(cpus)
	if k == 0 || n <= 1 || k%n != 0 {
		return cpus
	}
	from, _, _ := strings.Cut(cpus, "-")
	a, _ := strconv.Atoi(from)
	per := k / n
	return cpuRange(a+i*per, a+(i+1)*per-1)
}

// countCPUs is the number of CPUs of "a-b" or "a" (0 for "").
func countCPUs(cpus string) int {
	if cpus == "" {
		return 0
	}
	from, to, ok := strings.Cut(cpus, "-")
	if !ok {
		return 1
	}
	a, _ := strconv.Atoi(from)
	b, _ := strconv.Atoi(to)
	return b - a + 1
}

// pin makes p run under taskset on cpus ("" leaves it as it is).
func pin(p *loadgen.Proc, cpus string) {
	if cpus == "" {
		return
	}
	p.Args = append([]string{"-c", cpus, p.Path}, p.Args...)
	p.Path = "/usr/bin/taskset"
}

// system is a started shape: the processes whose CPU is counted, by part,
// and where its NATS server is.
type system struct {
	natsURL string
	// monitors are the NATS servers' statistics endpoints (none when the
	// server runs inside nova dev).
	monitors []string
	parts    []sysPart
	procs    []*loadgen.Proc
	// pprof is each part's profile endpoint, by part name.
	pprof map[string]string
}

type sysPart struct {
	name  string
	procs []*loadgen.Proc
	// cores is the CPUs its processes are pinned to, together (0: not
	// pinned).
	cores int
}

func (s *system) stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		s.procs[i].Stop()
	}
}

// startProd starts the production shape s from the binaries in bin, with
// its data and logs under dir, each part on the CPUs of l.
func startProd(ctx context.Context, cfg config, s prodShape, l layout, dir string) (*system, error) {
	bin, err := filepath.Abs(cfg.bin)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	mongoPort, err := loadgen.FreePort()
	if err != nil {
		return nil, err
	}
	sys := &system{pprof: map[string]string{}}
	mongoURI := fmt.Sprintf("mongodb://127.0.0.1:%d/", mongoPort)
	start := func(part string, p *loadgen.Proc, cpus string) error {
		pin(p, cpus)
		if err := p.Start(); err != nil {
			return err
		}
		sys.procs = append(sys.procs, p)
		i := slices.IndexFunc(sys.parts, func(sp sysPart) bool { return sp.name == part })
		if i < 0 {
			sys.parts = append(sys.parts, sysPart{name: part})
			i = len(sys.parts) - 1
		}
		sys.parts[i].procs = append(sys.parts[i].procs, p)
		// The audit service runs on the store's CPU: its own part has none.
		if part != "audit" {
			sys.parts[i].cores += countCPUs(cpus)
		}
		return nil
	}
	fail := func(err error) (*system, error) {
		sys.stop()
		return nil, err
	}

	// One NATS server, or a cluster of -nats-servers with every stream
	// replicated on 3 of them; the CPUs of l.nats split between them.
	servers := max(cfg.natsServers, 1)
	var spec devstack.ClusterSpec
	var natsProcs []*loadgen.Proc
	if servers >= 3 {
		if spec, err = devstack.NewClusterSpec(filepath.Join(dir, "data"), 0, servers); err != nil {
			return nil, err
		}
		sys.natsURL = spec.URL()
	} else {
		port, err := loadgen.FreePort()
		if err != nil {
			return nil, err
		}
		sys.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", port)
		spec.ClientPorts = []int{port}
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	for i := range servers {
		monitor, err := loadgen.FreePort()
		if err != nil {
			return fail(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", monitor)
		sys.monitors = append(sys.monitors, "http://"+addr)
		if i == 0 {
			sys.pprof["NATS server"] = "http://" + addr
		}
		args := []string{"nats", "-dir", filepath.Join(dir, "data"), "-port", fmt.Sprint(spec.ClientPorts[i]), "-monitor", addr}
		if servers >= 3 {
			args = append(args, "-spec", string(specJSON), "-i", fmt.Sprint(i))
		}
		p := &loadgen.Proc{Name: fmt.Sprintf("NATS server %d", i), Path: self, Log: filepath.Join(dir, fmt.Sprintf("nats-%d.log", i)),
			Env: loadgen.BaseEnv(), Args: args}
		if err := start("NATS server", p, splitCPUs(l.nats, servers, i)); err != nil {
			return fail(err)
		}
		natsProcs = append(natsProcs, p)
	}
	storeProc := &loadgen.Proc{Name: "store", Path: self, Log: filepath.Join(dir, "store.log"), Env: loadgen.BaseEnv(),
		Args: []string{"store", "-dir", filepath.Join(dir, "data"), "-port", fmt.Sprint(mongoPort)}}
	if err := start("store", storeProc, l.store); err != nil {
		return fail(err)
	}
	running, cancel := loadgen.WhileAllRunning(ctx, append(natsProcs, storeProc)...)
	// A server listens on its monitor once it is current with its
	// cluster; then JetStream must answer.
	for _, m := range sys.monitors {
		if err == nil {
			err = loadgen.WaitDial(running, strings.TrimPrefix(m, "http://"))
		}
	}
	if err == nil {
		err = loadgen.WaitDial(running, fmt.Sprintf("127.0.0.1:%d", mongoPort))
	}
	if err == nil {
		err = loadgen.WaitJetStream(running, sys.natsURL)
	}
	err = loadgen.ExitedError(ctx, running, err)
	cancel()
	if err != nil {
		return fail(err)
	}

	service := func(name, part string, i int, cpus string, env ...string) error {
		health, err := loadgen.FreePort()
		if err != nil {
			return err
		}
		label := name
		if i > 0 {
			label = fmt.Sprintf("%s-%d", name, i)
		}
		p := &loadgen.Proc{Name: label, Path: filepath.Join(bin, name), Log: filepath.Join(dir, label+".log"),
			Env: loadgen.BaseEnv(append([]string{"NATS_URL=" + sys.natsURL, "MONGODB_URI=" + mongoURI,
				fmt.Sprintf("HEALTH_ADDR=127.0.0.1:%d", health), "LOG_LEVEL=warn", "NOVA_PPROF=true",
				fmt.Sprintf("NOVA_STREAM_REPLICAS=%d", min(servers, 3))}, append(env, cfg.env...)...)...)}
		if _, ok := sys.pprof[part]; !ok {
			sys.pprof[part] = fmt.Sprintf("http://127.0.0.1:%d", health)
		}
		return start(part, p, cpus)
	}
	// The audit service shares the store's CPU: it writes what the
	// store stores.
	if err := service("audit", "audit", 0, l.store); err != nil {
		return fail(err)
	}
	for i, cpus := range l.sandboxes {
		if err := service("sandbox", "sandboxes", i+1, cpus); err != nil {
			return fail(err)
		}
	}
	for i, cpus := range l.engines {
		if err := service("graph-engine", "engines", i+1, cpus); err != nil {
			return fail(err)
		}
	}
	return sys, nil
}

// natsPart runs the NATS server of the production shape in a process of
// its own (benchscale nats), as nova dev configures its embedded one, and
// serves its statistics (/varz, /jsz) and Go's profiles on -monitor, until
// it is stopped.
func natsPart(args []string) int {
	fs := flag.NewFlagSet("nats", flag.ExitOnError)
	dir := fs.String("dir", "", "data directory")
	port := fs.Int("port", 0, "client port")
	monitor := fs.String("monitor", "", "address of the statistics and profiles")
	specJSON := fs.String("spec", "", "a cluster's devstack.ClusterSpec as JSON (none: one server)")
	i := fs.Int("i", 0, "this server's index in -spec")
	_ = fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var n *devstack.NATS
	var err error
	if *specJSON == "" {
		n, err = devstack.StartNATS(ctx, devstack.Options{DataDir: *dir, NATSPort: *port, Logger: log})
	} else {
		var spec devstack.ClusterSpec
		if err = json.Unmarshal([]byte(*specJSON), &spec); err == nil {
			if n, err = devstack.StartClusterNode(spec, *i, log); err == nil {
				if err = n.WaitCurrent(ctx); err != nil {
					n.Shutdown()
				}
			}
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "nats: %v\n", err)
		return 1
	}
	defer n.Shutdown()
	srv := n.Server()
	mux := http.NewServeMux()
	serveJSON := func(path string, f func() (any, error)) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
			v, err := f()
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			_ = json.NewEncoder(w).Encode(v)
		})
	}
	serveJSON("/varz", func() (any, error) { return srv.Varz(nil) })
	serveJSON("/connz", func() (any, error) { return srv.Connz(&server.ConnzOptions{Limit: 1024}) })
	serveJSON("/jsz", func() (any, error) {
		return srv.Jsz(&server.JSzOptions{Streams: true, Consumer: true})
	})
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	l, err := net.Listen("tcp", *monitor)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nats: %v\n", err)
		return 1
	}
	go func() { _ = http.Serve(l, mux) }()
	<-ctx.Done()
	return 0
}

// storePart runs the store (FerretDB) in a process of its own (benchscale
// store) until it is stopped.
func storePart(args []string) int {
	fs := flag.NewFlagSet("store", flag.ExitOnError)
	dir := fs.String("dir", "", "data directory")
	port := fs.Int("port", 0, "MongoDB wire port")
	_ = fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m, err := devstack.StartMongo(ctx, devstack.Options{DataDir: *dir, MongoPort: *port})
	if err != nil {
		fmt.Fprintf(os.Stderr, "store: %v\n", err)
		return 1
	}
	<-ctx.Done()
	_ = m.Close()
	return 0
}

// varz is what the statistics read of the NATS server's /varz.
type varz struct {
	InMsgs  int64 `json:"in_msgs"`
	OutMsgs int64 `json:"out_msgs"`
}

// connz is what they read of its /connz: messages in and out by client.
type connz struct {
	Conns []struct {
		CID     uint64 `json:"cid"`
		Name    string `json:"name"`
		InMsgs  int64  `json:"in_msgs"`
		OutMsgs int64  `json:"out_msgs"`
	} `json:"connections"`
}

// readServers sums the messages in and out of the servers at monitors,
// and by client name.
func readServers(ctx context.Context, monitors []string) (varz, map[string]int64, error) {
	var total varz
	clients := map[string]int64{}
	for _, m := range monitors {
		var v varz
		var c connz
		if err := getJSON(ctx, m+"/varz", &v); err != nil {
			return varz{}, nil, err
		}
		if err := getJSON(ctx, m+"/connz", &c); err != nil {
			return varz{}, nil, err
		}
		total.InMsgs += v.InMsgs
		total.OutMsgs += v.OutMsgs
		for name, n := range c.byClient() {
			clients[name] += n
		}
	}
	return total, clients, nil
}

// byClient is the messages in and out of each client name's connections.
func (c connz) byClient() map[string]int64 {
	out := map[string]int64{}
	for _, x := range c.Conns {
		name := x.Name
		if name == "" {
			name = "unnamed"
		}
		out[name] += x.InMsgs + x.OutMsgs
	}
	return out
}

func getJSON(ctx context.Context, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	body, err := get(ctx, url)
	if err != nil {
		return err
	}
	defer body.Close()
	return json.NewDecoder(body).Decode(v)
}

// get is the body of a GET of url that answered 200 OK.
func get(ctx context.Context, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return resp.Body, nil
}
