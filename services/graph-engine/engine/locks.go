package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/graph-engine/flow"
)

// Locks (Node.lock) across every execution of the deployment: each is a
// key of KV nova_locks (LockState: its holder and the lines waiting, in the
// order they asked), changed by compare-and-set. A line asks with a
// LockAcquire command and is told with LockGranted, a result of its
// execution, published only once the state that says so is stored; it
// gives the lock back with LockRelease when its visit ends (or leaves the
// queue, cancelled). The commands are durable and their handling
// idempotent, so a kill of any process at any point loses no grant and
// grants none twice: a redelivered command finds the state it left.

func (e *Engine) openLocks(ctx context.Context) error {
	kv, err := openBucket(ctx, e.bus.JetStream(), jetstream.KeyValueConfig{
		Bucket:      bus.BucketLocks,
		Description: "NOVA locks of nodes (lock:), one key per lock name: its holder and the lines waiting",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(e.cfg.Replicas, 1),
	})
	e.nodeLocks = kv
	return err
}

// sameLine tells whether a and b are the same line at the same node.
func sameLine(a, b *novav1.LockHolder) bool {
	return a.GetExecutionId() == b.GetExecutionId() && a.GetLineId() == b.GetLineId() && a.GetNodeId() == b.GetNodeId()
}

func (e *Engine) lockAcquire(ctx context.Context, ev event.Event) error {
	var cmd novav1.LockAcquire
	if err := bus.Decode(ev, &cmd); err != nil {
		return err
	}
	if !workflow.ValidToken(cmd.Lock) || cmd.GetLine().GetExecutionId() == "" {
		return bus.Permanent(fmt.Errorf("lock acquire: lock %q for execution %q is not a lock a node can name", cmd.Lock, cmd.GetLine().GetExecutionId()))
	}
	return e.changeLock(ctx, cmd.Lock, func(st *novav1.LockState) (*novav1.LockHolder, bool) {
		switch {
		case st.Holder != nil && sameLine(st.Holder, cmd.Line):
			return st.Holder, false // granted already: tell it again
		case slices.ContainsFunc(st.Waiting, func(w *novav1.LockHolder) bool { return sameLine(w, cmd.Line) }):
			return nil, false
		case st.Holder == nil:
			st.Holder, st.HeldSince = cmd.Line, timestamppb.New(e.now())
			return st.Holder, true
		}
		st.Waiting = append(st.Waiting, cmd.Line)
		return nil, true
	})
}

func (e *Engine) lockRelease(ctx context.Context, ev event.Event) error {
	var cmd novav1.LockRelease
	if err := bus.Decode(ev, &cmd); err != nil {
		return err
	}
	if !workflow.ValidToken(cmd.Lock) {
		return bus.Permanent(fmt.Errorf("lock release: %q is not a lock name", cmd.Lock))
	}
	return e.changeLock(ctx, cmd.Lock, func(st *novav1.LockState) (*novav1.LockHolder, bool) {
		switch {
		case st.Holder != nil && sameLine(st.Holder, cmd.Line):
			st.Holder, st.HeldSince = nil, nil
			if len(st.Waiting) > 0 {
				st.Holder, st.Waiting, st.HeldSince = st.Waiting[0], st.Waiting[1:], timestamppb.New(e.now())
			}
			return st.Holder, true
		case slices.ContainsFunc(st.Waiting, func(w *novav1.LockHolder) bool { return sameLine(w, cmd.Line) }):
			st.Waiting = slices.DeleteFunc(st.Waiting, func(w *novav1.LockHolder) bool { return sameLine(w, cmd.Line) })
			return nil, true
		}
		// Released already (a redelivery): the holder since may not have
		// been told yet; telling it again is harmless.
		return st.Holder, false
	})
}

