package chainstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/redact"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// mongoURI is the embedded FerretDB shared by all tests; each test uses its own database.
var mongoURI string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "audit-store-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ferret, err := devstack.StartMongo(ctx, devstack.Options{DataDir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mongoURI = ferret.URI()

	code := m.Run()
	if err := ferret.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

var nonWord = regexp.MustCompile(`[^A-Za-z0-9]+`)

func dbName(t *testing.T) string {
	return strings.ToLower(nonWord.ReplaceAllString(t.Name(), "_"))
}

// openStore opens a store on a database named after the test, with indexes.
func openStore(t *testing.T, opts ...chainstore.Option) (context.Context, *chainstore.Store) {
	t.Helper()
	// A bound on a whole test that hangs; the listing's comparison of every
	// filter takes tens of seconds on FerretDB with other test binaries
	// running beside it, and more than 6 minutes with another make test
	// (and a chaos run) on the same 2 cores.
	ctx, cancel := context.WithTimeout(t.Context(), 12*time.Minute)
	t.Cleanup(cancel)
	s, err := chainstore.Open(ctx, mongoURI, dbName(t), opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if err := s.EnsureIndexes(ctx); err != nil {
		t.Fatalf("EnsureIndexes: %v", err)
	}
	return ctx, s
}

// readModes are the two ways the store finds the documents of one
// execution, both run here on FerretDB: through the execution index (what
// Open picks on FerretDB) and with queries on execution_id (on MongoDB).
var readModes = []struct {
	name string
	opt  chainstore.Option
}{
	{"index", chainstore.WithExecutionIndex(true)},
	{"queries", chainstore.WithExecutionIndex(false)},
}

func mustJSON(t *testing.T, m map[string]any) *novav1.JSONValue {
	t.Helper()
	o, err := jsonvalue.ObjectOf(m)
	if err != nil {
		t.Fatal(err)
	}
	return o.Proto()
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(t0.Add(d)) }

// run of an invoice workflow: start -> classify (an AI node with two steps) -> end.
type events struct {
	started   *novav1.WorkflowStarted
	nodes     []*novav1.NodeCompleted
	steps     []*novav1.StepCompleted
	completed *novav1.WorkflowCompleted
}

func invoiceRun(t *testing.T, id string) events {
	t.Helper()
	def := &novav1.WorkflowDefinition{
		Name: "invoice",
		Nodes: []*novav1.Node{
			{Id: "start", Type: novav1.NodeType_NODE_TYPE_START},
			{Id: "classify", Type: novav1.NodeType_NODE_TYPE_ACTION, Prompt: "classify the invoice"},
			{Id: "end", Type: novav1.NodeType_NODE_TYPE_END},
		},
		Edges: []*novav1.Edge{{From: "start", To: "classify"}, {From: "classify", To: "end"}},
	}
	return events{
		started: &novav1.WorkflowStarted{
			ExecutionId: id, WorkflowName: "invoice", Definition: def,
			Context:   mustJSON(t, map[string]any{"amount": 120.5, "db_password": "hunter2"}),
			StartedAt: at(0),
		},
		// Out of sequence order on purpose: Chain must sort.
		nodes: []*novav1.NodeCompleted{
			{
				ExecutionId: id, NodeId: "classify", NodeType: "action", Visit: 1, Sequence: 2, Status: "success",
				CodeExecuted: "context['category'] = 'travel'",
				InputContext: mustJSON(t, map[string]any{"amount": 120.5}),
				OutputResult: mustJSON(t, map[string]any{"category": "travel"}),
				AiMetadata:   mustStruct(t, map[string]any{"model": "gpt-test", "tokens_input": 300.0, "api_key": "sk-1"}),
				StartedAt:    at(time.Second), CompletedAt: at(3 * time.Second), ExecutionTimeMs: 2000,
			},
			{
				ExecutionId: id, NodeId: "start", NodeType: "start", Visit: 1, Sequence: 1, Status: "success",
				StartedAt: at(0), CompletedAt: at(time.Second),
			},
		},
		steps: []*novav1.StepCompleted{
			{
				ExecutionId: id, NodeId: "classify", Visit: 1, StepNumber: 2, StepName: "execute", AgentName: "sandbox",
				AttemptNumber: 1, StepId: "s-exec", Status: "success", SandboxId: "sbx-1",
				InputData:  mustStruct(t, map[string]any{"code": "x = 1"}),
				OutputData: mustStruct(t, map[string]any{"stdout": "ok"}),
				Timestamp:  at(2 * time.Second),
			},
			{
				ExecutionId: id, NodeId: "classify", Visit: 1, StepNumber: 1, StepName: "generate", AgentName: "code-generator",
				AttemptNumber: 1, Status: "success", ModelUsed: "gpt-test", TokensInput: 300, TokensOutput: 40, CostUsd: 0.002,
				GeneratedCode: "context['category'] = 'travel'",
				InputData:     mustStruct(t, map[string]any{"prompt": "classify", "headers": map[string]any{"Authorization": "Bearer x"}}),
				ToolCalls: func() *structpb.ListValue {
					l, err := structpb.NewList([]any{map[string]any{"name": "fetch", "token": "t-1"}})
					if err != nil {
						t.Fatal(err)
					}
					return l
				}(),
				Timestamp: at(1500 * time.Millisecond),
			},
		},
		completed: &novav1.WorkflowCompleted{
			ExecutionId: id, WorkflowName: "invoice", Status: "succeeded",
			Context: mustJSON(t, map[string]any{"amount": 120.5, "category": "travel", "db_password": "hunter2"}),
			Path:    []string{"start", "classify", "end"},
			Nodes: []*novav1.NodeSummary{
				{Id: "start", Status: "succeeded", Attempts: 1, Visits: 1},
				{Id: "classify", Status: "succeeded", Attempts: 1, Visits: 1},
			},
			StartedAt: at(0), CompletedAt: at(4 * time.Second),
		},
	}
}

func (e events) record(ctx context.Context, t *testing.T, s *chainstore.Store) {
	t.Helper()
	if err := s.RecordWorkflowStarted(ctx, e.started); err != nil {
		t.Fatalf("RecordWorkflowStarted: %v", err)
	}
	for _, st := range e.steps {
		if err := s.RecordStep(ctx, st); err != nil {
			t.Fatalf("RecordStep: %v", err)
		}
	}
	for _, n := range e.nodes {
		if err := s.RecordNode(ctx, n); err != nil {
			t.Fatalf("RecordNode: %v", err)
		}
	}
	if err := s.RecordWorkflowCompleted(ctx, e.completed); err != nil {
		t.Fatalf("RecordWorkflowCompleted: %v", err)
	}
}

func TestRecordAndReadChain(t *testing.T) {
	for _, mode := range readModes {
		t.Run(mode.name, func(t *testing.T) {
			ctx, s := openStore(t, mode.opt)
			invoiceRun(t, "exec-1").record(ctx, t, s)

			exec, err := s.Execution(ctx, "exec-1")
			if err != nil {
				t.Fatalf("Execution: %v", err)
			}
			if exec.Status != "succeeded" || exec.WorkflowName != "invoice" {
				t.Errorf("status, name = %q, %q; want succeeded, invoice", exec.Status, exec.WorkflowName)
			}
			if got := strings.Join(exec.Path, ","); got != "start,classify,end" {
				t.Errorf("path = %s", got)
			}
			if exec.DurationMs != 4000 {
				t.Errorf("duration_ms = %d, want 4000", exec.DurationMs)
			}
			if exec.StartedAt == nil || !exec.StartedAt.Equal(t0) || exec.CompletedAt == nil || !exec.CompletedAt.Equal(t0.Add(4*time.Second)) {
				t.Errorf("started_at, completed_at = %v, %v", exec.StartedAt, exec.CompletedAt)
			}
			if len(exec.Nodes) != 2 || exec.Nodes[1] != (chainstore.NodeSummaryDoc{ID: "classify", Status: "succeeded", Attempts: 1, Visits: 1}) {
				t.Errorf("nodes = %+v", exec.Nodes)
			}
			if exec.FinalContext["category"] != "travel" || exec.InitialContext["amount"] != json.Number("120.5") {
				t.Errorf("initial, final context = %v, %v", exec.InitialContext, exec.FinalContext)
			}
			if exec.Definition["name"] != "invoice" {
				t.Errorf("definition = %v", exec.Definition)
			}
			if nodes, _ := exec.Definition["nodes"].(bson.A); len(nodes) != 3 {
				t.Errorf("definition nodes = %v, want 3", exec.Definition["nodes"])
			}

			chain, err := s.Chain(ctx, "exec-1")
			if err != nil {
				t.Fatalf("Chain: %v", err)
			}
			if len(chain) != 2 || chain[0].NodeID != "start" || chain[1].NodeID != "classify" {
				t.Fatalf("chain = %+v, want start then classify", chain)
			}
			classify := chain[1]
			if classify.ID != "exec-1/classify/1" || classify.OutputResult["category"] != "travel" ||
				classify.ExecutionTime != 2000 || classify.CodeExecuted == "" || classify.Timestamp == nil {
				t.Errorf("classify = %+v", classify)
			}
			if len(chain[0].Steps) != 0 {
				t.Errorf("start has steps %+v", chain[0].Steps)
			}
			if len(classify.Steps) != 2 || classify.Steps[0].StepName != "generate" || classify.Steps[1].StepName != "execute" {
				t.Fatalf("classify steps = %+v, want generate then execute", classify.Steps)
			}
			gen, exe := classify.Steps[0], classify.Steps[1]
			if gen.ID != "exec-1/classify/1/1" || exe.ID != "exec-1/s-exec" {
				t.Errorf("step ids = %q, %q; want position-based without step_id, step_id-based with", gen.ID, exe.ID)
			}
			if gen.ChainOfWorkID != classify.ID || gen.TokensInput != 300 || gen.TokensOutput != 40 || gen.CostUSD != 0.002 ||
				gen.ModelUsed != "gpt-test" || len(gen.ToolCalls) != 1 {
				t.Errorf("generate step = %+v", gen)
			}
			if exe.SandboxID != "sbx-1" || exe.OutputData["stdout"] != "ok" {
				t.Errorf("execute step = %+v", exe)
			}

			counts, err := s.Counts(ctx, "exec-1")
			if err != nil {
				t.Fatalf("Counts: %v", err)
			}
			want := map[string]int64{chainstore.ExecutionsCollection: 1, chainstore.ChainCollection: 2, chainstore.StepsCollection: 2}
			if fmt.Sprint(counts) != fmt.Sprint(want) {
				t.Errorf("counts = %v, want %v", counts, want)
			}
		})
	}
}

func TestRedeliveryDoesNotDuplicate(t *testing.T) {
	for _, mode := range readModes {
		t.Run(mode.name, func(t *testing.T) {
			ctx, s := openStore(t, mode.opt)
			run := invoiceRun(t, "exec-dup")
			run.record(ctx, t, s)
			first, err := s.Counts(ctx, "exec-dup")
			if err != nil {
				t.Fatal(err)
			}
			chainBefore, err := s.Chain(ctx, "exec-dup")
			if err != nil {
				t.Fatal(err)
			}

			run.record(ctx, t, s)

			second, err := s.Counts(ctx, "exec-dup")
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(first) != fmt.Sprint(second) {
				t.Errorf("counts after redelivery = %v, want %v", second, first)
			}
			all, err := s.AllCounts(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(all) != fmt.Sprint(map[string]map[string]int64{"exec-dup": second}) {
				t.Errorf("AllCounts = %v, want exec-dup: %v", all, second)
			}
			if first[chainstore.ChainCollection] != 2 || first[chainstore.StepsCollection] != 2 {
				t.Errorf("counts = %v; the test needs documents to duplicate", first)
			}
			chainAfter, err := s.Chain(ctx, "exec-dup")
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(chainBefore) != fmt.Sprint(chainAfter) {
				t.Errorf("chain changed on redelivery:\n%+v\n%+v", chainBefore, chainAfter)
			}
			exec, err := s.Execution(ctx, "exec-dup")
			if err != nil {
				t.Fatal(err)
			}
			if exec.Status != "succeeded" {
				t.Errorf("status after redelivery = %q, want succeeded", exec.Status)
			}
		})
	}
}

func TestStartedAfterCompletedKeepsOutcome(t *testing.T) {
	ctx, s := openStore(t)
	run := invoiceRun(t, "exec-late")
	run.completed.Status = "failed"
	run.completed.Error = "classify: boom"

	if err := s.RecordWorkflowCompleted(ctx, run.completed); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordWorkflowStarted(ctx, run.started); err != nil {
		t.Fatal(err)
	}

	exec, err := s.Execution(ctx, "exec-late")
	if err != nil {
		t.Fatal(err)
	}
	if exec.Status != "failed" || exec.Error != "classify: boom" {
		t.Errorf("status, error = %q, %q; want failed, classify: boom", exec.Status, exec.Error)
	}
	if exec.InitialContext["amount"] != json.Number("120.5") || exec.Definition["name"] != "invoice" {
		t.Errorf("late started event not merged: initial_context %v, definition %v", exec.InitialContext, exec.Definition)
	}
}

func TestStartedOnlyIsRunning(t *testing.T) {
	for _, mode := range readModes {
		t.Run(mode.name, func(t *testing.T) {
			ctx, s := openStore(t, mode.opt)
			run := invoiceRun(t, "exec-running")
			if err := s.RecordWorkflowStarted(ctx, run.started); err != nil {
				t.Fatal(err)
			}
			// A step recorded before its node completes shows up as a running visit.
			if err := s.RecordStep(ctx, run.steps[1]); err != nil {
				t.Fatal(err)
			}

			exec, err := s.Execution(ctx, "exec-running")
			if err != nil {
				t.Fatal(err)
			}
			if exec.Status != chainstore.StatusRunning || exec.CompletedAt != nil || exec.FinalContext != nil {
				t.Errorf("execution = %+v, want running without outcome", exec)
			}
			chain, err := s.Chain(ctx, "exec-running")
			if err != nil {
				t.Fatal(err)
			}
			if len(chain) != 1 || chain[0].ID != "exec-running/classify/1" || chain[0].Status != chainstore.StatusRunning || len(chain[0].Steps) != 1 {
				t.Errorf("chain = %+v, want one running classify visit with its step", chain)
			}
		})
	}
}

func TestSecretsAreRedacted(t *testing.T) {
	ctx, s := openStore(t)
	invoiceRun(t, "exec-secret").record(ctx, t, s)

	exec, err := s.Execution(ctx, "exec-secret")
	if err != nil {
		t.Fatal(err)
	}
	chain, err := s.Chain(ctx, "exec-secret")
	if err != nil {
		t.Fatal(err)
	}
	gen := chain[1].Steps[0]
	headers, _ := gen.InputData["headers"].(map[string]any)
	toolCall, _ := gen.ToolCalls[0].(map[string]any)

	tests := []struct {
		name string
		got  any
		want any
	}{
		{"initial_context.db_password", exec.InitialContext["db_password"], redact.Placeholder},
		{"final_context.db_password", exec.FinalContext["db_password"], redact.Placeholder},
		{"final_context.amount", exec.FinalContext["amount"], json.Number("120.5")},
		{"ai_metadata.api_key", chain[1].AIMetadata["api_key"], redact.Placeholder},
		{"ai_metadata.tokens_input", chain[1].AIMetadata["tokens_input"], 300.0},
		{"input_data.headers.Authorization", headers["Authorization"], redact.Placeholder},
		{"tool_calls[0].token", toolCall["token"], redact.Placeholder},
		{"tool_calls[0].name", toolCall["name"], "fetch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("%s = %#v, want %#v", tt.name, tt.got, tt.want)
			}
		})
	}
}

