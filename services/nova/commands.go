package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	sandboxservice "github.com/novaflow/nova/services/sandbox/service"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/config"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/health"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/llm/scripted"
	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/pkg/valueref"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
	"github.com/novaflow/nova/services/code-generator/generator"
	"github.com/novaflow/nova/services/code-validator/validator"
	"github.com/novaflow/nova/services/gateway/gateway"
	"github.com/novaflow/nova/services/graph-engine/engine"
	"github.com/novaflow/nova/services/input-analyzer/analyzer"
	"github.com/novaflow/nova/services/nova/client"
	"github.com/novaflow/nova/services/nova/stack"
	"github.com/novaflow/nova/services/output-validator/outputvalidator"
)

// setFlags collects repeated --set key=value.
type setFlags []string

func (s *setFlags) String() string     { return strings.Join(*s, ",") }
func (s *setFlags) Set(v string) error { *s = append(*s, v); return nil }

// parseFlags parses flags that may come before or after the positional
// arguments (nova run FILE --json and nova run --json FILE both work).
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// rulesHelp describes --llm-rules.
const rulesHelp = "scripted model rules `FILE` when no OPENAI_API_KEY/OPENAI_BASE_URL (default: the built-in rules, as in examples/scripted-llm.yaml)"

// devSettings are what nova dev and nova run read from the environment
// besides each service's configuration: where NATS and the store are (none:
// the embedded ones), where traces go, and the model API.
type devSettings struct {
	// NATSURL is a NATS server to use instead of the embedded one.
	NATSURL string `env:"NATS_URL"`
	// MongoURI is a MongoDB to keep the chain of work in instead of the
	// embedded store.
	MongoURI string `env:"MONGODB_URI"`
	// OTLPEndpoint receives traces over OTLP/HTTP; unset: none are exported.
	OTLPEndpoint string `env:"OTEL_EXPORTER_OTLP_ENDPOINT"`
	// Replicas of every stream and bucket (default 1, 3 on an embedded
	// cluster).
	Replicas int `env:"NOVA_STREAM_REPLICAS"`
	// EventEnvelopes puts the events of a workflow's start, a node's start
	// and completion and a step's completion that one transition publishes
	// in one message of the events stream; false publishes each alone.
	EventEnvelopes bool `env:"NOVA_EVENT_ENVELOPES" default:"true"`
	llm.Settings
}

// stackOptions are the stack's options from the environment: every
// service's configuration read as its binary reads it, each wrong setting
// named before anything starts.
func stackOptions(dataDir, rulesFile string, log *slog.Logger) (stack.Options, error) {
	var env devSettings
	opts := stack.Options{DataDir: dataDir, Logger: log, Engine: &engine.Settings{}, Sandbox: &sandboxservice.Config{},
		Audit: &auditservice.Config{}, InputAnalyzer: &analyzer.Config{}, CodeGenerator: &generator.Config{},
		CodeValidator: &validator.Config{}, OutputValidator: &outputvalidator.Config{}}
	for _, cfg := range []any{&env, opts.Engine, opts.Sandbox, opts.Audit, opts.InputAnalyzer, opts.CodeGenerator, opts.CodeValidator,
		opts.OutputValidator} {
		if err := config.Load(cfg, nil); err != nil {
			return opts, err
		}
	}
	if env.Replicas < 0 {
		return opts, fmt.Errorf("NOVA_STREAM_REPLICAS=%d: want a positive number of replicas", env.Replicas)
	}
	if _, err := opts.Engine.Config(1); err != nil {
		return opts, err
	}
	if opts.Sandbox.NodeModules == "" {
		opts.Sandbox.NodeModules = stack.FindNodeModules()
	}
	opts.NATSURL, opts.MongoURI, opts.OTLPEndpoint, opts.Replicas = env.NATSURL, env.MongoURI, env.OTLPEndpoint, env.Replicas
	opts.SingleEvents = !env.EventEnvelopes
	opts.LLM = stack.LLMOptions{APIKey: env.APIKey, BaseURL: env.BaseURL, APIVersion: env.APIVersion}
	prices, err := llm.ParsePrices(env.Prices, llm.DefaultPrices())
	if err != nil {
		return opts, fmt.Errorf("NOVA_LLM_PRICES: %w", err)
	}
	opts.LLM.Prices = prices
	if opts.LLM.APIKey != "" || opts.LLM.BaseURL != "" {
		return opts, nil
	}
	load := stack.DefaultRules
	if rulesFile != "" {
		load = func() (scripted.Rules, error) { return scripted.LoadRules(rulesFile) }
	}
	rules, err := load()
	if err != nil {
		return opts, fmt.Errorf("scripted model rules: %w", err)
	}
	opts.LLM.ScriptedRules = &rules
	return opts, nil
}

