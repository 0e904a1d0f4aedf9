package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/eventjson"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/gateway/gateway"
)

// answerRecorder keeps the gateway's last answer to the SDK's client, which
// itself reports only whether the event was taken.
type answerRecorder struct {
	mu   sync.Mutex
	last response
}

func (a *answerRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	a.mu.Lock()
	a.last = response{status: resp.StatusCode, header: resp.Header.Clone(), body: body}
	a.mu.Unlock()
	return resp, nil
}

// sendEvent posts ev to POST /v1/events with the CloudEvents SDK's HTTP
// client, in structured or binary content mode, with key as the Bearer key
// (none when empty), and returns the gateway's answer.
func sendEvent(t *testing.T, key string, structured bool, ev cloudevents.Event) response {
	t.Helper()
	rec := &answerRecorder{}
	opts := []cehttp.Option{cehttp.WithTarget(h.url + "/v1/events"), cehttp.WithRoundTripper(rec)}
	if key != "" {
		opts = append(opts, cehttp.WithHeader("Authorization", "Bearer "+key))
	}
	c, err := cloudevents.NewClientHTTP(opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if structured {
		ctx = cloudevents.WithEncodingStructured(ctx)
	} else {
		ctx = cloudevents.WithEncodingBinary(ctx)
	}
	result := c.Send(ctx, ev)
	var res *cehttp.Result
	if !cloudevents.ResultAs(result, &res) {
		t.Fatalf("send event %s: %v", ev.ID(), result)
	}
	rec.mu.Lock()
	resp := rec.last
	rec.mu.Unlock()
	if resp.status != res.StatusCode || cloudevents.IsACK(result) != (res.StatusCode/100 == 2) {
		t.Fatalf("the SDK reports %v (status %d), the gateway answered %d", result, res.StatusCode, resp.status)
	}
	return resp
}

// newEvent is a CloudEvent as a producer builds one; data is its JSON text
// (inline in structured mode), or raw bytes (data_base64 there).
func newEvent(id, typ string, data any) cloudevents.Event {
	ev := cloudevents.NewEvent()
	ev.SetID(id)
	ev.SetSource("gateway-test/producer")
	ev.SetType(typ)
	switch d := data.(type) {
	case nil:
	case string:
		if err := ev.SetData(cloudevents.ApplicationJSON, json.RawMessage(d)); err != nil {
			panic(fmt.Sprintf("event data %s: %v", d, err))
		}
	case []byte:
		_ = ev.SetData(cloudevents.ApplicationJSON, d)
	default:
		panic(fmt.Sprintf("event data of type %T", data))
	}
	return ev
}

// eventAnswer is the 202 of POST /v1/events.
type eventAnswer struct {
	ID          string `json:"id"`
	Type        string `json:"type"`
	ExecutionID string `json:"execution_id"`
	Workflow    string `json:"workflow"`
	Links       struct {
		Self       string `json:"self"`
		Events     string `json:"events"`
		Executions string `json:"executions"`
	} `json:"links"`
}

// awaitCompletion waits for the completion event of an execution on the bus.
func (h *harness) awaitCompletion(t *testing.T, id string) *novav1.WorkflowCompleted {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cons, err := h.bus.JetStream().OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.EventSubject(id, bus.KindWorkflowCompleted)},
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchContext(ctx))
	if err != nil {
		t.Fatalf("execution %s did not complete: %v", id, err)
	}
	ev, err := bus.DecodeNATS(m.Headers(), m.Data())
	if err != nil {
		t.Fatal(err)
	}
	var wc novav1.WorkflowCompleted
	if err := bus.Decode(*ev, &wc); err != nil {
		t.Fatal(err)
	}
	return &wc
}

