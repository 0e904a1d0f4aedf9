package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Schedules start a registered workflow on a cron expression or at an
// interval: POST /v1/schedules, GET /v1/schedules, GET, DELETE
// /v1/schedules/{workflow}/{id} and POST .../pause and .../resume. The graph
// engine keeps them in the KV bucket nova_schedules and changes them on the
// commands io.nova.schedule.put.v1 and io.nova.schedule.delete.v1; a
// change is answered once the engine stored it, or 202 when it has not
// within scheduleWait (it does once it takes the command).

// TypeInvalidSchedule: a schedule the engine cannot run: a bad cron, time
// zone, interval or catchup (422).
const TypeInvalidSchedule = typePrefix + "invalid-schedule"

// scheduleWait is how long a change of a schedule waits for the engine to
// store it before it is answered 202.
const scheduleWait = 5 * time.Second

// How many of the executions a schedule started GET
// /v1/schedules/{workflow}/{id} lists.
const recentTickCount = 5

var scheduleRequestFields = []string{"workflow", "schedule"}

// scheduleView is a schedule as the API shows it.
type scheduleView struct {
	workflow.ScheduleView
	// Pending is set in a 202: the command is on the bus and the engine has
	// not stored the change yet.
	Pending bool          `json:"pending,omitempty"`
	Links   scheduleLinks `json:"links"`
}

type scheduleLinks struct {
	Self     string `json:"self"`
	Workflow string `json:"workflow"`
	// Executions lists the executions the schedule started.
	Executions string `json:"executions"`
}

// scheduleDetail is GET /v1/schedules/{workflow}/{id}: the schedule and the
// last executions it started, newest first.
type scheduleDetail struct {
	scheduleView
	RecentExecutions []listItem `json:"recent_executions"`
}

type scheduleList struct {
	Schedules []scheduleView `json:"schedules"`
}

func scheduleLinksOf(wf, id string) scheduleLinks {
	return scheduleLinks{
		Self:     "/v1/schedules/" + url.PathEscape(wf) + "/" + url.PathEscape(id),
		Workflow: workflowLinksOf(wf).Self,
		Executions: "/v1/executions?workflow=" + url.QueryEscape(wf) + "&id=" +
			url.QueryEscape(execution.TickPrefix(wf, id)),
	}
}

// scheduleViewOf shows st as it stands at now.
func scheduleViewOf(st *novav1.ScheduleState, now time.Time) scheduleView {
	return scheduleView{ScheduleView: workflow.ViewSchedule(st, now), Links: scheduleLinksOf(st.GetWorkflow(), st.GetSchedule().GetId())}
}

// parseScheduleRequest reads the body of POST /v1/schedules: the workflow's
// name and the schedule, which is checked as a definition's schedules entry
// is (400 for a body of the wrong shape, 422 naming the schedule's
// problems). A schedule without id gets a new one; its context keeps its
// numbers as written.
func parseScheduleRequest(body []byte) (string, *novav1.Schedule, *Problem) {
	members, err := jsonvalue.ParseObject(body)
	if err != nil {
		return "", nil, invalid(fmt.Sprintf("the body must be a JSON object with workflow and schedule: %v", err))
	}
	var errs []FieldError
	for _, k := range members.Keys() {
		if !slices.Contains(scheduleRequestFields, k) {
			errs = append(errs, FieldError{Field: k, Detail: "unknown field (known: " + strings.Join(scheduleRequestFields, ", ") + ")"})
		}
	}
	var wf string
	if raw, ok := members["workflow"]; !ok {
		errs = append(errs, FieldError{Field: "workflow", Detail: "is required: the name of a registered workflow"})
	} else if json.Unmarshal(raw, &wf) != nil || strings.TrimSpace(wf) == "" {
		errs = append(errs, FieldError{Field: "workflow", Detail: "must be the name of a registered workflow, a string"})
	}
	var entry jsonvalue.Object
	if raw, ok := members["schedule"]; !ok {
		errs = append(errs, FieldError{Field: "schedule", Detail: "is required: an object with cron or every"})
	} else if entry, err = jsonvalue.ParseObject(raw); err != nil || string(raw) == "null" {
		errs = append(errs, FieldError{Field: "schedule", Detail: "must be a JSON object: cron or every, timezone, context, catchup, id, paused"})
	}
	if len(errs) > 0 {
		return "", nil, invalid(problemsDetail("the request", len(errs)), errs...)
	}
	s, p := parseScheduleEntry(entry)
	return wf, s, p
}

