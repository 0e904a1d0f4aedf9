package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// ErrExecutionCancelled is the cause (context.Cause) of a context that
// Cancels ended because its execution was cancelled.
var ErrExecutionCancelled = errors.New("the execution was cancelled")

// cancelWatchFlushWait bounds the round trip that makes sure the server
// knows of a new cancellation watch.
const cancelWatchFlushWait = 10 * time.Second

// WatchCancellations calls onCancel with the execution of every
// ExecutionCancelled and ExecutionStopped event published from now on, until stop is called or
// ctx ends. It reads them on a plain NATS subscription (what JetStream stores
// on nova.evt.*.execution.cancelled reaches it too), not a durable consumer,
// so every replica of every service hears each one. The execution is the
// subject's token: an id with characters a subject token cannot hold comes
// as EventSubject spells it ('.', '*', '>' and blanks as '_'). onCancel runs
// on the subscription's goroutine, one event at a time, and must not block.
//
// A cancellation published while the connection is down is not heard; the
// work it would have stopped runs to its end, and the graph engine ignores
// its result.
func (b *Bus) WatchCancellations(ctx context.Context, onCancel func(executionID string)) (stop func(), err error) {
	handle := func(m *nats.Msg) {
		if execution, _, ok := ParseEventSubject(m.Subject); ok {
			onCancel(execution)
		}
	}
	// ExecutionCancelled, and ExecutionStopped (an execution that ended
	// while some of its lines still ran work): one subscription each, the
	// subjects a service's NATS user may subscribe to.
	var subs []*nats.Subscription
	unsubscribeAll := func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}
	for _, kind := range []string{KindExecutionCancelled, KindExecutionStopped} {
		sub, err := b.nc.Subscribe(EventFilter(kind), handle)
		if err != nil {
			unsubscribeAll()
			return nil, fmt.Errorf("watch cancellations: %w", err)
		}
		subs = append(subs, sub)
	}
	// The server knows of the subscription once the flush returns: a
	// cancellation published after this call is delivered.
	fctx, cancel := context.WithTimeout(ctx, cancelWatchFlushWait)
	defer cancel()
	if err := b.nc.FlushWithContext(fctx); err != nil {
		unsubscribeAll()
		return nil, fmt.Errorf("watch cancellations: %w", err)
	}
	var once sync.Once
	unsubscribe := func() { once.Do(unsubscribeAll) }
	after := context.AfterFunc(ctx, unsubscribe)
	return func() {
		after()
		unsubscribe()
	}, nil
}

// Defaults of Cancels' memory of cancelled executions.
const (
	// CancelsRemembered is how many cancelled executions Cancels remembers.
	CancelsRemembered = 1024
	// CancelsRememberFor is how long Cancels remembers one.
	CancelsRememberFor = 10 * time.Minute
)

// Cancels ends the work of executions when they are cancelled: Start gives
// each piece of work a context that a cancellation of its execution ends,
// with cause ErrExecutionCancelled. It remembers the executions cancelled in
// the last CancelsRememberFor (the last CancelsRemembered of them), so that
// work an execution's cancellation overtook (a command delivered after it,
// or again) starts already cancelled. It is safe for concurrent use; the zero
// value works without a watch (Cancel tells it of cancellations).
type Cancels struct {
	// now is the clock of the memory (tests).
	now func() time.Time

	mu      sync.Mutex
	running map[string]map[*cancelWork]struct{}
	// recent maps a cancelled execution to when it was cancelled; order
	// holds the same in the order they came, at most CancelsRemembered.
	recent map[string]time.Time
	order  []cancelled
	stop   func()
}

type cancelWork struct{ cancel context.CancelCauseFunc }

type cancelled struct {
	execution string
	at        time.Time
}

// NewCancels starts Cancels that hear every cancellation published from now
// on (WatchCancellations); Close stops hearing them.
func (b *Bus) NewCancels(ctx context.Context) (*Cancels, error) {
	c := &Cancels{}
	stop, err := b.WatchCancellations(ctx, c.Cancel)
	if err != nil {
		return nil, err
	}
	// The steps cancelled while their execution runs on.
	steps, err := b.nc.Subscribe(EventFilter(KindStepsCancelled), func(m *nats.Msg) {
		ev, err := DecodeNATS(m.Header, m.Data)
		if err != nil {
			return
		}
		var sc novav1.StepsCancelled
		if Decode(*ev, &sc) == nil {
			c.CancelSteps(sc.ExecutionId, sc.StepIds...)
		}
	})
	if err == nil {
		fctx, cancel := context.WithTimeout(ctx, cancelWatchFlushWait)
		err = b.nc.FlushWithContext(fctx)
		cancel()
	}
	if err != nil {
		stop()
		if steps != nil {
			_ = steps.Unsubscribe()
		}
		return nil, fmt.Errorf("watch cancelled steps: %w", err)
	}
	c.mu.Lock()
	c.stop = func() { stop(); _ = steps.Unsubscribe() }
	c.mu.Unlock()
	return c, nil
}

