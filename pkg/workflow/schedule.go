package workflow

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // time zones resolve the same on machines without a zoneinfo database

	"github.com/google/uuid"
	"github.com/robfig/cron/v3"

	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// What a schedule does with the ticks missed while NOVA was down (catchup).
const (
	// CatchupNone skips them (the default).
	CatchupNone = "none"
	// CatchupLatest runs the last one.
	CatchupLatest = "latest"
	// CatchupAll runs each.
	CatchupAll = "all"
)

var catchups = []string{CatchupNone, CatchupLatest, CatchupAll}

// MinScheduleEvery is the shortest interval of an every schedule.
const MinScheduleEvery = time.Second

// cronParser reads the five fields of standard cron (minute hour
// day-of-month month day-of-week) and the descriptors, as Kubernetes
// CronJobs do.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// cronDescriptors are the descriptors a cron may be, besides five fields.
var cronDescriptors = []string{"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}

var cronFieldNames = []string{"minute", "hour", "day-of-month", "month", "day-of-week"}

// ScheduleIDs gives each schedule of def without an id its position in the
// list ("0", "1", ...). Parse calls it, so parsed definitions always carry
// schedule ids.
func ScheduleIDs(def *novav1.WorkflowDefinition) {
	for i, s := range def.GetSchedules() {
		if s != nil && s.GetId() == "" {
			s.Id = strconv.Itoa(i)
		}
	}
}

// CronSchedule returns when schedule s fires, and the time zone its cron is
// read in (UTC unless it names one): a cron schedule in its time zone, or
// an every schedule (in whole seconds; its zone is UTC).
func CronSchedule(s *novav1.Schedule) (cron.Schedule, *time.Location, error) {
	if s == nil {
		return nil, nil, errors.New("no schedule")
	}
	if s.GetCron() == "" {
		every := secondsDuration(s.GetEverySeconds())
		if every < MinScheduleEvery {
			return nil, nil, fmt.Errorf("schedule %q has neither cron nor an every of at least %s", s.GetId(), MinScheduleEvery)
		}
		return cron.Every(every), time.UTC, nil
	}
	loc, err := scheduleLocation(s.GetTimezone())
	if err != nil {
		return nil, nil, err
	}
	sched, err := parseCron(s.GetCron())
	if err != nil {
		return nil, nil, err
	}
	if spec, ok := sched.(*cron.SpecSchedule); ok {
		spec.Location = loc
	}
	return sched, loc, nil
}

// NATSCron writes schedule s the way a NATS message schedule reads it: the
// five cron fields with a seconds field of 0 in front ("*/5 * * * *" is
// "0 */5 * * * *"), a descriptor as it is (@daily), an every schedule as
// "@every <duration>" (@every 1m0s). The time zone is not part of it. It
// gives "" for a schedule with neither cron nor every.
func NATSCron(s *novav1.Schedule) string {
	c := strings.TrimSpace(s.GetCron())
	switch {
	case strings.HasPrefix(c, "@"):
		return c
	case c != "":
		return "0 " + strings.Join(strings.Fields(c), " ")
	case s.GetEverySeconds() > 0:
		return "@every " + secondsDuration(s.GetEverySeconds()).String()
	default:
		return ""
	}
}

// parseCron reads a schedule's cron; its errors quote the cron and say what
// is wrong with it.
func parseCron(spec string) (cron.Schedule, error) {
	c := strings.TrimSpace(spec)
	switch {
	case c == "":
		return nil, errors.New("cron is empty")
	case strings.HasPrefix(c, "TZ=") || strings.HasPrefix(c, "CRON_TZ="):
		return nil, fmt.Errorf("cron %q names a time zone; give it in timezone instead", spec)
	case strings.HasPrefix(c, "@every"):
		return nil, fmt.Errorf("cron %q: @every is not a cron descriptor here; write every: %s instead of cron", spec, strings.TrimSpace(strings.TrimPrefix(c, "@every")))
	case strings.HasPrefix(c, "@"):
		if !slices.Contains(cronDescriptors, c) {
			msg := fmt.Sprintf("cron %q is not a known descriptor", spec)
			if s := suggest(c, cronDescriptors); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			return nil, errors.New(msg + " (use " + strings.Join(cronDescriptors, ", ") + " or five fields)")
		}
	default:
		if fields := strings.Fields(c); len(fields) != 5 {
			noun := "fields"
			if len(fields) == 1 {
				noun = "field"
			}
			return nil, fmt.Errorf("cron %q has %d %s; want 5 (minute hour day-of-month month day-of-week)", spec, len(fields), noun)
		}
	}
	sched, err := cronParser.Parse(c)
	if err != nil {
		return nil, fmt.Errorf("cron %q: %s", spec, cronFieldError(c, err))
	}
	return sched, nil
}

// cronFieldError names the field of a five-field cron that err is about.
func cronFieldError(c string, err error) string {
	fields := strings.Fields(c)
	if len(fields) == 5 {
		for i, f := range fields {
			probe := []string{"*", "*", "*", "*", "*"}
			probe[i] = f
			if _, ferr := cronParser.Parse(strings.Join(probe, " ")); ferr != nil {
				return fmt.Sprintf("%s field %q: %v", cronFieldNames[i], f, ferr)
			}
		}
	}
	return err.Error()
}

// scheduleLocation loads a schedule's time zone; "" is UTC.
func scheduleLocation(tz string) (*time.Location, error) {
	switch tz {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return nil, fmt.Errorf("timezone %q depends on the machine; name the zone (e.g. Europe/Madrid) or leave it out for UTC", tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("timezone %q is not a known time zone; use an IANA name such as Europe/Madrid or America/New_York", tz)
	}
	return loc, nil
}

// schedule reads one entry of a workflow's schedules.
func (p *parser) schedule(i int, raw any) *novav1.Schedule {
	w := where{path: fmt.Sprintf("schedules[%d]", i)}
	m, ok := raw.(map[string]any)
	if !ok {
		p.problems = append(p.problems, Problem{Field: w.path, Message: "must be a mapping with cron or every, got " + kindOf(raw)})
		return nil
	}
	p.unknownFields(w, m, scheduleFields)
	s := &novav1.Schedule{
		Id:           p.str(w, m, "id"),
		Cron:         strings.TrimSpace(p.str(w, m, "cron")),
		Timezone:     strings.TrimSpace(p.str(w, m, "timezone")),
		EverySeconds: p.seconds(w, m, "every"),
		Catchup:      strings.ToLower(strings.TrimSpace(p.str(w, m, "catchup"))),
		Paused:       p.boolean(w, m, "paused"),
	}
	if v, ok := m["context"]; ok && v != nil {
		obj, isObj := v.(map[string]any)
		if !isObj {
			p.addf(w, "context", "must be a mapping (the context each run starts with), got %s", kindOf(v))
		} else if o, err := jsonvalue.ObjectOf(obj); err != nil {
			p.addf(w, "context", "%v", err)
		} else {
			s.Context = o.Proto()
		}
	}
	return s
}

// ParseSchedule reads one schedule written as a definition's schedules
// entry is (YAML or JSON: cron or every, timezone, context, catchup, id,
// paused) and validates it: what the schedules API takes. Its problems
// are a *ValidationError; an entry without id gets "0".
func ParseSchedule(data []byte) (*novav1.Schedule, error) {
	def, err := Parse(append([]byte("name: schedule\nschedules:\n  - "), indentFlow(data)...))
	if err != nil {
		return nil, err
	}
	s := def.GetSchedules()[0]
	return s, ValidateSchedule(s)
}

// indentFlow makes a YAML or JSON document the value of a list entry: a
// JSON object is one flow line already; YAML lines are indented under it.
func indentFlow(data []byte) []byte {
	return []byte(strings.ReplaceAll(strings.TrimSpace(string(data)), "\n", "\n    "))
}

// ValidateSchedule checks one schedule as Validate checks a definition's:
// a *ValidationError listing its problems, or nil.
func ValidateSchedule(s *novav1.Schedule) error {
	v := &validator{def: &novav1.WorkflowDefinition{Schedules: []*novav1.Schedule{s}}}
	v.schedules()
	if len(v.problems) > 0 {
		for i := range v.problems {
			v.problems[i].Field = strings.TrimPrefix(strings.TrimPrefix(v.problems[i].Field, "schedules[0]"), ".")
		}
		return &ValidationError{Problems: v.problems}
	}
	return nil
}

// NextTicks are the next n times schedule s ticks after now: a cron
// schedule's in its time zone, an every schedule's on its grid from anchor
// (see EveryTickAfter). None while it is paused.
func NextTicks(s *novav1.Schedule, anchor, now time.Time, n int) []time.Time {
	out := []time.Time{}
	if s.GetPaused() {
		return out
	}
	sched, loc, err := CronSchedule(s)
	if err != nil {
		return out
	}
	if every := ScheduleEvery(s); s.GetCron() == "" && every > 0 {
		t := now
		for range n {
			t = EveryTickAfter(anchor, every, t)
			out = append(out, t.UTC())
		}
		return out
	}
	t := now.In(loc) // the next ticks come in the time zone of the time given
	for range n {
		if t = sched.Next(t); t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

// ScheduleEvery is the interval of an every schedule (0 for a cron one).
func ScheduleEvery(s *novav1.Schedule) time.Duration {
	if s.GetCron() != "" {
		return 0
	}
	return secondsDuration(s.GetEverySeconds())
}

// ScheduleAnchor is the time the ticks of the schedule st keeps are
// counted from: when it was made, in whole seconds.
func ScheduleAnchor(st *novav1.ScheduleState) time.Time {
	return st.GetCreatedAt().AsTime().Truncate(time.Second)
}

// EveryTickAfter is the first tick after t of an every schedule: its ticks
// fall on a grid, anchor + k·every for k ≥ 1, whatever restarted in
// between, so the schedule keeps its phase.
func EveryTickAfter(anchor time.Time, every time.Duration, t time.Time) time.Time {
	if every <= 0 {
		return time.Time{}
	}
	if t.Before(anchor) {
		return anchor.Add(every)
	}
	return anchor.Add((t.Sub(anchor)/every + 1) * every)
}

// MaxScheduleID is the longest schedule id the schedules API and nova
// schedule take.
const MaxScheduleID = 64

// NextTickCount is how many next ticks a ScheduleView shows.
const NextTickCount = 3

// NewScheduleID is the id of a schedule made without one: eight hex
// digits.
func NewScheduleID() string { return strings.ReplaceAll(uuid.NewString(), "-", "")[:8] }

// ScheduleView is a schedule as the schedules API and `nova schedule
// --json` show it.
type ScheduleView struct {
	Workflow string `json:"workflow"`
	ID       string `json:"id"`
	// Cron (with Timezone, default UTC) or Every: when it ticks.
	Cron     string `json:"cron,omitempty"`
	Timezone string `json:"timezone,omitempty"`
	// Every is the interval as a Go duration ("1m0s"), EverySeconds the same
	// in seconds.
	Every        string          `json:"every,omitempty"`
	EverySeconds float64         `json:"every_seconds,omitempty"`
	Context      json.RawMessage `json:"context"`
	Catchup      string          `json:"catchup"`
	Paused       bool            `json:"paused"`
	// FromDefinition: declared in the workflow's definition (registering it
	// again sets it as declared), else made through the API.
	FromDefinition bool       `json:"from_definition"`
	CreatedAt      *time.Time `json:"created_at,omitempty"`
	// LastTick is the last tick that started an execution, or when the
	// schedule was made while none has; catchup counts missed ticks from it.
	LastTick *time.Time `json:"last_tick,omitempty"`
	// NextTicks are the next times it ticks (none while paused).
	NextTicks []time.Time `json:"next_ticks"`
}

// ViewSchedule shows st as it stands at now, with its next NextTickCount
// ticks.
func ViewSchedule(st *novav1.ScheduleState, now time.Time) ScheduleView {
	s := st.GetSchedule()
	v := ScheduleView{
		Workflow: st.GetWorkflow(), ID: s.GetId(), Cron: s.GetCron(), Timezone: s.GetTimezone(),
		Context: jsonvalue.MustObject(s.GetContext()).Bytes(), Catchup: cmp.Or(s.GetCatchup(), CatchupNone),
		Paused: s.GetPaused(), FromDefinition: st.GetFromDefinition(),
	}
	if ts := st.GetCreatedAt(); ts != nil {
		t := ts.AsTime()
		v.CreatedAt = &t
	}
	if ts := st.GetLastTick(); ts != nil {
		t := ts.AsTime()
		v.LastTick = &t
	}
	v.NextTicks = NextTicks(s, ScheduleAnchor(st), now, NextTickCount)
	if e := s.GetEverySeconds(); e > 0 {
		v.Every, v.EverySeconds = secondsDuration(e).String(), e
	}
	return v
}
