package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRepo is the configdoc package's small checkout.
const fakeRepo = "../../configdoc/testdata/repo"

func TestWriteThenCheck(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ref", "configuration.md")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-root", fakeRepo, "-out", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("write: exit %d, stderr %s", code, stderr.String())
	}
	written, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(written), "| `X_WORKERS` | `int` | `4` |") {
		t.Fatalf("the written reference lacks X_WORKERS:\n%s", written)
	}
	stale := strings.Replace(string(written), "`X_WORKERS` | `int` | `4`", "`X_WORKERS` | `int` | `2`", 1)

	tests := []struct {
		name     string
		content  *string // nil: no file
		code     int
		inStderr []string
	}{
		{"up to date", ptr(string(written)), 0, nil},
		{"stale", &stale, 1, []string{"is out of date", "-| `X_WORKERS` | `int` | `2`", "+| `X_WORKERS` | `int` | `4`", "run make config-doc"}},
		{"missing", nil, 1, []string{"does not exist", "run make config-doc"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "configuration.md")
			if tt.content != nil {
				if err := os.WriteFile(file, []byte(*tt.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var stdout, stderr bytes.Buffer
			code := run([]string{"-root", fakeRepo, "-out", file, "-check"}, &stdout, &stderr)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr.String())
			}
			for _, want := range tt.inStderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
				}
			}
		})
	}
}

func ptr(s string) *string { return &s }