// jsNote says where JavaScript nodes find their packages, or how to give
// them some.
func jsNote(opts stack.Options) string {
	if p := cmp.Or(opts.Sandbox.NodeModules, stack.FindNodeModules()); p != "" {
		return "JavaScript packages (axios, cheerio): " + p
	}
	return "JavaScript packages (axios, cheerio): none found; JavaScript nodes run without them (set " +
		stack.NodeModulesEnv + " to a node_modules directory holding them, e.g. after npm ci in services/sandbox/jsrunner/runtime)"
}

// semanticNote says that the code cache's semantic level is on, and with
// what; "" when it is off.
func semanticNote(opts stack.Options) string {
	if opts.Engine == nil || !opts.Engine.SemanticSettings.Enabled {
		return ""
	}
	sem := opts.Engine.SemanticSettings
	if !sem.Enabled {
		return ""
	}
	note := fmt.Sprintf("code cache: semantic level on (%s embeddings, similarity >= %v)", sem.EmbeddingModel, sem.Similarity)
	if opts.LLM.ScriptedRules != nil && opts.LLM.APIKey == "" && opts.LLM.BaseURL == "" {
		note += ", embeddings SCRIPTED (hashed words, not a model's)"
	}
	return note
}

// modelNote says which model answers the AI nodes, so that scripted output
// is never taken for a real model's.
func modelNote(opts stack.Options) string {
	switch {
	case opts.LLM.BaseURL != "":
		return "model API " + opts.LLM.BaseURL
	case opts.LLM.APIKey != "":
		return "model API: OpenAI"
	case opts.LLM.ScriptedRules != nil:
		return "model: SCRIPTED (offline rules, not a real model; set OPENAI_API_KEY or OPENAI_BASE_URL for a real one)"
	default:
		return "model: none configured (AI nodes fail; set OPENAI_API_KEY or OPENAI_BASE_URL, or --llm-rules)"
	}
}

// devFlags are nova dev's flags.
type devFlags struct {
	dataDir, rules, gatewayAddr, pprofAddr string
	natsPort, mongoPort, cluster           int
	// sandboxWorkers is -1 when the flag is not given (the variable, or
	// one per CPU).
	sandboxWorkers int
	zygoteIdle     time.Duration
	noAuth         bool
}

