// Package execstate is what an execution's state, as the graph engine keeps
// it, says: the rules of its id, its statuses, its lines of control, what
// it waits for, whether it can be steered, and the completion it stands
// for. It reads a state in memory and imports no NATS client, so that the
// engine's state machine can use it; package execution, which repeats each
// name for its callers, reads states from their bucket.
package execstate

import (
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/google/uuid"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Execution statuses as events, the HTTP API and the chain of work spell
// them: novav1.ExecutionStatus's names (Spelling).
const (
	StatusRunning   = "running"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
)

// Node visit statuses in the chain of work: novav1.NodeStatus's names.
const (
	NodeSuccess = "success"
	NodeFailed  = "failed"
	// NodeCancelled: the visit ended because its execution was cancelled.
	NodeCancelled = "cancelled"
	// NodeCarriedOver: a rerun took the node's visit from the execution it
	// reruns instead of running it.
	NodeCarriedOver = "carried_over"
)

// Spelling is how events and documents write status s: the lower-case
// name after the enum's prefix.
func Spelling(s novav1.ExecutionStatus) string {
	if s == novav1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(s.String(), "EXECUTION_STATUS_"))
}

// NodeSpelling is how the chain of work writes node status s.
func NodeSpelling(s novav1.NodeStatus) string {
	if s == novav1.NodeStatus_NODE_STATUS_UNSPECIFIED {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(s.String(), "NODE_STATUS_"))
}

// ParseStatus reads a status as events spell it.
func ParseStatus(s string) (novav1.ExecutionStatus, bool) {
	v, ok := novav1.ExecutionStatus_value["EXECUTION_STATUS_"+strings.ToUpper(s)]
	if !ok || s == "" || s != strings.ToLower(s) {
		return novav1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED, false
	}
	return novav1.ExecutionStatus(v), true
}

// Ended reports whether status is one an execution ends with.
func Ended(status string) bool {
	return status == StatusSucceeded || status == StatusFailed || status == StatusCancelled
}

var validKey = regexp.MustCompile(`^[-_=a-zA-Z0-9]{1,200}$`)

// ValidKey reports whether s can be a key of the engine's buckets (an
// execution id, a workflow name).
func ValidKey(s string) bool { return validKey.MatchString(s) }

// ID is the id of the execution a start asks to be id: id itself when it
// can be a key of the engine's buckets and is not "events" or "export"
// (the gateway's GET /v1/executions/events is the stream of every
// execution and GET /v1/executions/export the archive export, so an
// execution of either id could not be read at /v1/executions/{id}, nor
// named to `nova chain`), else a UUID derived from it, so a repeated start
// still names one execution.
func ID(id string) string {
	if validKey.MatchString(id) && id != "events" && id != "export" {
		return id
	}
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte(id)).String()
}

// RefineWorkflow is the workflow name of refinement executions, and
// RefineNode the one node each has.
const (
	RefineWorkflow = "refine"
	RefineNode     = "refine"
)

// WorkflowName is the name of the workflow st runs.
func WorkflowName(st *novav1.ExecutionState) string {
	if st.GetRefine() != nil {
		return RefineWorkflow
	}
	return st.GetDefinition().GetName()
}

// Completion is the completion event of an ended execution, from its
// state: what the engine published when it ended.
func Completion(st *novav1.ExecutionState) *novav1.WorkflowCompleted {
	wc := &novav1.WorkflowCompleted{
		ExecutionId:  st.ExecutionId,
		WorkflowName: WorkflowName(st),
		Status:       st.Status,
		Context:      st.Context,
		Path:         st.Path,
		Error:        st.Error,
		StartedAt:    st.StartedAt,
		CompletedAt:  st.CompletedAt,
		CostUsd:      st.GetSpend().GetUsd(),
		ModelCalls:   st.GetSpend().GetModelCalls(),
		CancelledBy:  st.CancelledBy,
		CancelReason: st.CancelReason,
		RerunOf:      st.GetRerun().GetExecutionId(),
		Parent:       st.GetParent(),
	}
	for _, id := range slices.Sorted(maps.Keys(st.Nodes)) {
		ns := st.Nodes[id]
		wc.Nodes = append(wc.Nodes, &novav1.NodeSummary{Id: id, Status: ns.Status, Attempts: ns.Attempts, Error: ns.Error, Visits: ns.Visits,
			CostUsd: ns.GetSpend().GetUsd(), ModelCalls: ns.GetSpend().GetModelCalls()})
	}
	return wc
}