// parseScheduleEntry reads one schedule, as a definition's schedules entry
// (cron or every, timezone, context, catchup, id, paused), the way POST
// /v1/schedules takes it: an entry without id gets a new one, its context
// keeps its numbers as written, and its problems are a 422 naming each
// field ("schedule.cron").
func parseScheduleEntry(entry jsonvalue.Object) (*novav1.Schedule, *Problem) {
	entry = entry.Clone()
	if _, ok := entry["id"]; !ok {
		entry["id"] = json.RawMessage(`"` + workflow.NewScheduleID() + `"`)
	}
	s, err := workflow.ParseSchedule(entry.Bytes())
	var verr *workflow.ValidationError
	switch {
	case errors.As(err, &verr):
		return nil, invalidSchedule(verr)
	case err != nil:
		return nil, invalidField("schedule", err.Error())
	}
	if len(s.GetId()) > workflow.MaxScheduleID {
		return nil, newProblem(http.StatusUnprocessableEntity, TypeInvalidSchedule,
			fmt.Sprintf("the schedule has 1 problem: id %q is longer than %d characters", s.GetId(), workflow.MaxScheduleID),
			FieldError{Field: "schedule.id", Detail: fmt.Sprintf("must be at most %d characters", workflow.MaxScheduleID)})
	}
	if raw, ok := entry["context"]; ok {
		// The entry was read as YAML; the context is taken as the JSON it is.
		c, err := jsonvalue.ParseObject(raw)
		if err != nil {
			return nil, invalidField("schedule.context", "must be a JSON object: the context each run starts with")
		}
		s.Context = nil
		if len(c) > 0 {
			s.Context = c.Proto()
		}
	}
	return s, nil
}

// invalidSchedule is a 422 naming each problem of a schedule.
func invalidSchedule(verr *workflow.ValidationError) *Problem {
	errs := make([]FieldError, len(verr.Problems))
	msgs := make([]string, len(verr.Problems))
	for i, p := range verr.Problems {
		field := strings.TrimPrefix(strings.TrimPrefix(p.Field, "schedules[0]"), ".")
		if field == "" {
			field = scheduleFieldOf(p.Message)
		}
		errs[i] = FieldError{Field: strings.TrimSuffix("schedule."+field, "."), Detail: p.Message}
		msgs[i] = p.Message
	}
	return newProblem(http.StatusUnprocessableEntity, TypeInvalidSchedule,
		problemsDetail("the schedule", len(errs))+": "+strings.Join(msgs, "; "), errs...)
}

// scheduleFieldOf is the field a schedule's problem is about, by the word
// its message begins with ("" when it is about the schedule as a whole:
// both cron and every, neither).
func scheduleFieldOf(msg string) string {
	for _, f := range []string{"cron", "timezone", "every", "id", "catchup", "context"} {
		if strings.HasPrefix(msg, f+" ") {
			return f
		}
	}
	return ""
}