func cmdDev(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, ok := parseDevFlags(args, stderr)
	if !ok {
		return exitInvalid
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	opts, localKey, err := devStackOptions(f, log)
	if err != nil {
		fmt.Fprintf(stderr, "nova dev: %v\n", err)
		return exitInvalid
	}
	s, err := stack.Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(stderr, "nova dev: %v\n", err)
		return exitFailed
	}
	removeStoreAddress, err := publishDevStore(ctx, s, opts)
	if err != nil {
		// nova rerun, chain and pin then need MONGODB_URI or --data-dir.
		fmt.Fprintf(stderr, "nova dev: %v; nova rerun, chain and pin will not find its store through NATS\n", err)
		removeStoreAddress = func() {}
	}
	if f.pprofAddr != "" {
		stopPprof, err := servePprof(ctx, f.pprofAddr)
		if err != nil {
			removeStoreAddress()
			_ = s.Close()
			fmt.Fprintf(stderr, "nova dev: --pprof: %v\n", err)
			return exitInvalid
		}
		defer stopPprof()
		fmt.Fprintf(stdout, "  Go profiles http://%s/debug/pprof/\n", f.pprofAddr)
	}
	idle := make(chan struct{})
	go func() { defer close(idle); returnMemoryWhenIdle(ctx) }()
	defer func() { <-idle }() // every return below comes after ctx ended
	printDevRunning(stdout, s, opts, localKey, f.noAuth)
	<-ctx.Done()
	removeStoreAddress()
	if err := s.Close(); err != nil {
		fmt.Fprintf(stderr, "nova dev: stop: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// parseDevFlags reads nova dev's flags and refuses, on stderr, values it
// cannot run with; false means exit with exitInvalid.
func parseDevFlags(args []string, stderr io.Writer) (devFlags, bool) {
	var f devFlags
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.dataDir, "data-dir", "./.nova", "directory of the embedded NATS and MongoDB-compatible store")
	fs.IntVar(&f.natsPort, "nats-port", 4222, "port of the embedded NATS server")
	fs.IntVar(&f.mongoPort, "mongo-port", 27017, "port of the embedded MongoDB-compatible store")
	fs.StringVar(&f.rules, "llm-rules", "", rulesHelp)
	fs.IntVar(&f.cluster, "cluster", 0, "run `N` (3 or more) clustered NATS servers on ports nats-port, +1, ... with 3 replicas of every stream, instead of one server")
	fs.StringVar(&f.gatewayAddr, "gateway-addr", stack.DefaultGatewayAddr, "`address` of the HTTP API (port 0 picks a free one; \"off\" runs no gateway)")
	fs.StringVar(&f.pprofAddr, "pprof", "", "serve Go's profiles of nova dev (net/http/pprof) at `address`, e.g. 127.0.0.1:6060")
	fs.DurationVar(&f.zygoteIdle, "zygote-idle", 5*time.Minute, "stop the sandbox's full Python zygote (pandas, numpy, ...: about 100 MiB) after this long without a program that needs it; the next one starts it again (0: keep it)")
	fs.IntVar(&f.sandboxWorkers, "sandbox-workers", -1, "programs the sandbox runs at once (default: $NOVA_SANDBOX_WORKERS, else one per CPU nova dev may use)")
	fs.BoolVar(&f.noAuth, "no-auth", false, "serve the HTTP API without API keys (local development only: anyone who reaches the port may do anything)")
	if _, err := parseFlags(fs, args); err != nil {
		return f, false
	}
	if f.sandboxWorkers == 0 || f.sandboxWorkers < -1 {
		fmt.Fprintf(stderr, "nova dev: --sandbox-workers %d: want 1 or more programs at once (leave it out for one per CPU)\n", f.sandboxWorkers)
		return f, false
	}
	if f.zygoteIdle < 0 {
		fmt.Fprintf(stderr, "nova dev: --zygote-idle %s: want a duration of 0 or more (0 keeps the zygote)\n", f.zygoteIdle)
		return f, false
	}
	if f.cluster == 1 || f.cluster == 2 || f.cluster < 0 {
		fmt.Fprintf(stderr, "nova dev: --cluster %d: a NATS cluster needs 3 or more servers (a majority must survive losing one)\n", f.cluster)
		return f, false
	}
	return f, true
}

// devStackOptions are the options of the stack nova dev runs, and the admin
// key made for this run when its gateway needs one.
func devStackOptions(f devFlags, log *slog.Logger) (stack.Options, string, error) {
	opts, err := stackOptions(f.dataDir, f.rules, log)
	if err != nil {
		return opts, "", err
	}
	if f.cluster > 0 && opts.NATSURL != "" {
		return opts, "", fmt.Errorf("--cluster runs embedded NATS servers, but NATS_URL points at %s; unset one", opts.NATSURL)
	}
	opts.NATSPort, opts.MongoPort, opts.NATSCluster = f.natsPort, f.mongoPort, f.cluster
	opts.Sandbox.Warm = true
	opts.Sandbox.ZygoteIdle = f.zygoteIdle
	if f.sandboxWorkers > 0 {
		opts.Sandbox.Workers = f.sandboxWorkers
	}
	var localKey string
	if f.gatewayAddr != "off" {
		if localKey, err = devGateway(&opts, f.gatewayAddr, f.noAuth); err != nil {
			return opts, "", err
		}
	}
	return opts, localKey, nil
}

// printDevRunning says what nova dev runs, where to reach it and how to
// start a workflow on it.
func printDevRunning(stdout io.Writer, s *stack.Stack, opts stack.Options, localKey string, noAuth bool) {
	fmt.Fprintf(stdout, "NOVA dev server running (%s)\n", strings.Join(s.Modules(), ", "))
	if opts.Sandbox != nil {
		how := "one per CPU; --sandbox-workers or NOVA_SANDBOX_WORKERS to change"
		if opts.Sandbox.Workers > 0 {
			how = "as set"
		}
		fmt.Fprintf(stdout, "  sandbox  %d programs at once (%s)\n", opts.Sandbox.RunWorkers(), how)
	}
	if opts.Engine != nil {
		how := "two per CPU, at least 8; NOVA_WORKERS to change"
		if opts.Engine.Workers > 0 {
			how = "as set"
		}
		fmt.Fprintf(stdout, "  engine   %d events at once per consumer (%s)\n", opts.Engine.RunWorkers(), how)
	}
	if u := s.GatewayURL(); u != "" {
		switch {
		case noAuth:
			fmt.Fprintf(stdout, "  HTTP API %s (no authentication: never expose this port)\n  console: %s/\n", u, u)
		case localKey != "":
			// The key rides in the link's fragment, which a browser never sends.
			fmt.Fprintf(stdout, "  HTTP API %s\n  NOVA_API_KEY=%s (admin; made for this run, shown once)\n  console: %s/#key=%s\n",
				u, localKey, u, localKey)
		default:
			fmt.Fprintf(stdout, "  HTTP API %s (keys from %s)\n  console: %s/ (sign in with a key)\n", u, os.Getenv(gatewayKeysEnv), u)
		}
	}
	fmt.Fprintf(stdout, "  %s\n", modelNote(opts))
	if n := semanticNote(opts); n != "" {
		fmt.Fprintf(stdout, "  %s\n", n)
	}
	fmt.Fprintf(stdout, "  %s\n", jsNote(opts))
	if c := s.Infra(); c != nil && c.Cluster != nil {
		fmt.Fprintf(stdout, "  NATS cluster %s: %d servers, %d replicas of every stream, KV bucket and object store\n",
			devstack.ClusterName, c.Cluster.Size(), s.Replicas())
	}
	fmt.Fprintf(stdout, "  NATS_URL=%s\n  MONGODB_URI=%s\n", s.NATSURL(), s.MongoURI())
	if u := s.GatewayURL(); u != "" {
		auth := ` -H "Authorization: Bearer $NOVA_API_KEY"`
		if noAuth {
			auth = ""
		}
		fmt.Fprintf(stdout, "Start a workflow with curl%s %s/v1/executions -d '{\"workflow\": \"NAME\", \"context\": {...}}',\n", auth, u)
		fmt.Fprintf(stdout, "or by publishing %s on %s; press Ctrl-C to stop.\n", bus.TypeWorkflowStart, bus.CommandSubject(bus.AgentGraphEngine))
	} else {
		fmt.Fprintf(stdout, "Start a workflow by publishing %s on %s; press Ctrl-C to stop.\n",
			bus.TypeWorkflowStart, bus.CommandSubject(bus.AgentGraphEngine))
	}
}

// servePprof serves Go's profiles at addr until stop is called.
func servePprof(ctx context.Context, addr string) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	health.HandlePprof(mux)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}, nil
}

