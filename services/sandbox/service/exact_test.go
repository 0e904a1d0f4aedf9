package service_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/sandbox/runner"
)

// A context sent as JSON text over the bus reaches the code and comes back in
// the CodeExecuted event with every number as it was written.
func TestExactContextThroughTheBus(t *testing.T) {
	h := startService(t, runner.Config{})
	const pow200 = "1606938044258990275541962092341162602522202993782792835301376"
	// White space and key order as a producer may write them; the updates are
	// compact.
	input := `{ "order": {"id": 9007199254740993, "lines": [{"qty": 2, "price": 150.0}]},
		"above_uint64": 18446744073709551616, "min_int64": -9223372036854775808,
		"pow_2_200": ` + pow200 + `, "neg_zero": -0.0, "max_exp": 1e+308, "ключ": 1 }`
	tests := []struct {
		name    string
		context string
		code    string
		updates string // the exact JSON text of context_updates
		status  string
		error   string // in the error, for a failed run
	}{
		{
			name:    "copied values",
			context: input,
			code:    "for k in list(context):\n    context['out_' + k] = context[k]",
			updates: `{"out_above_uint64":18446744073709551616,"out_max_exp":1e+308,"out_min_int64":-9223372036854775808,` +
				`"out_neg_zero":-0.0,"out_order":{"id":9007199254740993,"lines":[{"qty":2,"price":150.0}]},` +
				`"out_pow_2_200":` + pow200 + `,"out_ключ":1}`,
			status: "success",
		},
		{
			name:    "computed from a big integer",
			context: input,
			code:    "context['next_id'] = context['order']['id'] + 1\ncontext['total'] = sum(l['qty'] * l['price'] for l in context['order']['lines'])",
			updates: `{"next_id":9007199254740994,"total":300.0}`,
			status:  "success",
		},
		{
			name:    "left untouched",
			context: input,
			code:    "x = json.dumps(context)",
			updates: `{}`,
			status:  "success",
		},
		{
			name:    "a context that is not an object",
			context: `[9007199254740993]`,
			code:    "context['x'] = 1",
			status:  "error",
			error:   "must be a JSON object",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, raw := h.Execute(t, &novav1.ExecuteCode{Code: tt.code, Context: jsonvalue.Proto([]byte(tt.context))})
			if res.Status != tt.status || !strings.Contains(res.Error, tt.error) {
				t.Fatalf("status %s %s: %q; want %s %q\nstderr %s", res.Status, res.ErrorKind, res.Error, tt.status, tt.error, res.Stderr)
			}
			if tt.status != "success" {
				if res.ErrorKind != "code_error" || len(updatesOf(t, res)) != 0 {
					t.Errorf("kind %s, updates %s; want a code_error without updates", res.ErrorKind, res.GetContextUpdates().GetRaw())
				}
				return
			}
			if got := string(res.GetContextUpdates().GetRaw()); got != tt.updates {
				t.Errorf("context_updates\n got %s\nwant %s", got, tt.updates)
			}
			// The event on the bus carries the value itself, not a float.
			if tt.updates != `{}` && !bytes.Contains(raw, []byte(`"contextUpdates":`+tt.updates)) {
				t.Errorf("the event does not carry the updates as written: %.500s", raw)
			}
		})
	}
	h.StillServing(t)
}
