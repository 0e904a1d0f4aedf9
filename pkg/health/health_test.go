package health

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestPprofOnlyWhenAsked: the health server serves Go's profiles only after
// ServePprof.
func TestPprofOnlyWhenAsked(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		s, err := Listen("127.0.0.1:0", nil)
		if err != nil {
			t.Fatal(err)
		}
		if enabled {
			s.ServePprof()
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		resp, err := http.Get("http://" + s.Addr() + "/debug/pprof/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		served := resp.StatusCode == http.StatusOK && strings.Contains(string(body), "goroutine")
		if served != enabled {
			t.Errorf("pprof enabled %v: GET /debug/pprof/ = %d", enabled, resp.StatusCode)
		}
		resp, err = http.Get("http://" + s.Addr() + "/healthz")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("healthz: %v %v", resp, err)
		}
		resp.Body.Close()
		cancel()
		if err := <-done; err != nil && err != context.Canceled {
			t.Errorf("run: %v", err)
		}
	}
}
