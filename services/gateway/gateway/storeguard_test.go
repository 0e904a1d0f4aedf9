package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/services/gateway/gateway"
)

// TestReadsDuringAStoreOutage: while the audit store refuses connections,
// a read of an execution the engine holds answers from the engine's state,
// and the other reads answer 503 with Retry-After in a second or two, not
// after the store driver's 30 s.
func TestReadsDuringAStoreOutage(t *testing.T) {
	ctx := t.Context()
	m, err := devstack.StartMongo(ctx, devstack.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	st, err := chainstore.Open(ctx, m.URI(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(t.Context()) })
	base, err := h.serve(gateway.Deps{Store: st, Keys: h.keys})
	if err != nil {
		t.Fatal(err)
	}
	running := h.startRunning(t, "read-in-an-outage", "import time\ntime.sleep(30)")
	get := func(path string) (response, time.Duration) {
		start := time.Now()
		resp := h.do(t, base, request{method: "GET", path: path, key: h.key["reader"]})
		return resp, time.Since(start)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if resp, _ := get("/v1/executions/" + running); resp.status == http.StatusOK {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the running execution: %d %s", resp.status, resp.body)
		}
	}

	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	// The bound is far above the second or two it takes and far below the
	// driver's 30 s of server selection.
	const bound = 10 * time.Second
	resp, took := get("/v1/executions/" + running)
	var v struct {
		Execution struct {
			ExecutionID string `json:"execution_id"`
			Status      string `json:"status"`
			CurrentNode string `json:"current_node"`
		} `json:"execution"`
		Nodes            []json.RawMessage `json:"nodes"`
		ChainUnavailable string            `json:"chain_unavailable"`
	}
	if resp.status != http.StatusOK || json.Unmarshal(resp.body, &v) != nil || v.Execution.ExecutionID != running ||
		v.Execution.Status != "running" || v.Nodes == nil || len(v.Nodes) != 0 || !strings.Contains(v.ChainUnavailable, "graph engine's state") {
		t.Errorf("a running execution while the store is down: %d %s", resp.status, resp.body)
	}
	t.Logf("GET of the running execution while the store is down: %d in %v", resp.status, took)
	if took > bound {
		t.Errorf("it answered after %v", took)
	}
	for _, path := range []string{"/v1/executions/no-such-execution", "/v1/executions?limit=5"} {
		resp, took := get(path)
		p := problem(t, resp, http.StatusServiceUnavailable, gateway.TypeUnavailable)
		if resp.header.Get("Retry-After") == "" || !strings.Contains(p.Detail, "does not answer") {
			t.Errorf("GET %s: Retry-After %q, detail %q", path, resp.header.Get("Retry-After"), p.Detail)
		}
		t.Logf("GET %s while the store is down: %d in %v", path, resp.status, took)
		if took > bound {
			t.Errorf("GET %s answered after %v", path, took)
		}
	}
}