// createSchedule is POST /v1/schedules: 400 for a body of the wrong shape,
// 422 for a schedule the engine cannot run, 404 for a workflow that is not
// registered, 409 for the id of a schedule the workflow's definition
// declares; else the put command is published and the answer is 201 with
// the schedule as the engine stored it (200 when it replaced one of that
// id, or was stored so already), or 202 when the engine has not stored it
// within scheduleWait.
func (g *Gateway) createSchedule(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if p := checkQuery(r); p != nil {
		return p
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	wf, s, p := parseScheduleRequest(body)
	if p != nil {
		return p
	}
	if _, _, err := g.registeredWorkflow(r, wf); err != nil {
		if p := (*Problem)(nil); errors.As(err, &p) && p.Status == http.StatusNotFound {
			p.Errors = []FieldError{{Field: "workflow", Detail: "no workflow of this name is registered"}}
		}
		return err
	}
	kv, err := g.bucket(ctx, bus.BucketSchedules)
	if err != nil {
		return g.unavailable(r, "the schedules cannot be read; is the graph engine running?", err)
	}
	old, err := readSchedule(ctx, kv, wf, s.GetId())
	if err != nil {
		return g.unavailable(r, "the schedules cannot be read", err)
	}
	switch {
	case old != nil && old.GetFromDefinition():
		return newProblem(http.StatusConflict, TypeConflict, fmt.Sprintf(
			"schedule %q of workflow %q is declared in its definition: change it there and register the workflow again "+
				"(pausing, resuming and deleting it work here), or give this schedule another id", s.GetId(), wf),
			FieldError{Field: "schedule.id", Detail: "the id of a schedule the workflow's definition declares"})
	case old != nil && proto.Equal(old.GetSchedule(), s):
		writeSchedule(w, http.StatusOK, scheduleViewOf(old, time.Now()))
		return nil
	}
	entry, err := g.sendSchedule(r, kv, bus.ScheduleKey(wf, s.GetId()), bus.TypeSchedulePut,
		&novav1.PutSchedule{Workflow: wf, Schedule: s}, storedAs(s))
	if err != nil {
		return err
	}
	if entry == nil {
		writeSchedule(w, http.StatusAccepted, pendingView(wf, s))
		return nil
	}
	st, err := scheduleOf(entry)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if old != nil {
		status = http.StatusOK
	}
	writeSchedule(w, status, scheduleViewOf(st, time.Now()))
	return nil
}

// listSchedules is GET /v1/schedules: every schedule, or with ?workflow=
// one workflow's, by workflow and id.
func (g *Gateway) listSchedules(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if p := checkQuery(r, "workflow"); p != nil {
		return p
	}
	wf, filtered := r.URL.Query().Get("workflow"), r.URL.Query().Has("workflow")
	if filtered && !engineKey.MatchString(wf) {
		return invalidField("workflow", fmt.Sprintf("%q is not a workflow name: 1 to 200 letters, digits, '-', '_' or '='", wf))
	}
	list := scheduleList{Schedules: []scheduleView{}}
	kv, err := g.bucket(ctx, bus.BucketSchedules)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		writeJSON(w, http.StatusOK, list) // the engine has not run yet
		return nil
	}
	if err != nil {
		return g.unavailable(r, "the schedules cannot be read", err)
	}
	states, err := allSchedules(ctx, kv, wf)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return g.unavailable(r, "the schedules cannot be read", err)
	}
	now := time.Now()
	for _, st := range states {
		list.Schedules = append(list.Schedules, scheduleViewOf(st, now))
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// getSchedule is GET /v1/schedules/{workflow}/{id}: the schedule, its next
// ticks and the last executions it started (absent when the audit store
// cannot be read).
func (g *Gateway) getSchedule(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if p := checkQuery(r); p != nil {
		return p
	}
	st, _, err := g.scheduleState(r)
	if err != nil {
		return err
	}
	view := scheduleDetail{scheduleView: scheduleViewOf(st, time.Now()), RecentExecutions: []listItem{}}
	wf, id := st.GetWorkflow(), st.GetSchedule().GetId()
	docs, err := g.store.ListExecutions(ctx, chainstore.ListFilter{Workflow: wf, IDPrefix: execution.TickPrefix(wf, id), Limit: recentTickCount})
	if err != nil {
		g.log.WarnContext(ctx, "the executions of a schedule cannot be listed", "workflow", wf, "schedule", id, "err", err)
		view.RecentExecutions = nil
	}
	for _, d := range docs {
		view.RecentExecutions = append(view.RecentExecutions, listItemOf(&d))
	}
	writeJSON(w, http.StatusOK, view)
	return nil
}

// pauseSchedule is POST /v1/schedules/{workflow}/{id}/pause: the schedule
// starts nothing until it is resumed.
func (g *Gateway) pauseSchedule(w http.ResponseWriter, r *http.Request) error {
	return g.setPaused(w, r, true)
}

// resumeSchedule is POST /v1/schedules/{workflow}/{id}/resume.
func (g *Gateway) resumeSchedule(w http.ResponseWriter, r *http.Request) error {
	return g.setPaused(w, r, false)
}

// setPaused pauses or resumes a schedule: 404 for an unknown one, 200 with
// it as stored once the engine stored the change (at once when it was so
// already: nothing is sent), 202 when the engine has not within
// scheduleWait.
func (g *Gateway) setPaused(w http.ResponseWriter, r *http.Request, paused bool) error {
	if p := checkQuery(r); p != nil {
		return p
	}
	st, kv, err := g.scheduleState(r)
	if err != nil {
		return err
	}
	if st.GetSchedule().GetPaused() == paused {
		writeSchedule(w, http.StatusOK, scheduleViewOf(st, time.Now()))
		return nil
	}
	s := proto.CloneOf(st.GetSchedule())
	s.Paused = paused
	wf := st.GetWorkflow()
	entry, err := g.sendSchedule(r, kv, bus.ScheduleKey(wf, s.GetId()), bus.TypeSchedulePut,
		&novav1.PutSchedule{Workflow: wf, Schedule: s}, storedAs(s))
	if err != nil {
		return err
	}
	if entry == nil {
		want := proto.CloneOf(st)
		want.Schedule = s
		v := scheduleViewOf(want, time.Now())
		v.Pending = true
		writeSchedule(w, http.StatusAccepted, v)
		return nil
	}
	stored, err := scheduleOf(entry)
	if err != nil {
		return err
	}
	writeSchedule(w, http.StatusOK, scheduleViewOf(stored, time.Now()))
	return nil
}

// deleteSchedule is DELETE /v1/schedules/{workflow}/{id}: 404 for an
// unknown schedule, 204 once the engine removed it, 202 when it has not
// within scheduleWait.
func (g *Gateway) deleteSchedule(w http.ResponseWriter, r *http.Request) error {
	if p := checkQuery(r); p != nil {
		return p
	}
	st, kv, err := g.scheduleState(r)
	if err != nil {
		return err
	}
	wf, id := st.GetWorkflow(), st.GetSchedule().GetId()
	entry, err := g.sendSchedule(r, kv, bus.ScheduleKey(wf, id), bus.TypeScheduleDelete,
		&novav1.DeleteSchedule{Workflow: wf, ScheduleId: id}, func(e jetstream.KeyValueEntry) bool {
			return e.Operation() != jetstream.KeyValuePut
		})
	if err != nil {
		return err
	}
	if entry == nil {
		v := scheduleViewOf(st, time.Now())
		v.Pending = true
		writeSchedule(w, http.StatusAccepted, v)
		return nil
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// writeSchedule answers a schedule with its URL in Location.
func writeSchedule(w http.ResponseWriter, status int, v scheduleView) {
	w.Header().Set("Location", v.Links.Self)
	writeJSON(w, status, v)
}

// pendingView shows schedule s of workflow wf as the put command asks for
// it, before the engine stored it.
func pendingView(wf string, s *novav1.Schedule) scheduleView {
	v := scheduleViewOf(&novav1.ScheduleState{Workflow: wf, Schedule: s}, time.Now())
	v.Pending = true
	return v
}

// scheduleState reads the schedule the path names: 404 when there is none,
// naming the workflow's schedules.
func (g *Gateway) scheduleState(r *http.Request) (*novav1.ScheduleState, jetstream.KeyValue, error) {
	ctx := r.Context()
	wf, id := r.PathValue("workflow"), r.PathValue("id")
	notFound := func(detail string) error {
		return newProblem(http.StatusNotFound, TypeNotFound, fmt.Sprintf("workflow %q has no schedule %q%s", wf, id, detail))
	}
	if !engineKey.MatchString(wf) || !workflow.ValidToken(id) {
		return nil, nil, notFound("")
	}
	kv, err := g.bucket(ctx, bus.BucketSchedules)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil, notFound("")
	}
	if err != nil {
		return nil, nil, g.unavailable(r, "the schedules cannot be read", err)
	}
	st, err := readSchedule(ctx, kv, wf, id)
	if err != nil {
		return nil, nil, g.unavailable(r, "the schedules cannot be read", err)
	}
	if st != nil {
		return st, kv, nil
	}
	others, err := allSchedules(ctx, kv, wf)
	if err != nil || len(others) == 0 {
		return nil, nil, notFound(" (it has none)")
	}
	ids := make([]string, len(others))
	for i, o := range others {
		ids[i] = o.GetSchedule().GetId()
	}
	return nil, nil, notFound(" (its schedules: " + strings.Join(ids, ", ") + ")")
}

// readSchedule is schedule id of workflow wf, nil when there is none.
func readSchedule(ctx context.Context, kv jetstream.KeyValue, wf, id string) (*novav1.ScheduleState, error) {
	entry, err := kv.Get(ctx, bus.ScheduleKey(wf, id))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrInvalidKey):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return scheduleOf(entry)
}

func scheduleOf(entry jetstream.KeyValueEntry) (*novav1.ScheduleState, error) {
	var st novav1.ScheduleState
	if err := proto.Unmarshal(entry.Value(), &st); err != nil {
		return nil, fmt.Errorf("schedule %s: %w", entry.Key(), err)
	}
	return &st, nil
}

// allSchedules are the schedules of workflow wf ("" for every workflow's),
// by workflow and id.
func allSchedules(ctx context.Context, kv jetstream.KeyValue, wf string) ([]*novav1.ScheduleState, error) {
	filter := ">"
	if wf != "" {
		filter = wf + ".*"
	}
	// A watch hands over each key's latest value, then nil.
	watch, err := kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = watch.Stop() }()
	var out []*novav1.ScheduleState
	for {
		select {
		case entry, ok := <-watch.Updates():
			if !ok {
				return nil, errors.New("KV watch ended")
			}
			if entry == nil {
				slices.SortFunc(out, func(a, b *novav1.ScheduleState) int {
					return cmp.Or(strings.Compare(a.GetWorkflow(), b.GetWorkflow()),
						strings.Compare(a.GetSchedule().GetId(), b.GetSchedule().GetId()))
				})
				return out, nil
			}
			if st, err := scheduleOf(entry); err == nil {
				out = append(out, st)
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// storedAs tells whether an entry is the engine's write of schedule s.
func storedAs(s *novav1.Schedule) func(jetstream.KeyValueEntry) bool {
	return func(e jetstream.KeyValueEntry) bool {
		if e.Operation() != jetstream.KeyValuePut {
			return false
		}
		st, err := scheduleOf(e)
		return err == nil && proto.Equal(st.GetSchedule(), s)
	}
}

// sendSchedule publishes a schedule command (typ, cmd) on the engine's
// command subject and waits up to scheduleWait for the engine's write of
// key that done accepts. It returns that entry, nil when the wait ran
// out, or the problem: the engine's refusal (422), a bus that failed
// (503).
func (g *Gateway) sendSchedule(r *http.Request, kv jetstream.KeyValue, key, typ string, cmd proto.Message,
	done func(jetstream.KeyValueEntry) bool) (jetstream.KeyValueEntry, error) {
	ctx := r.Context()
	// Both watches begin before the command is published, so that neither
	// the engine's write nor its refusal is missed.
	stored, err := kv.Watch(ctx, key, jetstream.UpdatesOnly())
	if err != nil {
		return nil, g.unavailable(r, "the schedules cannot be watched", err)
	}
	defer func() { _ = stored.Stop() }()
	eventID := "schedule-" + uuid.NewString()
	refused, stop, err := g.watchRefusal(ctx, eventID)
	if err != nil {
		return nil, g.unavailable(r, "the graph engine's refusals cannot be watched", err)
	}
	defer stop()
	if err := g.bus.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), eventID, typ, cmd, nil); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, g.unavailable(r, "the schedule command was not acknowledged by the bus; try again", err)
	}
	wait := time.NewTimer(scheduleWait)
	defer wait.Stop()
	for {
		select {
		case entry, ok := <-stored.Updates():
			if !ok {
				return nil, g.unavailable(r, "the schedules cannot be watched", errors.New("KV watch ended"))
			}
			if entry != nil && done(entry) {
				return entry, nil
			}
		case dl := <-refused:
			return nil, newProblem(http.StatusUnprocessableEntity, TypeInvalidSchedule,
				"the graph engine refused the schedule: "+dl.GetReason())
		case <-wait.C:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
