package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/workflow"
	"github.com/novaflow/nova/services/gateway/gateway"
)

func TestAuthentication(t *testing.T) {
	wrongKey, _, err := gateway.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	const startBodyText = `{"workflow": "exact-numbers"}`
	tests := []struct {
		name          string
		method, path  string
		authorization string
		status        int
		typ           string
		challenge     string // WWW-Authenticate
	}{
		{"no key", "POST", "/v1/executions", "", 401, gateway.TypeUnauthorized, `Bearer realm="nova"`},
		{"no key, reading", "GET", "/v1/executions", "", 401, gateway.TypeUnauthorized, `Bearer realm="nova"`},
		{"a key that is not one", "POST", "/v1/executions", "Bearer " + wrongKey, 401, gateway.TypeUnauthorized, `Bearer realm="nova", error="invalid_token"`},
		{"a key's hash instead of the key", "GET", "/v1/executions", "Bearer " + gateway.HashKey(h.key["admin"]), 401, gateway.TypeUnauthorized, `Bearer realm="nova", error="invalid_token"`},
		{"not Bearer", "GET", "/v1/executions", "Basic " + h.key["admin"], 401, gateway.TypeUnauthorized, `Bearer realm="nova", error="invalid_request"`},
		{"Bearer without a key", "GET", "/v1/executions", "Bearer ", 401, gateway.TypeUnauthorized, `Bearer realm="nova", error="invalid_request"`},
		{"reader starting", "POST", "/v1/executions", "Bearer " + h.key["reader"], 403, gateway.TypeForbidden, `Bearer realm="nova", error="insufficient_scope", scope="executions:write"`},
		{"writer reading", "GET", "/v1/executions", "Bearer " + h.key["writer"], 403, gateway.TypeForbidden, `Bearer realm="nova", error="insufficient_scope", scope="executions:read"`},
		{"writer reading one", "GET", "/v1/executions/x", "Bearer " + h.key["writer"], 403, gateway.TypeForbidden, `Bearer realm="nova", error="insufficient_scope", scope="executions:read"`},
		{"another scope only", "GET", "/v1/executions", "Bearer " + h.key["refiner"], 403, gateway.TypeForbidden, `Bearer realm="nova", error="insufficient_scope", scope="executions:read"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := request{method: tt.method, path: tt.path, header: map[string]string{}}
			if tt.method == "POST" {
				req.body = startBodyText
			}
			if tt.authorization != "" {
				req.header["Authorization"] = tt.authorization
			}
			resp := h.do(t, h.url, req)
			p := problem(t, resp, tt.status, tt.typ)
			if got := resp.header.Get("WWW-Authenticate"); got != tt.challenge {
				t.Errorf("WWW-Authenticate = %q, want %q", got, tt.challenge)
			}
			for _, k := range []string{wrongKey, h.key["admin"], h.key["reader"], h.key["writer"], h.key["refiner"]} {
				if strings.Contains(string(resp.body), k) {
					t.Errorf("the problem shows a key: %s", resp.body)
				}
			}
			if tt.status == 403 && !strings.Contains(p.Detail, "scope") {
				t.Errorf("detail %q does not name the scope", p.Detail)
			}
		})
	}

	// The right scopes pass: admin has them all.
	for _, key := range []string{h.key["admin"], h.key["reader"]} {
		resp := h.do(t, h.url, request{method: "GET", path: "/v1/executions?limit=1", key: key})
		if resp.status != http.StatusOK {
			t.Errorf("GET with a reading key: %d %s", resp.status, resp.body)
		}
	}
	resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions", key: h.key["admin"], body: `{}`})
	problem(t, resp, http.StatusBadRequest, gateway.TypeInvalidRequest)

	// No key, right or wrong, is in the logs or the spans.
	logs := h.logs.String()
	if !strings.Contains(logs, "key=admin") {
		t.Errorf("the access log does not name the admin key by its name")
	}
	for name, k := range map[string]string{"wrong": wrongKey, "admin": h.key["admin"], "reader": h.key["reader"], "writer": h.key["writer"]} {
		if strings.Contains(logs, k) {
			t.Errorf("the %s key is in the logs", name)
		}
		for _, s := range h.spans.Ended() {
			for _, a := range s.Attributes() {
				if strings.Contains(a.Value.Emit(), k) {
					t.Errorf("the %s key is in span %q, attribute %s", name, s.Name(), a.Key)
				}
			}
		}
	}
}

func TestNoAuth(t *testing.T) {
	open, err := h.serve(gateway.Deps{NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	resp := h.do(t, open, request{method: "GET", path: "/v1/executions?limit=1"})
	if resp.status != http.StatusOK {
		t.Errorf("without a key: %d %s", resp.status, resp.body)
	}
	if !strings.Contains(h.logs.String(), "authentication is off") {
		t.Error("no warning that authentication is off")
	}
	if _, err := gateway.New(gateway.Deps{Bus: h.bus, Store: h.store}); err == nil {
		t.Error("New without keys and with authentication on: no error")
	}
}

func TestBodyTooLarge(t *testing.T) {
	small, err := h.serve(gateway.Deps{Keys: h.keys, Limits: gateway.Limits{MaxBody: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	big := startBody(`"definition": `+chain("big", `context["x"] = 1`), `"context": {"blob": "`+strings.Repeat("x", 2048)+`"}`)
	p := problem(t, h.do(t, small, request{method: "POST", path: "/v1/executions", key: h.key["writer"], body: big}),
		http.StatusRequestEntityTooLarge, gateway.TypeBodyTooLarge)
	if !strings.Contains(p.Detail, "1024") {
		t.Errorf("detail %q does not say the limit", p.Detail)
	}

	// Sent without a length (chunked), the body is cut off at the limit too.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", small+"/v1/executions", io.MultiReader(strings.NewReader(big)))
	if err != nil {
		t.Fatal(err)
	}
	if req.ContentLength != 0 {
		t.Fatalf("the request has a length (%d); it must go chunked", req.ContentLength)
	}
	req.Header.Set("Authorization", "Bearer "+h.key["writer"])
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	problem(t, response{status: res.StatusCode, header: res.Header, body: body}, http.StatusRequestEntityTooLarge, gateway.TypeBodyTooLarge)

	// The same body is fine under the default limit.
	resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions?wait=60s", key: h.key["writer"], body: big})
	var c completionDoc
	decode(t, resp, http.StatusOK, &c)
}

// A start within the gateway's body limit whose event is larger than the
// bus takes (values each under the value store's threshold) is answered
// 413 naming both sizes, before anything is published.
func TestStartEventTooLargeForTheBus(t *testing.T) {
	limit := h.bus.Conn().MaxPayload()
	value := strings.Repeat("x", 200<<10) // under the value store's 256 KiB threshold
	var fields []string
	for i := range int(limit/int64(len(value))) + 1 {
		fields = append(fields, fmt.Sprintf(`"v%d": "%s"`, i, value))
	}
	body := startBody(`"definition": `+chain("too-large-for-the-bus", `context["x"] = 1`), `"context": {`+strings.Join(fields, ", ")+`}`)
	if int64(len(body)) > gateway.DefaultMaxBody {
		t.Fatalf("the body (%d bytes) is over the gateway's own limit: the test checks less than it says", len(body))
	}
	p := problem(t, h.do(t, h.url, request{method: "POST", path: "/v1/executions", key: h.key["writer"], body: body}),
		http.StatusRequestEntityTooLarge, gateway.TypeBodyTooLarge)
	for _, want := range []string{fmt.Sprint(limit), "max_payload", "$ref"} {
		if !strings.Contains(p.Detail, want) {
			t.Errorf("detail %q does not say %q", p.Detail, want)
		}
	}
}

func TestBadStartRequests(t *testing.T) {
	valid := chain("valid", `context["x"] = 1`)
	tests := []struct {
		name   string
		query  string
		header map[string]string
		body   string
		fields []string // nil: the body as a whole is at fault
	}{
		{"no body", "", nil, "", []string{"workflow"}},
		{"not JSON", "", nil, `{"workflow": `, nil},
		{"not an object", "", nil, `["exact-numbers"]`, nil},
		{"empty object", "", nil, `{}`, []string{"workflow"}},
		{"both workflow and definition", "", nil, startBody(`"workflow": "exact-numbers"`, `"definition": `+valid), []string{"definition"}},
		{"workflow not a string", "", nil, `{"workflow": 5}`, []string{"workflow"}},
		{"workflow empty", "", nil, `{"workflow": ""}`, []string{"workflow"}},
		{"definition a number", "", nil, `{"definition": 5}`, []string{"definition"}},
		{"definition text that is no YAML", "", nil, `{"definition": "nodes: [\n"}`, []string{"definition"}},
		{"context not an object", "", nil, startBody(`"definition": `+valid, `"context": [1, 2]`), []string{"context"}},
		{"context a string", "", nil, startBody(`"definition": `+valid, `"context": "{}"`), []string{"context"}},
		{"unknown fields", "", nil, startBody(`"definition": `+valid, `"contxt": {}`, `"priority": 1`), []string{"contxt", "priority"}},
		{"several at once", "", nil, `{"workflow": 5, "context": 1}`, []string{"workflow", "context"}},
		{"wait not a duration", "?wait=soon", nil, startBody(`"definition": ` + valid), []string{"wait"}},
		{"wait negative", "?wait=-1s", nil, startBody(`"definition": ` + valid), []string{"wait"}},
		{"unknown parameter", "?wiat=30s", nil, startBody(`"definition": ` + valid), []string{"wiat"}},
		{"Idempotency-Key too long", "", map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}, startBody(`"definition": ` + valid), []string{"Idempotency-Key"}},
		{"Idempotency-Key not printable", "", map[string]string{"Idempotency-Key": "clé"}, startBody(`"definition": ` + valid), []string{"Idempotency-Key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions" + tt.query, key: h.key["writer"], body: tt.body, header: tt.header})
			p := problem(t, resp, http.StatusBadRequest, gateway.TypeInvalidRequest)
			if !slices.Equal(p.fields(), tt.fields) {
				t.Errorf("fields %v, want %v; %s", p.fields(), tt.fields, resp.body)
			}
		})
	}

	t.Run("a workflow that is not registered", func(t *testing.T) {
		resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions", key: h.key["writer"], body: `{"workflow": "never-registered"}`})
		p := problem(t, resp, http.StatusUnprocessableEntity, gateway.TypeUnknownWorkflow)
		if !slices.Equal(p.fields(), []string{"workflow"}) {
			t.Errorf("fields %v, want [workflow]", p.fields())
		}
	})

	t.Run("a secret in the body is not echoed", func(t *testing.T) {
		secret := "ghp_" + strings.Repeat("aB3", 12)
		resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions", key: h.key["writer"], body: `{"definition": "` + secret + `: [\n"}`})
		problem(t, resp, http.StatusBadRequest, gateway.TypeInvalidRequest)
		if strings.Contains(string(resp.body), secret) {
			t.Errorf("the problem quotes the secret: %s", resp.body)
		}
	})
}

// brokenYAML has several problems; the gateway must list each, as nova
// validate does.
const brokenYAML = `name: broken
nodes:
  - id: start
    type: start
  - id: check
    type: decision
    code: context["branch_decision"] = "yes"
  - id: orphan
    type: action
  - id: end
    type: end
edges:
  - from: start
    to: check
  - from: check
    to: ghost
    condition: "yes"
  - from: check
    to: end
    condition: "no"
`

func TestInvalidWorkflow(t *testing.T) {
	// What nova validate reports (workflow.Load: Parse, then Validate).
	def, err := workflow.Parse([]byte(brokenYAML))
	if err == nil {
		err = workflow.Validate(def, workflow.ValidateOptions{AllowPrompt: true})
	}
	var verr *workflow.ValidationError
	if !errors.As(err, &verr) || len(verr.Problems) < 3 {
		t.Fatalf("the broken workflow must have several problems, has: %v", err)
	}
	for _, body := range []string{startBody(`"definition": ` + jsonString(brokenYAML))} {
		resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions", key: h.key["writer"], body: body})
		p := problem(t, resp, http.StatusUnprocessableEntity, gateway.TypeInvalidWorkflow)
		if len(p.Errors) != len(verr.Problems) {
			t.Fatalf("%d errors, want the %d problems nova validate lists: %s", len(p.Errors), len(verr.Problems), resp.body)
		}
		for i, want := range verr.Problems {
			got := p.Errors[i]
			field := "definition"
			if want.Field != "" {
				field += "." + want.Field
			}
			if got.Field != field || got.Node != want.NodeID || got.Detail != want.Message {
				t.Errorf("error %d = %+v, want field %q, node %q, detail %q", i, got, field, want.NodeID, want.Message)
			}
		}
		if want := fmt.Sprintf(`workflow "broken" has %d problems`, len(verr.Problems)); p.Detail != want {
			t.Errorf("detail %q, want %q", p.Detail, want)
		}
	}
	// A shape problem (a node type that does not exist) is listed the same way.
	resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions", key: h.key["writer"],
		body: `{"definition": {"name": "x", "nodes": [{"id": "a", "type": "loop"}, {"id": "b", "kind": "end"}], "edges": []}}`})
	p := problem(t, resp, http.StatusUnprocessableEntity, gateway.TypeInvalidWorkflow)
	if len(p.Errors) < 2 {
		t.Errorf("want every shape problem, got %s", resp.body)
	}
}

func TestRoutes(t *testing.T) {
	tests := []struct {
		method, path string
		status       int
		typ, allow   string
	}{
		{"GET", "/index.html", 404, gateway.TypeNotFound, ""},
		{"GET", "/console/", 404, gateway.TypeNotFound, ""},
		{"GET", "/console/nothing.js", 404, gateway.TypeNotFound, ""},
		{"GET", "/console/index.html", 404, gateway.TypeNotFound, ""},
		{"GET", "/console/src/main.ts", 404, gateway.TypeNotFound, ""},
		{"POST", "/", 405, gateway.TypeMethodNotAllowed, "GET, HEAD"},
		{"GET", "/v1/nothing", 404, gateway.TypeNotFound, ""},
		{"GET", "/v1/executions/a/b", 404, gateway.TypeNotFound, ""},
		{"DELETE", "/v1/executions", 405, gateway.TypeMethodNotAllowed, "GET, HEAD, POST"},
		{"PUT", "/v1/executions/abc", 405, gateway.TypeMethodNotAllowed, "GET, HEAD"},
		{"POST", "/v1/executions/abc", 405, gateway.TypeMethodNotAllowed, "GET, HEAD"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			resp := h.do(t, h.url, request{method: tt.method, path: tt.path, key: h.key["admin"]})
			problem(t, resp, tt.status, tt.typ)
			if got := resp.header.Get("Allow"); got != tt.allow {
				t.Errorf("Allow = %q, want %q", got, tt.allow)
			}
		})
	}
}
