package eventjson_test

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/eventjson"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

const exactContext = `{"big":18446744073709551616,"f":150.0,"id":9007199254740993,"nested":{"z":[-0.0,1e+308]},"ключ":"日本"}`

func TestContextTravelsExactly(t *testing.T) {
	start := &novav1.StartWorkflow{ExecutionId: "e1", WorkflowName: "orders", Context: jsonvalue.Proto([]byte(exactContext))}
	data, err := eventjson.Marshal(start)
	if err != nil {
		t.Fatal(err)
	}
	// The context is the JSON value itself, not {"raw": ...}.
	if !strings.Contains(string(data), `"context":`+exactContext) {
		t.Fatalf("context not inline and exact: %s", data)
	}
	var got novav1.StartWorkflow
	if err := eventjson.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if string(got.GetContext().GetRaw()) != exactContext || got.ExecutionId != "e1" || got.WorkflowName != "orders" {
		t.Errorf("round trip: %v", &got)
	}
}

func TestProducerJSON(t *testing.T) {
	// What a producer in any language writes: proto or JSON field names,
	// white space, unknown fields.
	in := `{
	  "workflow_name": "orders",
	  "unknownField": {"x": 1},
	  "context": { "id" : 9007199254740993, "f": 150.0 }
	}`
	var got novav1.StartWorkflow
	if err := eventjson.Unmarshal([]byte(in), &got); err != nil {
		t.Fatal(err)
	}
	if got.WorkflowName != "orders" || string(got.GetContext().GetRaw()) != `{"id":9007199254740993,"f":150.0}` {
		t.Errorf("got %q %s", got.WorkflowName, got.GetContext().GetRaw())
	}
	var null novav1.StartWorkflow
	if err := eventjson.Unmarshal([]byte(`{"context":null}`), &null); err != nil || null.Context != nil {
		t.Errorf("null context: %v %v", null.Context, err)
	}
}

func TestNestedValuesAndPlainMessages(t *testing.T) {
	// A JSONValue below the top level (the AI run's pending execution).
	st := &novav1.ExecutionState{
		ExecutionId: "e2",
		Context:     jsonvalue.Proto([]byte(`{"a":1.0}`)),
		Ai: &novav1.AIRun{Phase: "execute", Execution: &novav1.CodeExecuted{
			StepId: "s", ContextUpdates: jsonvalue.Proto([]byte(`{"n":9007199254740993}`)),
			Result: jsonvalue.Proto([]byte(`[1,2.0]`)),
		}},
		Nodes: map[string]*novav1.NodeState{"x": {Visits: 2}},
	}
	data, err := eventjson.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var got novav1.ExecutionState
	if err := eventjson.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(st, &got) {
		t.Errorf("round trip differs:\n%s\n%v", data, &got)
	}
	// A message without JSONValue fields is plain protojson.
	def := &novav1.WorkflowDefinition{Name: "w", Nodes: []*novav1.Node{{Id: "start"}}}
	data, err = eventjson.Marshal(def)
	if err != nil {
		t.Fatal(err)
	}
	var def2 novav1.WorkflowDefinition
	if err := protojson.Unmarshal(data, &def2); err != nil || !proto.Equal(def, &def2) {
		t.Errorf("plain message: %s %v", data, err)
	}
}

func TestRefusesInvalidJSON(t *testing.T) {
	bad := &novav1.StartWorkflow{Context: &novav1.JSONValue{Raw: []byte(`{"a":`)}}
	if _, err := eventjson.Marshal(bad); err == nil {
		t.Error("Marshal of an invalid JSONValue did not fail")
	}
	var got novav1.StartWorkflow
	for _, in := range []string{`{"context": {"a": }`, `not json`, `{"workflowName": 3}`, `[1]`, `"s"`} {
		if err := eventjson.Unmarshal([]byte(in), &got); err == nil {
			t.Errorf("Unmarshal(%s) did not fail", in)
		}
	}
	// What is wrong is named.
	if err := eventjson.Unmarshal([]byte(` [{"context": 1}]`), &got); err == nil ||
		!strings.Contains(err.Error(), "a JSON object is needed, not an array") {
		t.Errorf("an array for an event: %v", err)
	}
	// Empty JSONValue is written as null, so the event stays valid JSON.
	data, err := eventjson.Marshal(&novav1.StartWorkflow{Context: &novav1.JSONValue{}})
	if err != nil || !json.Valid(data) {
		t.Errorf("empty value: %s %v", data, err)
	}
}
