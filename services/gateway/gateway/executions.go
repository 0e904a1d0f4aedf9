package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/redact"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// idempotencyNamespace derives execution ids from (API key name,
// Idempotency-Key): the same pair always names the same execution.
var idempotencyNamespace = uuid.MustParse("5b0c7f0e-8f0a-4d5e-9a61-2f3c1d7e9b42")

// maxIdempotencyKey is the longest Idempotency-Key accepted.
const maxIdempotencyKey = 255

// links are the URLs of an execution.
type links struct {
	Self   string `json:"self"`
	Events string `json:"events"`
}

func executionLinks(id string) links {
	self := "/v1/executions/" + url.PathEscape(id)
	return links{Self: self, Events: self + "/events"}
}

// accepted is the answer to a start that has not ended (yet).
type accepted struct {
	ExecutionID string `json:"execution_id"`
	Status      string `json:"status"`
	Links       links  `json:"links"`
}

// completion is a finished execution, in the shape `nova run --json` prints.
type completion struct {
	ExecutionID string           `json:"execution_id"`
	Status      string           `json:"status"`
	Context     json.RawMessage  `json:"context"`
	Path        []string         `json:"path"`
	Nodes       []completionNode `json:"nodes"`
	Error       string           `json:"error"`
	CostUSD     float64          `json:"cost_usd"`
	ModelCalls  int32            `json:"model_calls"`
}

type completionNode struct {
	ID         string  `json:"id"`
	Status     string  `json:"status"`
	Attempts   int32   `json:"attempts"`
	Error      string  `json:"error"`
	CostUSD    float64 `json:"cost_usd"`
	ModelCalls int32   `json:"model_calls"`
}

func toCompletion(wc *novav1.WorkflowCompleted) completion {
	c := completion{
		ExecutionID: wc.GetExecutionId(),
		Status:      wc.GetStatus(),
		Context:     jsonvalue.MustObject(wc.GetContext()).Bytes(),
		Path:        wc.GetPath(),
		Nodes:       []completionNode{},
		Error:       wc.GetError(),
		CostUSD:     wc.GetCostUsd(),
		ModelCalls:  wc.GetModelCalls(),
	}
	if c.Path == nil {
		c.Path = []string{}
	}
	for _, n := range wc.GetNodes() {
		c.Nodes = append(c.Nodes, completionNode{ID: n.GetId(), Status: n.GetStatus(), Attempts: n.GetAttempts(), Error: n.GetError(),
			CostUSD: n.GetCostUsd(), ModelCalls: n.GetModelCalls()})
	}
	return c
}

// startRequest is a checked POST /v1/executions body.
type startRequest struct {
	workflow string
	def      *novav1.WorkflowDefinition
	context  jsonvalue.Object
}

var startFields = []string{"workflow", "definition", "context"}

