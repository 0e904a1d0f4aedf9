package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// engineKey is the graph engine's rule for registered workflow names (they
// are keys of its KV buckets): the engine refuses a name that breaks it.
// Execution ids follow it too, made so by execution.ID.
var engineKey = regexp.MustCompile(`^[-_=a-zA-Z0-9]{1,200}$`)

// workflowLinks are the URLs of a registered workflow.
type workflowLinks struct {
	Self string `json:"self"`
	// Executions lists the workflow's executions.
	Executions string `json:"executions"`
}

// workflowSummary is a registered workflow as the engine keeps it.
type workflowSummary struct {
	Name string `json:"name"`
	// Revision is the registry's revision of this registration: a later
	// registration of the name has a higher one.
	Revision  uint64        `json:"revision"`
	NodeCount int           `json:"node_count"`
	UpdatedAt time.Time     `json:"updated_at"`
	Links     workflowLinks `json:"links"`
	// Unchanged is set on a registration of the definition the name has
	// already: nothing new was stored, Revision is the stored one.
	Unchanged bool `json:"unchanged,omitempty"`
	// Runs sums up the workflow's last executions, with ?runs=N only.
	Runs *recentRuns `json:"runs,omitempty"`
}

// recentRuns are a workflow's last executions as GET /v1/workflows?runs=N
// sums them up: the newest, and how many of the last N ended and
// succeeded.
type recentRuns struct {
	// Last is the newest execution; absent when it never ran.
	Last *listItem `json:"last,omitempty"`
	// Counted executions, at most N; Ended of them ended, Succeeded of
	// those succeeded.
	Counted   int `json:"counted"`
	Ended     int `json:"ended"`
	Succeeded int `json:"succeeded"`
}

// workflowView is GET /v1/workflows/{name}: the summary and the definition,
// in the shape the audit store shows an execution's definition, and the
// registrations the registry keeps of the name.
type workflowView struct {
	workflowSummary
	Definition json.RawMessage `json:"definition"`
	// Revisions are the kept registrations of the name, newest first; the
	// first is the one a start by name runs.
	Revisions []workflowRevision `json:"revisions"`
}

// workflowRevision is one kept registration of a workflow's name.
type workflowRevision struct {
	Revision  uint64    `json:"revision"`
	NodeCount int       `json:"node_count"`
	UpdatedAt time.Time `json:"updated_at"`
}

type workflowList struct {
	Workflows []workflowSummary `json:"workflows"`
}

// definitionJSON writes definitions as the audit store records them.
var definitionJSON = protojson.MarshalOptions{UseProtoNames: true}

// YAML media types of a definition.
var yamlTypes = []string{"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"}

