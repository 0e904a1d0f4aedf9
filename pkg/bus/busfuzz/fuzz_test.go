// Package busfuzz fuzzes the bus's reading of events on its own, so that its
// instrumented build (go test -fuzz) is that of the bus, not of the NATS
// server the bus's own tests start.
package busfuzz_test

import (
	"testing"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"

	"github.com/novaflow/nova/pkg/bus"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// eventMessages maps every event type to its data's message.
var eventMessages = []struct {
	typ string
	msg func() proto.Message
}{
	{bus.TypeWorkflowStart, func() proto.Message { return &novav1.StartWorkflow{} }},
	{bus.TypeWorkflowRegister, func() proto.Message { return &novav1.RegisterWorkflow{} }},
	{bus.TypeWorkflowStarted, func() proto.Message { return &novav1.WorkflowStarted{} }},
	{bus.TypeWorkflowCompleted, func() proto.Message { return &novav1.WorkflowCompleted{} }},
	{bus.TypeSandboxExecute, func() proto.Message { return &novav1.ExecuteCode{} }},
	{bus.TypeSandboxExecuted, func() proto.Message { return &novav1.CodeExecuted{} }},
	{bus.TypeNodeCompleted, func() proto.Message { return &novav1.NodeCompleted{} }},
	{bus.TypeStepCompleted, func() proto.Message { return &novav1.StepCompleted{} }},
	{bus.TypeDeadLetter, func() proto.Message { return &novav1.DeadLetter{} }},
	{bus.TypeInputAnalyze, func() proto.Message { return &novav1.AnalyzeInput{} }},
	{bus.TypeInputAnalyzed, func() proto.Message { return &novav1.InputAnalyzed{} }},
	{bus.TypeCodeGenerate, func() proto.Message { return &novav1.GenerateCode{} }},
	{bus.TypeCodeGenerated, func() proto.Message { return &novav1.CodeGenerated{} }},
	{bus.TypeCodeValidate, func() proto.Message { return &novav1.ValidateCode{} }},
	{bus.TypeCodeValidated, func() proto.Message { return &novav1.CodeValidated{} }},
	{bus.TypeOutputValidate, func() proto.Message { return &novav1.ValidateOutput{} }},
	{bus.TypeOutputValidated, func() proto.Message { return &novav1.OutputValidated{} }},
}

// FuzzDecodeEvent: any headers and body decode or fail as a malformed event,
// for every event type; what decodes encodes again to an event that decodes
// to an equal message.
func FuzzDecodeEvent(f *testing.F) {
	f.Add(uint8(0), "start-1", "application/json", []byte(`{"workflowName":"w","context":{"id":9007199254740993,"f":150.0}}`))
	f.Add(uint8(4), "x", "application/json", []byte(`{"executionId":"e","context":{"a":[1,{"b":null}]},"timeoutSeconds":1e308}`))
	f.Add(uint8(5), "y", "application/json", []byte(`{"contextUpdates":{"k":-0.0},"result":[1,2],"items":null}`))
	f.Add(uint8(8), "z", "application/json", []byte(`{"data":"aGVsbG8=","headers":{"a":"b"}}`))
	f.Add(uint8(3), "", "text/plain", []byte(`{`))
	f.Fuzz(func(t *testing.T, which uint8, id, contentType string, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		em := eventMessages[int(which)%len(eventMessages)]
		h := nats.Header{}
		for k, v := range map[string]string{"ce-specversion": "1.0", "ce-id": id, "ce-type": em.typ,
			"ce-source": "fuzz", "content-type": contentType} {
			h.Set(k, v)
		}
		ev, err := bus.DecodeNATS(h, data)
		if err != nil {
			return
		}
		msg := em.msg()
		if err := bus.Decode(*ev, msg); err != nil {
			return
		}
		again, err := bus.NewEvent("again", em.typ, "fuzz", msg)
		if err != nil {
			t.Fatalf("a decoded %s does not encode: %v", em.typ, err)
		}
		back := em.msg()
		if err := bus.Decode(again, back); err != nil {
			t.Fatalf("a re-encoded %s does not decode: %v\n%s", em.typ, err, again.Data())
		}
		if d := cmp.Diff(msg, back, protocmp.Transform()); d != "" {
			t.Fatalf("%s changed through encode and decode (-first +again):\n%s", em.typ, d)
		}
	})
}
