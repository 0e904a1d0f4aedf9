package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

const scheduleUsage = `Usage:
  nova schedule list   [--workflow W] [--json]
  nova schedule add    WORKFLOW (--cron EXPR [--timezone TZ] | --every DURATION) [--id ID]
                       [--set key=value]... [--catchup none|latest|all] [--paused] [--timeout 10s] [--json]
  nova schedule pause  WORKFLOW ID [--timeout 10s] [--json]
  nova schedule resume WORKFLOW ID [--timeout 10s] [--json]
  nova schedule delete WORKFLOW ID [--timeout 10s] [--json]

A schedule starts a registered workflow on a cron expression (five fields,
minute hour day-of-month month day-of-week, or @daily, @hourly, ...; read in
--timezone, default UTC) or at an interval (--every 15m, at least 1s), each
run with the context of --set. --catchup says which ticks missed while NOVA
was down run: none (default), latest or all. Without --id a new id is made.
The graph engine keeps the schedules; nova schedule sends it the change and
waits up to --timeout for it to be stored (0: does not wait). NATS_URL names
the server (default nova dev's).
`

// Outcomes of nova schedule's changes.
const (
	scheduleCreated   = "created"
	scheduleReplaced  = "replaced"
	scheduleUnchanged = "unchanged"
	schedulePaused    = "paused"
	scheduleResumed   = "resumed"
	scheduleDeleted   = "deleted"
	// scheduleSent: sent; not stored within the wait (or none waited for).
	scheduleSent = "sent"
	// scheduleRefused: the engine refused the change.
	scheduleRefused = "refused"
)

// scheduleView is a schedule as nova schedule --json prints it.
type scheduleView = workflow.ScheduleView

// scheduleResult is what add, pause, resume and delete print with --json:
// the schedule as stored (as it was, for delete) and what became of the
// change.
type scheduleResult struct {
	scheduleView
	// Outcome is created, replaced, unchanged, paused, resumed, deleted,
	// sent or refused.
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
	// already says, for an unchanged schedule, how it is already.
	already string
}

// cmdSchedule lists, adds, pauses, resumes and deletes the schedules of
// the workflows of a deployment (or of nova dev) at NATS_URL. A change is
// checked as the engine will check it, sent as the command the engine
// reads, and waited for until the engine stored it. Exit 0 once it is
// stored (or was so already, or with --timeout 0 once it is sent), 1 when
// the engine refused it or did not store it within the wait, 2 for a
// request that cannot be taken (a schedule the engine cannot run, a
// workflow that is not registered, an unknown schedule).
func cmdSchedule(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, scheduleUsage)
		return exitInvalid
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "list":
		return scheduleListCmd(ctx, rest, stdout, stderr)
	case "add":
		return scheduleAddCmd(ctx, rest, stdout, stderr)
	case "pause", "resume", "delete":
		return scheduleChangeCmd(ctx, sub, rest, stdout, stderr)
	}
	fmt.Fprintf(stderr, "nova schedule: unknown command %q\n\n%s", sub, scheduleUsage)
	return exitInvalid
}

func scheduleListCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("schedule list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	wf := fs.String("workflow", "", "only this workflow's schedules")
	asJSON := fs.Bool("json", false, "print the schedules as a JSON array")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitInvalid
	}
	if len(pos) != 0 {
		fmt.Fprintf(stderr, "nova schedule list: unexpected argument %q\n", pos[0])
		return exitInvalid
	}
	b, _, err := connectRemote(ctx, false)
	if err != nil {
		fmt.Fprintf(stderr, "nova schedule list: %v\n", err)
		return exitInvalid
	}
	defer b.Close()
	var states []*novav1.ScheduleState
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketSchedules)
	if err == nil {
		states, err = listSchedules(ctx, kv, *wf)
	}
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		fmt.Fprintf(stderr, "nova schedule list: the schedules cannot be read: %v\n", err)
		return exitFailed
	}
	now := time.Now()
	views := make([]scheduleView, len(states))
	for i, st := range states {
		views[i] = workflow.ViewSchedule(st, now)
	}
	if *asJSON {
		return printJSON(stdout, stderr, views)
	}
	if len(views) == 0 {
		if *wf != "" {
			fmt.Fprintf(stdout, "workflow %s has no schedules\n", *wf)
		} else {
			fmt.Fprintln(stdout, "no schedules")
		}
		return exitOK
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "WORKFLOW\tID\tWHEN\tSTATE\tNEXT\tLAST TICK\tFROM")
	for _, v := range views {
		state, next := "active", "-"
		if v.Paused {
			state = "paused"
		}
		if len(v.NextTicks) > 0 {
			next = v.NextTicks[0].Format(time.RFC3339)
		}
		from := "api"
		if v.FromDefinition {
			from = "definition"
		}
		last := "-"
		if v.LastTick != nil {
			last = v.LastTick.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Workflow, v.ID, when(v), state, next, last, from)
	}
	_ = w.Flush()
	return exitOK
}

func scheduleAddCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("schedule add", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cronExpr := fs.String("cron", "", "cron `EXPR`: five fields (minute hour day-of-month month day-of-week) or @daily, @hourly, ...")
	tz := fs.String("timezone", "", "the IANA time zone the cron is read in (default UTC)")
	every := fs.String("every", "", "the interval, a `DURATION` (90s, 15m, 1h, 1d) or seconds; at least 1s")
	id := fs.String("id", "", "the schedule's id, unique among the workflow's (default: a new one); the same id replaces it")
	catchup := fs.String("catchup", "", "which ticks missed while NOVA was down run: none (default), latest or all")
	paused := fs.Bool("paused", false, "add it paused: it starts nothing until resumed")
	var sets setFlags
	fs.Var(&sets, "set", "each run's context `key=value` (repeatable; value parsed as JSON when valid, else a string)")
	asJSON := fs.Bool("json", false, "print the outcome as a JSON object")
	timeout := fs.Duration("timeout", defaultSteerWait, "how long to wait for the engine to store it (0: do not wait)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitInvalid
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	switch {
	case len(pos) != 1:
		fmt.Fprintln(stderr, "nova schedule add: want exactly one WORKFLOW")
		return exitInvalid
	case given["cron"] && given["every"]:
		fmt.Fprintln(stderr, "nova schedule add: give --cron or --every, not both")
		return exitInvalid
	case !given["cron"] && !given["every"]:
		fmt.Fprintln(stderr, "nova schedule add: want --cron EXPR (e.g. \"0 9 * * 1-5\") or --every DURATION (e.g. 15m)")
		return exitInvalid
	case *timeout < 0:
		fmt.Fprintln(stderr, "nova schedule add: --timeout must not be negative")
		return exitInvalid
	}
	wf := pos[0]
	runContext, err := initialContext("", sets)
	if err != nil {
		fmt.Fprintf(stderr, "nova schedule add: %v\n", err)
		return exitInvalid
	}
	entry := map[string]any{"id": cmp.Or(*id, workflow.NewScheduleID())}
	for name, v := range map[string]string{"cron": *cronExpr, "timezone": *tz, "every": *every, "catchup": *catchup} {
		if given[name] {
			entry[name] = v
		}
	}
	if *paused {
		entry["paused"] = true
	}
	s, err := parseScheduleFlags(entry)
	if err != nil {
		fmt.Fprintf(stderr, "nova schedule add: %v\n", err)
		return exitInvalid
	}
	if len(runContext) > 0 {
		s.Context = runContext.Proto()
	}

	b, _, err := connectRemote(ctx, false)
	if err != nil {
		fmt.Fprintf(stderr, "nova schedule add: %v\n", err)
		return exitInvalid
	}
	defer b.Close()
	if code := checkRegistered(ctx, b, wf, stderr); code != exitOK {
		return code
	}
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketSchedules)
	if err != nil {
		fmt.Fprintf(stderr, "nova schedule add: the schedules cannot be read (is the graph engine running?): %v\n", err)
		return exitFailed
	}
	old, err := readScheduleState(ctx, kv, wf, s.GetId())
	if err != nil {
		fmt.Fprintf(stderr, "nova schedule add: the schedules cannot be read: %v\n", err)
		return exitFailed
	}
	switch {
	case old != nil && old.GetFromDefinition():
		fmt.Fprintf(stderr, "nova schedule add: schedule %q of workflow %q is declared in its definition: change it there and "+
			"register the workflow again (nova schedule pause, resume and delete work on it), or give another --id\n", s.GetId(), wf)
		return exitInvalid
	case old != nil && proto.Equal(old.GetSchedule(), s):
		return printScheduleResult(stdout, *asJSON, scheduleResult{scheduleView: workflow.ViewSchedule(old, time.Now()), Outcome: scheduleUnchanged,
			already: "is stored so already"})
	}
	outcome := scheduleCreated
	if old != nil {
		outcome = scheduleReplaced
	}
	want := &novav1.ScheduleState{Workflow: wf, Schedule: s}
	res := sendScheduleChange(ctx, b, kv, *timeout, want, bus.TypeSchedulePut, &novav1.PutSchedule{Workflow: wf, Schedule: s}, outcome)
	return printScheduleResult(stdout, *asJSON, res)
}