// registerWorkflow is POST /v1/workflows: the body is a definition in YAML
// or JSON (by its Content-Type; without one, either). It is validated as
// `nova validate` does, registered with the engine by the register command
// `nova register` publishes, and answered 201 once the engine has stored
// it, so that a start by name that follows finds it.
func (g *Gateway) registerWorkflow(w http.ResponseWriter, r *http.Request) error {
	if p := checkQuery(r); p != nil {
		return p
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	def, p := parseDefinition(r.Header.Get("Content-Type"), body)
	if p != nil {
		return p
	}
	entry, unchanged, err := g.registerChange(r, def)
	if err != nil {
		return err
	}
	s := summarize(entry, def)
	w.Header().Set("Location", s.Links.Self)
	if unchanged {
		s.Unchanged = true
		writeJSON(w, http.StatusOK, s)
		return nil
	}
	writeJSON(w, http.StatusCreated, s)
	return nil
}

// register registers def with the engine by the register command `nova
// register` publishes, and returns the registry's entry once the engine
// has stored it (or holds it already), so that a start by name that
// follows finds it.
func (g *Gateway) register(r *http.Request, def *novav1.WorkflowDefinition) (jetstream.KeyValueEntry, error) {
	entry, _, err := g.registerChange(r, def)
	return entry, err
}

// registerChange is register, and tells whether def was unchanged. A
// definition the registry holds already as the name's latest is answered
// at once with that entry and unchanged set: the engine stores nothing for
// it, so there is no write to wait for. The command is still sent, for the
// engine re-applies the definition's schedules on every registration.
func (g *Gateway) registerChange(r *http.Request, def *novav1.WorkflowDefinition) (entry jetstream.KeyValueEntry, unchanged bool, err error) {
	ctx := r.Context()
	kv, err := g.bucket(ctx, bus.BucketWorkflows)
	if err != nil {
		return nil, false, g.unavailable(r, "the workflow registry cannot be read; is the graph engine running?", err)
	}
	current, err := kv.Get(ctx, def.Name)
	switch {
	case err == nil:
		var stored novav1.WorkflowDefinition
		if proto.Unmarshal(current.Value(), &stored) == nil && proto.Equal(&stored, def) {
			if err := g.publishRegister(ctx, "register-"+uuid.NewString(), def); err != nil {
				return nil, false, g.publishProblem(r, err)
			}
			return current, true, nil
		}
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, false, g.unavailable(r, "the workflow registry cannot be read", err)
	}
	entry, err = g.awaitRegister(r, kv, def)
	return entry, false, err
}

// publishRegister publishes the register command of def, as `nova
// register` does.
func (g *Gateway) publishRegister(ctx context.Context, eventID string, def *novav1.WorkflowDefinition) error {
	return g.bus.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), eventID, bus.TypeWorkflowRegister,
		&novav1.RegisterWorkflow{Definition: def}, nil)
}

// publishProblem is the answer to a register command the bus did not take.
func (g *Gateway) publishProblem(r *http.Request, err error) error {
	if r.Context().Err() != nil {
		return r.Context().Err()
	}
	return g.unavailable(r, "the register command was not acknowledged by the bus; try again", err)
}

// awaitRegister publishes the register command of def and returns the
// registry's entry once the engine has stored def, or the engine's
// refusal.
func (g *Gateway) awaitRegister(r *http.Request, kv jetstream.KeyValue, def *novav1.WorkflowDefinition) (jetstream.KeyValueEntry, error) {
	ctx := r.Context()
	// Both watches begin before the command is published, so that neither
	// the engine's write nor its refusal is missed.
	stored, err := kv.Watch(ctx, def.Name, jetstream.UpdatesOnly())
	if err != nil {
		return nil, g.unavailable(r, "the workflow registry cannot be watched", err)
	}
	defer func() { _ = stored.Stop() }()
	eventID := "register-" + uuid.NewString()
	refused, stop, err := g.watchRefusal(ctx, eventID)
	if err != nil {
		return nil, g.unavailable(r, "the graph engine's refusals cannot be watched", err)
	}
	defer stop()
	if err := g.publishRegister(ctx, eventID, def); err != nil {
		return nil, g.publishProblem(r, err)
	}
	for {
		select {
		case entry, ok := <-stored.Updates():
			if !ok {
				return nil, g.unavailable(r, "the workflow registry cannot be watched", errors.New("KV watch ended"))
			}
			if entry == nil || entry.Operation() != jetstream.KeyValuePut {
				continue
			}
			var got novav1.WorkflowDefinition
			if proto.Unmarshal(entry.Value(), &got) != nil || !proto.Equal(&got, def) {
				continue // another registration of the name
			}
			return entry, nil
		case dl := <-refused:
			return nil, newProblem(http.StatusUnprocessableEntity, TypeInvalidWorkflow,
				fmt.Sprintf("the graph engine refused workflow %q: %s", def.Name, dl.GetReason()))
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, newProblem(http.StatusGatewayTimeout, TypeTimeout, fmt.Sprintf(
					"the register command for workflow %q is on the bus, but the graph engine has not stored it in time; "+
						"it will once it takes the command up (GET /v1/workflows/%s shows when)", def.Name, def.Name))
			}
			return nil, ctx.Err()
		}
	}
}

