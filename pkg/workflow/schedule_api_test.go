package workflow

import (
	"strings"
	"testing"
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
