package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Outcomes of nova signal.
const (
	// signalTaken: the wait node took the signal and moved on.
	signalTaken = "taken"
	// signalKept: no wait node waited for it yet; the execution keeps it
	// for the first that comes.
	signalKept = "kept"
	// signalRejected: the engine did not take it (signal.rejected).
	signalRejected = "rejected"
	// signalEnded: the execution ended before the signal was taken.
	signalEnded = "ended"
	// signalSent: sent, no answer within the wait (or none waited for).
	signalSent = "sent"
	// signalRefused: not sent (an unknown or ended execution, a signal it
	// does not wait for, a payload that fails the schema).
	signalRefused = "refused"
)

// signalResult is what nova signal --json prints.
type signalResult struct {
	ExecutionID string `json:"execution_id"`
	Signal      string `json:"signal"`
	// Node is the wait node the signal was for ("" while it is kept).
	Node string `json:"node,omitempty"`
	// EventID is the signal's CloudEvent id.
	EventID string `json:"event_id"`
	// Outcome is taken, kept, rejected, ended, sent or refused.
	Outcome string `json:"outcome"`
	// Next is the node the execution went on to, when taken.
	Next string `json:"next,omitempty"`
	// Reason says why the engine rejected the signal.
	Reason string `json:"reason,omitempty"`
	// Kept is how many signals the execution keeps, when kept.
	Kept int32 `json:"kept,omitempty"`
	// Status is the execution's end status, when it ended.
	Status string `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
}

// cmdSignal sends a signal to the wait node a running execution of a
// deployment (or of nova dev) at NATS_URL is at: it checks the engine's
// state of the execution (it must wait for that signal) and the payload
// against the wait node's schema, publishes the signal the engine reads,
// and waits until the node moved on or the engine rejected the signal.
// Exit 0 when the signal was taken (or, with --timeout 0, sent), 1 when it
// was rejected or not answered within the wait, 2 for a request that
// cannot be taken (an unknown execution, one that ended or does not wait
// for the signal, a payload that fails the schema).
func cmdSignal(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("signal", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sets setFlags
	fs.Var(&sets, "set", "payload `key=value` (repeatable; value parsed as JSON when valid, else a string)")
	data := fs.String("data", "", "the payload as a JSON object; --set values override its members")
	asJSON := fs.Bool("json", false, "print the outcome as a JSON object")
	timeout := fs.Duration("timeout", defaultSteerWait, "how long to wait for the wait node to move on (0: do not wait)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitInvalid
	}
	if len(pos) != 2 {
		fmt.Fprintln(stderr, "nova signal: want EXECUTION_ID and SIGNAL")
		return exitInvalid
	}
	if *timeout < 0 {
		fmt.Fprintln(stderr, "nova signal: --timeout must not be negative")
		return exitInvalid
	}
	id, name := pos[0], pos[1]
	if !workflow.ValidToken(name) {
		fmt.Fprintf(stderr, "nova signal: %q is not a signal name (letters, digits, '-' and '_')\n", name)
		return exitInvalid
	}
	payload, err := signalPayload(*data, sets)
	if err != nil {
		fmt.Fprintf(stderr, "nova signal: %v\n", err)
		return exitInvalid
	}
	decoded, err := payload.Decoded()
	if err != nil {
		fmt.Fprintf(stderr, "nova signal: payload: %v\n", err)
		return exitInvalid
	}
	// A refusal is said on stderr and, with --json, as the outcome.
	refuse := func(code int, node, problem string) int {
		fmt.Fprintf(stderr, "nova signal: %s\n", problem)
		if *asJSON {
			writeJSONOut(stdout, signalResult{ExecutionID: id, Signal: name, Node: node, Outcome: signalRefused, Error: problem})
		}
		return code
	}
	b, _, err := connectRemote(ctx, false)
	if err != nil {
		return refuse(exitInvalid, "", err.Error())
	}
	defer b.Close()

	st, code, problem := steeredState(ctx, b, id)
	if st == nil {
		return refuse(code, "", problem)
	}
	if err := st.CheckSignal(name); err != nil {
		// A signal a wait node of the workflow waits for, and none does
		// yet, is kept for the first that comes.
		var notWaiting *execution.NotWaitingError
		if !errors.As(err, &notWaiting) || !notWaiting.Keeps {
			return refuse(exitInvalid, "", err.Error())
		}
	}
	node := st.WaitNode(name)
	if node != nil {
		if err := workflow.CheckPayload(node, decoded); err != nil {
			return refuse(exitInvalid, node.GetId(), payloadProblem(node, err))
		}
	}

	res := signalResult{ExecutionID: id, Signal: name, Node: node.GetId(), EventID: "signal-" + uuid.NewString(), Outcome: signalSent}
	var answers <-chan signalResult
	if *timeout > 0 {
		var stop func()
		answers, stop, err = watchSignal(ctx, b, res, st.Node(node.GetId()).Visits)
		if err != nil {
			return refuse(exitFailed, node.GetId(), fmt.Sprintf("execution %s: its events cannot be watched: %v", id, err))
		}
		defer stop()
	}
	err = execution.PublishSignal(ctx, b, res.EventID,
		&novav1.SignalExecution{ExecutionId: id, Signal: name, Payload: payload.Proto(), SentBy: cliUser()})
	if err != nil {
		return refuse(exitFailed, node.GetId(), fmt.Sprintf("execution %s: the signal was not sent: %v", id, err))
	}
	if *timeout == 0 {
		return printSignal(stdout, *asJSON, res)
	}
	timer := time.NewTimer(*timeout)
	defer timer.Stop()
	select {
	case res = <-answers:
	case <-timer.C:
		res.Error = fmt.Sprintf("the signal was sent; no answer within %v", *timeout)
	case <-ctx.Done():
		fmt.Fprintf(stderr, "nova signal: execution %s: %v (the signal was sent)\n", id, ctx.Err())
		return exitFailed
	}
	return printSignal(stdout, *asJSON, res)
}

// signalPayload is the payload --data and --set make: --data's object,
// then each --set (its value parsed as JSON when it is valid JSON — true,
// 12, "x", {...} — else taken as a string), numbers kept as written.
func signalPayload(data string, sets []string) (jsonvalue.Object, error) {
	payload := jsonvalue.Object{}
	if data != "" {
		var err error
		if payload, err = jsonvalue.ParseObject([]byte(data)); err != nil {
			return nil, fmt.Errorf("--data: the payload must be a JSON object: %w", err)
		}
	}
	fromSets, err := initialContext("", sets)
	if err != nil {
		return nil, err
	}
	payload.Merge(fromSets)
	return payload, nil
}

// payloadProblem says which field of a payload fails node's schema.
func payloadProblem(node *novav1.Node, err error) string {
	var pe *workflow.PayloadError
	if errors.As(err, &pe) {
		if pe.Field == "" {
			return fmt.Sprintf("the payload does not meet the schema of wait node %q: %s", node.GetId(), pe.Problem)
		}
		return fmt.Sprintf("payload field %q: %s (the schema of wait node %q)", pe.Field, pe.Problem, node.GetId())
	}
	return fmt.Sprintf("the payload does not meet the schema of wait node %q: %v", node.GetId(), err)
}

// watchSignal watches the events of sent's execution for what became of
// the signal: the wait node's completion of this visit (taken), a
// signal.rejected naming the signal's event (rejected), or the
// execution's completion (ended). The first comes on the channel.
func watchSignal(ctx context.Context, b *bus.Bus, sent signalResult, visit int32) (<-chan signalResult, func(), error) {
	id := sent.ExecutionID
	got := make(chan signalResult, 1)
	offer := func(r signalResult) {
		select {
		case got <- r:
		default:
		}
	}
	stop, err := b.Watch(ctx, "watch signal "+sent.EventID, bus.StreamEvents,
		jetstream.OrderedConsumerConfig{FilterSubjects: []string{
			bus.EventSubject(id, bus.KindNodeCompleted),
			bus.EventSubject(id, bus.KindSignalRejected),
			bus.EventSubject(id, bus.KindSignalKept),
			bus.EventSubject(id, bus.KindWorkflowCompleted),
		}},
		func(m jetstream.Msg, ev *event.Event) {
			r := sent
			switch bus.EventKind(id, m.Subject()) {
			case bus.KindNodeCompleted:
				var nc novav1.NodeCompleted
				if bus.Decode(*ev, &nc) != nil || nc.GetNodeId() != sent.Node || visit > 0 && nc.GetVisit() != visit {
					return
				}
				if nc.GetSignal() == nil {
					// The visit ended otherwise: its timeout, a cancel.
					r.Outcome, r.Error = signalEnded, waitEnded(&nc)
				} else {
					r.Outcome, r.Next = signalTaken, nc.GetPathTaken()
				}
			case bus.KindSignalKept:
				var sk novav1.SignalKept
				if bus.Decode(*ev, &sk) != nil || sk.GetSignalEventId() != sent.EventID {
					return
				}
				r.Outcome, r.Kept = signalKept, sk.GetKept()
			case bus.KindSignalRejected:
				var sr novav1.SignalRejected
				if bus.Decode(*ev, &sr) != nil || sr.GetSignalEventId() != sent.EventID {
					return
				}
				r.Outcome, r.Reason = signalRejected, sr.GetReason()
			case bus.KindWorkflowCompleted:
				var wc novav1.WorkflowCompleted
				if bus.Decode(*ev, &wc) != nil {
					return
				}
				r.Outcome, r.Status, r.Error = signalEnded, wc.GetStatus(), wc.GetError()
			default:
				return
			}
			offer(r)
		})
	if err != nil {
		return nil, nil, err
	}
	return got, stop, nil
}

// waitEnded says how a wait node's visit ended without a signal.
func waitEnded(nc *novav1.NodeCompleted) string {
	switch {
	case nc.GetTimedOut():
		return fmt.Sprintf("node %s timed out before the signal came", nc.GetNodeId())
	case nc.GetErrorMessage() != "":
		return fmt.Sprintf("node %s ended %s: %s", nc.GetNodeId(), nc.GetStatus(), firstLine(nc.GetErrorMessage()))
	}
	return fmt.Sprintf("node %s ended %s without the signal", nc.GetNodeId(), nc.GetStatus())
}

// printSignal prints the outcome of nova signal, one line or a JSON
// object, and is its exit code.
func printSignal(stdout io.Writer, asJSON bool, res signalResult) int {
	code := exitFailed
	if res.Outcome == signalTaken || res.Outcome == signalKept || res.Outcome == signalSent && res.Error == "" {
		code = exitOK
	}
	if asJSON {
		writeJSONOut(stdout, res)
		return code
	}
	head := fmt.Sprintf("execution %s: signal %q", res.ExecutionID, res.Signal)
	switch res.Outcome {
	case signalTaken:
		line := fmt.Sprintf("%s taken; node %s moved on", head, res.Node)
		if res.Next != "" {
			line += " to " + res.Next
		}
		fmt.Fprintln(stdout, line)
	case signalKept:
		fmt.Fprintf(stdout, "%s kept: no wait node waits for it yet; the first to come takes it (%d kept)\n", head, res.Kept)
	case signalRejected:
		fmt.Fprintf(stdout, "%s rejected: %s\n", head, res.Reason)
	case signalEnded:
		if res.Status != "" {
			line := fmt.Sprintf("%s not taken: the execution ended %s", head, res.Status)
			if res.Error != "" {
				line += ": " + firstLine(res.Error)
			}
			fmt.Fprintln(stdout, line)
		} else {
			fmt.Fprintf(stdout, "%s not taken: %s\n", head, res.Error)
		}
	default:
		if res.Error != "" {
			fmt.Fprintf(stdout, "%s (event %s): %s\n", head, res.EventID, res.Error)
		} else {
			fmt.Fprintf(stdout, "%s sent to node %s (event %s)\n", head, res.Node, res.EventID)
		}
	}
	return code
}
