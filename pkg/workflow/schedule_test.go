package workflow_test

import (
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

func TestValidateSchedules(t *testing.T) {
	tests := []struct {
		name      string
		schedules []*novav1.Schedule
		want      []string
	}{
		{"valid", []*novav1.Schedule{
			{Id: "a", Cron: "*/5 * * * *", Timezone: "Europe/Madrid", Catchup: "latest"},
			{Id: "b", Cron: "0 9 * * MON-FRI", Catchup: "all"},
			{Id: "c", Cron: "@daily", Timezone: "America/New_York"},
			{Id: "d", EverySeconds: 1, Catchup: "none", Paused: true},
			{Id: "e", Cron: "0 0 29 2 *"},
			{Id: "f", Cron: "  30   4 1,15 * 5  ", Timezone: "UTC", Context: &novav1.JSONValue{Raw: []byte(`{"a":1}`)}},
		}, nil},
		{"four fields", []*novav1.Schedule{{Id: "a", Cron: "*/5 * * *"}},
			[]string{`schedules[0]: cron "*/5 * * *" has 4 fields; want 5 (minute hour day-of-month month day-of-week)`}},
		{"six fields", []*novav1.Schedule{{Id: "a", Cron: "0 */5 * * * *"}},
			[]string{`schedules[0]: cron "0 */5 * * * *" has 6 fields; want 5 (minute hour day-of-month month day-of-week)`}},
		{"one field", []*novav1.Schedule{{Id: "a", Cron: "hourly"}},
			[]string{`schedules[0]: cron "hourly" has 1 field; want 5 (minute hour day-of-month month day-of-week)`}},
		{"a field out of range", []*novav1.Schedule{{Id: "a", Cron: "0 24 * * *"}},
			[]string{`schedules[0]: cron "0 24 * * *": hour field "24": end of range (24) above maximum (23): 24`}},
		{"a field that is not a number", []*novav1.Schedule{{Id: "a", Cron: "* * * JANUARY *"}},
			[]string{`schedules[0]: cron "* * * JANUARY *": month field "JANUARY": failed to parse int from JANUARY: strconv.Atoi: parsing "JANUARY": invalid syntax`}},
		{"@every in cron", []*novav1.Schedule{{Id: "a", Cron: "@every 5m"}},
			[]string{`schedules[0]: cron "@every 5m": @every is not a cron descriptor here; write every: 5m instead of cron`}},
		{"unknown descriptor", []*novav1.Schedule{{Id: "a", Cron: "@daly"}},
			[]string{`schedules[0]: cron "@daly" is not a known descriptor; did you mean "@daily"? (use @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or five fields)`}},
		{"time zone in cron", []*novav1.Schedule{{Id: "a", Cron: "CRON_TZ=Europe/Madrid 0 9 * * *"}},
			[]string{`schedules[0]: cron "CRON_TZ=Europe/Madrid 0 9 * * *" names a time zone; give it in timezone instead`}},
		{"never fires", []*novav1.Schedule{{Id: "a", Cron: "0 0 30 2 *"}},
			[]string{`schedules[0]: cron "0 0 30 2 *" matches no date in the next five years`}},
		{"both cron and every", []*novav1.Schedule{{Id: "a", Cron: "@hourly", EverySeconds: 60}},
			[]string{`schedules[0]: has both cron and every; a schedule uses one of them`}},
		{"neither", []*novav1.Schedule{{Id: "a"}},
			[]string{`schedules[0]: needs cron (e.g. "0 9 * * 1-5") or every (e.g. 1h)`}},
		{"every below a second", []*novav1.Schedule{{Id: "a", EverySeconds: 0.5}},
			[]string{`schedules[0]: every must be at least 1s, got 0.5s`}},
		{"negative every", []*novav1.Schedule{{Id: "a", EverySeconds: -60}},
			[]string{`schedules[0]: every must be at least 1s, got -60s`}},
		{"unknown time zone", []*novav1.Schedule{{Id: "a", Cron: "@daily", Timezone: "Europe/Madird"}},
			[]string{`schedules[0]: timezone "Europe/Madird" is not a known time zone; use an IANA name such as Europe/Madrid or America/New_York`}},
		{"local time zone", []*novav1.Schedule{{Id: "a", Cron: "@daily", Timezone: "Local"}},
			[]string{`schedules[0]: timezone "Local" depends on the machine; name the zone (e.g. Europe/Madrid) or leave it out for UTC`}},
		{"time zone with every", []*novav1.Schedule{{Id: "a", EverySeconds: 60, Timezone: "Europe/Madrid"}},
			[]string{`schedules[0]: timezone "Europe/Madrid" applies to cron only; every runs at a fixed interval`}},
		{"unknown catchup", []*novav1.Schedule{{Id: "a", EverySeconds: 60, Catchup: "lates"}},
			[]string{`schedules[0]: catchup must be none, latest or all, got "lates"; did you mean "latest"?`}},
		{"duplicate ids", []*novav1.Schedule{{Id: "a", EverySeconds: 60}, {Id: "b", EverySeconds: 60}, {Id: "a", Cron: "@daily"}},
			[]string{`schedules[2]: id "a" is also the id of schedules[0]; schedule ids must be unique (a schedule without id takes its position as id)`}},
		{"id of two tokens", []*novav1.Schedule{{Id: "every 5", EverySeconds: 300}},
			[]string{`schedules[0]: id "every 5" is not a single token; use letters, digits, '-' and '_' only`}},
		{"no id", []*novav1.Schedule{{EverySeconds: 300}},
			[]string{`schedules[0]: id is required`}},
		{"context not an object", []*novav1.Schedule{{Id: "a", EverySeconds: 60, Context: &novav1.JSONValue{Raw: []byte(`[1]`)}}},
			[]string{`schedules[0]: context must be a JSON object: not a JSON object: got an array`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			def := mustParse(t, routingYAML)
			def.Schedules = tt.schedules
			checkProblems(t, workflow.Validate(def, workflow.ValidateOptions{}), tt.want)
		})
	}
}

func TestParseSchedules(t *testing.T) {
	def := mustParse(t, `
name: w
schedules:
  - {cron: "@hourly"}
  - {id: nightly, cron: "0 2 * * *", paused: true}
  - {every: 90s, context: {}}
`)
	s := def.GetSchedules()
	if len(s) != 3 || s[0].GetId() != "0" || s[1].GetId() != "nightly" || s[2].GetId() != "2" {
		t.Fatalf("schedule ids = %v", s)
	}
	if !s[1].GetPaused() || s[2].GetEverySeconds() != 90 || string(s[2].GetContext().GetRaw()) != "{}" || s[0].GetContext() != nil {
		t.Errorf("schedules = %v", s)
	}
	roundTrip(t, def)

	// A definition built in code gets its ids the same way.
	built := &novav1.WorkflowDefinition{Schedules: []*novav1.Schedule{{Cron: "@daily"}, {Id: "x"}, {EverySeconds: 60}}}
	workflow.ScheduleIDs(built)
	for i, want := range []string{"0", "x", "2"} {
		if got := built.GetSchedules()[i].GetId(); got != want {
			t.Errorf("schedules[%d].id = %q, want %q", i, got, want)
		}
	}
}

func TestCronSchedule(t *testing.T) {
	// 2026-03-02 is a Monday; Madrid is UTC+1 in March until the 29th.
	from := time.Date(2026, 3, 2, 7, 0, 0, 0, time.UTC)
	tests := []struct {
		s    *novav1.Schedule
		want time.Time
	}{
		{&novav1.Schedule{Cron: "0 9 * * *", Timezone: "Europe/Madrid"}, time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)},
		{&novav1.Schedule{Cron: "0 9 * * *"}, time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)},
		{&novav1.Schedule{Cron: "*/5 * * * *"}, time.Date(2026, 3, 2, 7, 5, 0, 0, time.UTC)},
		{&novav1.Schedule{Cron: "@daily", Timezone: "America/New_York"}, time.Date(2026, 3, 3, 5, 0, 0, 0, time.UTC)},
		{&novav1.Schedule{Cron: "0 9 * * SAT"}, time.Date(2026, 3, 7, 9, 0, 0, 0, time.UTC)},
		{&novav1.Schedule{EverySeconds: 90}, from.Add(90 * time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.s.String(), func(t *testing.T) {
			sched, loc, err := workflow.CronSchedule(tt.s)
			if err != nil {
				t.Fatal(err)
			}
			if tz := tt.s.GetTimezone(); tz != "" && loc.String() != tz {
				t.Errorf("location = %v, want %s", loc, tz)
			} else if tz == "" && loc != time.UTC {
				t.Errorf("location = %v, want UTC", loc)
			}
			if got := sched.Next(from); !got.Equal(tt.want) {
				t.Errorf("Next(%v) = %v, want %v", from, got.UTC(), tt.want)
			}
		})
	}
	for _, bad := range []*novav1.Schedule{nil, {}, {Cron: "* * *"}, {Cron: "@daily", Timezone: "Mars/Olympus"}, {EverySeconds: 0.5}} {
		if _, _, err := workflow.CronSchedule(bad); err == nil {
			t.Errorf("CronSchedule(%v) succeeded", bad)
		}
	}
}

func TestNATSCron(t *testing.T) {
	for _, tt := range []struct {
		s    *novav1.Schedule
		want string
	}{
		{&novav1.Schedule{Cron: "*/5 * * * *"}, "0 */5 * * * *"},
		{&novav1.Schedule{Cron: " 0  9 * *   MON-FRI "}, "0 0 9 * * MON-FRI"},
		{&novav1.Schedule{Cron: "@daily", Timezone: "Europe/Madrid"}, "@daily"},
		{&novav1.Schedule{Cron: "@hourly"}, "@hourly"},
		{&novav1.Schedule{EverySeconds: 60}, "@every 1m0s"},
		{&novav1.Schedule{EverySeconds: 1.5}, "@every 1.5s"},
		{&novav1.Schedule{EverySeconds: 7 * 24 * 3600}, "@every 168h0m0s"},
		{&novav1.Schedule{}, ""},
	} {
		if got := workflow.NATSCron(tt.s); got != tt.want {
			t.Errorf("NATSCron(%v) = %q, want %q", tt.s, got, tt.want)
		}
	}
}
