package service

import (
	"testing"
	"time"
)

// floor is the first message still needed: of a running execution (for up
// to holdRunning), of one ended less than keep ago, or less than keep old.
func TestRetentionFloor(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	r := &retention{keep: time.Minute, holdRunning: time.Hour, running: map[string]mark{}}
	see := func(execution, kind string, seq uint64, at time.Duration) {
		r.see("nova.evt."+execution+"."+kind, mark{seq, t0.Add(at)})
	}
	check := func(at time.Duration, want uint64) {
		t.Helper()
		if got := r.floor(t0.Add(at)); got != want {
			t.Errorf("floor at %v = %d, want %d", at, got, want)
		}
	}
	see("a", "workflow.started", 1, 0)
	see("b", "workflow.started", 5, time.Second)
	see("a", "workflow.completed", 9, 2*time.Second)
	check(3*time.Second, 1)  // a ended less than a minute ago
	check(62*time.Second, 5) // a ended a minute ago; b runs
	see("b", "workflow.completed", 12, 63*time.Second)
	check(90*time.Second, 5)   // b ended half a minute ago
	check(124*time.Second, 13) // all read and old: up to the last read
	see("c", "workflow.started", 20, 3*time.Minute)
	check(3*time.Minute, 20) // c runs
	check(time.Hour+3*time.Minute-time.Second, 20)
	check(time.Hour+4*time.Minute, 21)              // c ran for an hour: no longer holds back
	see("d", "workflow.completed", 30, 2*time.Hour) // its start unseen
	check(2*time.Hour+time.Second, 30)
}
