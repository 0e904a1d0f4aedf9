package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/bench/loadgen"
	"github.com/novaflow/nova/pkg/bus"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// streamSeqs is the last sequence of every stream: what each stored since
// is the difference.
func streamSeqs(ctx context.Context, js jetstream.JetStream) (map[string]uint64, error) {
	out := map[string]uint64{}
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		out[info.Config.Name] = info.State.LastSeq
	}
	return out, l.Err()
}

// backlog follows what every consumer has waiting (not yet delivered, and
// delivered but not acknowledged) while a load runs, sampled every 250 ms.
type backlog struct {
	mu      sync.Mutex
	sum     map[string]float64 // by stream/consumer
	max     map[string]int
	samples int
}

func (b *backlog) run(ctx context.Context, js jetstream.JetStream) {
	b.sum, b.max = map[string]float64{}, map[string]int{}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		seen := map[string]int{}
		streams := js.StreamNames(ctx)
		for name := range streams.Name() {
			s, err := js.Stream(ctx, name)
			if err != nil {
				continue
			}
			cl := s.ListConsumers(ctx)
			for c := range cl.Info() {
				if c.Config.Durable == "" {
					continue // a client's own ordered consumer
				}
				seen[name+"/"+c.Name] = int(c.NumPending) + c.NumAckPending
			}
		}
		b.mu.Lock()
		if err := streams.Err(); err != nil {
			// A sample the server did not answer in full is left out.
			b.mu.Unlock()
			continue
		}
		b.samples++
		for k, v := range seen {
			b.sum[k] += float64(v)
			b.max[k] = max(b.max[k], v)
		}
		b.mu.Unlock()
	}
}

// waiting is one consumer's backlog while the load ran.
type waiting struct {
	name string // stream/durable
	mean float64
	most int
}

// top is the n consumers with the most waiting on average, most first;
// those with none are left out.
func (b *backlog) top(n int) []waiting {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []waiting
	for k, sum := range b.sum {
		if m := sum / float64(max(b.samples, 1)); m >= 0.05 {
			out = append(out, waiting{name: k, mean: m, most: b.max[k]})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].mean != out[j].mean {
			return out[i].mean > out[j].mean
		}
		return out[i].name < out[j].name
	})
	return out[:min(n, len(out))]
}

// hops is where a workflow's time went, from its events: per workflow,
// summed over its node visits.
type hops struct {
	// start: the start event published to the first visit started.
	start []time.Duration
	// toSandbox: a code node's visit started (its command published) to
	// its program started in the sandbox (the sandbox's result less the
	// program's run): the command's wait in its stream and the sandbox's.
	toSandbox []time.Duration
	// program: the sandbox's run of the code (CodeExecuted.duration_ms).
	program []time.Duration
	// back: the sandbox's result published to the engine ending the visit
	// (the result's wait in its stream and the engine's handling of it;
	// the engine starts the next visit in the same step).
	back []time.Duration
}

// readHops reads the node visits and the sandbox's results of the
// executions of l from the events stream and sums each workflow's time
// per hop.
func readHops(ctx context.Context, js jetstream.JetStream, l *loadgen.Load, since time.Time) (hops, error) {
	index := make(map[string]int, len(l.IDs))
	for i, id := range l.IDs {
		index[id] = i
	}
	type result struct {
		at  time.Time
		run time.Duration
	}
	visits := make([][]*novav1.NodeCompleted, len(l.IDs))
	results := map[string]result{} // by execution/node/visit
	key := func(id, node string, visit int32) string { return fmt.Sprintf("%s/%s/%d", id, node, visit) }
	// A cluster may be moving a stream's leader for a moment: asked again.
	var oc jetstream.Consumer
	var err error
	filters := []string{bus.EventFilter(bus.KindNodeCompleted), bus.EventFilter(bus.KindSandboxResult)}
	for try := 0; ; try++ {
		oc, err = js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
			FilterSubjects: bus.FiltersWithEnvelopes(filters),
			DeliverPolicy:  jetstream.DeliverByStartTimePolicy, OptStartTime: &since})
		if err == nil {
			break
		}
		if try == 10 {
			return hops{}, fmt.Errorf("read node visits: %w", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for {
		batch, err := oc.FetchNoWait(1000)
		if err != nil {
			return hops{}, fmt.Errorf("read node visits: %w", err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			for _, m := range bus.Parts(ctx, msg, filters) {
				ev, err := bus.EventOf(m)
				if err != nil {
					continue
				}
				if strings.HasSuffix(m.Subject(), "."+bus.KindSandboxResult) {
					var ce novav1.CodeExecuted
					if bus.Decode(*ev, &ce) == nil {
						results[key(ce.ExecutionId, ce.NodeId, ce.Visit)] = result{at: ev.Time(),
							run: time.Duration(ce.DurationMs * float64(time.Millisecond))}
					}
					continue
				}
				var nc novav1.NodeCompleted
				if bus.Decode(*ev, &nc) != nil {
					continue
				}
				if i, ok := index[nc.ExecutionId]; ok {
					visits[i] = append(visits[i], &nc)
				}
			}
		}
		if err := batch.Error(); err != nil {
			return hops{}, fmt.Errorf("read node visits: %w", err)
		}
		if n == 0 {
			break
		}
	}
	var h hops
	for i, vs := range visits {
		o := l.Outcomes[i]
		if len(vs) == 0 || o == nil {
			continue
		}
		slices.SortFunc(vs, func(a, b *novav1.NodeCompleted) int { return int(a.Sequence - b.Sequence) })
		var to, program, back time.Duration
		for _, v := range vs {
			if r, ok := results[key(v.ExecutionId, v.NodeId, v.Visit)]; ok {
				to += r.at.Sub(v.StartedAt.AsTime()) - r.run
				program += r.run
				back += v.CompletedAt.AsTime().Sub(r.at)
			}
		}
		h.start = append(h.start, vs[0].StartedAt.AsTime().Sub(l.Started[i]))
		h.toSandbox = append(h.toSandbox, to)
		h.program = append(h.program, program)
		h.back = append(h.back, back)
	}
	return h, nil
}

// mean of ds.
func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}
