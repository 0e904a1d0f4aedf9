package runner

import (
	"fmt"
	"sync"
	"time"
)

// breaker stops trying after consecutive sandbox faults: for a cool-down every
// run is answered runtime_unavailable at once (the engine fails fast instead of
// retrying into a broken sandbox), then one run probes (half-open): a success
// closes the breaker, a fault opens it again.
type breaker struct {
	threshold int // <0: disabled
	coolDown  time.Duration
	now       func() time.Time

	mu          sync.Mutex
	consecutive int
	openUntil   time.Time // zero: closed
	probing     bool
	lastFault   string
}

func newBreaker(threshold int, coolDown time.Duration) *breaker {
	return &breaker{threshold: threshold, coolDown: coolDown, now: time.Now}
}

// allow tells whether a run may go ahead; probe marks the one run let through
// after the cool-down. A refusal comes with its reason.
func (b *breaker) allow() (probe bool, refusal string) {
	if b.threshold < 0 {
		return false, ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.openUntil.IsZero():
		return false, ""
	case b.now().Before(b.openUntil) || b.probing:
		return false, fmt.Sprintf("the sandbox is unavailable after %d consecutive faults (last: %s); retrying after %s",
			b.consecutive, b.lastFault, b.openUntil.Format(time.RFC3339))
	default:
		b.probing = true
		return true, ""
	}
}

// fault records a sandbox fault and reports whether it opened the breaker.
func (b *breaker) fault(probe bool, message string) (opened bool) {
	if b.threshold < 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.consecutive++
	b.lastFault = message
	if probe {
		b.probing = false
	}
	if (probe || b.consecutive >= b.threshold) && (probe || b.openUntil.IsZero()) {
		b.openUntil = b.now().Add(b.coolDown)
		return true
	}
	return false
}

// success closes the breaker.
func (b *breaker) success(probe bool) {
	if b.threshold < 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.consecutive = 0
	b.openUntil = time.Time{}
	if probe {
		b.probing = false
	}
}

// done ends a run that proved nothing (cancelled by its caller).
func (b *breaker) done(probe bool) {
	if probe {
		b.mu.Lock()
		b.probing = false
		b.mu.Unlock()
	}
}