// Close stops the watch of NewCancels. Contexts already started are left as
// they are.
func (c *Cancels) Close() {
	c.mu.Lock()
	stop := c.stop
	c.stop = nil
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// Start returns a context of parent for work of execution executionID,
// ended with cause ErrExecutionCancelled when the execution is cancelled, or
// at once when it was cancelled a moment ago; release ends it when the work
// is done (call it, as a context's cancel). An empty executionID is never
// cancelled.
func (c *Cancels) Start(executionID string, parent context.Context) (ctx context.Context, release func()) {
	return c.StartStep(executionID, "", parent)
}

// StartStep is Start for the work of step stepID of execution executionID:
// its context also ends (with the same cause) when that step alone is
// cancelled (StepsCancelled: its line was cancelled while the execution
// runs on).
func (c *Cancels) StartStep(executionID, stepID string, parent context.Context) (ctx context.Context, release func()) {
	ctx, cancel := context.WithCancelCause(parent)
	if executionID == "" {
		return ctx, func() { cancel(context.Canceled) }
	}
	keys := []string{subjectToken(executionID)}
	if stepID != "" {
		keys = append(keys, stepKey(executionID, stepID))
	}
	w := &cancelWork{cancel: cancel}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, key := range keys {
		if c.cancelledLocked(key) {
			cancel(ErrExecutionCancelled)
			return ctx, func() {}
		}
	}
	if c.running == nil {
		c.running = map[string]map[*cancelWork]struct{}{}
	}
	for _, key := range keys {
		set := c.running[key]
		if set == nil {
			set = map[*cancelWork]struct{}{}
			c.running[key] = set
		}
		set[w] = struct{}{}
	}
	return ctx, func() {
		c.mu.Lock()
		for _, key := range keys {
			if set := c.running[key]; set != nil {
				delete(set, w)
				if len(set) == 0 {
					delete(c.running, key)
				}
			}
		}
		c.mu.Unlock()
		cancel(context.Canceled)
	}
}

// stepKey is where the work of one step is held: apart from its
// execution's (a subject token holds no NUL).
func stepKey(executionID, stepID string) string { return subjectToken(executionID) + "\x00" + stepID }

// Cancel ends the contexts of execution executionID's work and remembers it
// cancelled (WatchCancellations calls it for every cancellation).
func (c *Cancels) Cancel(executionID string) {
	if executionID == "" {
		return
	}
	c.cancelKeys(subjectToken(executionID))
}

// CancelSteps ends the contexts of the work of steps stepIDs of execution
// executionID (StartStep) and remembers them cancelled; the execution's
// other work goes on.
func (c *Cancels) CancelSteps(executionID string, stepIDs ...string) {
	if executionID == "" {
		return
	}
	keys := make([]string, 0, len(stepIDs))
	for _, s := range stepIDs {
		if s != "" {
			keys = append(keys, stepKey(executionID, s))
		}
	}
	c.cancelKeys(keys...)
}

func (c *Cancels) cancelKeys(keys ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, key := range keys {
		c.rememberLocked(key)
		for w := range c.running[key] {
			w.cancel(ErrExecutionCancelled)
		}
		delete(c.running, key)
	}
}

// Cancelled tells whether execution executionID was cancelled within what
// Cancels remembers.
func (c *Cancels) Cancelled(executionID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cancelledLocked(subjectToken(executionID))
}

// Running is how many pieces of work Cancels holds contexts of.
func (c *Cancels) Running() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, set := range c.running {
		n += len(set)
	}
	return n
}

func (c *Cancels) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

func (c *Cancels) cancelledLocked(key string) bool {
	at, ok := c.recent[key]
	return ok && c.clock().Sub(at) < CancelsRememberFor
}

func (c *Cancels) rememberLocked(key string) {
	now := c.clock()
	if c.recent == nil {
		c.recent = map[string]time.Time{}
	}
	// Forget what is too old, and the oldest beyond the count.
	drop := 0
	for drop < len(c.order) && (now.Sub(c.order[drop].at) >= CancelsRememberFor || len(c.order)-drop >= CancelsRemembered) {
		old := c.order[drop]
		if c.recent[old.execution].Equal(old.at) {
			delete(c.recent, old.execution)
		}
		drop++
	}
	if drop > 0 {
		c.order = append(c.order[:0], c.order[drop:]...)
	}
	c.recent[key] = now
	c.order = append(c.order, cancelled{execution: key, at: now})
}
