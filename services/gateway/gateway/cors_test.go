package gateway_test

import (
	"net/http"
	"testing"

	"github.com/novaflow/nova/services/gateway/gateway"
)

// TestCORS: no CORS header unless the origin is configured; a configured
// origin gets its preflight answered and may read the answers.
func TestCORS(t *testing.T) {
	preflight := map[string]string{"Origin": "https://console.example", "Access-Control-Request-Method": "POST",
		"Access-Control-Request-Headers": "authorization, content-type"}

	// The harness's gateway has no origin configured.
	resp := h.do(t, h.url, request{method: "OPTIONS", path: "/v1/executions", header: preflight})
	if resp.header.Get("Access-Control-Allow-Origin") != "" || resp.status != http.StatusMethodNotAllowed {
		t.Errorf("preflight without CORS configured: status %d, headers %v", resp.status, resp.header)
	}
	resp = h.do(t, h.url, request{method: "GET", path: "/v1/executions", key: h.key["reader"], header: map[string]string{"Origin": "https://console.example"}})
	if resp.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("answer carries Access-Control-Allow-Origin %q without CORS configured", resp.header.Get("Access-Control-Allow-Origin"))
	}

	url, err := h.serve(gateway.Deps{Keys: h.keys, CORSOrigins: []string{"https://console.example"}})
	if err != nil {
		t.Fatal(err)
	}
	resp = h.do(t, url, request{method: "OPTIONS", path: "/v1/executions", header: preflight})
	if resp.status != http.StatusNoContent || resp.header.Get("Access-Control-Allow-Origin") != "https://console.example" ||
		resp.header.Get("Access-Control-Allow-Methods") == "" || resp.header.Get("Access-Control-Allow-Headers") == "" {
		t.Errorf("preflight: status %d, headers %v", resp.status, resp.header)
	}
	resp = h.do(t, url, request{method: "GET", path: "/v1/executions", key: h.key["reader"], header: map[string]string{"Origin": "https://console.example"}})
	if resp.status != http.StatusOK || resp.header.Get("Access-Control-Allow-Origin") != "https://console.example" {
		t.Errorf("GET from the origin: status %d, headers %v", resp.status, resp.header)
	}
	resp = h.do(t, url, request{method: "OPTIONS", path: "/v1/executions", header: map[string]string{
		"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}})
	if resp.header.Get("Access-Control-Allow-Origin") != "" || resp.status == http.StatusNoContent {
		t.Errorf("preflight from another origin: status %d, headers %v", resp.status, resp.header)
	}
}
