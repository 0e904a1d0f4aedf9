package main

import (
	"testing"
	"time"
)

// idleStep is one period: how much CPU the process used in it, and whether
// memory should be returned at its end.
type idleStep struct {
	busy time.Duration
	want bool
}

// Memory is returned when a busy period is followed by an idle one, again
// at the end of period idleExpired (what the server keeps two minutes has
// gone), then every idleRepeat periods while idle lasts, and again after
// the next burst.
func TestIdleMemoryIsReturnedWhenIdle(t *testing.T) {
	var used time.Duration
	frees := 0
	r := &idleReturner{period: 30 * time.Second, cpu: func() time.Duration { return used }, free: func() {
		frees++
		used += 80 * time.Millisecond // the collection's own CPU
	}}
	steps := []idleStep{
		{20 * time.Second, false},       // under load
		{15 * time.Second, false},       // still working
		{150 * time.Millisecond, true},  // idle: returned
		{160 * time.Millisecond, false}, // idle still: not again yet
		{100 * time.Millisecond, false},
		{2 * time.Second, false}, // a few workflows
		{200 * time.Millisecond, true},
	}
	for i := range 2 * idleRepeat { // a long idle spell: periods 2, 3, ...
		steps = append(steps, idleStep{150 * time.Millisecond, i+2 == idleExpired || (i+1)%idleRepeat == 0})
	}
	steps = append(steps, idleStep{5 * time.Second, false}, idleStep{100 * time.Millisecond, true})
	for i, s := range steps {
		used += s.busy
		if got := r.tick(); got != s.want {
			t.Fatalf("period %d (%s busy): returned %v, want %v", i, s.busy, got, s.want)
		}
	}
	if frees != 6 {
		t.Fatalf("memory returned %d times, want 6", frees)
	}
	if processCPU() <= 0 {
		t.Fatal("processCPU read no CPU time for this process")
	}
}