// scheduleChangeCmd is nova schedule pause, resume and delete.
func scheduleChangeCmd(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("schedule "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the outcome as a JSON object")
	timeout := fs.Duration("timeout", defaultSteerWait, "how long to wait for the engine to store the change (0: do not wait)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitInvalid
	}
	if len(pos) != 2 {
		fmt.Fprintf(stderr, "nova schedule %s: want WORKFLOW and ID (nova schedule list shows them)\n", sub)
		return exitInvalid
	}
	if *timeout < 0 {
		fmt.Fprintf(stderr, "nova schedule %s: --timeout must not be negative\n", sub)
		return exitInvalid
	}
	wf, id := pos[0], pos[1]
	b, _, err := connectRemote(ctx, false)
	if err != nil {
		fmt.Fprintf(stderr, "nova schedule %s: %v\n", sub, err)
		return exitInvalid
	}
	defer b.Close()
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketSchedules)
	var st *novav1.ScheduleState
	if err == nil {
		st, err = readScheduleState(ctx, kv, wf, id)
	}
	switch {
	case err != nil && !errors.Is(err, jetstream.ErrBucketNotFound):
		fmt.Fprintf(stderr, "nova schedule %s: the schedules cannot be read: %v\n", sub, err)
		return exitFailed
	case st == nil:
		fmt.Fprintf(stderr, "nova schedule %s: workflow %q has no schedule %q%s\n", sub, wf, id, otherSchedules(ctx, kv, wf))
		return exitInvalid
	}
	now := time.Now()
	if sub == "delete" {
		res := sendScheduleChange(ctx, b, kv, *timeout, st, bus.TypeScheduleDelete,
			&novav1.DeleteSchedule{Workflow: wf, ScheduleId: id}, scheduleDeleted)
		return printScheduleResult(stdout, *asJSON, res)
	}
	pause := sub == "pause"
	if st.GetSchedule().GetPaused() == pause {
		already := "is not paused"
		if pause {
			already = "is paused already"
		}
		return printScheduleResult(stdout, *asJSON, scheduleResult{scheduleView: workflow.ViewSchedule(st, now), Outcome: scheduleUnchanged,
			already: already})
	}
	want := proto.CloneOf(st)
	want.Schedule.Paused = pause
	outcome := scheduleResumed
	if pause {
		outcome = schedulePaused
	}
	res := sendScheduleChange(ctx, b, kv, *timeout, want, bus.TypeSchedulePut,
		&novav1.PutSchedule{Workflow: wf, Schedule: want.Schedule}, outcome)
	return printScheduleResult(stdout, *asJSON, res)
}

// parseScheduleFlags checks the schedule nova schedule add's flags make,
// as the engine checks one; the error names each problem by its flag.
func parseScheduleFlags(entry map[string]any) (*novav1.Schedule, error) {
	data, err := json.Marshal(entry)
	if err != nil {
		return nil, err
	}
	s, err := workflow.ParseSchedule(data)
	var verr *workflow.ValidationError
	if errors.As(err, &verr) {
		msgs := make([]string, len(verr.Problems))
		for i, p := range verr.Problems {
			field := strings.TrimPrefix(strings.TrimPrefix(p.Field, "schedules[0]"), ".")
			switch field {
			case "":
				msgs[i] = p.Message
			case "context":
				msgs[i] = "--set: " + p.Message
			default:
				msgs[i] = "--" + field + ": " + p.Message
			}
		}
		return nil, errors.New(strings.Join(msgs, "; "))
	}
	if err != nil {
		return nil, err
	}
	if len(s.GetId()) > workflow.MaxScheduleID {
		return nil, fmt.Errorf("--id %q is longer than %d characters", s.GetId(), workflow.MaxScheduleID)
	}
	return s, nil
}

