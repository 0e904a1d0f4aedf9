package flow

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoNATS: the state machine stays pure. Nothing it links talks to
// NATS; what it decides, the shell (package engine) carries out.
func TestLinksNoNATS(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the package's dependencies")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.Contains(p, "nats-io") {
			t.Errorf("package flow links %s", p)
		}
	}
}