// parseDefinition reads a definition by its media type: JSON must be JSON,
// YAML (or no type) is read as YAML, of which JSON is a part. Text that is
// no definition at all is 400; a definition with problems 422, listing
// every one.
func parseDefinition(contentType string, body []byte) (*novav1.WorkflowDefinition, *Problem) {
	mt := ""
	if contentType != "" {
		var err error
		if mt, _, err = mime.ParseMediaType(contentType); err != nil {
			return nil, invalidField("Content-Type", fmt.Sprintf("%q is not a media type", contentType))
		}
	}
	if mt == "application/json" {
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			return nil, syntaxProblem(body, fmt.Sprintf("is not JSON (Content-Type %s): %v", mt, err), err)
		}
	}
	def, err := workflow.Parse(body)
	var verr *workflow.ValidationError
	switch {
	case errors.As(err, &verr):
		p := invalidWorkflow(verr)
		definitionLines(body, p.Errors)
		return nil, p
	case err != nil:
		what := "YAML or JSON"
		switch {
		case mt == "application/json":
			what = "JSON"
		case slices.Contains(yamlTypes, mt):
			what = "YAML"
		}
		return nil, syntaxProblem(body, fmt.Sprintf("is not a workflow definition in %s: %v", what, err), err)
	}
	if p := validateDefinition(def, true); p != nil {
		definitionLines(body, p.Errors)
		return nil, p
	}
	return def, nil
}

// syntaxProblem is a 400 for a body that does not parse, at the line of
// it the parser's error names.
func syntaxProblem(body []byte, detail string, err error) *Problem {
	p := invalidField("body", detail)
	p.Errors[0].Line = syntaxLine(body, err)
	return p
}

// validateDefinition lists every problem of def, as `nova validate` does;
// one to be registered needs a name the registry can keep, too.
func validateDefinition(def *novav1.WorkflowDefinition, registering bool) *Problem {
	var verr *workflow.ValidationError
	if err := workflow.Validate(def, workflow.ValidateOptions{AllowPrompt: true}); err != nil && !errors.As(err, &verr) {
		return invalidField("definition", err.Error())
	}
	if name := def.GetName(); registering && strings.TrimSpace(name) != "" && !engineKey.MatchString(name) {
		if verr == nil {
			verr = &workflow.ValidationError{Workflow: name}
		}
		verr.Problems = append(verr.Problems, workflow.Problem{Field: "name",
			Message: fmt.Sprintf("%q cannot be registered: a name is 1 to 200 letters, digits, '-', '_' or '='", name)})
	}
	if verr != nil {
		return invalidWorkflow(verr)
	}
	return nil
}

// watchRefusal reports the dead letter of the register command eventID: the
// engine refuses a definition it cannot run (AI nodes where they are off).
func (g *Gateway) watchRefusal(ctx context.Context, eventID string) (<-chan *novav1.DeadLetter, func(), error) {
	refused := make(chan *novav1.DeadLetter, 1)
	cons, err := g.bus.JetStream().OrderedConsumer(ctx, bus.StreamDeadLetters, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.DeadLetterSubject(bus.ConsumerEngineCommands)},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("watch dead letters of %s: %w", eventID, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		ev, err := bus.DecodeNATS(m.Headers(), m.Data())
		var dl novav1.DeadLetter
		if err == nil && bus.Decode(*ev, &dl) == nil && dl.GetHeaders()["ce-id"] == eventID {
			select {
			case refused <- &dl:
			default:
			}
		}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("watch dead letters of %s: %w", eventID, err)
	}
	return refused, cc.Stop, nil
}

