package service

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestHealthcheck: the HEALTHCHECK probe passes on a 200 from /healthz on
// HEALTH_ADDR's port (an empty host is the loopback), and fails naming why
// on another status or nothing listening.
func TestHealthcheck(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	if err := healthcheck(":"+port, time.Second); err != nil {
		t.Errorf("a 200 on :%s: %v", port, err)
	}
	status = http.StatusServiceUnavailable
	if err := healthcheck("0.0.0.0:"+port, time.Second); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("a 503: %v, want an error naming it", err)
	}
	srv.Close()
	if err := healthcheck(":"+port, time.Second); err == nil {
		t.Error("nothing listening: no error")
	}
	if err := healthcheck("8080", time.Second); err == nil || !strings.Contains(err.Error(), "HEALTH_ADDR") {
		t.Errorf("a malformed HEALTH_ADDR: %v", err)
	}
}
