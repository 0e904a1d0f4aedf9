package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// maxBatch is the most executions one POST /v1/executions/batch acts on.
const maxBatch = 500

// Batch actions.
const (
	batchCancel = "cancel"
	batchRerun  = "rerun"
)

// Outcomes of one execution of a batch.
const (
	outcomeCancelling = "cancelling" // the cancel command was published
	outcomeCancelled  = "cancelled"  // it was cancelled already
	outcomeRerun      = "rerun"      // a rerun was started
	outcomeRefused    = "refused"    // nothing was done; detail says why
)

var batchFields = []string{"action", "ids", "filter", "reason"}

// listFilters are the filters of GET /v1/executions a batch's filter takes.
var listFilters = []string{"id", "parent", "workflow", "status", "since", "until"}

// batchRequest is a checked POST /v1/executions/batch body.
type batchRequest struct {
	action string
	ids    []string
	filter *chainstore.ListFilter
	reason string
}

// batchResult is what happened to one execution of a batch.
type batchResult struct {
	ExecutionID string `json:"execution_id"`
	Outcome     string `json:"outcome"`
	// Detail says why it was refused (the problem the single action answers).
	Detail string `json:"detail,omitempty"`
	// RerunID is the rerun started.
	RerunID string `json:"rerun_id,omitempty"`
}

// batchAnswer is the answer of POST /v1/executions/batch.
type batchAnswer struct {
	Action string `json:"action"`
	// Selected is how many executions the ids or the filter named; Done
	// how many were cancelled (or are cancelling) or rerun; Refused the rest.
	Selected int           `json:"selected"`
	Done     int           `json:"done"`
	Refused  int           `json:"refused"`
	Results  []batchResult `json:"results"`
}

// batchExecutions is POST /v1/executions/batch: cancel or rerun several
// executions, named by ids or selected by the filters of GET
// /v1/executions (at most maxBatch: a filter that selects more is refused
// whole). Each is acted on as POST /v1/executions/{id}/cancel or /rerun
// (from the node that failed) would; one that cannot be is reported
// refused with the reason, and the others go on. 200 with each outcome.
func (g *Gateway) batchExecutions(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if p := checkQuery(r); p != nil {
		return p
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	req, p := parseBatch(body)
	if p != nil {
		return p
	}
	ids := req.ids
	if req.filter != nil {
		f := *req.filter
		f.Limit = maxBatch + 1
		docs, err := g.store.ListExecutions(ctx, f)
		if err != nil {
			return g.unavailable(r, "the audit store cannot be read", err)
		}
		if len(docs) > maxBatch {
			return newProblem(http.StatusUnprocessableEntity, TypeInvalidRequest,
				fmt.Sprintf("the filter selects more than %d executions; a batch acts on at most %d: narrow the filter", maxBatch, maxBatch),
				FieldError{Field: "filter", Detail: fmt.Sprintf("selects more than %d executions", maxBatch)})
		}
		for _, d := range docs {
			ids = append(ids, d.ExecutionID)
		}
	}
	answer := batchAnswer{Action: req.action, Selected: len(ids), Results: make([]batchResult, 0, len(ids))}
	for _, id := range ids {
		var res batchResult
		var err error
		if req.action == batchCancel {
			res, err = g.batchCancel(r, id, req.reason)
		} else {
			res, err = g.batchRerun(r, id)
		}
		if err != nil {
			return err
		}
		if res.Outcome == outcomeRefused {
			answer.Refused++
		} else {
			answer.Done++
		}
		answer.Results = append(answer.Results, res)
	}
	writeJSON(w, http.StatusOK, answer)
	return nil
}

// batchCancel cancels execution id as POST /v1/executions/{id}/cancel
// does; an error only for what stops the whole batch (the bus, the store).
func (g *Gateway) batchCancel(r *http.Request, id, reason string) (batchResult, error) {
	st, p := g.steeredState(r, id)
	if p == nil {
		if err := st.CheckCancel(); err != nil {
			p = steerProblem(err)
		}
	}
	if p != nil {
		if p.Status == http.StatusServiceUnavailable {
			return batchResult{}, p
		}
		return batchResult{ExecutionID: id, Outcome: outcomeRefused, Detail: p.Detail}, nil
	}
	if st.Status == execution.StatusCancelled {
		return batchResult{ExecutionID: id, Outcome: outcomeCancelled}, nil
	}
	ctx := r.Context()
	if err := execution.PublishCancel(ctx, g.bus, &novav1.CancelExecution{ExecutionId: id, Reason: reason, RequestedBy: sender(r)}); err != nil {
		if ctx.Err() != nil {
			return batchResult{}, ctx.Err()
		}
		return batchResult{}, g.unavailable(r, "the cancel command was not acknowledged by the bus; try again", err)
	}
	return batchResult{ExecutionID: id, Outcome: outcomeCancelling}, nil
}

// batchRerun reruns execution id from the node that failed, as POST
// /v1/executions/{id}/rerun with an empty body does.
func (g *Gateway) batchRerun(r *http.Request, id string) (batchResult, error) {
	ctx := r.Context()
	start, err := g.store.RerunStart(ctx, id, chainstore.RerunRequest{})
	if err != nil {
		perr := g.rerunProblem(r, id, "", err)
		var p *Problem
		if errors.As(perr, &p) && p.Status != http.StatusServiceUnavailable {
			return batchResult{ExecutionID: id, Outcome: outcomeRefused, Detail: p.Detail}, nil
		}
		return batchResult{}, perr
	}
	if g.values != nil {
		if err := g.shrinkStart(ctx, start); err != nil {
			return batchResult{}, g.unavailable(r, "a large context value could not be stored", err)
		}
	}
	newID := start.GetExecutionId()
	err = g.bus.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), "start-"+newID, bus.TypeWorkflowStart, start,
		map[string]string{bus.ExtensionExecutionID: newID})
	if err != nil {
		if ctx.Err() != nil {
			return batchResult{}, ctx.Err()
		}
		if big := (*bus.TooLargeError)(nil); errors.As(err, &big) {
			return batchResult{ExecutionID: id, Outcome: outcomeRefused, Detail: eventTooLarge(big).Detail}, nil
		}
		return batchResult{}, g.unavailable(r, "the start command of a rerun was not acknowledged by the bus; try again", err)
	}
	return batchResult{ExecutionID: id, Outcome: outcomeRerun, RerunID: newID}, nil
}

