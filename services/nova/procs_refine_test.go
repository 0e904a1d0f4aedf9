package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/llm/scripted"
	auditservice "github.com/novaflow/nova/services/audit/service"
	"github.com/novaflow/nova/services/nova/client"
)

// refineStreamMsg is one message of a refinement's stream as a client reads it.
type refineStreamMsg struct {
	id          string
	Type        string   `json:"type"`
	Message     string   `json:"message"`
	ExecutionID string   `json:"executionId"`
	Attempt     int      `json:"attempt"`
	Resolved    []string `json:"resolved"`
	Remaining   []string `json:"remaining"`
	Error       string   `json:"error"`
}

// TestProcsRefinementSurvivesKills: a refinement runs in the graph engine,
// not in the HTTP request that started it. The gateway and the engine, each
// a process of its own, are killed with SIGKILL while the sandbox runs the
// first attempt's code; with a new engine the refinement completes, and the
// client that reconnects to a new gateway with Last-Event-ID gets the rest
// of the stream, each message once, and the chain of work has each step once.
func TestProcsRefinementSurvivesKills(t *testing.T) {
	t.Parallel() // its own binaries, servers and processes
	if testing.Short() {
		t.Skip("builds the service binaries and starts them as processes")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := procsBuild(t, ctx)

	dataDir := t.TempDir()
	nats, err := devstack.StartNATS(ctx, devstack.Options{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nats.Shutdown)
	mongo, err := devstack.StartMongo(ctx, devstack.Options{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mongo.Close() })

	const (
		original = "# STAGE: TASK\ncontext['rows'] = [{'n': r['n']} for r in context['items']]\n"
		// The first attempt runs long enough to kill everything meanwhile.
		slow    = "# STAGE: TASK\nimport time\ntime.sleep(3)\ncontext['rows'] = [{'n': r['n']} for r in context['items']]\n"
		refined = "# STAGE: TASK\ncontext['rows'] = [{'n': r['n'], 'price': float(r['p'])} for r in context['items']]\n"
	)
	answer := func(code string) *scripted.Response { return &scripted.Response{Content: "```python\n" + code + "```"} }
	model, err := scripted.New(scripted.Rules{Rules: []scripted.Rule{
		{Name: "second", Match: scripted.Match{Agent: "code-generator", UserContains: scripted.Strings{"Attempt 1: ran"}}, Respond: answer(refined)},
		{Name: "first", Match: scripted.Match{Agent: "code-generator"}, Respond: answer(slow)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, stop, err := model.Start(ctx, ""); err != nil {
		t.Fatal(err)
	} else {
		t.Cleanup(func() { _ = stop() })
	}
	env := func(own map[string]string) map[string]string {
		e := map[string]string{"NATS_URL": nats.URL(), "MONGODB_URI": mongo.URI(), "HEALTH_ADDR": procsFreeAddr(t), "LOG_FORMAT": "json",
			"OPENAI_BASE_URL": model.BaseURL(), "OPENAI_API_KEY": "sk-procs-test"}
		for k, v := range own {
			e[k] = v
		}
		return e
	}
	start := func(name string, own map[string]string) *procsProcess {
		p := procsStart(t, filepath.Join(bin, name), name, env(own))
		p.waitReady(t, ctx)
		return p
	}
	for _, name := range []string{"sandbox", "code-generator", "audit"} {
		start(name, nil)
	}
	engine := start("graph-engine", nil)
	gatewayEnv := func() map[string]string {
		return map[string]string{"GATEWAY_ADDR": procsFreeAddr(t), "NOVA_GATEWAY_NO_AUTH": "true"}
	}
	firstEnv := gatewayEnv()
	gw := start("gateway", firstEnv)
	waitAPI(t, ctx, firstEnv["GATEWAY_ADDR"])

	body, _ := json.Marshal(map[string]any{"agentType": "transformer", "language": "python", "originalCode": original,
		"outputAnalysis": map[string]any{"type": "array", "isStructured": true, "itemCount": 3,
			"fields": []any{map[string]any{"name": "n", "coverage": 100}}},
		"feedback":    []any{map[string]any{"field": "price", "issue": "missing"}},
		"testContext": map[string]any{"items": []any{map[string]any{"n": "lamp", "p": "19.5"}, map[string]any{"n": "desk", "p": "120"}}},
		"maxAttempts": 3})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+firstEnv["GATEWAY_ADDR"]+"/v1/refine", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/refine: %d", resp.StatusCode)
	}
	stream := bufio.NewReader(resp.Body)
	var msgs []refineStreamMsg
	for len(msgs) < 3 {
		m, err := readRefineMsg(stream)
		if err != nil {
			t.Fatalf("after %d messages: %v", len(msgs), err)
		}
		msgs = append(msgs, m)
	}
	if !strings.HasPrefix(msgs[2].Message, "Testing improved code") || msgs[2].Attempt != 1 {
		t.Fatalf("third message %+v, want attempt 1's code under test", msgs[2])
	}
	// The sandbox now runs attempt 1's code for 3 s: both go.
	for _, p := range []*procsProcess{gw, engine} {
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-p.done
	}
	id := msgs[0].ExecutionID
	start("graph-engine", nil)
	secondEnv := gatewayEnv()
	start("gateway", secondEnv)
	waitAPI(t, ctx, secondEnv["GATEWAY_ADDR"])

	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, "http://"+secondEnv["GATEWAY_ADDR"]+"/v1/refine/"+id+"/events", nil)
	req.Header.Set("Last-Event-ID", msgs[2].id)
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	if resp2.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/refine/%s/events: %d", id, resp2.StatusCode)
	}
	stream = bufio.NewReader(resp2.Body)
	for msgs[len(msgs)-1].Type != "complete" && msgs[len(msgs)-1].Type != "error" {
		m, err := readRefineMsg(stream)
		if err != nil {
			t.Fatalf("after %d messages: %v", len(msgs), err)
		}
		msgs = append(msgs, m)
	}
	var got, ids []string
	for _, m := range msgs {
		got = append(got, fmt.Sprintf("%s:%d", m.Type, m.Attempt))
		ids = append(ids, m.id)
	}
	if want := []string{"info:0", "info:1", "info:1", "progress:1", "info:2", "info:2", "complete:2"}; !slices.Equal(got, want) {
		t.Fatalf("messages %v, want %v", got, want)
	}
	if want := []string{"1", "2", "3", "4", "5", "6", "7"}; !slices.Equal(ids, want) {
		t.Errorf("ids %v, want %v: every message once, in order", ids, want)
	}
	if c := msgs[len(msgs)-1]; !slices.Equal(c.Resolved, []string{"price"}) {
		t.Errorf("complete %+v", c)
	}

	// The chain of work has each agent step once.
	b, err := bus.Connect(ctx, nats.URL(), bus.WithName("procs-refine-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := client.New(b, nil).WaitConsumerIdle(ctx, bus.StreamEvents, auditservice.Consumer); err != nil {
		t.Fatal(err)
	}
	st, err := chainstore.Open(ctx, mongo.URI(), "nova")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close(context.WithoutCancel(ctx)) }()
	exec, err := st.Execution(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if exec.Status != "succeeded" || exec.WorkflowName != "refine" {
		t.Errorf("execution document: status %s, workflow %q", exec.Status, exec.WorkflowName)
	}
	chain, err := st.Chain(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(chain) != 1 {
		t.Fatalf("chain of work: %d node visits, want 1", len(chain))
	}
	var steps []string
	for _, s := range chain[0].Steps {
		steps = append(steps, fmt.Sprintf("%s:%d", s.StepName, s.AttemptNumber))
	}
	if want := []string{"code_refinement:1", "code_execution:1", "code_refinement:2", "code_execution:2"}; !slices.Equal(steps, want) {
		t.Errorf("steps %v, want %v", steps, want)
	}
}

// readRefineMsg reads the next message of a refinement's stream, skipping
// comments and the retry field.
func readRefineMsg(r *bufio.Reader) (refineStreamMsg, error) {
	var m refineStreamMsg
	var data string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return m, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && data != "":
			err := json.Unmarshal([]byte(data), &m)
			return m, err
		case strings.HasPrefix(line, "id: "):
			m.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
}

// waitAPI waits until the gateway at addr serves its API (it is ready on its
// health port a moment before).
func waitAPI(t *testing.T, ctx context.Context, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/openapi.json", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway at %s does not serve its API after 30s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