// parseStart reads the body of POST /v1/executions: 400 for what is not a
// start request, 422 listing every problem of an invalid definition (as
// `nova validate` does). The context keeps every number's text.
func parseStart(body []byte) (*startRequest, *Problem) {
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil, invalid("the body must be a JSON object with workflow or definition, and optionally context",
			FieldError{Field: "workflow", Detail: "either workflow or definition is required"})
	}
	members, err := jsonvalue.ParseObject(body)
	if err != nil {
		return nil, invalid(fmt.Sprintf("the body is not a JSON object: %v", err))
	}
	var errs []FieldError
	for _, k := range members.Keys() {
		if !slices.Contains(startFields, k) {
			errs = append(errs, FieldError{Field: k, Detail: "unknown field (known: workflow, definition, context)"})
		}
	}
	req := &startRequest{context: jsonvalue.Object{}}
	if raw, ok := members["workflow"]; ok {
		if err := json.Unmarshal(raw, &req.workflow); err != nil {
			errs = append(errs, FieldError{Field: "workflow", Detail: "must be the name of a registered workflow, a string"})
		} else if req.workflow == "" {
			errs = append(errs, FieldError{Field: "workflow", Detail: "must not be empty"})
		}
	}
	var definition []byte
	if raw, ok := members["definition"]; ok {
		switch raw[0] {
		case '{':
			definition = raw
		case '"':
			var text string
			_ = json.Unmarshal(raw, &text)
			definition = []byte(text)
		default:
			errs = append(errs, FieldError{Field: "definition", Detail: "must be a workflow as a JSON object, or its YAML or JSON text"})
		}
	}
	_, hasWorkflow := members["workflow"]
	_, hasDefinition := members["definition"]
	switch {
	case hasWorkflow && hasDefinition:
		errs = append(errs, FieldError{Field: "definition", Detail: "give either workflow or definition, not both"})
	case !hasWorkflow && !hasDefinition:
		errs = append(errs, FieldError{Field: "workflow", Detail: "either workflow or definition is required"})
	}
	if raw, ok := members["context"]; ok {
		c, err := jsonvalue.ParseObject(raw)
		if err != nil {
			errs = append(errs, FieldError{Field: "context", Detail: "must be a JSON object"})
		} else {
			req.context = c
		}
	}
	var def *novav1.WorkflowDefinition
	if definition != nil && len(errs) == 0 {
		def, err = workflow.Parse(definition)
		if err == nil {
			err = workflow.Validate(def, workflow.ValidateOptions{AllowPrompt: true})
		}
		var verr *workflow.ValidationError
		switch {
		case errors.As(err, &verr):
			return nil, invalidWorkflow(verr)
		case err != nil:
			errs = append(errs, FieldError{Field: "definition", Detail: err.Error()})
		}
	}
	if len(errs) > 0 {
		return nil, invalid(problemsDetail("the request", len(errs)), errs...)
	}
	req.def = def
	return req, nil
}

func problemsDetail(what string, n int) string {
	if n == 1 {
		return what + " has 1 problem"
	}
	return fmt.Sprintf("%s has %d problems", what, n)
}

// invalidWorkflow is a 422 listing every problem of a definition.
func invalidWorkflow(verr *workflow.ValidationError) *Problem {
	errs := make([]FieldError, len(verr.Problems))
	for i, p := range verr.Problems {
		field := "definition"
		if p.Field != "" {
			field += "." + p.Field
		}
		errs[i] = FieldError{Field: field, Node: p.NodeID, Detail: p.Message}
	}
	what := "the workflow definition"
	if verr.Workflow != "" {
		what = fmt.Sprintf("workflow %q", verr.Workflow)
	}
	return newProblem(http.StatusUnprocessableEntity, TypeInvalidWorkflow, problemsDetail(what, len(errs)), errs...)
}

// parseWait reads ?wait=: a Go duration ("30s", "1m") or seconds ("30"),
// capped by limit; 0 when absent.
func parseWait(q string, limit time.Duration) (time.Duration, *Problem) {
	if q == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(q)
	if err != nil {
		secs, serr := strconv.ParseFloat(q, 64)
		if serr != nil || math.IsNaN(secs) || math.IsInf(secs, 0) {
			return 0, invalidField("wait", fmt.Sprintf("%q is not a duration such as 30s", q))
		}
		d = time.Duration(min(secs, limit.Seconds()+1) * float64(time.Second))
	}
	if d < 0 {
		return 0, invalidField("wait", "must not be negative")
	}
	return min(d, limit), nil
}

// checkQuery refuses parameters a route does not take and repeated ones.
func checkQuery(r *http.Request, known ...string) *Problem {
	var errs []FieldError
	q := r.URL.Query()
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		switch {
		case !slices.Contains(known, k):
			errs = append(errs, FieldError{Field: k, Detail: "unknown query parameter (known: " + strings.Join(known, ", ") + ")"})
		case len(q[k]) > 1:
			errs = append(errs, FieldError{Field: k, Detail: "given more than once"})
		}
	}
	if len(errs) > 0 {
		return invalid(problemsDetail("the query", len(errs)), errs...)
	}
	return nil
}