// gatewayKeysEnv names the keys file nova dev's gateway accepts instead of
// a key made for the run.
const gatewayKeysEnv = "NOVA_GATEWAY_KEYS_FILE"

// devGateway adds the gateway to the modules nova dev runs, with the keys
// of NOVA_GATEWAY_KEYS_FILE, or none (noAuth), or else a new admin key
// made for this run and returned to be shown.
func devGateway(opts *stack.Options, addr string, noAuth bool) (string, error) {
	opts.Modules = append(stack.DefaultModules(opts.LLM), stack.Gateway)
	opts.Gateway.Addr, opts.Gateway.NoAuth = addr, noAuth
	var settings gateway.Settings
	if err := config.Load(&settings, nil); err != nil {
		return "", err
	}
	opts.Gateway.Limits, opts.Gateway.CORSOrigins, opts.Gateway.JaegerURL = settings.Limits(), settings.Origins(), settings.JaegerURL
	if noAuth {
		return "", nil
	}
	if f := os.Getenv(gatewayKeysEnv); f != "" {
		keys, err := gateway.LoadKeys(f)
		if err != nil {
			return "", err
		}
		opts.Gateway.Keys = keys
		return "", nil
	}
	key, keys, err := gateway.LocalKey("nova-dev")
	if err != nil {
		return "", err
	}
	opts.Gateway.Keys = keys
	return key, nil
}

// runResult is what `nova run --json` prints.
type runResult struct {
	ExecutionID string          `json:"execution_id"`
	Status      string          `json:"status"`
	Context     json.RawMessage `json:"context"`
	Path        []string        `json:"path"`
	Nodes       []runNodeResult `json:"nodes"`
	Error       string          `json:"error"`
	// What the execution's model calls cost (the price table's estimate).
	CostUSD    float64 `json:"cost_usd"`
	ModelCalls int32   `json:"model_calls"`
}

type runNodeResult struct {
	ID         string  `json:"id"`
	Status     string  `json:"status"`
	Attempts   int32   `json:"attempts"`
	Error      string  `json:"error"`
	CostUSD    float64 `json:"cost_usd"`
	ModelCalls int32   `json:"model_calls"`
}

// runFlags are nova run's flags and its workflow file.
type runFlags struct {
	file                        string
	sets                        setFlags
	contextFile, dataDir, rules string
	asJSON, withChain, verbose  bool
	remote, progress, detach    bool
	timeout                     time.Duration
}

