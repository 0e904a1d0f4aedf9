package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// exactValues are context values that a float64 on the way would change:
// integers past 2**53, floats without a fraction, negative zero, extremes,
// deep nesting and unicode keys. text is what Python's json module writes for
// the value; pyType is its Python type in a node; js says whether a
// JavaScript number holds it (the node must refuse the others, naming them).
var exactValues = []struct {
	name, text, pyType string
	js                 bool
}{
	{"2**53 + 1", `9007199254740993`, "int", false},
	{"int64 min", `-9223372036854775808`, "int", false},
	{"int64 max", `9223372036854775807`, "int", false},
	{"2**64", `18446744073709551616`, "int", false},
	{"2**200", `1606938044258990275541962092341162602522202993782792835301376`, "int", false},
	{"safe integer", `9007199254740991`, "int", true},
	{"float 150.0", `150.0`, "float", true},
	{"negative zero", `-0.0`, "float", true},
	{"1e308", `1e+308`, "float", true},
	{"smallest subnormal", `5e-324`, "float", true},
	{"deep nesting", deepNesting(40), "dict", true},
	{"unicode keys", `{"ключ":{"日本語":"値","emoji 🔑":[1,2.5]}}`, "dict", true},
	{"big int inside a list", `[1,{"id":9007199254740993}]`, "list", false},
}

func deepNesting(depth int) string {
	var b strings.Builder
	for i := range depth {
		fmt.Fprintf(&b, `{"l%d":[%d,`, i, i)
	}
	b.WriteString(`{"leaf":123456.789,"n":1e-07,"id":9007199254740991}`)
	for range depth {
		b.WriteString(`]}`)
	}
	return b.String()
}

// threeNodes copies v through three Python nodes and records the Python
// type and the sign of zero each node saw.
const threeNodes = `
name: exact-values
nodes:
  - {id: start, type: start}
  - id: a
    type: action
    code: |
      import math
      context["a_v"] = context["v"]
      context["a_type"] = type(context["v"]).__name__
      if isinstance(context["v"], float):
          context["a_sign"] = math.copysign(1.0, context["v"])
  - id: b
    type: action
    code: |
      import copy
      context["b_v"] = copy.deepcopy(context["a_v"])
  - id: c
    type: action
    code: |
      context["c_v"] = json.loads(json.dumps(context["b_v"]))
  - {id: done, type: end}
edges:
  - {from: start, to: a}
  - {from: a, to: b}
  - {from: b, to: c}
  - {from: c, to: done}
`

// jsNode hands v to a JavaScript node, then to a Python node.
const jsNode = `
name: exact-values-js
nodes:
  - {id: start, type: start}
  - id: js
    type: action
    language: javascript
    code: |
      context.js_v = context.v;
      context.js_kind = typeof context.v;
  - id: py
    type: action
    code: |
      context["py_type"] = type(context["v"]).__name__
  - {id: done, type: end}
edges:
  - {from: start, to: js}
  - {from: js, to: py}
  - {from: py, to: done}
`