// startExecution is POST /v1/executions.
func (g *Gateway) startExecution(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
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
	req, p := parseStart(body)
	if p != nil {
		return p
	}
	if req.workflow != "" {
		if p := g.checkRegistered(r, req.workflow); p != nil {
			return p
		}
	}
	if g.values != nil {
		if err := g.values.Shrink(ctx, req.context); err != nil {
			return g.unavailable(r, "a large context value could not be stored", err)
		}
	}

	id := uuid.NewString()
	if idem != "" {
		id = uuid.NewSHA1(idempotencyNamespace, []byte(keyName(r)+"\x00"+idem)).String()
	}
	start := &novav1.StartWorkflow{ExecutionId: id, Definition: req.def, WorkflowName: req.workflow, Context: req.context.Proto()}
	wc, self, err := g.publishStart(w, r, start, wait, idem != "", "the start command")
	if err != nil {
		return err
	}
	if wc != nil {
		writeJSON(w, http.StatusOK, toCompletion(wc))
		return nil
	}
	writeJSON(w, http.StatusAccepted, accepted{ExecutionID: id, Status: chainstore.StatusRunning, Links: self})
	return nil
}

// publishStart publishes start, whose execution is new unless reused (an
// Idempotency-Key's, which may have started before), sets Location, and
// with wait > 0 waits that long for its completion: nil when it did not
// come in time. what names the command in the answer when the bus does
// not take it.
func (g *Gateway) publishStart(w http.ResponseWriter, r *http.Request, start *novav1.StartWorkflow, wait time.Duration,
	reused bool, what string) (*novav1.WorkflowCompleted, links, error) {
	ctx := r.Context()
	id := start.GetExecutionId()
	var early *completionWait
	if wait > 0 && !reused {
		// A new execution: its completion cannot come before this wait.
		early = g.waitNewCompletion(ctx, id)
	}
	// The start event's id follows from the execution's, so a retried POST
	// publishes the same message id and JetStream stores it once.
	err := g.bus.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), "start-"+id, bus.TypeWorkflowStart, start,
		map[string]string{bus.ExtensionExecutionID: id})
	if err != nil {
		early.end()
		if ctx.Err() != nil {
			return nil, links{}, ctx.Err()
		}
		if big := (*bus.TooLargeError)(nil); errors.As(err, &big) {
			return nil, links{}, eventTooLarge(big)
		}
		return nil, links{}, g.unavailable(r, what+" was not acknowledged by the bus; try again (with the same Idempotency-Key)", err)
	}
	self := executionLinks(id)
	w.Header().Set("Location", self.Self)
	if wait <= 0 {
		return nil, self, nil
	}
	wc, err := g.awaitCompletion(ctx, id, wait, early)
	return wc, self, err
}

// completionWait is a wait for the completion of one execution.
type completionWait struct {
	done   <-chan *novav1.WorkflowCompleted
	cancel func()
}

// waitNewCompletion waits for the completion of a new execution, not yet
// started, with the gateway's one consumer of completions (bus.Waits); nil
// when the wait cannot be made (awaitCompletion then watches on its own).
func (g *Gateway) waitNewCompletion(ctx context.Context, id string) *completionWait {
	done, stop, err := bus.WaitFirst[novav1.WorkflowCompleted](ctx, g.completions, bus.EventSubject(id, bus.KindWorkflowCompleted))
	if err != nil {
		g.log.WarnContext(ctx, "the shared wait for completions cannot be made; watching this one on its own", "execution", id, "err", err)
		return nil
	}
	return &completionWait{done: done, cancel: stop}
}

// end ends the wait (nothing for nil).
func (c *completionWait) end() {
	if c != nil {
		c.cancel()
	}
}