// checkRegistered says, exit 2, when workflow wf is not registered.
func checkRegistered(ctx context.Context, b *bus.Bus, wf string, stderr io.Writer) int {
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketWorkflows)
	if err == nil {
		_, err = kv.Get(ctx, wf)
	}
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound), errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrInvalidKey):
		fmt.Fprintf(stderr, "nova schedule add: workflow %q is not registered; register it first (POST /v1/workflows)\n", wf)
		return exitInvalid
	case err != nil:
		fmt.Fprintf(stderr, "nova schedule add: the registered workflows cannot be read: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// sendScheduleChange publishes a schedule command (typ, cmd) and waits up
// to timeout for the engine to store want (for a delete, to remove it) or
// to refuse the command. The result shows want as stored, or as asked
// for, with outcome done once stored.
func sendScheduleChange(ctx context.Context, b *bus.Bus, kv jetstream.KeyValue, timeout time.Duration, want *novav1.ScheduleState,
	typ string, cmd proto.Message, done string) scheduleResult {
	res := scheduleResult{scheduleView: workflow.ViewSchedule(want, time.Now()), Outcome: scheduleSent}
	key := want.GetWorkflow() + "." + want.GetSchedule().GetId()
	eventID := "schedule-" + uuid.NewString()
	var stored jetstream.KeyWatcher
	refused := make(chan string, 1)
	if timeout > 0 {
		// Both watches begin before the command is published, so that
		// neither the engine's write nor its refusal is missed.
		var err error
		if stored, err = kv.Watch(ctx, key, jetstream.UpdatesOnly()); err != nil {
			res.Outcome, res.Error = scheduleRefused, fmt.Sprintf("the schedules cannot be watched: %v", err)
			return res
		}
		defer func() { _ = stored.Stop() }()
		stop, err := b.Watch(ctx, "watch refusal "+eventID, bus.StreamDeadLetters, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{bus.DeadLetterSubject(bus.ConsumerEngineCommands)},
			DeliverPolicy:  jetstream.DeliverNewPolicy,
		}, func(_ jetstream.Msg, ev *event.Event) {
			var dl novav1.DeadLetter
			if bus.Decode(*ev, &dl) == nil && dl.GetHeaders()["ce-id"] == eventID {
				select {
				case refused <- dl.GetReason():
				default:
				}
			}
		})
		if err != nil {
			res.Outcome, res.Error = scheduleRefused, fmt.Sprintf("the engine's refusals cannot be watched: %v", err)
			return res
		}
		defer stop()
	}
	if err := b.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), eventID, typ, cmd, nil); err != nil {
		res.Outcome, res.Error = scheduleRefused, fmt.Sprintf("the command was not sent: %v", err)
		return res
	}
	if timeout == 0 {
		return res
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case entry, ok := <-stored.Updates():
			if !ok {
				res.Error = "the schedules cannot be watched; the command was sent"
				return res
			}
			if entry == nil {
				continue
			}
			if typ == bus.TypeScheduleDelete {
				if entry.Operation() != jetstream.KeyValuePut {
					res.Outcome = done
					return res
				}
				continue
			}
			var st novav1.ScheduleState
			if entry.Operation() == jetstream.KeyValuePut && proto.Unmarshal(entry.Value(), &st) == nil &&
				proto.Equal(st.GetSchedule(), want.GetSchedule()) {
				res.scheduleView, res.Outcome = workflow.ViewSchedule(&st, time.Now()), done
				return res
			}
		case reason := <-refused:
			res.Outcome, res.Error = scheduleRefused, "the graph engine refused it: "+reason
			return res
		case <-timer.C:
			res.Error = fmt.Sprintf("the command was sent; the engine had not stored it within %v", timeout)
			return res
		case <-ctx.Done():
			res.Error = fmt.Sprintf("%v (the command was sent)", ctx.Err())
			return res
		}
	}
}

