package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// maxCancelReason is the longest --reason taken, in bytes (the gateway's
// limit too).
const maxCancelReason = 1000

// defaultSteerWait is how long nova cancel and nova signal wait, by
// default, for the engine to act on what they sent.
const defaultSteerWait = 10 * time.Second

// cancelResult is what nova cancel --json prints.
type cancelResult struct {
	ExecutionID string `json:"execution_id"`
	// Status is the execution's: "cancelled" once it ended so (or was
	// already), another end status when it ended otherwise first, or
	// "cancelling" when the cancel was sent and it had not ended within
	// the wait.
	Status       string `json:"status"`
	CancelledBy  string `json:"cancelled_by,omitempty"`
	CancelReason string `json:"cancel_reason,omitempty"`
	// Already is set when the execution was cancelled before: nothing was
	// sent.
	Already bool `json:"already,omitempty"`
	// Refused is set when nothing was sent: Error says why (an unknown
	// execution, one that ended, no bus to send it on).
	Refused bool   `json:"refused,omitempty"`
	Error   string `json:"error,omitempty"`
}

// cmdCancel cancels a running execution of a deployment (or of nova dev)
// at NATS_URL: it checks the engine's state of the execution, publishes
// the cancel command the engine reads, and waits for the execution's
// completion (status cancelled). Exit 0 once it is cancelled (or was
// already, or with --timeout 0 once the command is sent), 1 when it did
// not end cancelled within the wait, 2 for a request that cannot be taken
// (an unknown execution, one that ended).
func cmdCancel(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	fs.SetOutput(stderr)
	reason := fs.String("reason", "", "why the execution is cancelled (kept in its chain of work)")
	asJSON := fs.Bool("json", false, "print the outcome as a JSON object")
	timeout := fs.Duration("timeout", defaultSteerWait, "how long to wait for the execution to end cancelled (0: do not wait)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitInvalid
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "nova cancel: want exactly one EXECUTION_ID")
		return exitInvalid
	}
	if len(*reason) > maxCancelReason {
		fmt.Fprintf(stderr, "nova cancel: --reason is %d bytes; at most %d are taken\n", len(*reason), maxCancelReason)
		return exitInvalid
	}
	if *timeout < 0 {
		fmt.Fprintln(stderr, "nova cancel: --timeout must not be negative")
		return exitInvalid
	}
	id := pos[0]
	// A refusal is said on stderr and, with --json, as the outcome.
	refuse := func(code int, problem string) int {
		fmt.Fprintf(stderr, "nova cancel: %s\n", problem)
		if *asJSON {
			writeJSONOut(stdout, cancelResult{ExecutionID: id, Refused: true, Error: problem})
		}
		return code
	}
	b, _, err := connectRemote(ctx, false)
	if err != nil {
		return refuse(exitInvalid, err.Error())
	}
	defer b.Close()

	st, code, problem := steeredState(ctx, b, id)
	if st == nil {
		return refuse(code, problem)
	}
	if err := st.CheckCancel(); err != nil {
		return refuse(exitInvalid, err.Error())
	}
	if st.Status == execution.StatusCancelled {
		return printCancel(stdout, *asJSON, cancelResult{ExecutionID: id, Status: execution.StatusCancelled,
			CancelledBy: st.CancelledBy, CancelReason: st.CancelReason, Already: true})
	}

	// The completion is watched from the stream, one stored before the
	// watch included: the execution runs, so any completion is the one
	// this cancel leads to (or one that came first).
	var done <-chan *novav1.WorkflowCompleted
	if *timeout > 0 {
		var stop func()
		done, stop, err = bus.First[novav1.WorkflowCompleted](ctx, b, bus.EventSubject(id, bus.KindWorkflowCompleted))
		if err != nil {
			return refuse(exitFailed, fmt.Sprintf("execution %s: its completion cannot be watched: %v", id, err))
		}
		defer stop()
	}
	cmd := &novav1.CancelExecution{ExecutionId: id, Reason: *reason, RequestedBy: cliUser()}
	if err := execution.PublishCancel(ctx, b, cmd); err != nil {
		return refuse(exitFailed, fmt.Sprintf("execution %s: the cancel was not sent: %v", id, err))
	}
	res := cancelResult{ExecutionID: id, Status: "cancelling"}
	if *timeout == 0 {
		return printCancel(stdout, *asJSON, res)
	}
	timer := time.NewTimer(*timeout)
	defer timer.Stop()
	select {
	case wc := <-done:
		res.Status, res.CancelledBy, res.CancelReason, res.Error = wc.GetStatus(), wc.GetCancelledBy(), wc.GetCancelReason(), wc.GetError()
	case <-timer.C:
		res.Error = fmt.Sprintf("the cancel was sent; the execution had not ended within %v", *timeout)
	case <-ctx.Done():
		fmt.Fprintf(stderr, "nova cancel: execution %s: %v (the cancel was sent)\n", id, ctx.Err())
		return exitFailed
	}
	return printCancel(stdout, *asJSON, res)
}

// printCancel prints the outcome of nova cancel, one line or a JSON
// object, and is its exit code.
func printCancel(stdout io.Writer, asJSON bool, res cancelResult) int {
	code := exitOK
	if res.Status != execution.StatusCancelled && (res.Status != "cancelling" || res.Error != "") {
		code = exitFailed
	}
	if asJSON {
		writeJSONOut(stdout, res)
		return code
	}
	by := ""
	if res.CancelledBy != "" {
		by = " by " + res.CancelledBy
		if res.CancelReason != "" {
			by += ": " + res.CancelReason
		}
	}
	switch {
	case res.Already:
		fmt.Fprintf(stdout, "execution %s was cancelled already%s\n", res.ExecutionID, by)
	case res.Status == execution.StatusCancelled:
		fmt.Fprintf(stdout, "execution %s cancelled%s\n", res.ExecutionID, by)
	case res.Status == "cancelling" && res.Error == "":
		fmt.Fprintf(stdout, "execution %s: cancel sent\n", res.ExecutionID)
	case res.Status == "cancelling":
		fmt.Fprintf(stdout, "execution %s: %s\n", res.ExecutionID, res.Error)
	default:
		line := fmt.Sprintf("execution %s ended %s before the cancel took effect", res.ExecutionID, res.Status)
		if res.Error != "" {
			line += ": " + firstLine(res.Error)
		}
		fmt.Fprintln(stdout, line)
	}
	return code
}

// steeredState is the engine's state of execution id for nova cancel and
// nova signal: nil with the exit code and the problem when it cannot be
// read or there is none.
func steeredState(ctx context.Context, b *bus.Bus, id string) (*execution.View, int, string) {
	if !execution.ValidKey(id) {
		return nil, exitInvalid, fmt.Sprintf("no execution %q (not an execution id)", id)
	}
	var st *execution.View
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketExecutions)
	if err == nil {
		st, err = execution.ReadView(ctx, kv, id)
	}
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		return nil, exitInvalid, fmt.Sprintf("no execution %q (the engine has run none here)", id)
	case err != nil:
		return nil, exitFailed, fmt.Sprintf("execution %s: its state cannot be read: %v", id, err)
	case st == nil:
		return nil, exitInvalid, fmt.Sprintf("no execution %q (the engine keeps an ended execution's state for a week, NOVA_KEEP_ENDED_STATE)", id)
	}
	return st, exitOK, ""
}

// cliUser is who nova cancel and nova signal name as the sender: the
// user running them.
func cliUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return cmp.Or(os.Getenv("USER"), "nova-cli")
}

// writeJSONOut prints v as indented JSON, as the other --json outputs.
func writeJSONOut(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