// Secrets in real formats (public documentation examples), split so that
// secret scanners do not report this file.
const (
	stripeKey = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
	githubPAT = "ghp_" + "R2d2C3poBb8xWq7Lm4Nz0Kv6Ty1Ju5Hs9Fg3"
	awsKeyID  = "AKIA" + "IOSFODNN7EXAMPLE"
	jwtToken  = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9" + ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ" +
		".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)

// TestSecretsAreRedactedByTheirLook: a secret under an innocuous key, in a
// list or inside longer text, and one that code printed, is stored as
// [REDACTED]; the text around it and exact numbers stay.
func TestSecretsAreRedactedByTheirLook(t *testing.T) {
	ctx, s := openStore(t)
	run := invoiceRun(t, "exec-look")
	run.started.Context = mustJSON(t, map[string]any{
		"stripe":  stripeKey,
		"notes":   "rotate " + githubPAT + " monthly",
		"vendors": []any{map[string]any{"name": "aws", "key_id": awsKeyID}},
		"big":     json.Number("18446744073709551616"),
	})
	run.completed.Context = mustJSON(t, map[string]any{"session": jwtToken, "amount": 120.5})
	classify := run.nodes[0]
	classify.Stdout = "using " + stripeKey + "\n"
	classify.AiMetadata = mustStruct(t, map[string]any{"model": "gpt-test", "openai": jwtToken})
	gen := run.steps[1]
	gen.InputData = mustStruct(t, map[string]any{"headers": map[string]any{"X-Upstream": "Bearer " + jwtToken}})
	gen.ErrorMessage = "401 for " + githubPAT
	run.record(ctx, t, s)

	exec, err := s.Execution(ctx, "exec-look")
	if err != nil {
		t.Fatal(err)
	}
	chain, err := s.Chain(ctx, "exec-look")
	if err != nil {
		t.Fatal(err)
	}
	vendor, _ := exec.InitialContext["vendors"].([]any)[0].(map[string]any)
	step := chain[1].Steps[0]
	headers, _ := step.InputData["headers"].(map[string]any)

	const r = redact.Placeholder
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"initial_context.stripe", exec.InitialContext["stripe"], r},
		{"initial_context.notes", exec.InitialContext["notes"], "rotate " + r + " monthly"},
		{"initial_context.vendors[0].key_id", vendor["key_id"], r},
		{"initial_context.vendors[0].name", vendor["name"], "aws"},
		{"initial_context.big", exec.InitialContext["big"], json.Number("18446744073709551616")},
		{"final_context.session", exec.FinalContext["session"], r},
		{"final_context.amount", exec.FinalContext["amount"], json.Number("120.5")},
		{"stdout", chain[1].Stdout, "using " + r + "\n"},
		{"ai_metadata.openai", chain[1].AIMetadata["openai"], r},
		{"input_data.headers.X-Upstream", headers["X-Upstream"], "Bearer " + r},
		{"error_message", step.ErrorMessage, "401 for " + r},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("%s = %#v, want %#v", tt.name, tt.got, tt.want)
			}
		})
	}
}