// listWorkflows is GET /v1/workflows: every registered workflow, by name.
// With ?runs=N (1 to maxWorkflowRuns) each also sums up its last N
// executions, so that a page of workflows and their health is one read.
func (g *Gateway) listWorkflows(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if p := checkQuery(r, "runs"); p != nil {
		return p
	}
	runs := 0
	if v := r.URL.Query().Get("runs"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxWorkflowRuns {
			return invalidField("runs", fmt.Sprintf("%q is not a whole number from 1 to %d", v, maxWorkflowRuns))
		}
		runs = n
	}
	list := workflowList{Workflows: []workflowSummary{}}
	kv, err := g.bucket(ctx, bus.BucketWorkflows)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		writeJSON(w, http.StatusOK, list) // the engine has not run yet
		return nil
	}
	if err != nil {
		return g.unavailable(r, "the workflow registry cannot be read", err)
	}
	// A watch of every key hands over each one's latest value, then nil.
	all, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return g.unavailable(r, "the workflow registry cannot be read", err)
	}
	defer func() { _ = all.Stop() }()
	for {
		var entry jetstream.KeyValueEntry
		var ok bool
		select {
		case entry, ok = <-all.Updates():
		case <-ctx.Done():
			return ctx.Err()
		}
		if !ok {
			return g.unavailable(r, "the workflow registry cannot be read", errors.New("KV watch ended"))
		}
		if entry == nil {
			break
		}
		var def novav1.WorkflowDefinition
		if err := proto.Unmarshal(entry.Value(), &def); err != nil {
			g.log.WarnContext(ctx, "registered workflow unreadable", "workflow", entry.Key(), "err", err)
			continue
		}
		list.Workflows = append(list.Workflows, summarize(entry, &def))
	}
	slices.SortFunc(list.Workflows, func(a, b workflowSummary) int { return strings.Compare(a.Name, b.Name) })
	if runs > 0 {
		if err := g.sumRuns(ctx, list.Workflows, runs); err != nil {
			return g.unavailable(r, "the audit store cannot be read", err)
		}
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// maxWorkflowRuns bounds GET /v1/workflows?runs=N.
const maxWorkflowRuns = 100

// sumRuns sets the Runs of each workflow from its last n executions. It
// reads the newest n executions per workflow (at most the store's listing
// limit) in one listing; only when that window is full and a workflow has
// fewer than n in it (it ran rarely, or not lately) is that workflow's own
// listing read.
func (g *Gateway) sumRuns(ctx context.Context, workflows []workflowSummary, n int) error {
	window := min(max(n*len(workflows), n), chainstore.MaxListLimit)
	newest, err := g.store.ListExecutions(ctx, chainstore.ListFilter{Limit: window})
	if err != nil {
		return err
	}
	byName := map[string][]chainstore.ExecutionDoc{}
	for _, d := range newest {
		if len(byName[d.WorkflowName]) < n {
			byName[d.WorkflowName] = append(byName[d.WorkflowName], d)
		}
	}
	for i := range workflows {
		docs := byName[workflows[i].Name]
		if len(newest) == window && len(docs) < n {
			if docs, err = g.store.ListExecutions(ctx, chainstore.ListFilter{Workflow: workflows[i].Name, Limit: n}); err != nil {
				return err
			}
		}
		workflows[i].Runs = sumOf(docs)
	}
	return nil
}

// sumOf sums up executions listed newest first.
func sumOf(docs []chainstore.ExecutionDoc) *recentRuns {
	sum := &recentRuns{Counted: len(docs)}
	if len(docs) > 0 {
		last := listItemOf(&docs[0])
		sum.Last = &last
	}
	for _, d := range docs {
		if d.Status == execution.StatusRunning {
			continue
		}
		sum.Ended++
		if d.Status == execution.StatusSucceeded {
			sum.Succeeded++
		}
	}
	return sum
}

// getWorkflow is GET /v1/workflows/{name}: the registration a start by name
// runs, or with ?revision=N one the registry still keeps (it keeps the
// last few of each name), and the list of those it keeps.
func (g *Gateway) getWorkflow(w http.ResponseWriter, r *http.Request) error {
	if p := checkQuery(r, "revision"); p != nil {
		return p
	}
	name := r.PathValue("name")
	var want uint64
	if v := r.URL.Query().Get("revision"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return invalidField("revision", fmt.Sprintf("%q is not a revision: a whole number from 1", v))
		}
		want = n
	}
	entry, def, err := g.registeredWorkflow(r, name)
	if err != nil {
		return err
	}
	revisions, kept, err := g.workflowRevisions(r, name)
	if err != nil {
		return err
	}
	if want != 0 && want != entry.Revision() {
		i := slices.IndexFunc(kept, func(e jetstream.KeyValueEntry) bool { return e.Revision() == want })
		if i < 0 {
			return newProblem(http.StatusNotFound, TypeNotFound, fmt.Sprintf(
				"revision %d of workflow %q is not kept; the registry keeps %s", want, name, revisionList(revisions)))
		}
		entry, def = kept[i], &novav1.WorkflowDefinition{}
		if err := proto.Unmarshal(entry.Value(), def); err != nil {
			return fmt.Errorf("workflow %q revision %d: %w", name, want, err)
		}
	}
	text, err := definitionJSON.Marshal(def)
	if err != nil {
		return fmt.Errorf("registered workflow %q: %w", name, err)
	}
	writeJSON(w, http.StatusOK, workflowView{workflowSummary: summarize(entry, def), Definition: text, Revisions: revisions})
	return nil
}

