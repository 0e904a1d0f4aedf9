package gateway_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	verrors "github.com/pb33f/libopenapi-validator/errors"

	"github.com/novaflow/nova/services/gateway/gateway"
)

// openapiValidator reads GET /v1/openapi.json, served without a key, and
// checks it is a valid OpenAPI 3.1 document.
func openapiValidator(t *testing.T) validator.Validator {
	t.Helper()
	resp := h.do(t, h.url, request{method: "GET", path: "/v1/openapi.json"})
	if resp.status != http.StatusOK || resp.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/openapi.json: status %d, Content-Type %q", resp.status, resp.header.Get("Content-Type"))
	}
	doc, err := libopenapi.NewDocument(resp.body)
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.GetVersion(); v != "3.1.0" {
		t.Errorf("OpenAPI version %q, want 3.1.0", v)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		t.Fatalf("the document is not valid OpenAPI 3.1:\n%s", describeErrors(verrs))
	}
	return v
}

func describeErrors(errs []*verrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString(e.Message + ": " + e.Reason + "\n")
		for _, s := range e.SchemaValidationErrors {
			b.WriteString("    " + s.Reason + " at " + s.FieldPath + "\n")
		}
	}
	return b.String()
}

// TestOpenAPIDescribesEveryRoute: the document's operations are exactly the
// routes the gateway serves.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	openapiValidator(t)
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
	v := openapiValidator(t)
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
		{"wrong scope", request{method: "GET", path: "/v1/executions", key: h.key["writer"]}, 403},
		{"workflows", request{method: "GET", path: "/v1/workflows", key: h.key["reader"]}, 200},
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
			httpReq, err := http.NewRequest(c.req.method, h.url+c.req.path, strings.NewReader(c.req.body))
			if err != nil {
				t.Fatal(err)
			}
			if c.req.body != "" {
				httpReq.Header.Set("Content-Type", "application/json")
			}
			if c.req.key != "" {
				httpReq.Header.Set("Authorization", "Bearer "+c.req.key)
			}
			httpResp := &http.Response{StatusCode: resp.status, Header: resp.header, Body: io.NopCloser(bytes.NewReader(resp.body)), Request: httpReq}
			if ok, errs := v.ValidateHttpRequestResponse(httpReq, httpResp); !ok {
				if c.want < 300 || !onlyRequestErrors(errs) {
					t.Errorf("not as documented:\n%s\nbody %s", describeErrors(errs), resp.body)
				}
			}
		})
	}
}

// onlyRequestErrors: a request the gateway refuses may well be one the
// document refuses too; only its answer must be as documented.
func onlyRequestErrors(errs []*verrors.ValidationError) bool {
	for _, e := range errs {
		if e.ValidationType == "response" {
			return false
		}
	}
	return true
}