// awaitCompletion waits up to wait for the completion of the started
// execution id; nil when it did not come in time. early is the wait made
// before a new execution's start; without it (an Idempotency-Key's
// execution may have completed already) it watches once the start is
// published (the engine need not wait for the watch): the stream keeps
// the completion, so none is missed. When the completion cannot be watched
// it says so in the log and returns nil: the answer is then as without
// ?wait.
func (g *Gateway) awaitCompletion(ctx context.Context, id string, wait time.Duration, early *completionWait) (*novav1.WorkflowCompleted, error) {
	if early == nil {
		// An execution that has ended (a repeat): its completion from the
		// engine's state, as it was published; its events may be purged.
		if st, err := g.liveState(ctx, id); err == nil && st != nil && st.Status != chainstore.StatusRunning {
			return st.Completion(), nil
		}
		done, stop, err := bus.First[novav1.WorkflowCompleted](ctx, g.bus, bus.EventSubject(id, bus.KindWorkflowCompleted))
		if err != nil {
			g.log.WarnContext(ctx, "the completion of a started execution cannot be watched; answering without it", "execution", id, "err", err)
			return nil, nil
		}
		early = &completionWait{done: done, cancel: stop}
	}
	defer early.end()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case wc := <-early.done:
		return wc, nil
	case <-timer.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// idempotencyKey is the request's Idempotency-Key, "" when it has none;
// a key given empty, too long or not printable is a problem.
func idempotencyKey(r *http.Request) (string, *Problem) {
	k := r.Header.Get("Idempotency-Key")
	if _, given := r.Header["Idempotency-Key"]; given {
		if p := checkIdempotencyKey(k); p != nil {
			return "", p
		}
	}
	return k, nil
}

func checkIdempotencyKey(k string) *Problem {
	if k == "" || len(k) > maxIdempotencyKey {
		return invalidField("Idempotency-Key", fmt.Sprintf("must be 1 to %d characters", maxIdempotencyKey))
	}
	for _, c := range []byte(k) {
		if c < 0x20 || c > 0x7e {
			return invalidField("Idempotency-Key", "must be printable ASCII")
		}
	}
	return nil
}

// keyName is the name of the request's API key.
func keyName(r *http.Request) string {
	if info, ok := r.Context().Value(requestInfoKey{}).(*requestInfo); ok {
		return info.key
	}
	return ""
}

// checkRegistered answers 422 when no workflow of that name is registered
// (the engine would fail the execution at once).
func (g *Gateway) checkRegistered(r *http.Request, name string) *Problem {
	notRegistered := newProblem(http.StatusUnprocessableEntity, TypeUnknownWorkflow,
		fmt.Sprintf("workflow %q is not registered", name),
		FieldError{Field: "workflow", Detail: "no workflow of this name is registered"})
	if g.registered.seen(name) {
		return nil
	}
	kv, err := g.bucket(r.Context(), bus.BucketWorkflows)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return notRegistered
	}
	if err != nil {
		return g.unavailable(r, "registered workflows cannot be read", err)
	}
	_, err = kv.Get(r.Context(), name)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrInvalidKey):
		return notRegistered
	case err != nil:
		return g.unavailable(r, "registered workflows cannot be read", err)
	}
	g.registered.add(name)
	return nil
}

// registeredNames remembers for a few seconds the workflows found
// registered, so that a stream of starts of one workflow costs one lookup
// of the registry, not one each. A workflow unregistered in that time
// still fails at the engine, with a clear error.
type registeredNames struct {
	mu    sync.Mutex
	found map[string]time.Time
}

const registeredTTL = 5 * time.Second

func (r *registeredNames) seen(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.found[name]
	return ok && time.Since(t) < registeredTTL
}

func (r *registeredNames) add(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.found == nil || len(r.found) > 10000 {
		r.found = map[string]time.Time{}
	}
	r.found[name] = time.Now()
}

// bucket opens one of the engine's KV buckets, once.
func (g *Gateway) bucket(ctx context.Context, name string) (jetstream.KeyValue, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if kv := g.buckets[name]; kv != nil {
		return kv, nil
	}
	kv, err := g.bus.JetStream().KeyValue(ctx, name)
	if err != nil {
		return nil, err
	}
	g.buckets[name] = kv
	return kv, nil
}

// executionView is GET /v1/executions/{id}: what `nova chain --json`
// prints, with the node the engine is at while the execution runs.
type executionView struct {
	Execution executionDoc         `json:"execution"`
	Nodes     []chainstore.NodeDoc `json:"nodes"`
	// ChainUnavailable says why nodes is empty when the audit store could
	// not be read and the view is the engine's state.
	ChainUnavailable string `json:"chain_unavailable,omitempty"`
}

type executionDoc struct {
	*chainstore.ExecutionDoc
	// CurrentNode is the node the engine is running, while the execution runs.
	CurrentNode string `json:"current_node,omitempty"`
	// Waiting is what the execution waits for while its current node is a
	// wait node.
	Waiting *waitingView `json:"waiting,omitempty"`
	// KeptSignals are the signals it keeps until a wait node takes them,
	// oldest first.
	KeptSignals []keptView `json:"kept_signals,omitempty"`
	// Branches are the lines of control running at once, while the
	// execution runs several (a fan-out, a map's items).
	Branches []branchView `json:"branches,omitempty"`
}