// workflowRevisions lists the registrations the registry keeps of name,
// newest first, with their entries. A registration replaced by a deletion
// is not one a start can run and is left out.
func (g *Gateway) workflowRevisions(r *http.Request, name string) ([]workflowRevision, []jetstream.KeyValueEntry, error) {
	kv, err := g.bucket(r.Context(), bus.BucketWorkflows)
	if err != nil {
		return nil, nil, g.unavailable(r, "the workflow registry cannot be read", err)
	}
	history, err := kv.History(r.Context(), name)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil, g.unavailable(r, "the workflow registry's history cannot be read", err)
	}
	revisions := []workflowRevision{}
	var kept []jetstream.KeyValueEntry
	for _, e := range slices.Backward(history) {
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		var def novav1.WorkflowDefinition
		if err := proto.Unmarshal(e.Value(), &def); err != nil {
			g.log.WarnContext(r.Context(), "registered workflow revision unreadable", "workflow", name, "revision", e.Revision(), "err", err)
			continue
		}
		revisions = append(revisions, workflowRevision{Revision: e.Revision(), NodeCount: len(def.GetNodes()), UpdatedAt: e.Created().UTC()})
		kept = append(kept, e)
	}
	return revisions, kept, nil
}

// revisionList names revisions for a message: "revisions 12, 9 and 4".
func revisionList(rs []workflowRevision) string {
	if len(rs) == 0 {
		return "none"
	}
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = strconv.FormatUint(r.Revision, 10)
	}
	if len(names) == 1 {
		return "revision " + names[0]
	}
	return "revisions " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

func summarize(entry jetstream.KeyValueEntry, def *novav1.WorkflowDefinition) workflowSummary {
	return workflowSummary{
		Name:      entry.Key(),
		Revision:  entry.Revision(),
		NodeCount: len(def.GetNodes()),
		UpdatedAt: entry.Created().UTC(),
		Links:     workflowLinksOf(entry.Key()),
	}
}

// registeredWorkflow reads the registration of workflow name: 404 when
// there is none, 503 when the registry cannot be read.
func (g *Gateway) registeredWorkflow(r *http.Request, name string) (jetstream.KeyValueEntry, *novav1.WorkflowDefinition, error) {
	notFound := newProblem(http.StatusNotFound, TypeNotFound, fmt.Sprintf("no workflow %q is registered", name))
	if !engineKey.MatchString(name) {
		return nil, nil, notFound
	}
	kv, err := g.bucket(r.Context(), bus.BucketWorkflows)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil, notFound
	}
	if err != nil {
		return nil, nil, g.unavailable(r, "the workflow registry cannot be read", err)
	}
	entry, err := kv.Get(r.Context(), name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil, notFound
	}
	if err != nil {
		return nil, nil, g.unavailable(r, "the workflow registry cannot be read", err)
	}
	var def novav1.WorkflowDefinition
	if err := proto.Unmarshal(entry.Value(), &def); err != nil {
		return nil, nil, fmt.Errorf("registered workflow %q: %w", name, err)
	}
	return entry, &def, nil
}

// workflowLinksOf are the URLs of a registered workflow.
func workflowLinksOf(name string) workflowLinks {
	return workflowLinks{
		Self:       "/v1/workflows/" + url.PathEscape(name),
		Executions: "/v1/executions?workflow=" + url.QueryEscape(name),
	}
}
