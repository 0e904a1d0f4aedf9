package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/runtimeinfo"
	"github.com/novaflow/nova/services/nova/stack"
)

// TestFirstRunCachesItsCode runs an AI node with `nova run` five times on
// one fresh data dir: only the first run calls the model. The sandbox
// publishes its runtime's description a moment after it starts, so on a
// fresh data dir the first run's node may begin before the code cache can
// be keyed; its accepted code is still kept for the next run.
func TestFirstRunCachesItsCode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs nova five times")
	}
	bin := buildNova(t)
	file := filepath.Join(t.TempDir(), "discount.yaml")
	if err := os.WriteFile(file, []byte(discountWorkflow), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	var calls []int32
	for range 5 {
		r := nova(t, bin, "run", file, "--set", "total=1500", "--data-dir", dataDir, "--json")
		if r.code != 0 {
			t.Fatalf("nova run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
		var res struct {
			Status     string `json:"status"`
			ModelCalls int32  `json:"model_calls"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Status != "succeeded" {
			t.Fatalf("nova run --json: %v %s", err, r.stdout)
		}
		calls = append(calls, res.ModelCalls)
	}
	if calls[0] == 0 || !slices.Equal(calls[1:], []int32{0, 0, 0, 0}) {
		t.Errorf("model calls per run = %v, want the first run's only (e.g. [2 0 0 0 0])", calls)
	}
}

// TestCodeCachedWhenTheRuntimeCameLate runs an AI node that begins before
// the sandbox's runtime description is published (deleted here, as on a
// fresh deployment) and is published while the node runs: its accepted
// code is cached all the same, and the next run calls no model.
func TestCodeCachedWhenTheRuntimeCameLate(t *testing.T) {
	e := startAIEnvFile(t, demoRules)
	info := e.waitRuntimeDocs()
	obj, err := e.bus.JetStream().ObjectStore(e.ctx, runtimeinfo.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := obj.Delete(e.ctx, runtimeinfo.Object); err != nil {
		t.Fatal(err)
	}
	// The node waits for its code while the runtime comes.
	if err := e.s.StopModule(stack.CodeGenerator); err != nil {
		t.Fatal(err)
	}
	def := parseAI(t, discountWorkflow)
	exec, err := e.client.Start(e.ctx, def, "", map[string]any{"total": 1500})
	if err != nil {
		t.Fatal(err)
	}
	e.eventually(10*time.Second, "the node waits for the code generator", func() bool {
		st := e.state(exec.ID)
		lines := execution.Lines(st)
		return st != nil && len(lines) == 1 && lines[0].GetAi().GetPhase() == "generate"
	})
	if err := runtimeinfo.Publish(e.ctx, e.bus.JetStream(), info); err != nil {
		t.Fatal(err)
	}
	if err := e.s.StartModule(e.ctx, stack.CodeGenerator); err != nil {
		t.Fatal(err)
	}
	wc, err := exec.Wait(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	succeeded(t, wc)
	if wc.ModelCalls == 0 {
		t.Fatal("the first run made no model call")
	}
	first := nodeDoc(t, e.chain(wc.ExecutionId), "discount", 1)
	t.Logf("first run: cache_key %v, cache_hit %v", first.AIMetadata["cache_key"], first.AIMetadata["cache_hit"])
	again := e.run(def, map[string]any{"total": 2000})
	succeeded(t, again)
	if again.ModelCalls != 0 {
		t.Errorf("the second run made %d model calls, want 0 (the first run's code cached)", again.ModelCalls)
	}
}