// runServices are the bus and audit store nova run starts its workflow
// with; release closes them and whatever was started for them.
type runServices struct {
	bus   *bus.Bus
	store *chainstore.Store
	// natsEnv is the NATS_URL=... another nova command needs to reach
	// the bus: "" when it is the environment's.
	natsEnv string
	release func()
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, ok := parseRunFlags(args, stdout, stderr)
	if !ok {
		return exitInvalid
	}
	// With --remote, a name that is no file is a registered workflow's.
	byName := f.remote && isRegisteredName(f.file)
	var def *novav1.WorkflowDefinition
	if !byName {
		var err error
		if def, err = workflow.Load(f.file, workflow.ValidateOptions{AllowPrompt: true}); err != nil {
			fmt.Fprintf(stderr, "nova run: %v\n", err)
			return exitInvalid
		}
	}
	initial, err := initialContext(f.contextFile, f.sets)
	if err != nil {
		fmt.Fprintf(stderr, "nova run: %v\n", err)
		return exitInvalid
	}

	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	var svc runServices
	var code int
	if f.remote {
		svc, code = connectRunRemote(ctx, f.withChain, stderr)
	} else {
		svc, code = startRunStack(ctx, f, def, stderr)
	}
	if code != exitOK {
		return code
	}
	defer svc.release()
	if byName {
		if def, err = registeredDefinition(ctx, svc.bus, f.file); err != nil {
			fmt.Fprintf(stderr, "nova run: %v\n", err)
			return exitFailed
		}
		if def == nil {
			fmt.Fprintf(stderr, "nova run: %q is neither a file nor a workflow registered at %s (nova register FILE registers one)\n",
				f.file, svc.bus.Conn().ConnectedUrl())
			return exitInvalid
		}
	}
	return runAndReport(ctx, f, def, byName, initial, svc, stdout, stderr)
}

// isRegisteredName tells whether nova run's argument names a registered
// workflow rather than a file: there is no such file, and it is a name
// the registry can hold.
func isRegisteredName(arg string) bool {
	if _, err := os.Stat(arg); !errors.Is(err, os.ErrNotExist) {
		return false
	}
	return execution.ValidKey(arg)
}

// parseRunFlags reads nova run's flags and its one workflow file; false
// means exit with exitInvalid, having said why on stderr.
func parseRunFlags(args []string, stdout, stderr io.Writer) (runFlags, bool) {
	var f runFlags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(&f.sets, "set", "initial context value key=value (JSON when valid JSON, else a string); repeatable")
	fs.StringVar(&f.contextFile, "context-file", "", "JSON object with the initial context")
	fs.BoolVar(&f.asJSON, "json", false, "print one JSON object")
	fs.BoolVar(&f.withChain, "chain", false, "also print the chain of work from the audit store")
	fs.StringVar(&f.dataDir, "data-dir", "./.nova", "directory of the embedded NATS and MongoDB-compatible store")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up waiting after this long")
	fs.BoolVar(&f.verbose, "v", false, "show the services' logs")
	fs.StringVar(&f.rules, "llm-rules", "", rulesHelp)
	fs.BoolVar(&f.remote, "remote", false, "only start the workflow and wait for it (with --detach: only start it): the services run elsewhere (needs NATS_URL; --chain reads MONGODB_URI, else nova dev's store); instead of a FILE, the name of a registered workflow")
	fs.BoolVar(&f.progress, "progress", isTerminal(stdout), "show each node as it starts and ends (default on a terminal)")
	fs.BoolVar(&f.detach, "detach", false, "with --remote: start the workflow, print its execution id and exit without waiting (nova watch ID follows it)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return f, false
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "nova run: want exactly one workflow FILE (with --remote, or the name of a registered workflow)")
		return f, false
	}
	f.file = pos[0]
	switch {
	case f.detach && !f.remote:
		// The services nova run starts itself would stop when it exits.
		fmt.Fprintln(stderr, "nova run: --detach needs --remote: only a running system (nova dev, a deployment at NATS_URL) can run the workflow after nova run exits")
		return f, false
	case f.detach && f.withChain:
		fmt.Fprintln(stderr, "nova run: --detach does not wait for the end, so it has no chain of work to print; run nova chain ID once the execution ended")
		return f, false
	}
	return f, true
}

