package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
	"github.com/novaflow/nova/services/nova/client"
)

// firstEventWait is how long nova watch waits for the first event of an
// execution before it says there is none.
const firstEventWait = 5 * time.Second

// cmdWatch follows an execution of a deployment (or of nova dev) as it
// runs: a line per node as it starts and ends, then its outcome. An
// execution that already ended is replayed.
func cmdWatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 0, "give up after this long (default: wait for the end)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitInvalid
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "nova watch: want exactly one EXECUTION_ID")
		return exitInvalid
	}
	id := pos[0]
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	// NATS_URL, by default nova dev's (service.Common).
	b, _, err := connectRemote(ctx, false)
	if err != nil {
		fmt.Fprintf(stderr, "nova watch: %v\n", err)
		return exitInvalid
	}
	defer b.Close()

	if !execution.ValidKey(id) {
		fmt.Fprintf(stderr, "nova watch: no execution %q (not an execution id)\n", id)
		return exitFailed
	}
	switch known, err := executionKnown(ctx, b, id); {
	case err != nil:
		fmt.Fprintf(stderr, "nova watch: execution %s: %v\n", id, err)
		return exitFailed
	case !known:
		fmt.Fprintf(stderr, "nova watch: no execution %q: the engine at %s has no state of it and its events stream holds none of its events\n",
			id, b.Conn().ConnectedUrl())
		return exitFailed
	}
	c := client.New(b, nil)
	wc, err := c.Purged(ctx, id)
	if err != nil {
		fmt.Fprintf(stderr, "nova watch: %v\n", err)
		return exitFailed
	}
	if wc != nil {
		return showPurged(stdout, stderr, wc)
	}
	events := make(chan client.Progress, 64)
	stop, err := c.Follow(ctx, id, func(p client.Progress) {
		select {
		case events <- p:
		case <-ctx.Done():
		}
	})
	if err != nil {
		fmt.Fprintf(stderr, "nova watch: %v\n", err)
		return exitFailed
	}
	defer stop()

	var shown *progressPrinter
	first := time.NewTimer(firstEventWait)
	defer first.Stop()
	for {
		select {
		case <-first.C:
			if shown == nil {
				// An execution that ended at its start publishes its events
				// just before the engine stores its state: if they were
				// purged in between, the state is there by now.
				if wc, err := c.Purged(ctx, id); err == nil && wc != nil {
					return showPurged(stdout, stderr, wc)
				}
				fmt.Fprintf(stderr, "nova watch: no execution %q (no event of it in %v; events are kept for a limited time)\n", id, firstEventWait)
				return exitFailed
			}
		case <-ctx.Done():
			if shown == nil && ctx.Err() == context.DeadlineExceeded {
				fmt.Fprintf(stderr, "nova watch: no event of execution %s within --timeout %v\n", id, *timeout)
			} else {
				fmt.Fprintf(stderr, "nova watch: execution %s: %v\n", id, ctx.Err())
			}
			return exitFailed
		case p := <-events:
			if shown == nil {
				shown = newProgressPrinter(stdout, nil)
			}
			if s := p.Started; s != nil {
				shown.width = max(shown.width, maxNodeID(s.GetDefinition()))
				fmt.Fprintf(stdout, "workflow   %s\nexecution  %s\nstarted    %s\n", s.GetWorkflowName(), id,
					s.GetStartedAt().AsTime().Local().Format(time.RFC3339))
			}
			shown.print(p)
			if wc := p.Completed; wc != nil {
				return showOutcome(stdout, wc)
			}
		}
	}
}

// showOutcome prints an execution's status (and error) and is its exit
// code.
func showOutcome(stdout io.Writer, wc *novav1.WorkflowCompleted) int {
	fmt.Fprintf(stdout, "status     %s\n", wc.GetStatus())
	if e := wc.GetError(); e != "" {
		fmt.Fprintf(stdout, "error      %s\n", e)
	}
	if wc.GetStatus() != execution.StatusSucceeded {
		return exitFailed
	}
	return exitOK
}

// showPurged shows an ended execution whose events are no longer kept: its
// nodes and outcome from the engine's state, and where its chain of work
// is.
func showPurged(stdout, stderr io.Writer, wc *novav1.WorkflowCompleted) int {
	id := wc.GetExecutionId()
	fmt.Fprintf(stderr, "nova watch: the events of execution %s are no longer kept (the audit service purges them once they are "+
		"NOVA_KEEP_ENDED_EVENTS, by default %v, past the end): its outcome is from the engine's state; "+
		"nova chain %s prints its chain of work\n", id, auditservice.KeepEnded, id)
	fmt.Fprintf(stdout, "workflow   %s\nexecution  %s\nstarted    %s\n", wc.GetWorkflowName(), id,
		wc.GetStartedAt().AsTime().Local().Format(time.RFC3339))
	width := 8
	for _, n := range wc.GetNodes() {
		width = max(width, len(n.GetId()))
	}
	for _, n := range wc.GetNodes() {
		mark := "✓"
		if n.GetStatus() != execution.StatusSucceeded {
			mark = "✗"
		}
		line := fmt.Sprintf("  %s %-*s %s", mark, width, n.GetId(), n.GetStatus())
		if n.GetVisits() > 1 {
			line += fmt.Sprintf(", %d visits", n.GetVisits())
		}
		if n.GetAttempts() > 1 {
			line += fmt.Sprintf(", %d attempts", n.GetAttempts())
		}
		if e := n.GetError(); e != "" {
			line += "  " + firstLine(e)
		}
		fmt.Fprintln(stdout, line)
	}
	return showOutcome(stdout, wc)
}

func maxNodeID(def *novav1.WorkflowDefinition) int {
	n := 0
	for _, node := range def.GetNodes() {
		n = max(n, len(node.GetId()))
	}
	return n
}

// executionKnown tells whether execution id is one nova watch can follow:
// the engine has its state, the events stream holds an event of it, or
// the engine has commands still to take up (its start may be one).
func executionKnown(ctx context.Context, b *bus.Bus, id string) (bool, error) {
	if st, err := engineState(ctx, b, id); err != nil || st != nil {
		return st != nil, err
	}
	js := b.JetStream()
	events, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, fmt.Errorf("the events stream: %w", err)
	}
	if err == nil {
		info, err := events.Info(ctx, jetstream.WithSubjectFilter(bus.ExecutionFilter(id)))
		if err != nil {
			return false, fmt.Errorf("the events stream: %w", err)
		}
		if len(info.State.Subjects) > 0 {
			return true, nil
		}
	}
	cons, err := js.Consumer(ctx, bus.StreamCommands, bus.ConsumerEngineCommands)
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("the engine's commands: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("the engine's commands: %w", err)
	}
	return info.NumPending > 0 || info.NumAckPending > 0, nil
}
