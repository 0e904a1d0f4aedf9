// Package health serves a service's /healthz, /readyz and /metrics.
package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is one readiness condition (connected to NATS, store reachable...).
type Check struct {
	Name string
	Func func(context.Context) error
}

// Server answers liveness, readiness and metrics requests.
type Server struct {
	srv *http.Server
	ln  net.Listener
	mux *http.ServeMux

	mu       sync.Mutex
	degraded func(context.Context) []string
}

// Listen binds addr (":0" picks a free port) and prepares the handlers.
func Listen(addr string, reg *prometheus.Registry, checks ...Check) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health listener on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	s := &Server{ln: ln, mux: mux}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		s.mu.Lock()
		degraded := s.degraded
		s.mu.Unlock()
		var reasons []string
		if degraded != nil {
			reasons = degraded(r.Context())
		}
		if len(reasons) == 0 {
			fmt.Fprintln(w, "ok")
			return
		}
		fmt.Fprintln(w, "degraded")
		for _, reason := range reasons {
			fmt.Fprintln(w, reason)
		}
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		status := map[string]string{}
		code := http.StatusOK
		for _, c := range checks {
			if err := c.Func(ctx); err != nil {
				status[c.Name] = err.Error()
				code = http.StatusServiceUnavailable
			} else {
				status[c.Name] = "ok"
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(status)
	})
	if reg != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	}
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return s, nil
}

// Degraded sets what /healthz reports beside "ok": while fn returns
// reasons, it answers 200 with "degraded" and one reason a line (the
// process lives, restarting it would not help, but it does not do all it
// should).
func (s *Server) Degraded(fn func(context.Context) []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.degraded = fn
}

// ServePprof adds Go's profiles (net/http/pprof) under /debug/pprof/. Call
// it before Run. Profiles show the process's internals: enable them only
// where the port is private (NOVA_PPROF, off by default).
func (s *Server) ServePprof() { HandlePprof(s.mux) }

// HandlePprof registers Go's profiles under /debug/pprof/ on mux.
func HandlePprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Run serves until ctx ends, then shuts down within a short deadline.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := s.srv.Shutdown(sctx); err != nil {
			return err
		}
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}
