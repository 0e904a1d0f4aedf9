package kedascaler

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// portedFrom is the SHA-256 of pkg/scalers/nats_jetstream_scaler.go of
// KEDA v2.21.0, the file this package ports.
const portedFrom = "234885d172217e7b73807b970c261e85c224d283617e0cb011a9f4993b4789b1"

// TestPortFollowsKEDASource fails when deploy/test requires a KEDA whose
// nats-jetstream scaler differs from the one ported here: compare the two,
// port the change, then update portedFrom.
func TestPortFollowsKEDASource(t *testing.T) {
	// go test puts its own GOROOT/bin first in PATH.
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}} {{.Dir}}", "github.com/kedacore/keda/v2").Output()
	if err != nil {
		t.Fatalf("locate KEDA's module: %v", err)
	}
	version, dir, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
	if !ok || dir == "" {
		t.Fatalf("KEDA's module is not in the module cache (go mod download): %q", out)
	}
	src, err := os.ReadFile(filepath.Join(dir, "pkg", "scalers", "nats_jetstream_scaler.go"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(src)
	if got := hex.EncodeToString(sum[:]); got != portedFrom {
		t.Fatalf("KEDA %s's nats_jetstream_scaler.go (sha256 %s) is not the file this package ports (v2.21.0): "+
			"port its changes to scaler.go and set portedFrom", version, got)
	}
}
