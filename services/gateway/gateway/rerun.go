package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Rerunning an ended execution from one of its nodes: POST
// /v1/executions/{id}/rerun. The rerun is a new execution of the same
// workflow (the revision the original ran, or the newest registered one)
// that starts at that node with the context the original's chain of work
// holds before the node's last visit, with the request's changes; the
// nodes the original ran before it are recorded as carried over, not run
// again.

// Problem types of reruns.
const (
	// TypeExecutionRunning: the execution has not ended, as the audit
	// store records it; only an ended one can be rerun (409).
	TypeExecutionRunning = typePrefix + "execution-running"
	// TypeCannotRerun: the chain of work cannot give the rerun asked for: a
	// node the execution never reached, no failed node to start from, a
	// node the revision to run does not have, no registered workflow for
	// revision newest (422).
	TypeCannotRerun = typePrefix + "cannot-rerun"
)

// Revisions a rerun may run.
const (
	revisionOriginal = "original"
	revisionNewest   = "newest"
)

// recordRetry is the Retry-After, in seconds, of a rerun asked for before
// the audit store has recorded the original's end.
const recordRetry = "2"

var rerunFields = []string{"from", "context", "revision"}

// rerunRequest is a checked POST /v1/executions/{id}/rerun body.
type rerunRequest struct {
	from   string
	set    jsonvalue.Object
	newest bool
}

// rerunAnswer is the answer to a rerun that has not ended (yet).
type rerunAnswer struct {
	ExecutionID string `json:"execution_id"`
	Status      string `json:"status"`
	// RerunOf is the execution rerun, From the node the rerun starts at.
	RerunOf string `json:"rerun_of"`
	From    string `json:"from"`
	// CarriedOver are the nodes the original ran before From, in order,
	// which the rerun records as carried over instead of running them.
	CarriedOver []string `json:"carried_over"`
	Links       links    `json:"links"`
}

// rerunCompletion is a rerun that ended within ?wait: its completion, as
// POST /v1/executions?wait answers it, and what it reran.
type rerunCompletion struct {
	completion
	RerunOf     string   `json:"rerun_of"`
	From        string   `json:"from"`
	CarriedOver []string `json:"carried_over"`
}

// parseRerun reads the body of a rerun: empty, or an object with from (a
// node id), context (an object of changes, numbers kept as written) and
// revision (original or newest).
func parseRerun(body []byte) (*rerunRequest, *Problem) {
	req := &rerunRequest{}
	if len(strings.TrimSpace(string(body))) == 0 {
		return req, nil
	}
	members, err := jsonvalue.ParseObject(body)
	if err != nil {
		return nil, invalid(fmt.Sprintf("the body must be empty or a JSON object with from, context and revision: %v", err))
	}
	var errs []FieldError
	for _, k := range members.Keys() {
		if !slices.Contains(rerunFields, k) {
			errs = append(errs, FieldError{Field: k, Detail: "unknown field (known: " + strings.Join(rerunFields, ", ") + ")"})
		}
	}
	if raw, ok := members["from"]; ok {
		if err := json.Unmarshal(raw, &req.from); err != nil || strings.TrimSpace(req.from) == "" {
			errs = append(errs, FieldError{Field: "from", Detail: "must be the id of a node the execution ran; leave it out to start from the node that failed"})
		}
	}
	if raw, ok := members["context"]; ok {
		c, err := jsonvalue.ParseObject(raw)
		if err != nil {
			errs = append(errs, FieldError{Field: "context", Detail: "must be a JSON object: the members to set in the context before the node"})
		} else {
			req.set = c
		}
	}
	if raw, ok := members["revision"]; ok {
		var rev string
		_ = json.Unmarshal(raw, &rev)
		switch rev {
		case revisionOriginal:
		case revisionNewest:
			req.newest = true
		default:
			errs = append(errs, FieldError{Field: "revision", Detail: fmt.Sprintf("must be %q (the definition the execution ran) or %q (the workflow's newest registration)", revisionOriginal, revisionNewest)})
		}
	}
	if len(errs) > 0 {
		return nil, invalid(problemsDetail("the request", len(errs)), errs...)
	}
	return req, nil
}