// getExecution is GET /v1/executions/{id}: the audit store's document and
// chain of work, or, before the audit service has recorded the execution,
// what the engine's state says of it with the node visits recorded so far
// (the audit service records those as they come, the execution's document
// once it completes or has run a while). Either way the engine's state adds
// the node a running execution is at and what it waits for, and who
// cancelled a cancelled one.
func (g *Gateway) getExecution(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id := r.PathValue("id")
	var view executionDoc
	doc, err := g.store.Execution(ctx, id)
	switch {
	case err == nil:
		view = executionDoc{ExecutionDoc: doc}
		g.liveFor(ctx, &view)
	case errors.Is(err, chainstore.ErrNotFound):
		st, err := g.liveState(ctx, id)
		if err != nil {
			return g.unavailable(r, "the execution state cannot be read", err)
		}
		if st == nil {
			return newProblem(http.StatusNotFound, TypeNotFound, fmt.Sprintf("no execution %q", id))
		}
		if view, err = fromState(st); err != nil {
			return err
		}
	default:
		return g.fromEngine(w, r, id, "the audit store cannot be read", err)
	}
	nodes, err := g.store.Chain(ctx, id)
	if err != nil {
		return g.fromEngine(w, r, id, "the chain of work cannot be read", err)
	}
	writeJSON(w, http.StatusOK, executionView{Execution: view, Nodes: nodes})
	return nil
}

// fromEngine answers GET /v1/executions/{id} from the engine's state when
// the audit store cannot be read (storeErr): the execution's status, path,
// nodes and what it waits for, without the chain of work, which
// chain_unavailable says. An execution the engine does not hold is a 503.
func (g *Gateway) fromEngine(w http.ResponseWriter, r *http.Request, id, detail string, storeErr error) error {
	st, err := g.liveState(r.Context(), id)
	if err != nil || st == nil {
		return g.unavailable(r, detail, storeErr)
	}
	view, err := fromState(st)
	if err != nil {
		return err
	}
	g.log.WarnContext(r.Context(), "execution read from the engine's state: the audit store cannot be read", "execution_id", id, "err", storeErr)
	writeJSON(w, http.StatusOK, executionView{Execution: view, Nodes: []chainstore.NodeDoc{},
		ChainUnavailable: detail + "; this is the graph engine's state of the execution, without its chain of work"})
	return nil
}

// liveState is the engine's state of an execution, nil when it has none.
func (g *Gateway) liveState(ctx context.Context, id string) (*execution.View, error) {
	kv, err := g.bucket(ctx, bus.BucketExecutions)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return execution.ReadView(ctx, kv, id)
}

// fromState describes an execution from the engine's state, in the audit
// store's shape, with its definition. Errors are scrubbed of secrets, as the
// store does.
func fromState(st *execution.View) (executionDoc, error) {
	def, err := chainstore.DefinitionDoc(st.Definition)
	if err != nil {
		return executionDoc{}, fmt.Errorf("execution state %s: definition: %w", st.ID, err)
	}
	doc := &chainstore.ExecutionDoc{
		Definition:   def,
		ExecutionID:  st.ID,
		WorkflowName: st.Workflow,
		Status:       st.Status,
		Path:         st.Path,
		Error:        redact.Scrub(st.Error, nil),
		StartedAt:    timeOf(st.StartedAt),
		CompletedAt:  timeOf(st.CompletedAt),
		CostUSD:      st.CostUSD,
		ModelCalls:   int(st.ModelCalls),
		RerunOf:      st.RerunOf,
		RerunFrom:    st.RerunFrom,
		ScheduleID:   st.ScheduleID,
		ScheduledAt:  timeOf(st.ScheduledAt),
	}
	for _, n := range st.Nodes {
		doc.Nodes = append(doc.Nodes, chainstore.NodeSummaryDoc{ID: n.ID, Status: n.Status, Attempts: int(n.Attempts),
			Visits: int(n.Visits), Error: redact.Scrub(n.Error, nil), CostUSD: n.CostUSD, ModelCalls: int(n.ModelCalls)})
	}
	view := executionDoc{ExecutionDoc: doc}
	addLive(&view, st)
	return view, nil
}