// connectRunRemote connects to the services of a deployment elsewhere
// (--remote). Every failure is the user's setup: exitInvalid.
func connectRunRemote(ctx context.Context, withChain bool, stderr io.Writer) (runServices, int) {
	var b *bus.Bus
	var st *chainstore.Store
	var err error
	if os.Getenv("NATS_URL") == "" {
		err = errors.New("--remote needs NATS_URL")
	} else {
		b, st, err = connectRemote(ctx, withChain)
	}
	if err != nil {
		fmt.Fprintf(stderr, "nova run: %v\n", err)
		return runServices{}, exitInvalid
	}
	release := func() {
		b.Close()
		if st != nil {
			st.Close(context.WithoutCancel(ctx))
		}
	}
	return runServices{bus: b, store: st, release: release}, exitOK
}

// startRunStack starts the services in this process for one run of def,
// their logs shown only with -v.
func startRunStack(ctx context.Context, f runFlags, def *novav1.WorkflowDefinition, stderr io.Writer) (runServices, int) {
	logOut := io.Discard
	if f.verbose {
		logOut = stderr
	}
	opts, err := stackOptions(f.dataDir, f.rules, slog.New(slog.NewTextHandler(logOut, nil)))
	if err != nil {
		fmt.Fprintf(stderr, "nova run: %v\n", err)
		return runServices{}, exitInvalid
	}
	// One workflow and gone: warm zygotes would cost their start-up and
	// memory for programs that run once (nova dev keeps them).
	opts.Sandbox.Warm = false
	// Only a workflow that calls a model needs to be told which one answers.
	if hasPrompt(def) {
		fmt.Fprintf(stderr, "nova run: %s\n", modelNote(opts))
		if n := semanticNote(opts); n != "" {
			fmt.Fprintf(stderr, "nova run: %s\n", n)
		}
	}
	s, err := stack.Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(stderr, "nova run: %v\n", err)
		return runServices{}, exitFailed
	}
	b, err := s.Connect(ctx, "nova-cli")
	if err != nil {
		s.Close()
		fmt.Fprintf(stderr, "nova run: %v\n", err)
		return runServices{}, exitFailed
	}
	release := func() {
		b.Close()
		s.Close()
	}
	return runServices{bus: b, store: s.Store, natsEnv: "NATS_URL=" + s.NATSURL(), release: release}, exitOK
}

// runAndReport starts def with initial, waits for it to end (showing its
// progress when asked), prints the result and, with --chain, its chain of
// work. It exits exitOK only when the execution succeeded. With --detach it
// only starts it, prints its execution id and exits exitOK.
func runAndReport(ctx context.Context, f runFlags, def *novav1.WorkflowDefinition, byName bool, initial jsonvalue.Object,
	svc runServices, stdout, stderr io.Writer) int {
	values, err := valueref.Open(ctx, svc.bus.JetStream(), 0, 0)
	if err != nil {
		fmt.Fprintf(stderr, "nova run: %v\n", err)
		return exitFailed
	}
	c := client.New(svc.bus, values)
	defer c.Close()
	var exec *client.Execution
	if byName {
		// The engine runs the registration it holds when the start comes.
		exec, err = c.Start(ctx, nil, def.GetName(), initial)
	} else {
		exec, err = c.Start(ctx, def, "", initial)
	}
	if err != nil {
		fmt.Fprintf(stderr, "nova run: %v\n", err)
		return exitFailed
	}
	if f.detach {
		return printDetached(stdout, f.asJSON, exec.ID)
	}
	// A wait for a signal is said at once, with the command that sends
	// it: otherwise nova run only waits, silent, for as long as the node.
	stopWaits, err := svc.bus.Watch(ctx, "waits of "+exec.ID, bus.StreamEvents,
		jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.EventSubject(exec.ID, bus.KindNodeWaiting)}},
		func(_ jetstream.Msg, ev *event.Event) {
			var nw novav1.NodeWaiting
			if bus.Decode(*ev, &nw) == nil && nw.GetKind() == "signal" {
				waitNotice(stderr, exec.ID, def, &nw, svc.natsEnv, f.timeout)
			}
		})
	if err != nil {
		fmt.Fprintf(stderr, "nova run: %v\n", err)
		return exitFailed
	}
	defer stopWaits()
	var shown *progressPrinter
	if f.progress && !f.asJSON {
		shown = newProgressPrinter(stdout, nodeIDs(def))
		stop, err := c.Follow(ctx, exec.ID, shown.print)
		if err != nil {
			fmt.Fprintf(stderr, "nova run: %v\n", err)
			return exitFailed
		}
		defer stop()
	}
	wc, err := exec.Wait(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "nova run: %v\n", err)
		return exitFailed
	}
	if shown != nil {
		shown.wait(2 * time.Second)
	}
	res := toRunResult(wc)
	if f.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		_ = enc.Encode(res)
	} else {
		printRun(stdout, def, res)
	}
	if f.withChain {
		if err := c.WaitConsumerIdle(ctx, bus.StreamEvents, auditservice.Consumer); err != nil {
			fmt.Fprintf(stderr, "nova run: %v\n", err)
			return exitFailed
		}
		if err := printChain(ctx, stdout, svc.store, res.ExecutionID, f.asJSON); err != nil {
			fmt.Fprintf(stderr, "nova run: %v\n", err)
			return exitFailed
		}
	}
	if res.Status != execution.StatusSucceeded {
		return exitFailed
	}
	return exitOK
}