// TestEnsureIndexes checks the indexes of the queries: created where the
// server reads them (forced here, as on MongoDB), none on FerretDB, and
// dropped there by the next start when an earlier one created them.
func TestEnsureIndexes(t *testing.T) {
	want := map[string]map[string]string{
		chainstore.ChainCollection: {"execution_sequence": `[{execution_id 1} {sequence 1}]`},
		chainstore.StepsCollection: {"execution_node_visit_step": `[{execution_id 1} {node_id 1} {visit 1} {step_number 1}]`},
		chainstore.ExecutionsCollection: {
			"started_at": `[{started_at -1}]`, "workflow_started_at": `[{workflow_name 1} {started_at -1}]`,
			"started_at_id": `[{started_at -1} {_id -1}]`, "status_started_at": `[{status 1} {started_at -1}]`,
		},
	}
	client, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(dbName(t))
	indexes := func(ctx context.Context, coll string) map[string]string {
		t.Helper()
		got, err := listIndexes(ctx, db.Collection(coll))
		if err != nil {
			t.Fatalf("list indexes of %s: %v", coll, err)
		}
		return got
	}

	ctx, s := openStore(t, chainstore.WithQueryIndexes(true))
	// Again: start-up runs it on every boot.
	if err := s.EnsureIndexes(ctx); err != nil {
		t.Fatalf("EnsureIndexes twice: %v", err)
	}
	for coll, want := range want {
		got := indexes(ctx, coll)
		for name, keys := range want {
			if got[name] != keys {
				t.Errorf("%s index %s keys = %q, want %q (all: %v)", coll, name, got[name], keys, got)
			}
		}
	}

	// The next start, on FerretDB as Open finds it.
	ctx, s = openStore(t)
	if err := s.EnsureIndexes(ctx); err != nil {
		t.Fatalf("EnsureIndexes twice: %v", err)
	}
	for coll, want := range want {
		got := indexes(ctx, coll)
		for name := range want {
			if _, ok := got[name]; ok {
				t.Errorf("%s index %s is still there on FerretDB (all: %v)", coll, name, got)
			}
		}
		if _, ok := got["_id_"]; !ok {
			t.Errorf("%s lost its _id index: %v", coll, got)
		}
	}
}

