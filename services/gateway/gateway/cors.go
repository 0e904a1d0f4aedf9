package gateway

import (
	"net/http"
	"slices"
	"strings"
)

// cors answers cross-origin requests from the configured origins only; with
// none configured the gateway sends no CORS header and browsers keep other
// origins out. It reports whether it answered the request (a preflight).
func (g *Gateway) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || len(g.corsOrigins) == 0 {
		return false
	}
	w.Header().Add("Vary", "Origin")
	if !slices.Contains(g.corsOrigins, origin) && !slices.Contains(g.corsOrigins, "*") {
		return false
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Expose-Headers", "Location, Retry-After, WWW-Authenticate")
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		return false
	}
	// A preflight: what the routes take.
	h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
	h.Set("Access-Control-Allow-Headers", strings.Join([]string{"Authorization", "Content-Type", "Idempotency-Key",
		"Last-Event-ID", "ce-id", "ce-source", "ce-type", "ce-specversion", "ce-subject", "ce-time", "ce-dataschema", "traceparent"}, ", "))
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return true
}
