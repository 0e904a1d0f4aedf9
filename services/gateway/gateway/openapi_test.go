package gateway_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/novaflow/nova/services/gateway/gateway"
)

// openapiRouter reads GET /v1/openapi.json, served without a key, checks it
// is a valid OpenAPI 3.1 document, and returns a router that finds the
// document's operation of a request to the gateway under test.
func openapiRouter(t *testing.T) routers.Router {
	t.Helper()
	resp := h.do(t, h.url, request{method: "GET", path: "/v1/openapi.json"})
	if resp.status != http.StatusOK || resp.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/openapi.json: status %d, Content-Type %q", resp.status, resp.header.Get("Content-Type"))
	}
	doc, err := openapi3.NewLoader().LoadFromData(resp.body)
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.OpenAPI; v != "3.1.0" {
		t.Errorf("OpenAPI version %q, want 3.1.0", v)
	}
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatalf("the document is not valid OpenAPI 3.1: %v", err)
	}
	// Requests go to the gateway under test, wherever the document says
	// it is served.
	doc.Servers = openapi3.Servers{{URL: h.url}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return router
}

// TestOpenAPIDescribesEveryRoute: the document's operations are exactly the
// routes the gateway serves.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	openapiRouter(t)
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	raw, err := gateway.OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			if method != "parameters" {
				documented = append(documented, strings.ToUpper(method)+" "+path)
			}
		}
	}
	g, err := gateway.New(gateway.Deps{Bus: h.bus, Store: h.store, Keys: h.keys})
	if err != nil {
		t.Fatal(err)
	}
	served := g.Routes()
	slices.Sort(documented)
	slices.Sort(served)
	if !slices.Equal(documented, served) {
		t.Errorf("documented %q\nserved     %q", documented, served)
	}
}