// listIndexes returns index name -> keys as "[{field order} ...]".
func listIndexes(ctx context.Context, coll *mongo.Collection) (map[string]string, error) {
	cur, err := coll.Indexes().List(ctx)
	if err != nil {
		return nil, err
	}
	var specs []struct {
		Name string `bson:"name"`
		Key  bson.D `bson:"key"`
	}
	if err := cur.All(ctx, &specs); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(specs))
	for _, spec := range specs {
		var parts []string
		for _, e := range spec.Key {
			parts = append(parts, fmt.Sprintf("{%s %v}", e.Key, e.Value))
		}
		out[spec.Name] = "[" + strings.Join(parts, " ") + "]"
	}
	return out, nil
}

func TestExecutionNotFound(t *testing.T) {
	for _, mode := range readModes {
		t.Run(mode.name, func(t *testing.T) {
			ctx, s := openStore(t, mode.opt)
			_, err := s.Execution(ctx, "nope")
			if !errors.Is(err, chainstore.ErrNotFound) {
				t.Errorf("err = %v, want ErrNotFound", err)
			}
			chain, err := s.Chain(ctx, "nope")
			if err != nil || len(chain) != 0 {
				t.Errorf("Chain = %v, %v; want empty", chain, err)
			}
		})
	}
}

func TestInvalidEvents(t *testing.T) {
	ctx, s := openStore(t)
	tests := []struct {
		name  string
		write func() error
	}{
		{"started without execution id", func() error { return s.RecordWorkflowStarted(ctx, &novav1.WorkflowStarted{}) }},
		{"completed without execution id", func() error { return s.RecordWorkflowCompleted(ctx, &novav1.WorkflowCompleted{}) }},
		{"node without node id", func() error { return s.RecordNode(ctx, &novav1.NodeCompleted{ExecutionId: "x"}) }},
		{"step without execution id", func() error { return s.RecordStep(ctx, &novav1.StepCompleted{NodeId: "n"}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.write(); !errors.Is(err, chainstore.ErrInvalidEvent) {
				t.Errorf("err = %v, want ErrInvalidEvent", err)
			}
		})
	}
}

// TestContextNumbersStayExact stores numbers BSON or the store would change
// (integers beyond int64 and JavaScript's safe range, -0.0, a float with no
// fraction) and reads back the same JSON text.
func TestContextNumbersStayExact(t *testing.T) {
	ctx, s := openStore(t)
	const raw = `{"beyond_int64":123456789012345678901234567890,"f":150.0,"i":9007199254740993,` +
		`"max":9223372036854775807,"min":-9223372036854775808,"neg_zero":-0.0,` +
		`"nested":{"l":[1,2.5,-0.0,18446744073709551616]},"small":0.1}`
	run := invoiceRun(t, "exec-exact")
	run.started.Context = &novav1.JSONValue{Raw: []byte(raw)}
	run.completed.Context = &novav1.JSONValue{Raw: []byte(raw)}
	run.record(ctx, t, s)

	exec, err := s.Execution(ctx, "exec-exact")
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]map[string]any{"initial_context": exec.InitialContext, "final_context": exec.FinalContext} {
		b, err := jsonvalue.Encode(got)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != raw {
			t.Errorf("%s read back as\n%s\nwant\n%s", name, b, raw)
		}
	}
}
