package gateway

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"go.yaml.in/yaml/v3"
)

// openapiYAML describes every route (OpenAPI 3.1); a test holds it to the
// routes the gateway serves.
//
//go:embed openapi.yaml
var openapiYAML []byte

// OpenAPI is the document describing the gateway's routes, as JSON.
func OpenAPI() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(openapiYAML, &doc); err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	return b, nil
}

// serveOpenAPI is GET /v1/openapi.json; it needs no key.
func (g *Gateway) serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(g.openapi)
}

// Routes lists the routes the gateway serves ("METHOD /path").
func (g *Gateway) Routes() []string { return slices.Clone(g.routes) }
