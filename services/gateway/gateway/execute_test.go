package gateway_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/services/gateway/gateway"
)

// executeDoc is POST /v1/execute's answer as a client reads it.
type executeDoc struct {
	Success  bool            `json:"success"`
	Result   json.RawMessage `json:"result"`
	Items    json.RawMessage `json:"items"`
	Logs     []string        `json:"logs"`
	Duration float64         `json:"duration"`
	Error    string          `json:"error"`
	Stack    string          `json:"stack"`
	Analysis struct {
		Type         string `json:"type"`
		IsStructured bool   `json:"isStructured"`
		ItemCount    int    `json:"itemCount"`
		Fields       []struct {
			Name     string `json:"name"`
			Type     string `json:"type"`
			Required bool   `json:"required"`
			Coverage int    `json:"coverage"`
			Examples []any  `json:"examples"`
		} `json:"fields"`
	} `json:"analysis"`
	Context   map[string]json.RawMessage `json:"context"`
	ErrorKind string                     `json:"errorKind"`
	Limit     string                     `json:"limit"`
}

func (h *harness) execute(t *testing.T, body string) executeDoc {
	t.Helper()
	resp := h.do(t, h.url, request{method: "POST", path: "/v1/execute", key: h.key["admin"], body: body})
	var d executeDoc
	decode(t, resp, http.StatusOK, &d)
	return d
}

// deadLetters is how many messages the dead-letter stream holds.
func (h *harness) deadLetters(t *testing.T) uint64 {
	t.Helper()
	s, err := h.bus.JetStream().Stream(t.Context(), bus.StreamDeadLetters)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestExecute(t *testing.T) {
	deadBefore := h.deadLetters(t)

	t.Run("python", func(t *testing.T) {
		d := h.execute(t, `{"language": "python", "code": "print('hi')\ncontext['total'] = context['price'] * 2\ncontext['id'] = context['id'] + 1",
			"context": {"price": 150.0, "id": 9007199254740993}}`)
		if !d.Success || d.Error != "" {
			t.Fatalf("answer %+v", d)
		}
		if string(d.Context["total"]) != "300.0" || string(d.Context["id"]) != "9007199254740994" || string(d.Context["price"]) != "150.0" {
			t.Errorf("context %v", d.Context)
		}
		var result map[string]json.RawMessage
		if err := json.Unmarshal(d.Result, &result); err != nil || len(result) != 2 || string(result["total"]) != "300.0" {
			t.Errorf("result %s: the members the code set", d.Result)
		}
		if d.Duration <= 0 || d.Analysis.Type == "" {
			t.Errorf("duration %v, analysis %+v", d.Duration, d.Analysis)
		}
	})

	t.Run("javascript with args and the output analysis", func(t *testing.T) {
		d := h.execute(t, `{"code": "module.exports = async (args) => { console.log('rows', args.rows.length); return args.rows.map(r => ({name: r.n, price: r.p, url: 'https://shop.example/' + r.n})) }",
			"args": [{"rows": [{"n": "a", "p": 1.5}, {"n": "b", "p": 2}, {"n": "c"}]}]}`)
		if !d.Success {
			t.Fatalf("answer %+v", d)
		}
		var items []map[string]any
		if err := json.Unmarshal(d.Items, &items); err != nil || len(items) != 3 {
			t.Fatalf("items %s", d.Items)
		}
		if !slices.Equal(d.Logs, []string{"rows 3"}) {
			t.Errorf("logs %q", d.Logs)
		}
		a := d.Analysis
		if a.Type != "array" || !a.IsStructured || a.ItemCount != 3 || len(a.Fields) != 3 {
			t.Fatalf("analysis %+v", a)
		}
		cov := map[string]int{}
		types := map[string]string{}
		for _, f := range a.Fields {
			cov[f.Name], types[f.Name] = f.Coverage, f.Type
		}
		if cov["name"] != 100 || cov["price"] != 67 || types["price"] != "number" || types["url"] != "url" {
			t.Errorf("fields %+v", a.Fields)
		}
	})

	t.Run("code that fails", func(t *testing.T) {
		d := h.execute(t, `{"language": "python", "code": "def f():\n    raise ValueError('no price')\nf()"}`)
		if d.Success || d.ErrorKind != "code_error" || !strings.Contains(d.Error, "no price") || !strings.Contains(d.Stack, "line 2") {
			t.Errorf("answer %+v", d)
		}
	})

	t.Run("code that runs too long", func(t *testing.T) {
		start := time.Now()
		d := h.execute(t, `{"language": "python", "code": "while True:\n    pass", "timeout": 700}`)
		if d.Success || d.ErrorKind != "timeout" {
			t.Errorf("answer %+v", d)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("a 700 ms timeout took %v", took)
		}
	})

	// The runs outside any workflow leave the engine alone: nothing of
	// theirs is dead-lettered.
	if after := h.deadLetters(t); after != deadBefore {
		t.Errorf("dead letters %d -> %d", deadBefore, after)
	}
}

func TestExecuteBadRequests(t *testing.T) {
	for _, c := range []struct {
		name, body string
		fields     []string
	}{
		{"not JSON", `code`, []string{"code"}},
		{"no code", `{"language": "python"}`, []string{"code"}},
		{"every problem at once", `{"code": 5, "language": "ruby", "timeout": 600000, "args": [1, 2], "url": "ftp://x", "color": "red"}`,
			[]string{"args", "code", "color", "language", "timeout", "url"}},
		{"args not an object", `{"code": "1", "args": ["x"]}`, []string{"args[0]"}},
		{"context not an object", `{"code": "1", "context": [1]}`, []string{"context"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := h.do(t, h.url, request{method: "POST", path: "/v1/execute", key: h.key["admin"], body: c.body})
			p := problem(t, resp, http.StatusBadRequest, gateway.TypeInvalidRequest)
			got := p.fields()
			slices.Sort(got)
			if !slices.Equal(got, c.fields) {
				t.Errorf("fields %v, want %v (%+v)", got, c.fields, p)
			}
		})
	}
	resp := h.do(t, h.url, request{method: "POST", path: "/v1/execute", key: h.key["writer"], body: `{"code": "1"}`})
	problem(t, resp, http.StatusForbidden, gateway.TypeForbidden)
}