// canonical decodes JSON with exact numbers and writes it again with sorted
// keys and no escaping, so two texts of the same value compare equal (Python
// escapes non-ASCII characters, Go sorts keys) while 150 and 150.0, or
// 2**53 and 2**53 + 1, do not.
func canonical(t *testing.T, raw []byte) string {
	t.Helper()
	v, err := jsonvalue.Decode(raw)
	if err != nil {
		t.Fatalf("not JSON: %v: %s", err, raw)
	}
	out, err := jsonvalue.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// member returns a member of a JSON object as its exact text.
func member(t *testing.T, raw []byte, key string) []byte {
	t.Helper()
	o, err := jsonvalue.ParseObject(raw)
	if err != nil {
		t.Fatalf("context %s: %v", raw, err)
	}
	v, ok := o[key]
	if !ok {
		t.Fatalf("context has no %q: %s", key, raw)
	}
	return v
}

func initialWith(text string) json.RawMessage {
	return json.RawMessage(`{"v":` + text + `}`)
}

func TestContextValuesStayExact(t *testing.T) {
	e := startEnv(t)
	py, js := parse(t, threeNodes), parse(t, jsNode)

	for _, tc := range exactValues {
		t.Run(tc.name, func(t *testing.T) {
			want := canonical(t, []byte(tc.text))

			// Three Python nodes; the completion event and the audit store.
			wc := e.run(py, initialWith(tc.text))
			if wc.Status != "succeeded" {
				t.Fatalf("python workflow %s: %s", wc.Status, wc.Error)
			}
			ctx := wc.GetContext().GetRaw()
			for _, key := range []string{"v", "a_v", "b_v", "c_v"} {
				if got := canonical(t, member(t, ctx, key)); got != want {
					t.Errorf("completion event context[%q] = %s, want %s", key, got, want)
				}
			}
			if got := string(member(t, ctx, "a_type")); got != `"`+tc.pyType+`"` {
				t.Errorf("Python saw a %s, want %s", got, tc.pyType)
			}
			if tc.text == `-0.0` && string(member(t, ctx, "a_sign")) != `-1.0` {
				t.Errorf("Python saw the sign of -0.0 as %s", member(t, ctx, "a_sign"))
			}
			nodes := e.chain(wc.ExecutionId)
			for _, n := range nodes {
				if n.NodeID != "c" {
					continue
				}
				out, _ := json.Marshal(n.OutputResult)
				if got := canonical(t, member(t, out, "c_v")); got != want {
					t.Errorf("audit store output_result of c: c_v = %s, want %s", got, want)
				}
				in, _ := json.Marshal(n.InputContext)
				if got := canonical(t, member(t, in, "v")); got != want {
					t.Errorf("audit store input_context of c: v = %s, want %s", got, want)
				}
			}
			exec, err := e.s.Store.Execution(e.ctx, wc.ExecutionId)
			if err != nil {
				t.Fatal(err)
			}
			final, _ := json.Marshal(exec.FinalContext)
			if got := canonical(t, member(t, final, "c_v")); got != want {
				t.Errorf("audit store final_context: c_v = %s, want %s", got, want)
			}

			// A JavaScript node gets the value when a JavaScript number
			// holds it; otherwise it refuses to run and names the key.
			wc = e.run(js, initialWith(tc.text))
			if !tc.js {
				if wc.Status != "failed" || !strings.Contains(wc.Error, "JavaScript cannot represent exactly") ||
					!strings.Contains(wc.Error, "v") {
					t.Errorf("javascript node with %s: status %s, error %q; want a failure naming the key", tc.text, wc.Status, wc.Error)
				}
				return
			}
			if wc.Status != "succeeded" {
				t.Fatalf("javascript workflow %s: %s", wc.Status, wc.Error)
			}
			ctx = wc.GetContext().GetRaw()
			// The untouched value is still exactly what was written.
			if got := canonical(t, member(t, ctx, "v")); got != want {
				t.Errorf("after the JavaScript node v = %s, want %s", got, want)
			}
			if got := string(member(t, ctx, "py_type")); got != `"`+tc.pyType+`"` {
				t.Errorf("the Python node after JavaScript saw a %s, want %s", got, tc.pyType)
			}
			// The copy is what JavaScript holds: the same number (150.0 and
			// -0.0 become 150 and 0, JavaScript has one number type).
			var orig, copied any
			_ = json.Unmarshal([]byte(tc.text), &orig)
			_ = json.Unmarshal(member(t, ctx, "js_v"), &copied)
			if fmt.Sprint(orig) != fmt.Sprint(copied) && !(tc.text == `-0.0` && fmt.Sprint(copied) == "0") {
				t.Errorf("JavaScript copy %v, want %v", copied, orig)
			}
		})
	}
}

// The same values through the CLI: nova run --context-file ... --json and
// nova chain --json, as a user sees them.
func TestCLIKeepsContextValuesExact(t *testing.T) {
	bin := buildNova(t)
	dir := t.TempDir()
	wf := filepath.Join(dir, "exact.yaml")
	var ctx bytes.Buffer
	ctx.WriteString("{")
	for i, tc := range exactValues {
		if i > 0 {
			ctx.WriteString(",")
		}
		fmt.Fprintf(&ctx, `"v%d":%s`, i, tc.text)
	}
	ctx.WriteString(`,"v":0}`)
	if err := os.WriteFile(wf, []byte(threeNodes), 0o600); err != nil {
		t.Fatal(err)
	}
	cf := filepath.Join(dir, "ctx.json")
	if err := os.WriteFile(cf, ctx.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	res := nova(t, bin, "run", wf, "--context-file", cf, "--json", "--data-dir", data)
	if res.code != 0 {
		t.Fatalf("nova run: exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	var run struct {
		ExecutionID string          `json:"execution_id"`
		Context     json.RawMessage `json:"context"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &run); err != nil {
		t.Fatalf("nova run --json: %v\n%s", err, res.stdout)
	}
	chain := nova(t, bin, "chain", "--json", "--data-dir", data, run.ExecutionID)
	if chain.code != 0 {
		t.Fatalf("nova chain: exit %d\n%s", chain.code, chain.stderr)
	}
	var view struct {
		Execution struct {
			Initial json.RawMessage `json:"initial_context"`
			Final   json.RawMessage `json:"final_context"`
		} `json:"execution"`
		Nodes []struct {
			NodeID string          `json:"node_id"`
			Output json.RawMessage `json:"output_result"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(chain.stdout), &view); err != nil {
		t.Fatalf("nova chain --json: %v\n%s", err, chain.stdout)
	}
	for i, tc := range exactValues {
		t.Run(tc.name, func(t *testing.T) {
			key, want := fmt.Sprintf("v%d", i), canonical(t, []byte(tc.text))
			if got := canonical(t, member(t, run.Context, key)); got != want {
				t.Errorf("nova run --json context[%q] = %s, want %s", key, got, want)
			}
			if got := canonical(t, member(t, view.Execution.Initial, key)); got != want {
				t.Errorf("nova chain --json initial_context[%q] = %s, want %s", key, got, want)
			}
			if got := canonical(t, member(t, view.Execution.Final, key)); got != want {
				t.Errorf("nova chain --json final_context[%q] = %s, want %s", key, got, want)
			}
			for _, n := range view.Nodes {
				if n.NodeID == "c" {
					if got := canonical(t, member(t, n.Output, key)); got != want {
						t.Errorf("nova chain --json output_result of c [%q] = %s, want %s", key, got, want)
					}
				}
			}
		})
	}
	// The text a person reads keeps them too.
	for _, lit := range []string{"9007199254740993", "150.0", "-0.0", "1e+308", "18446744073709551616"} {
		if !strings.Contains(res.stdout, lit) {
			t.Errorf("nova run --json output lacks %s", lit)
		}
	}
}

// A start event whose context is JSON but not an object fails its execution
// with an error that says so; nothing waits forever.
func TestStartContextMustBeAnObject(t *testing.T) {
	e := startEnv(t)
	id := uuid.NewString()
	start := &novav1.StartWorkflow{ExecutionId: id, Definition: parse(t, threeNodes),
		Context: &novav1.JSONValue{Raw: []byte(`[1, 2]`)}}
	if err := e.bus.PublishProto(e.ctx, bus.CommandSubject(bus.AgentGraphEngine), "start-"+id, bus.TypeWorkflowStart, start, nil); err != nil {
		t.Fatal(err)
	}
	m, err := e.waitMsg(bus.StreamEvents, bus.EventSubject(id, bus.KindWorkflowCompleted), func(jetstream.Msg) bool { return true })
	if err != nil {
		t.Fatalf("no completion: %v", err)
	}
	ev, err := bus.DecodeNATS(m.Headers(), m.Data())
	if err != nil {
		t.Fatal(err)
	}
	var wc novav1.WorkflowCompleted
	if err := bus.Decode(*ev, &wc); err != nil {
		t.Fatal(err)
	}
	if wc.Status != "failed" {
		t.Errorf("status %q, want failed", wc.Status)
	}
	mustContain(t, "completion error", wc.Error, "context must be a JSON object", "array")
}
