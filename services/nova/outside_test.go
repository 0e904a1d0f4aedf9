package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestNovaOutsideTheRepository runs an installed nova binary from a
// directory that is not the repository, without a model configured: its AI
// nodes are answered by the built-in scripted rules (labelled SCRIPTED), not
// refused, and nothing is looked up relative to the working directory.
func TestNovaOutsideTheRepository(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the nova binary")
	}
	bin := filepath.Join(t.TempDir(), "nova")
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if out, err := exec.CommandContext(t.Context(), goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	workflow, err := filepath.Abs(filepath.Join("..", "..", "examples", "ai-orders.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	cmd := exec.CommandContext(t.Context(), bin, "run", workflow, "--set", "total=1500", "--json", "--data-dir", filepath.Join(elsewhere, "data"))
	cmd.Dir = elsewhere
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OPENAI_") && !strings.HasPrefix(kv, "NATS_URL=") && !strings.HasPrefix(kv, "MONGODB_URI=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nova run from %s: %v\nstdout: %s\nstderr: %s", elsewhere, err, out, stderr.String())
	}
	var res struct {
		Status string   `json:"status"`
		Path   []string `json:"path"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("nova run --json: %v\n%s", err, out)
	}
	if res.Status != "succeeded" {
		t.Errorf("status %s along %v\nstderr: %s", res.Status, res.Path, stderr.String())
	}
	if !strings.Contains(stderr.String(), "model: SCRIPTED") {
		t.Errorf("nova run does not say its model is scripted: %s", stderr.String())
	}
}