// wantExactNumbers checks the numbers the exact-numbers workflow ends with
// as text, and its note as a string: the SDK's JSON encoder writes "<" as
// "\u003c" (and the context keeps that text as the producer sent it).
func wantExactNumbers(t *testing.T, end jsonvalue.Object) {
	t.Helper()
	want := map[string]string{"id": "9007199254740993", "price": "150.0", "next_id": "9007199254740994", "total": "300.0"}
	for k, v := range want {
		if string(end[k]) != v {
			t.Errorf("context[%q] = %s, want %s (context %s)", k, end[k], v, end.Bytes())
		}
	}
	var note string
	if err := json.Unmarshal(end["note"], &note); err != nil || note != "<é>" {
		t.Errorf("context[\"note\"] = %s, want \"<é>\"", end["note"])
	}
}

func TestEventsStart(t *testing.T) {
	h.register(t, exactYAML)
	def, err := workflow.Parse([]byte(exactYAML))
	if err != nil {
		t.Fatal(err)
	}
	initial, err := jsonvalue.ParseObject([]byte(exactContext))
	if err != nil {
		t.Fatal(err)
	}
	ownID := "own-" + uuid.NewString()
	inline, err := eventjson.Marshal(&novav1.StartWorkflow{ExecutionId: ownID, Definition: def, Context: initial.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	eventID := "ev-" + uuid.NewString()
	tests := []struct {
		name       string
		structured bool
		id         string
		data       any
		execution  string // the execution id to expect; empty: a UUID derived from id
	}{
		{"binary, by name, the execution named by the event id", false, eventID,
			`{"workflowName": "exact-numbers", "context": ` + exactContext + `}`, eventID},
		{"structured, an inline definition and an execution id of its own", true, "ev-" + uuid.NewString(),
			string(inline), ownID},
		{"structured with data_base64, field names as in the .proto, an id no key can be", true, "order 42/" + uuid.NewString(),
			[]byte(`{"workflow_name": "exact-numbers", "context": ` + exactContext + `}`), ""},
		// GET /v1/executions/events is the stream of every execution.
		{"binary, the event id events, which no execution may have", false, "events",
			`{"workflowName": "exact-numbers", "context": ` + exactContext + `}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.execution
			resp := sendEvent(t, h.key["writer"], tt.structured, newEvent(tt.id, bus.TypeWorkflowStart, tt.data))
			var a eventAnswer
			decode(t, resp, http.StatusAccepted, &a)
			if a.ID != tt.id || a.Type != bus.TypeWorkflowStart || a.ExecutionID == "" || a.Workflow != "" {
				t.Fatalf("answer = %s", resp.body)
			}
			if want != "" && a.ExecutionID != want {
				t.Errorf("execution %s, want %s", a.ExecutionID, want)
			}
			if want == "" && (a.ExecutionID == tt.id || uuid.Validate(a.ExecutionID) != nil) {
				t.Errorf("execution %q for the event id %q: want a UUID derived from it", a.ExecutionID, tt.id)
			}
			if a.Links.Self != "/v1/executions/"+a.ExecutionID || a.Links.Events != a.Links.Self+"/events" ||
				resp.header.Get("Location") != a.Links.Self {
				t.Errorf("links %+v, Location %q", a.Links, resp.header.Get("Location"))
			}

			wc := h.awaitCompletion(t, a.ExecutionID)
			if wc.GetStatus() != "succeeded" || wc.GetWorkflowName() != "exact-numbers" {
				t.Fatalf("completion = %v", wc)
			}
			wantExactNumbers(t, jsonvalue.MustObject(wc.GetContext()))
			v := h.awaitStatus(t, a.ExecutionID, "succeeded")
			if v.Execution.ExecutionID != a.ExecutionID {
				t.Errorf("GET %s = %+v", a.Links.Self, v.Execution)
			}
		})
	}
}

func TestEventsDuplicateID(t *testing.T) {
	h.register(t, exactYAML)
	id := "dup-" + uuid.NewString()
	first := sendEvent(t, h.key["writer"], false,
		newEvent(id, bus.TypeWorkflowStart, `{"workflowName": "exact-numbers", "context": `+exactContext+`}`))
	var a eventAnswer
	decode(t, first, http.StatusAccepted, &a)
	if wc := h.awaitCompletion(t, a.ExecutionID); wc.GetStatus() != "succeeded" {
		t.Fatalf("first start: %v", wc)
	}
	commands := h.lastCommand(t)

	// The same id again, in the other mode and with other data: JetStream
	// drops it, and nothing new starts.
	again := sendEvent(t, h.key["writer"], true,
		newEvent(id, bus.TypeWorkflowStart, `{"workflowName": "exact-numbers", "context": {"id": 1, "price": 2.5}}`))
	var b eventAnswer
	decode(t, again, http.StatusAccepted, &b)
	if b.ExecutionID != a.ExecutionID {
		t.Errorf("the repeated id answers execution %s, want %s", b.ExecutionID, a.ExecutionID)
	}
	if got := h.lastCommand(t); got != commands {
		t.Errorf("NOVA_CMD's last sequence went from %d to %d: the repeated id was stored again", commands, got)
	}
	h.waitAudit(t)
	if n := h.startedEvents(t, a.ExecutionID); n != 1 {
		t.Errorf("%d workflow.started events for %s, want 1", n, a.ExecutionID)
	}
	v := h.awaitStatus(t, a.ExecutionID, "succeeded")
	if got := string(v.Execution.InitialContext["id"]); got != "9007199254740993" {
		t.Errorf("initial context id = %s: the repeat's data reached the engine", got)
	}
}

func TestEventsRegister(t *testing.T) {
	name := "ev-reg-" + uuid.NewString()[:8]
	def, err := workflow.Parse([]byte(chain(name, `context["n"] = context["n"] * 2`)))
	if err != nil {
		t.Fatal(err)
	}
	data, err := eventjson.Marshal(&novav1.RegisterWorkflow{Definition: def})
	if err != nil {
		t.Fatal(err)
	}
	register := newEvent("reg-"+uuid.NewString(), bus.TypeWorkflowRegister, string(data))

	// Starting needs executions:write; registering needs admin.
	p := problem(t, sendEvent(t, h.key["writer"], true, register), http.StatusForbidden, gateway.TypeForbidden)
	if !strings.Contains(p.Detail, "admin") {
		t.Errorf("detail %q does not name the scope", p.Detail)
	}

	resp := sendEvent(t, h.key["admin"], true, register)
	var a eventAnswer
	decode(t, resp, http.StatusAccepted, &a)
	if a.ID != register.ID() || a.Type != bus.TypeWorkflowRegister || a.Workflow != name || a.ExecutionID != "" ||
		a.Links.Self != "/v1/workflows/"+name {
		t.Fatalf("answer = %s", resp.body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := h.do(t, h.url, request{method: "GET", path: a.Links.Self, key: h.key["reader"]})
		if got.status == http.StatusOK {
			break
		}
		problem(t, got, http.StatusNotFound, gateway.TypeNotFound)
		if time.Now().After(deadline) {
			t.Fatalf("workflow %s never registered", name)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Started by name, with a start event.
	resp = sendEvent(t, h.key["writer"], false, newEvent("ev-"+uuid.NewString(), bus.TypeWorkflowStart,
		`{"workflowName": "`+name+`", "context": {"n": 21}}`))
	var s eventAnswer
	decode(t, resp, http.StatusAccepted, &s)
	wc := h.awaitCompletion(t, s.ExecutionID)
	if got := string(jsonvalue.MustObject(wc.GetContext())["n"]); wc.GetStatus() != "succeeded" || got != "42" {
		t.Errorf("completion %v, n = %s", wc, got)
	}
}

func TestEventsRejected(t *testing.T) {
	// A secret in the data is neither logged nor echoed.
	secret := "ghp_" + strings.Repeat("xY7", 12)
	withSecret := `"context": {"api_token": "` + secret + `"}`
	broken, err := workflow.Parse([]byte(brokenYAML))
	if err != nil {
		t.Fatal(err)
	}
	verr, ok := workflow.Validate(broken, workflow.ValidateOptions{AllowPrompt: true}).(*workflow.ValidationError)
	if !ok || len(verr.Problems) < 3 {
		t.Fatalf("the broken workflow must have several problems")
	}
	brokenRegister, _ := eventjson.Marshal(&novav1.RegisterWorkflow{Definition: broken})
	brokenStart, _ := eventjson.Marshal(&novav1.StartWorkflow{Definition: broken})
	badName, _ := workflow.Parse([]byte(chain("bad name", `context["x"] = 1`)))
	badNameRegister, _ := eventjson.Marshal(&novav1.RegisterWorkflow{Definition: badName})

	event := func(typ string, data any, edit ...func(*cloudevents.Event)) cloudevents.Event {
		ev := newEvent("bad-"+uuid.NewString(), typ, data)
		for _, f := range edit {
			f(&ev)
		}
		return ev
	}
	tests := []struct {
		name       string
		key        string
		structured bool
		ev         cloudevents.Event
		status     int
		typ        string
		fields     []string
		detail     []string // the detail says each
	}{
		{"a type that is not a command", "writer", false,
			event("io.nova.workflow.completed.v1", `{"workflowName": "exact-numbers", `+withSecret+`}`),
			400, gateway.TypeInvalidRequest, []string{"type"},
			[]string{"io.nova.workflow.completed.v1", bus.TypeWorkflowStart, bus.TypeWorkflowRegister}},
		{"data that is not JSON", "writer", false,
			event(bus.TypeWorkflowStart, []byte(`{"workflowName": "exact-numbers", `+withSecret)),
			400, gateway.TypeInvalidRequest, []string{"data"}, []string{"nova.v1.StartWorkflow"}},
		{"data of the wrong shape", "writer", true,
			event(bus.TypeWorkflowStart, `{"workflowName": 5, `+withSecret+`}`),
			400, gateway.TypeInvalidRequest, []string{"data"}, []string{"workflowName"}},
		{"no data", "writer", false, event(bus.TypeWorkflowStart, nil),
			400, gateway.TypeInvalidRequest, []string{"data"}, nil},
		{"neither workflow nor definition", "writer", true, event(bus.TypeWorkflowStart, `{`+withSecret+`}`),
			400, gateway.TypeInvalidRequest, []string{"data.workflowName"}, nil},
		{"a context that is no object", "writer", false,
			event(bus.TypeWorkflowStart, `{"workflowName": "exact-numbers", "context": [1, 2]}`),
			400, gateway.TypeInvalidRequest, []string{"data.context"}, nil},
		{"the dataschema of another message", "writer", false,
			event(bus.TypeWorkflowStart, `{"workflowName": "exact-numbers"}`, func(e *cloudevents.Event) {
				e.SetDataSchema("proto:nova.v1.RegisterWorkflow")
			}),
			400, gateway.TypeInvalidRequest, []string{"dataschema"}, []string{"proto:nova.v1.StartWorkflow"}},
		{"data that is not JSON by its type", "writer", true,
			event(bus.TypeWorkflowStart, nil, func(e *cloudevents.Event) { _ = e.SetData("text/plain", []byte("exact-numbers")) }),
			400, gateway.TypeInvalidRequest, []string{"datacontenttype"}, nil},
		{"a workflow that is not registered", "writer", false,
			event(bus.TypeWorkflowStart, `{"workflowName": "never-registered", `+withSecret+`}`),
			422, gateway.TypeUnknownWorkflow, []string{"data.workflowName"}, []string{"never-registered"}},
		{"an invalid inline definition", "writer", true, event(bus.TypeWorkflowStart, string(brokenStart)),
			422, gateway.TypeInvalidWorkflow, nil, nil},
		{"registering an invalid definition", "admin", true, event(bus.TypeWorkflowRegister, string(brokenRegister)),
			422, gateway.TypeInvalidWorkflow, nil, nil},
		{"registering a name the registry cannot keep", "admin", false, event(bus.TypeWorkflowRegister, string(badNameRegister)),
			422, gateway.TypeInvalidWorkflow, []string{"data.definition.name"}, []string{"bad name"}},
		{"registering no definition", "admin", false, event(bus.TypeWorkflowRegister, `{}`),
			400, gateway.TypeInvalidRequest, []string{"data.definition"}, nil},
		{"no key", "", false, event(bus.TypeWorkflowStart, `{"workflowName": "exact-numbers"}`),
			401, gateway.TypeUnauthorized, nil, nil},
		{"a reading key", "reader", true, event(bus.TypeWorkflowStart, `{"workflowName": "exact-numbers"}`),
			403, gateway.TypeForbidden, nil, []string{"executions:write"}},
		{"a starting key registering", "writer", false, event(bus.TypeWorkflowRegister, string(brokenRegister)),
			403, gateway.TypeForbidden, nil, []string{"admin"}},
	}
	commands := h.lastCommand(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := sendEvent(t, h.key[tt.key], tt.structured, tt.ev)
			p := problem(t, resp, tt.status, tt.typ)
			if tt.fields != nil && !slices.Equal(p.fields(), tt.fields) {
				t.Errorf("fields %v, want %v; %s", p.fields(), tt.fields, resp.body)
			}
			for _, s := range tt.detail {
				if !strings.Contains(p.Detail+fmt.Sprint(p.Errors), s) {
					t.Errorf("the problem does not say %q: %s", s, resp.body)
				}
			}
			if tt.typ == gateway.TypeInvalidWorkflow && tt.fields == nil {
				if len(p.Errors) != len(verr.Problems) {
					t.Fatalf("%d errors, want the %d problems nova validate lists: %s", len(p.Errors), len(verr.Problems), resp.body)
				}
				for i, want := range verr.Problems {
					field := "data.definition"
					if want.Field != "" {
						field += "." + want.Field
					}
					if got := p.Errors[i]; got.Field != field || got.Node != want.NodeID || got.Detail != want.Message {
						t.Errorf("error %d = %+v, want field %q, node %q, detail %q", i, got, field, want.NodeID, want.Message)
					}
				}
			}
			if strings.Contains(string(resp.body), secret) {
				t.Errorf("the problem shows the secret: %s", resp.body)
			}
		})
	}

	t.Run("not a CloudEvent", func(t *testing.T) {
		resp := h.do(t, h.url, request{method: "POST", path: "/v1/events", key: h.key["writer"],
			body: `{"workflow": "exact-numbers"}`, header: map[string]string{"Content-Type": "application/json"}})
		p := problem(t, resp, http.StatusBadRequest, gateway.TypeInvalidRequest)
		if !strings.Contains(p.Detail, "binary mode") || !strings.Contains(p.Detail, "structured mode") {
			t.Errorf("detail %q does not say what a CloudEvent looks like", p.Detail)
		}
	})
	t.Run("a binary-mode event without a source", func(t *testing.T) {
		resp := h.do(t, h.url, request{method: "POST", path: "/v1/events", key: h.key["writer"],
			body: `{"workflowName": "exact-numbers"}`, header: map[string]string{
				"Content-Type": "application/json", "Ce-Specversion": "1.0", "Ce-Id": "no-source", "Ce-Type": bus.TypeWorkflowStart}})
		p := problem(t, resp, http.StatusBadRequest, gateway.TypeInvalidRequest)
		if !slices.Equal(p.fields(), []string{"source"}) {
			t.Errorf("fields %v, want [source]", p.fields())
		}
	})
	t.Run("a batch", func(t *testing.T) {
		resp := h.do(t, h.url, request{method: "POST", path: "/v1/events", key: h.key["writer"],
			body: `[]`, header: map[string]string{"Content-Type": "application/cloudevents-batch+json"}})
		problem(t, resp, http.StatusBadRequest, gateway.TypeInvalidRequest)
	})

	if got := h.lastCommand(t); got != commands {
		t.Errorf("NOVA_CMD's last sequence went from %d to %d: a refused event was published", commands, got)
	}
	if strings.Contains(h.logs.String(), secret) {
		t.Error("the secret from an event's data is in the logs")
	}
}
