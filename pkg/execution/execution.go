// Package execution is what every reader of an execution shares with the
// graph engine that writes it: its id rules, its statuses, and its state in
// the KV bucket bus.BucketExecutions with the completion that state stands
// for. The engine, the gateway, the nova CLI and the producer library read
// executions through it, so none of them links another's code. What a state
// says in memory is package execstate's, which imports no NATS client; it is
// repeated here.
package execution

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution/execstate"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// The statuses and names of package execstate.
const (
	StatusRunning   = execstate.StatusRunning
	StatusSucceeded = execstate.StatusSucceeded
	StatusFailed    = execstate.StatusFailed
	StatusCancelled = execstate.StatusCancelled

	NodeSuccess     = execstate.NodeSuccess
	NodeFailed      = execstate.NodeFailed
	NodeCancelled   = execstate.NodeCancelled
	NodeCarriedOver = execstate.NodeCarriedOver

	RefineWorkflow = execstate.RefineWorkflow
	RefineNode     = execstate.RefineNode
)

// The errors of package execstate.
type (
	EndedError      = execstate.EndedError
	NotWaitingError = execstate.NotWaitingError
)

// Spelling is execstate.Spelling.
func Spelling(s novav1.ExecutionStatus) string { return execstate.Spelling(s) }

// NodeSpelling is execstate.NodeSpelling.
func NodeSpelling(s novav1.NodeStatus) string { return execstate.NodeSpelling(s) }

// ParseStatus is execstate.ParseStatus.
func ParseStatus(s string) (novav1.ExecutionStatus, bool) { return execstate.ParseStatus(s) }

// Ended is execstate.Ended.
func Ended(status string) bool { return execstate.Ended(status) }

// ValidKey is execstate.ValidKey.
func ValidKey(s string) bool { return execstate.ValidKey(s) }

// ID is execstate.ID.
func ID(id string) string { return execstate.ID(id) }

// WorkflowName is execstate.WorkflowName.
func WorkflowName(st *novav1.ExecutionState) string { return execstate.WorkflowName(st) }

// Completion is execstate.Completion.
func Completion(st *novav1.ExecutionState) *novav1.WorkflowCompleted { return execstate.Completion(st) }

// CheckCancel is execstate.CheckCancel.
func CheckCancel(st *novav1.ExecutionState) error { return execstate.CheckCancel(st) }

// Lines is execstate.Lines.
func Lines(st *novav1.ExecutionState) []*novav1.Branch { return execstate.Lines(st) }

// Forked is execstate.Forked.
func Forked(st *novav1.ExecutionState) []*novav1.Branch { return execstate.Forked(st) }

// CurrentNode is execstate.CurrentNode.
func CurrentNode(st *novav1.ExecutionState) string { return execstate.CurrentNode(st) }

// WaitingFor is execstate.WaitingFor.
func WaitingFor(st *novav1.ExecutionState) string { return execstate.WaitingFor(st) }

// CheckSignalTarget is execstate.CheckSignalTarget.
func CheckSignalTarget(st *novav1.ExecutionState, name string) error {
	return execstate.CheckSignalTarget(st, name)
}

// WaitingLine is execstate.WaitingLine.
func WaitingLine(st *novav1.ExecutionState, name string) *novav1.Branch {
	return execstate.WaitingLine(st, name)
}

// ListensFor is execstate.ListensFor.
func ListensFor(l *novav1.Branch, name string) bool { return execstate.ListensFor(l, name) }

// WaitNode is execstate.WaitNode.
func WaitNode(st *novav1.ExecutionState, name string) *novav1.Node {
	return execstate.WaitNode(st, name)
}

// CancelEventID is execstate.CancelEventID.
func CancelEventID(id string) string { return execstate.CancelEventID(id) }

// WaitUntil is execstate.WaitUntil.
func WaitUntil(l *novav1.Branch) *timestamppb.Timestamp { return execstate.WaitUntil(l) }

// Parked is execstate.Parked.
func Parked(st *novav1.ExecutionState) map[string][]string { return execstate.Parked(st) }

// StateSubject is the subject of execution id's key in
// bus.BucketExecutions, the one its state is stored on.
func StateSubject(id string) string { return "$KV." + bus.BucketExecutions + "." + id }

// ReadState is the engine's state of execution id in kv (the bucket
// bus.BucketExecutions), nil when it has none, with the context members it
// keeps apart put back. A part removed as it is read (the execution ended
// between the two reads) sends it to read the state again.
func ReadState(ctx context.Context, kv jetstream.KeyValue, id string) (*novav1.ExecutionState, error) {
	for try := 1; ; try++ {
		entry, err := kv.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		var st novav1.ExecutionState
		if err := proto.Unmarshal(entry.Value(), &st); err != nil {
			return nil, fmt.Errorf("execution state %s: %w", id, err)
		}
		_, err = execstate.Expand(&st, func(digest string) ([]byte, error) {
			part, err := kv.Get(ctx, PartKey(id, digest))
			if err != nil {
				return nil, err
			}
			return part.Value(), nil
		})
		if errors.Is(err, jetstream.ErrKeyNotFound) && try < 3 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &st, nil
	}
}

// PartKey is execstate.PartKey.
func PartKey(id, digest string) string { return execstate.PartKey(id, digest) }