// changeLock applies change to lock's state and stores it (compare-and-set,
// again on a lost race), then tells the holder change names that it holds
// the lock.
func (e *Engine) changeLock(ctx context.Context, lock string, change func(*novav1.LockState) (grant *novav1.LockHolder, changed bool)) error {
	for range 50 {
		st := &novav1.LockState{}
		var rev uint64
		entry, err := e.nodeLocks.Get(ctx, lock)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("read lock %s: %w", lock, err)
		default:
			rev = entry.Revision()
			if err := proto.Unmarshal(entry.Value(), st); err != nil {
				return bus.Permanent(fmt.Errorf("lock %s unreadable: %w", lock, err))
			}
		}
		grant, changed := change(st)
		if changed {
			data, err := proto.Marshal(st)
			if err != nil {
				return bus.Permanent(err)
			}
			if rev == 0 {
				_, err = e.nodeLocks.Create(ctx, lock, data)
			} else {
				_, err = e.nodeLocks.Update(ctx, lock, data, rev)
			}
			if bus.LostRace(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("store lock %s: %w", lock, err)
			}
		}
		if grant == nil {
			return nil
		}
		waited := e.now().Sub(grant.GetAskedAt().AsTime()).Seconds()
		trace.SpanFromContext(ctx).AddEvent(bus.TypeLockGranted, trace.WithAttributes(attribute.String("lock", lock),
			attribute.String("execution.id", grant.ExecutionId), attribute.String("node.id", grant.NodeId), attribute.Float64("waited_seconds", waited)))
		id := fmt.Sprintf("lock-granted/%s/%s/%s/%s/%d", lock, grant.ExecutionId, grant.LineId, grant.NodeId, grant.Sequence)
		return e.bus.PublishProto(ctx, bus.EventSubject(grant.ExecutionId, bus.KindChildCompleted), id, bus.TypeLockGranted,
			&novav1.LockGranted{Lock: lock, Line: grant, WaitedSeconds: waited}, map[string]string{bus.ExtensionExecutionID: grant.ExecutionId})
	}
	return fmt.Errorf("lock %s: too many concurrent changes", lock)
}

// lockGranted applies a LockGranted to the line it names.
func (e *Engine) lockGranted(ctx context.Context, ev event.Event) error {
	var g novav1.LockGranted
	if err := bus.Decode(ev, &g); err != nil {
		return err
	}
	l := g.GetLine()
	return e.update(ctx, l.GetExecutionId(), l.GetNodeId(), func(t *flow.Transition) error {
		return t.OnLine(func(b *novav1.Branch) bool {
			return b.Id == l.GetLineId() && (b.LockWait == g.Lock || b.LockHeld == g.Lock) && b.CurrentNode == l.GetNodeId()
		}, func() error { return t.LockGranted(&g) })
	})
}

// constructEvents adds to the transition's span an event for each thing
// the control-flow constructs did in it: a lock asked for, given back or
// granted, a signal kept, the steps of cancelled lines stopped. (Visits
// that ended cancelled, boundaries and terminates included, are the
// node.completed events the span's children publish.)
func constructEvents(span trace.Span, out []flow.OutEvent) {
	for _, o := range out {
		var attrs []attribute.KeyValue
		switch m := o.Msg.(type) {
		case *novav1.LockAcquire:
			attrs = []attribute.KeyValue{attribute.String("lock", m.Lock), attribute.String("node.id", m.GetLine().GetNodeId())}
		case *novav1.LockRelease:
			attrs = []attribute.KeyValue{attribute.String("lock", m.Lock), attribute.String("node.id", m.GetLine().GetNodeId()), attribute.String("reason", m.Reason)}
		case *novav1.SignalKept:
			attrs = []attribute.KeyValue{attribute.String("signal", m.Signal), attribute.Int("kept", int(m.Kept))}
		case *novav1.StepsCancelled:
			attrs = []attribute.KeyValue{attribute.StringSlice("step.ids", m.StepIds), attribute.String("reason", m.Reason)}
		default:
			continue
		}
		span.AddEvent(o.Type, trace.WithAttributes(attrs...))
	}
}