// printScheduleResult prints what became of a change, a few lines or a
// JSON object, and is its exit code.
func printScheduleResult(stdout io.Writer, asJSON bool, res scheduleResult) int {
	code := exitOK
	if res.Outcome == scheduleRefused || res.Outcome == scheduleSent && res.Error != "" {
		code = exitFailed
	}
	if asJSON {
		writeJSONOut(stdout, res)
		return code
	}
	name := res.Workflow + "/" + res.ID
	switch res.Outcome {
	case scheduleRefused:
		fmt.Fprintf(stdout, "schedule %s: %s\n", name, res.Error)
		return code
	case scheduleSent:
		if res.Error != "" {
			fmt.Fprintf(stdout, "schedule %s: %s\n", name, res.Error)
		} else {
			fmt.Fprintf(stdout, "schedule %s: sent\n", name)
		}
		return code
	case scheduleDeleted:
		fmt.Fprintf(stdout, "schedule %s deleted\n", name)
		return code
	case scheduleUnchanged:
		fmt.Fprintf(stdout, "schedule %s %s; nothing was sent\n", name, res.already)
	default:
		fmt.Fprintf(stdout, "schedule %s %s\n", name, res.Outcome)
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "  when\t%s\n", when(res.scheduleView))
	if ctx := string(res.Context); ctx != "{}" {
		fmt.Fprintf(w, "  context\t%s\n", ctx)
	}
	fmt.Fprintf(w, "  catchup\t%s\n", res.Catchup)
	if res.Paused {
		fmt.Fprintf(w, "  paused\tyes: it starts nothing until resumed\n")
	} else {
		next := make([]string, len(res.NextTicks))
		for i, t := range res.NextTicks {
			next[i] = t.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "  next\t%s\n", strings.Join(next, ", "))
	}
	_ = w.Flush()
	return code
}

// when says when a schedule ticks: `cron "0 9 * * 1-5" Europe/Madrid` or
// `every 15m0s`.
func when(v scheduleView) string {
	if v.Cron == "" {
		return "every " + v.Every
	}
	return fmt.Sprintf("cron %q %s", v.Cron, cmp.Or(v.Timezone, "UTC"))
}

// readScheduleState is schedule id of workflow wf, nil when there is none.
func readScheduleState(ctx context.Context, kv jetstream.KeyValue, wf, id string) (*novav1.ScheduleState, error) {
	entry, err := kv.Get(ctx, bus.ScheduleKey(wf, id))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrInvalidKey):
		return nil, nil
	case err != nil:
		return nil, err
	}
	var st novav1.ScheduleState
	if err := proto.Unmarshal(entry.Value(), &st); err != nil {
		return nil, fmt.Errorf("schedule %s.%s: %w", wf, id, err)
	}
	return &st, nil
}

// listSchedules are the schedules of workflow wf ("" for every
// workflow's), by workflow and id.
func listSchedules(ctx context.Context, kv jetstream.KeyValue, wf string) ([]*novav1.ScheduleState, error) {
	filter := ">"
	if wf != "" {
		filter = wf + ".*"
	}
	keys, err := kv.ListKeysFiltered(ctx, filter)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*novav1.ScheduleState
	for k := range keys.Keys() {
		wfName, id, _ := strings.Cut(k, ".")
		st, err := readScheduleState(ctx, kv, wfName, id)
		if err != nil {
			return nil, err
		}
		if st != nil {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b *novav1.ScheduleState) int {
		return cmp.Or(strings.Compare(a.GetWorkflow(), b.GetWorkflow()), strings.Compare(a.GetSchedule().GetId(), b.GetSchedule().GetId()))
	})
	return out, nil
}

// otherSchedules names the schedules workflow wf has, for a message about
// one it does not have.
func otherSchedules(ctx context.Context, kv jetstream.KeyValue, wf string) string {
	if kv == nil {
		return ""
	}
	states, err := listSchedules(ctx, kv, wf)
	if err != nil {
		return ""
	}
	if len(states) == 0 {
		return " (it has none)"
	}
	ids := make([]string, len(states))
	for i, st := range states {
		ids[i] = st.GetSchedule().GetId()
	}
	return " (its schedules: " + strings.Join(ids, ", ") + ")"
}
