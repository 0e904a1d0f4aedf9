package main

import (
	"context"
	"runtime/debug"
	"syscall"
	"time"
)

// Idle memory. After a burst of workflows the Go runtime keeps the heap it
// grew to (its goal is twice the live heap at the last collection) and
// gives memory back only as later collections shrink that goal, which an
// idle process seldom runs: nova dev held 170 MiB 40 s after a burst, twice
// its size before. Once nova dev has been idle for a whole period, it
// collects and returns its free memory to the system; again once what its
// NATS server keeps of recent messages has expired (the ids of the
// streams' duplicate windows, 40 s for the events and 2 minutes for the
// commands, and the per-block subject state of the streams, dropped after
// 2 minutes unused); then every idleRepeat periods while it stays idle.

const (
	// idleCheckPeriod is how long nova dev must be idle before its memory is
	// returned.
	idleCheckPeriod = 30 * time.Second
	// idleCPUShare is the share of one CPU under which nova dev counts as
	// idle: idle, its servers' timers take about 0.5%; under load it uses
	// most of a core.
	idleCPUShare = 0.02
	// idleExpired is the idle period at whose end memory is returned a
	// second time: 150 to 180 s after the last activity, past the server's
	// two minutes.
	idleExpired = 5
	// idleRepeat is how many idle periods pass between two returns after
	// the first.
	idleRepeat = 10
)

// idleReturner decides, period after period, when to return memory: cpu
// reads the CPU time the process has used, free returns the memory.
type idleReturner struct {
	period time.Duration
	cpu    func() time.Duration
	free   func()
	last   time.Duration
	idle   int // periods of this idle spell so far
}

// tick is called once a period; it returns whether it returned memory.
func (r *idleReturner) tick() bool {
	used := r.cpu()
	busy := used - r.last
	r.last = used
	if float64(busy) > idleCPUShare*float64(r.period) {
		r.idle = 0
		return false
	}
	r.idle++
	if r.idle != idleExpired && (r.idle-1)%idleRepeat != 0 {
		return false
	}
	r.free()
	// The collection's own CPU is not activity.
	r.last = r.cpu()
	return true
}

// returnMemoryWhenIdle runs an idleReturner for this process until ctx ends.
func returnMemoryWhenIdle(ctx context.Context) {
	r := &idleReturner{period: idleCheckPeriod, cpu: processCPU, free: debug.FreeOSMemory}
	r.last = r.cpu()
	t := time.NewTicker(r.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.tick()
		}
	}
}

// processCPU is the user and system time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