// parseBatch reads {"action": "cancel" | "rerun", "ids": [...]} or
// {"action": ..., "filter": {"workflow": ..., "status": ..., "id": ...,
// "since": ..., "until": ...}}, and for a cancel an optional reason,
// naming every field at fault.
func parseBatch(body []byte) (*batchRequest, *Problem) {
	members, err := jsonvalue.ParseObject(body)
	if err != nil {
		return nil, invalid(fmt.Sprintf("the body must be a JSON object with action and ids or filter: %v", err))
	}
	var errs []FieldError
	for _, k := range members.Keys() {
		if !slices.Contains(batchFields, k) {
			errs = append(errs, FieldError{Field: k, Detail: "unknown field (known: " + strings.Join(batchFields, ", ") + ")"})
		}
	}
	req := &batchRequest{}
	if raw, ok := members["action"]; !ok {
		errs = append(errs, FieldError{Field: "action", Detail: "is required: cancel or rerun"})
	} else if err := json.Unmarshal(raw, &req.action); err != nil || (req.action != batchCancel && req.action != batchRerun) {
		errs = append(errs, FieldError{Field: "action", Detail: fmt.Sprintf("must be %q or %q, got %s", batchCancel, batchRerun, raw)})
	}
	rawIDs, hasIDs := members["ids"]
	rawFilter, hasFilter := members["filter"]
	switch {
	case hasIDs && hasFilter:
		errs = append(errs, FieldError{Field: "filter", Detail: "give ids or filter, not both"})
	case !hasIDs && !hasFilter:
		errs = append(errs, FieldError{Field: "ids", Detail: "give the executions' ids, or a filter that selects them"})
	case hasIDs:
		errs = append(errs, parseBatchIDs(rawIDs, req)...)
	default:
		errs = append(errs, parseBatchFilter(rawFilter, req)...)
	}
	if raw, ok := members["reason"]; ok {
		switch {
		case json.Unmarshal(raw, &req.reason) != nil:
			errs = append(errs, FieldError{Field: "reason", Detail: "must be a string"})
		case len(req.reason) > maxReason:
			errs = append(errs, FieldError{Field: "reason", Detail: fmt.Sprintf("must be at most %d bytes", maxReason)})
		case req.action == batchRerun:
			errs = append(errs, FieldError{Field: "reason", Detail: "is a cancel's; a rerun takes none"})
		}
	}
	if len(errs) > 0 {
		return nil, invalid(problemsDetail("the request", len(errs)), errs...)
	}
	return req, nil
}

func parseBatchIDs(raw json.RawMessage, req *batchRequest) []FieldError {
	if err := json.Unmarshal(raw, &req.ids); err != nil {
		return []FieldError{{Field: "ids", Detail: "must be a list of execution ids"}}
	}
	if len(req.ids) == 0 || len(req.ids) > maxBatch {
		return []FieldError{{Field: "ids", Detail: fmt.Sprintf("must list 1 to %d executions, got %d", maxBatch, len(req.ids))}}
	}
	var errs []FieldError
	seen := map[string]bool{}
	for i, id := range req.ids {
		switch {
		case !engineKey.MatchString(id):
			errs = append(errs, FieldError{Field: fmt.Sprintf("ids[%d]", i), Detail: fmt.Sprintf("%q is no execution id", id)})
		case seen[id]:
			errs = append(errs, FieldError{Field: fmt.Sprintf("ids[%d]", i), Detail: fmt.Sprintf("%q is listed twice", id)})
		}
		seen[id] = true
	}
	return errs
}

func parseBatchFilter(raw json.RawMessage, req *batchRequest) []FieldError {
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return []FieldError{{Field: "filter", Detail: "must be an object of strings: " + strings.Join(listFilters, ", ")}}
	}
	q := url.Values{}
	var errs []FieldError
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(listFilters, k) {
			errs = append(errs, FieldError{Field: "filter." + k, Detail: "unknown filter (known: " + strings.Join(listFilters, ", ") + ")"})
			continue
		}
		if m[k] != "" {
			q.Set(k, m[k])
		}
	}
	f, ferrs := listFilterOf(q, "filter.")
	req.filter = &f
	return append(errs, ferrs...)
}
