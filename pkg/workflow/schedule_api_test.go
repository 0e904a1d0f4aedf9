package workflow

import (
	"strings"
	"testing"
	"time"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

func TestParseScheduleAPI(t *testing.T) {
	s, err := ParseSchedule([]byte(`{"cron": "*/5 * * * *", "timezone": "Europe/Madrid", "context": {"n": 1}, "id": "five"}`))
	if err != nil || s.Cron != "*/5 * * * *" || s.Id != "five" || string(s.Context.GetRaw()) != `{"n":1}` {
		t.Fatalf("%v %v", s, err)
	}
	_, err = ParseSchedule([]byte(`{"cron": "*/5 * * *"}`))
	if err == nil || !strings.Contains(err.Error(), `has 4 fields; want 5`) {
		t.Fatalf("4 fields: %v", err)
	}
	_, err = ParseSchedule([]byte("every: 1m\ncatchup: lates\n"))
	if err == nil || !strings.Contains(err.Error(), `did you mean "latest"`) {
		t.Fatalf("catchup: %v", err)
	}
	s, err = ParseSchedule([]byte("every: 90s\n"))
	if err != nil || s.EverySeconds != 90 || s.Id != "0" {
		t.Fatalf("every: %v %v", s, err)
	}
}

func TestNextTicks(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 2, 30, 0, time.UTC)
	cron := &novav1.Schedule{Cron: "*/5 * * * *", Timezone: "Europe/Madrid"}
	got := NextTicks(cron, time.Time{}, now, 2)
	if len(got) != 2 || !got[0].Equal(now.Truncate(time.Minute).Add(3*time.Minute)) || got[1].Sub(got[0]) != 5*time.Minute {
		t.Errorf("cron ticks %v", got)
	}
	// An every schedule ticks on its grid from its anchor, however long ago.
	anchor := now.Add(-time.Hour - 2500*time.Millisecond)
	every := &novav1.Schedule{EverySeconds: 3}
	if got := NextTicks(every, anchor, now, 2); len(got) != 2 || !got[0].Equal(now.Add(500*time.Millisecond)) || got[1].Sub(got[0]) != 3*time.Second {
		t.Errorf("every ticks %v from %v", got, anchor)
	}
	if got := EveryTickAfter(anchor, 3*time.Second, anchor.Add(6*time.Second)); !got.Equal(anchor.Add(9 * time.Second)) {
		t.Errorf("the tick after a tick: %v", got)
	}
	if got := EveryTickAfter(anchor, 3*time.Second, anchor.Add(-time.Minute)); !got.Equal(anchor.Add(3 * time.Second)) {
		t.Errorf("the first tick: %v", got)
	}
	if got := NextTicks(&novav1.Schedule{EverySeconds: 1, Paused: true}, time.Time{}, now, 2); len(got) != 0 {
		t.Errorf("paused: %v", got)
	}
}