// TestResponsesMatchTheDocument sends requests of every kind and checks
// each request and its answer against the document.
func TestResponsesMatchTheDocument(t *testing.T) {
	router := openapiRouter(t)
	// An export's lines are checked as text, as the document describes them.
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", openapi3filter.PlainBodyDecoder)
	h.register(t, exactYAML)
	started := h.do(t, h.url, request{method: "POST", path: "/v1/executions", key: h.key["writer"],
		body: startBody(`"workflow": "exact-numbers"`, `"context": `+exactContext)})
	var a acceptedDoc
	decode(t, started, http.StatusAccepted, &a)
	h.awaitStatus(t, a.ExecutionID, "succeeded")

	for _, c := range []struct {
		name string
		req  request
		want int
	}{
		{"start and wait", request{method: "POST", path: "/v1/executions?wait=60s", key: h.key["writer"],
			body: startBody(`"workflow": "exact-numbers"`, `"context": `+exactContext)}, 200},
		{"start", request{method: "POST", path: "/v1/executions", key: h.key["writer"],
			body: startBody(`"definition": ` + chain("documented", `context["a"] = 1`))}, 202},
		{"invalid start", request{method: "POST", path: "/v1/executions", key: h.key["writer"], body: `{"workflow": 5}`}, 400},
		{"list", request{method: "GET", path: "/v1/executions?workflow=exact-numbers&limit=2", key: h.key["reader"]}, 200},
		{"get", request{method: "GET", path: "/v1/executions/" + a.ExecutionID, key: h.key["reader"]}, 200},
		{"get unknown", request{method: "GET", path: "/v1/executions/nothing-here", key: h.key["reader"]}, 404},
		{"no key", request{method: "GET", path: "/v1/executions", key: ""}, 401},
		{"executions stream, an unknown parameter", request{method: "GET", path: "/v1/executions/events?status=running", key: h.key["reader"]}, 400},
		{"executions stream, wrong scope", request{method: "GET", path: "/v1/executions/events", key: h.key["writer"]}, 403},
		{"totals", request{method: "GET", path: "/v1/execution-totals?workflow=exact-numbers&status=succeeded", key: h.key["reader"]}, 200},
		{"totals, a limit", request{method: "GET", path: "/v1/execution-totals?limit=5", key: h.key["reader"]}, 400},
		{"batch", request{method: "POST", path: "/v1/executions/batch", key: h.key["writer"],
			body: `{"action": "cancel", "ids": ["` + a.ExecutionID + `", "nothing-here"], "reason": "documented"}`}, 200},
		{"batch by filter", request{method: "POST", path: "/v1/executions/batch", key: h.key["writer"],
			body: `{"action": "rerun", "filter": {"workflow": "exact-numbers", "status": "failed"}}`}, 200},
		{"invalid batch", request{method: "POST", path: "/v1/executions/batch", key: h.key["writer"], body: `{"action": "delete", "ids": []}`}, 400},
		{"export", request{method: "GET", path: "/v1/executions/export?workflow=exact-numbers&since=2000-01-01", key: h.key["reader"]}, 200},
		{"export, a bad since", request{method: "GET", path: "/v1/executions/export?since=yesterday", key: h.key["reader"]}, 400},
		{"wrong scope", request{method: "GET", path: "/v1/executions", key: h.key["writer"]}, 403},
		{"workflows", request{method: "GET", path: "/v1/workflows", key: h.key["reader"]}, 200},
		{"workflows with their runs", request{method: "GET", path: "/v1/workflows?runs=5", key: h.key["reader"]}, 200},
		{"register", request{method: "POST", path: "/v1/workflows", key: h.key["admin"], body: chain("documented-register", `context["a"] = 1`)}, 201},
		{"register unchanged", request{method: "POST", path: "/v1/workflows", key: h.key["admin"], body: chain("documented-register", `context["a"] = 1`)}, 200},
		{"workflow", request{method: "GET", path: "/v1/workflows/exact-numbers", key: h.key["reader"]}, 200},
		{"execute", request{method: "POST", path: "/v1/execute", key: h.key["admin"],
			body: `{"code": "module.exports = () => [{name: 'a', price: 1}]"}`}, 200},
		{"execute python that fails", request{method: "POST", path: "/v1/execute", key: h.key["admin"],
			body: `{"language": "python", "code": "1/0"}`}, 200},
		{"invalid execute", request{method: "POST", path: "/v1/execute", key: h.key["admin"], body: `{"language": "ruby"}`}, 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := h.do(t, h.url, c.req)
			if resp.status != c.want {
				t.Fatalf("status %d, want %d: %s", resp.status, c.want, resp.body)
			}
			documented(t, router, c.req, resp)
		})
	}
}

// documented checks req and resp, its answer, against the document.
func documented(t *testing.T, router routers.Router, req request, resp response) {
	t.Helper()
	httpReq, err := http.NewRequest(req.method, h.url+req.path, strings.NewReader(req.body))
	if err != nil {
		t.Fatal(err)
	}
	if req.body != "" {
		httpReq.Header.Set("Content-Type", "application/json")
	}
	if req.key != "" {
		httpReq.Header.Set("Authorization", "Bearer "+req.key)
	}
	for k, v := range req.header {
		httpReq.Header.Set(k, v)
	}
	route, params, err := router.FindRoute(httpReq)
	if err != nil {
		t.Fatalf("%s %s is not in the document: %v", req.method, req.path, err)
	}
	in := &openapi3filter.RequestValidationInput{Request: httpReq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true}}
	// A request the gateway refuses may well be one the document
	// refuses too; only its answer must be as documented.
	if err := openapi3filter.ValidateRequest(t.Context(), in); err != nil && resp.status < 300 {
		t.Errorf("request not as documented: %v", err)
	}
	err = openapi3filter.ValidateResponse(t.Context(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.status, Header: resp.header,
		Body: io.NopCloser(bytes.NewReader(resp.body)), Options: in.Options})
	if err != nil {
		t.Errorf("answer not as documented: %v\nbody %s", validationErrors(err), resp.body)
	}
}

// validationErrors lists each of a validation's errors on a line of its own.
func validationErrors(err error) string {
	var multi openapi3.MultiError
	if !errors.As(err, &multi) {
		return err.Error()
	}
	lines := make([]string, len(multi))
	for i, e := range multi {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}