// printDetached prints the id of an execution nova run --detach started,
// alone on its line (ID=$(nova run --remote --detach FILE) keeps it), or
// with --json as {"execution_id": ...}.
func printDetached(stdout io.Writer, asJSON bool, id string) int {
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(struct {
			ExecutionID string `json:"execution_id"`
		}{id})
	} else {
		fmt.Fprintln(stdout, id)
	}
	return exitOK
}

func nodeIDs(def *novav1.WorkflowDefinition) []string {
	ids := make([]string, len(def.Nodes))
	for i, n := range def.Nodes {
		ids[i] = n.Id
	}
	return ids
}

func hasPrompt(def *novav1.WorkflowDefinition) bool {
	for _, n := range def.Nodes {
		if n.Prompt != "" {
			return true
		}
	}
	return false
}

// connectRemote connects to a running deployment at NATS_URL (default nova
// dev's) as a producer, with the NATS credentials of the environment
// (NATS_USER, NATS_CREDS, ...), and to its audit store when the chain is
// wanted: MONGODB_URI's, else the one the nova dev there names.
func connectRemote(ctx context.Context, withChain bool) (*bus.Bus, *chainstore.Store, error) {
	var common service.Common
	if err := config.Load(&common, nil); err != nil {
		return nil, nil, err
	}
	natsOpts, err := common.NATSOptions()
	if err != nil {
		return nil, nil, err
	}
	b, err := bus.Connect(ctx, common.NATSURL, bus.WithName("nova-cli"), bus.WithNATSOptions(natsOpts...))
	if err != nil {
		return nil, nil, err
	}
	if !withChain {
		return b, nil, nil
	}
	uri := os.Getenv("MONGODB_URI")
	if uri == "" {
		// nova dev names its embedded store on its NATS server.
		if uri, _, err = devStoreURI(ctx); err != nil || uri == "" {
			b.Close()
			return nil, nil, errors.New("--remote --chain needs MONGODB_URI: the NATS server at NATS_URL names no nova dev store")
		}
	}
	st, err := chainstore.Open(ctx, uri, cmp.Or(os.Getenv("MONGODB_DATABASE"), "nova"))
	if err != nil {
		b.Close()
		return nil, nil, err
	}
	return b, st, nil
}

// remoteNATSURL is the NATS server connectRemote connects to: NATS_URL,
// by default nova dev's.
func remoteNATSURL() string {
	var common service.Common
	if err := config.Load(&common, nil); err != nil {
		return "NATS_URL"
	}
	return common.NATSURL
}

// initialContext merges --context-file and then every --set. Values keep
// their exact JSON text (9007199254740993 stays that integer, 150.0 a float).
func initialContext(file string, sets []string) (jsonvalue.Object, error) {
	ctx := jsonvalue.Object{}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("context file: %w", err)
		}
		if ctx, err = jsonvalue.ParseObject(data); err != nil {
			return nil, fmt.Errorf("context file %s is %w", file, err)
		}
	}
	for _, kv := range sets {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--set %q: want key=value", kv)
		}
		if raw := []byte(strings.TrimSpace(v)); json.Valid(raw) {
			ctx[k] = jsonvalue.Compact(raw)
		} else if err := ctx.Set(k, v); err != nil {
			return nil, err
		}
	}
	return ctx, nil
}

func toRunResult(wc *novav1.WorkflowCompleted) runResult {
	res := runResult{
		ExecutionID: wc.ExecutionId,
		Status:      wc.Status,
		Context:     jsonvalue.MustObject(wc.GetContext()).Bytes(),
		Path:        wc.Path,
		Error:       wc.Error,
		Nodes:       []runNodeResult{},
		CostUSD:     wc.CostUsd,
		ModelCalls:  wc.ModelCalls,
	}
	if res.Path == nil {
		res.Path = []string{}
	}
	for _, n := range wc.Nodes {
		res.Nodes = append(res.Nodes, runNodeResult{ID: n.Id, Status: n.Status, Attempts: n.Attempts, Error: n.Error,
			CostUSD: n.CostUsd, ModelCalls: n.ModelCalls})
	}
	return res
}

