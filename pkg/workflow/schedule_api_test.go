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
	got := NextTicks(cron, nil, now, 2)
	if len(got) != 2 || !got[0].Equal(now.Truncate(time.Minute).Add(3*time.Minute)) || got[1].Sub(got[0]) != 5*time.Minute {
		t.Errorf("cron ticks %v", got)
	}
	last := now.Add(-2500 * time.Millisecond)
	every := &novav1.Schedule{EverySeconds: 1}
	if got := NextTicks(every, &last, now, 2); len(got) != 2 || !got[0].Equal(last.Add(3*time.Second)) {
		t.Errorf("every ticks %v after %v", got, last)
	}
	if got := NextTicks(&novav1.Schedule{EverySeconds: 1, Paused: true}, nil, now, 2); len(got) != 0 {
		t.Errorf("paused: %v", got)
	}
}
