package execution

import (
	"context"

	"github.com/novaflow/nova/pkg/bus"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// PublishCancel publishes cmd, the command that cancels execution
// cmd.ExecutionId: CloudEvent type bus.TypeExecutionCancel on the graph
// engine's command subject, with its execution in bus.ExtensionExecutionID
// and CancelEventID as its id. The gateway and the nova CLI send it so.
func PublishCancel(ctx context.Context, b *bus.Bus, cmd *novav1.CancelExecution) error {
	id := cmd.GetExecutionId()
	return b.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), CancelEventID(id), bus.TypeExecutionCancel, cmd,
		map[string]string{bus.ExtensionExecutionID: id})
}

// PublishSignal publishes cmd, a signal for execution cmd.ExecutionId:
// CloudEvent type bus.TypeExecutionSignal on the graph engine's command
// subject with event id eventID, which a SignalRejected of it names
// (signal_event_id).
func PublishSignal(ctx context.Context, b *bus.Bus, eventID string, cmd *novav1.SignalExecution) error {
	id := cmd.GetExecutionId()
	return b.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), eventID, bus.TypeExecutionSignal, cmd,
		map[string]string{bus.ExtensionExecutionID: id})
}