func printRun(w io.Writer, def *novav1.WorkflowDefinition, res runResult) {
	fmt.Fprintf(w, "workflow   %s\nexecution  %s\nstatus     %s\n", def.Name, res.ExecutionID, res.Status)
	if res.Error != "" {
		fmt.Fprintf(w, "error      %s\n", res.Error)
	}
	fmt.Fprintf(w, "path       %s\n", strings.Join(res.Path, " -> "))
	if res.ModelCalls > 0 || hasPrompt(def) {
		fmt.Fprintf(w, "spend      $%.6f in %d model calls%s\n", res.CostUSD, res.ModelCalls, nodeSpend(res.Nodes))
	}
	var ctxJSON bytes.Buffer
	_ = json.Indent(&ctxJSON, res.Context, "           ", "  ")
	fmt.Fprintf(w, "context    %s\n", ctxJSON.Bytes())
}

// nodeSpend lists what each node that called a model spent: " (a $0.1, b $0.2)".
func nodeSpend(nodes []runNodeResult) string {
	var parts []string
	for _, n := range nodes {
		if n.ModelCalls > 0 {
			parts = append(parts, fmt.Sprintf("%s $%.6f", n.ID, n.CostUSD))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// cmdValidate validates a definition, and when it calls other workflows
// checks that they are registered on the deployment at NATS_URL (default
// nova dev's): one not registered is an error there; with no deployment
// reachable it says it could not check.
func cmdValidate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitInvalid
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "nova validate: want exactly one workflow FILE")
		return exitInvalid
	}
	def, err := workflow.Load(pos[0], workflow.ValidateOptions{AllowPrompt: true})
	if err != nil {
		fmt.Fprintf(stderr, "nova validate: %v\n", err)
		return exitInvalid
	}
	if refs := workflow.WorkflowRefs(def); len(refs) > 0 {
		if code := checkCalls(ctx, pos[0], def, stderr); code != exitOK {
			return code
		}
	}
	fmt.Fprintf(stdout, "%s: workflow %q is valid (%d nodes, %d edges)\n", pos[0], def.Name, len(def.Nodes), len(def.Edges))
	return exitOK
}

// callCheckWait bounds how long nova validate tries to reach a deployment
// to check the workflows a definition calls.
const callCheckWait = 3 * time.Second

// checkCalls checks that the workflows def calls are registered on the
// deployment at NATS_URL; unreachable, it says on stderr that it could
// not check, and passes.
func checkCalls(ctx context.Context, file string, def *novav1.WorkflowDefinition, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, callCheckWait)
	defer cancel()
	calls := strings.Join(slices.Compact(slices.Sorted(slices.Values(workflow.WorkflowRefs(def)))), ", ")
	b, _, err := connectRemote(ctx, false)
	if err != nil {
		fmt.Fprintf(stderr, "nova validate: %s: could not check that the workflows it calls (%s) are registered: no deployment reachable at %s (NATS_URL): %v\n",
			file, calls, remoteNATSURL(), err)
		return exitOK
	}
	defer b.Close()
	missing, err := unregisteredCalls(ctx, b, def)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "nova validate: %s: could not check that the workflows it calls (%s) are registered: %v\n", file, calls, err)
		return exitOK
	case missing != "":
		fmt.Fprintf(stderr, "nova validate: %s: %s\n", file, missing)
		return exitInvalid
	}
	return exitOK
}

func cmdChain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "export" {
		return cmdChainExport(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("chain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	store := addStoreFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	fromFile := fs.String("from-file", "", "read the executions from `FILE`, an export of nova chain export, instead of the store")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitInvalid
	}
	if *fromFile != "" {
		if len(pos) > 1 {
			fmt.Fprintln(stderr, "nova chain --from-file: want at most one EXECUTION_ID (none prints every execution of the file)")
			return exitInvalid
		}
		id := "" // every execution of the file
		if len(pos) == 1 {
			id = pos[0]
		}
		return chainFromFile(*fromFile, id, *asJSON, stdout, stderr)
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "nova chain: want exactly one EXECUTION_ID")
		return exitInvalid
	}
	st, release, _, err := store.open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "nova chain: %v\n", err)
		return exitFailed
	}
	defer release()
	if err := printChain(ctx, stdout, st, pos[0], *asJSON); err != nil {
		fmt.Fprintf(stderr, "nova chain: %v\n", err)
		if errors.Is(err, chainstore.ErrNotFound) {
			return exitInvalid
		}
		return exitFailed
	}
	return exitOK
}
