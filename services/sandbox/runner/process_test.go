package runner

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// The process backend runs the same protocol without isolation, and says so
// loudly whenever it is chosen.
func TestProcessBackend(t *testing.T) {
	var logs bytes.Buffer
	r := newTestRunner(t, Config{Backend: BackendProcess, MemoryBytes: 256 << 20, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "NO ISOLATION") {
		t.Errorf("choosing the process backend was not logged as a warning: %q", logs.String())
	}
	wantSuccess(t, run(t, r, Request{Code: "import os\ncontext['x'] = len(context['s'])\nopen('f', 'w').write('x')", Context: obj(t, map[string]any{"s": "abc"})}), `{"x": 3}`)
	wantError(t, run(t, r, Request{Code: "x = 'y' * (512 << 20)"}), KindLimit, "MemoryError")
	wantError(t, run(t, r, Request{Code: "raise ValueError('bad')"}), KindCodeError, "ValueError: bad")
}

func TestNewRejectsUnknownBackend(t *testing.T) {
	if _, err := New(Config{Backend: "docker"}); err == nil || !strings.Contains(err.Error(), `"docker"`) {
		t.Errorf("err = %v", err)
	}
}