// rerunExecution is POST /v1/executions/{id}/rerun: the rerun is built from
// the audit store's chain of work of the execution and started with the
// start command any producer sends, naming the execution it reruns. 404 for
// an unknown execution, 409 for one that has not ended (or whose end the
// audit store has not recorded yet: Retry-After), 422 for a rerun the chain
// of work cannot give; else 202, or with ?wait 200 and the completion when
// the rerun ends within the wait. Idempotency-Key makes a retry name the
// same rerun and start nothing new.
func (g *Gateway) rerunExecution(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id := r.PathValue("id")
	if p := checkQuery(r, "wait"); p != nil {
		return p
	}
	wait, p := parseWait(r.URL.Query().Get("wait"), g.limits.MaxWait)
	if p != nil {
		return p
	}
	idem, p := idempotencyKey(r)
	if p != nil {
		return p
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	req, p := parseRerun(body)
	if p != nil {
		return p
	}
	rr := chainstore.RerunRequest{From: req.from, Set: req.set}
	if idem != "" {
		rr.ExecutionID = uuid.NewSHA1(idempotencyNamespace, []byte(keyName(r)+"\x00rerun\x00"+id+"\x00"+idem)).String()
	}
	if req.newest {
		if rr.Definition, err = g.newestRevision(r, id); err != nil {
			return err
		}
	}
	start, err := g.store.RerunStart(ctx, id, rr)
	if err != nil {
		return g.rerunProblem(r, id, req.from, err)
	}
	if g.values != nil {
		if err := g.shrinkStart(ctx, start); err != nil {
			return g.unavailable(r, "a large context value could not be stored", err)
		}
	}

	newID := start.GetExecutionId()
	wc, self, err := g.publishStart(w, r, start, wait, idem != "", "the start command of the rerun")
	if err != nil {
		return err
	}
	rerun := start.GetRerun()
	carried := rerun.GetCarriedOver()
	if carried == nil {
		carried = []string{}
	}
	if wc != nil {
		writeJSON(w, http.StatusOK, rerunCompletion{completion: toCompletion(wc), RerunOf: id, From: rerun.GetNodeId(), CarriedOver: carried})
		return nil
	}
	writeJSON(w, http.StatusAccepted, rerunAnswer{ExecutionID: newID, Status: execution.StatusRunning, RerunOf: id,
		From: rerun.GetNodeId(), CarriedOver: carried, Links: self})
	return nil
}

// newestRevision is the newest registration of the workflow execution id
// ran: 404 for an unknown execution, 409 for a running one, 422 when no
// workflow of its name is registered.
func (g *Gateway) newestRevision(r *http.Request, id string) (*novav1.WorkflowDefinition, error) {
	ctx := r.Context()
	doc, err := g.store.Execution(ctx, id)
	if err != nil {
		return nil, g.rerunProblem(r, id, "", err)
	}
	if doc.Status == execution.StatusRunning {
		return nil, g.rerunProblem(r, id, "", fmt.Errorf("%w: execution %s is running", chainstore.ErrRunning, id))
	}
	notRegistered := newProblem(http.StatusUnprocessableEntity, TypeCannotRerun,
		fmt.Sprintf("workflow %q is not registered: rerun the revision execution %s ran (revision %q)", doc.WorkflowName, id, revisionOriginal),
		FieldError{Field: "revision", Detail: fmt.Sprintf("no workflow %q is registered", doc.WorkflowName)})
	if !engineKey.MatchString(doc.WorkflowName) {
		return nil, notRegistered
	}
	kv, err := g.bucket(ctx, bus.BucketWorkflows)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, notRegistered
	}
	if err != nil {
		return nil, g.unavailable(r, "the workflow registry cannot be read", err)
	}
	entry, err := kv.Get(ctx, doc.WorkflowName)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrInvalidKey):
		return nil, notRegistered
	case err != nil:
		return nil, g.unavailable(r, "the workflow registry cannot be read", err)
	}
	def := &novav1.WorkflowDefinition{}
	if err := proto.Unmarshal(entry.Value(), def); err != nil {
		return nil, fmt.Errorf("registered workflow %q: %w", doc.WorkflowName, err)
	}
	return def, nil
}

// rerunProblem answers an error of RerunStart. The rerun is built from the
// audit store, which records an execution's end a moment after the engine
// ended it: when the engine's state says it ended and the store does not
// know it yet (or still has it running), the answer is 409 with
// Retry-After.
func (g *Gateway) rerunProblem(r *http.Request, id, from string, err error) error {
	switch {
	case errors.Is(err, chainstore.ErrNotFound), errors.Is(err, chainstore.ErrRunning):
		st, serr := g.liveState(r.Context(), id)
		if serr != nil {
			return g.unavailable(r, "the execution state cannot be read", serr)
		}
		switch {
		case st != nil && execution.Ended(st.Status):
			return newProblem(http.StatusConflict, TypeExecutionRunning, fmt.Sprintf(
				"execution %s ended %s, but the audit store has not recorded its end yet (it does within a few seconds); try again in a moment",
				id, st.Status)).with("Retry-After", recordRetry)
		case st != nil || errors.Is(err, chainstore.ErrRunning):
			return newProblem(http.StatusConflict, TypeExecutionRunning, fmt.Sprintf(
				"execution %s is running: cancel it, or wait for its end, before rerunning it", id))
		}
		return newProblem(http.StatusNotFound, TypeNotFound, fmt.Sprintf("no execution %q", id))
	case errors.Is(err, chainstore.ErrRerun):
		return newProblem(http.StatusUnprocessableEntity, TypeCannotRerun, err.Error(),
			FieldError{Field: "from", Node: from, Detail: strings.TrimPrefix(err.Error(), chainstore.ErrRerun.Error()+": ")})
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return g.unavailable(r, "the chain of work cannot be read", err)
}

// shrinkStart puts the large values of a rerun's context in the value
// store, as a start's: the snapshot travels in the start event.
func (g *Gateway) shrinkStart(ctx context.Context, start *novav1.StartWorkflow) error {
	c, err := jsonvalue.FromProto(start.GetContext())
	if err != nil {
		return err
	}
	if c == nil {
		return nil
	}
	if err := g.values.Shrink(ctx, c); err != nil {
		return err
	}
	start.Context = c.Proto()
	return nil
}
