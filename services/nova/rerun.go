package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/valueref"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// defaultRerunWait is how long nova rerun waits, by default, for the rerun
// to end (as nova run does).
const defaultRerunWait = 10 * time.Minute

// recordWait is how long nova rerun waits for the audit store to record
// the end of an execution the engine has ended.
const recordWait = 10 * time.Second

// rerunResult is what nova rerun --json prints.
type rerunResult struct {
	// ExecutionID is the rerun's id, RerunOf the execution rerun and From
	// the node the rerun started at.
	ExecutionID string `json:"execution_id"`
	RerunOf     string `json:"rerun_of"`
	From        string `json:"from"`
	// CarriedOver are the nodes the original ran before From, in order:
	// not run again, recorded as carried over.
	CarriedOver []string `json:"carried_over"`
	// Status is the rerun's end status, or "running" when it was not
	// waited for or had not ended within the wait.
	Status  string          `json:"status"`
	Context json.RawMessage `json:"context,omitempty"`
	Path    []string        `json:"path,omitempty"`
	Error   string          `json:"error,omitempty"`
}

// cmdRerun reruns an ended execution of a deployment (or of nova dev) from
// one of its nodes: it builds the start from the execution's chain of work
// in the audit store (--mongo, default $MONGODB_URI, else the embedded
// store of --data-dir, else the store of the nova dev at NATS_URL, as nova
// chain reads it), publishes it on NATS_URL
// and waits for the rerun's end. Exit 0 when the rerun succeeded (or, with
// --no-wait, started), 1 when it failed or did not end within --timeout, 2
// for a rerun that cannot be made (an unknown execution, one still
// running, a node it never reached, no failed node to start from).
func cmdRerun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rerun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	store := addStoreFlags(fs)
	from := fs.String("from", "", "the `NODE` to rerun from (default: the node that failed)")
	var sets setFlags
	fs.Var(&sets, "set", "context change `key=value` before the node (repeatable; value parsed as JSON when valid, else a string)")
	newest := fs.Bool("newest", false, "run the workflow's newest registration instead of the definition the execution ran")
	noWait := fs.Bool("no-wait", false, "only start the rerun: print its id and do not wait for its end")
	timeout := fs.Duration("timeout", defaultRerunWait, "how long to wait for the rerun to end (0: do not wait)")
	asJSON := fs.Bool("json", false, "print the outcome as a JSON object")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitInvalid
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "nova rerun: want exactly one EXECUTION_ID")
		return exitInvalid
	}
	if *timeout < 0 {
		fmt.Fprintln(stderr, "nova rerun: --timeout must not be negative")
		return exitInvalid
	}
	if strings.TrimSpace(*from) == "" && flagSet(fs, "from") {
		fmt.Fprintln(stderr, "nova rerun: --from must name a node (leave it out to rerun from the node that failed)")
		return exitInvalid
	}
	set, err := initialContext("", sets)
	if err != nil {
		fmt.Fprintf(stderr, "nova rerun: %v\n", err)
		return exitInvalid
	}
	id := pos[0]
	wait := *timeout
	if *noWait {
		wait = 0
	}

	b, _, err := connectRemote(ctx, false)
	if err != nil {
		fmt.Fprintf(stderr, "nova rerun: %v\n", err)
		return exitInvalid
	}
	defer b.Close()
	st, release, where, err := store.open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "nova rerun: %v\n", err)
		return exitInvalid
	}
	defer release()

	start, code := rerunStart(ctx, b, st, where, id, chainstore.RerunRequest{From: *from, Set: set}, *newest, stderr)
	if start == nil {
		return code
	}
	newID := start.GetExecutionId()
	values, err := valueref.Open(ctx, b.JetStream(), 0, 0)
	if err == nil {
		err = shrinkContext(ctx, values, start)
	}
	if err != nil {
		fmt.Fprintf(stderr, "nova rerun: a large context value could not be stored: %v\n", err)
		return exitFailed
	}
	var done <-chan *novav1.WorkflowCompleted
	if wait > 0 {
		var stop func()
		done, stop, err = bus.First[novav1.WorkflowCompleted](ctx, b, bus.EventSubject(newID, bus.KindWorkflowCompleted))
		if err != nil {
			fmt.Fprintf(stderr, "nova rerun: the rerun's completion cannot be watched: %v\n", err)
			return exitFailed
		}
		defer stop()
	}
	err = b.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), "start-"+newID, bus.TypeWorkflowStart, start,
		map[string]string{bus.ExtensionExecutionID: newID})
	if err != nil {
		fmt.Fprintf(stderr, "nova rerun: the rerun of %s was not started: %v\n", id, err)
		return exitFailed
	}
	res := rerunResult{ExecutionID: newID, RerunOf: id, From: start.GetRerun().GetNodeId(),
		CarriedOver: start.GetRerun().GetCarriedOver(), Status: execution.StatusRunning}
	if res.CarriedOver == nil {
		res.CarriedOver = []string{}
	}
	if !*asJSON {
		printRerunStart(stdout, res)
	}
	if wait == 0 {
		return printRerunEnd(stdout, *asJSON, res)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case wc := <-done:
		res.Status, res.Path, res.Error = wc.GetStatus(), wc.GetPath(), wc.GetError()
		res.Context = jsonvalue.MustObject(wc.GetContext()).Bytes()
	case <-timer.C:
		res.Error = fmt.Sprintf("the rerun had not ended within %v; nova watch %s follows it", wait, newID)
	case <-ctx.Done():
		fmt.Fprintf(stderr, "nova rerun: rerun %s: %v (it was started)\n", newID, ctx.Err())
		return exitFailed
	}
	return printRerunEnd(stdout, *asJSON, res)
}

// rerunStart is the start of the rerun req asks for, built from the chain
// of work of execution id (the definition its workflow's newest
// registration with newest); nil with the exit code, the problem said,
// when it cannot be made. An execution the engine has ended is waited for
// until the audit store has recorded its end, at most recordWait.
func rerunStart(ctx context.Context, b *bus.Bus, st *chainstore.Store, where, id string, req chainstore.RerunRequest, newest bool,
	stderr io.Writer) (*novav1.StartWorkflow, int) {
	deadline := time.Now().Add(recordWait)
	for {
		var err error
		if newest && req.Definition == nil {
			req.Definition, err = newestDefinition(ctx, b, st, id)
		}
		var start *novav1.StartWorkflow
		if err == nil {
			start, err = st.RerunStart(ctx, id, req)
		}
		if err == nil {
			return start, exitOK
		}
		if !errors.Is(err, chainstore.ErrNotFound) && !errors.Is(err, chainstore.ErrRunning) {
			fmt.Fprintf(stderr, "nova rerun: %v\n", err)
			if errors.Is(err, chainstore.ErrRerun) {
				return nil, exitInvalid
			}
			return nil, exitFailed
		}
		state, serr := engineState(ctx, b, id)
		switch {
		case serr != nil:
			fmt.Fprintf(stderr, "nova rerun: execution %s: its state cannot be read: %v\n", id, serr)
			return nil, exitFailed
		case state != nil && execution.Ended(state.Status) && time.Now().Before(deadline):
			// Ended: the audit store records it within a few seconds.
		case state != nil && execution.Ended(state.Status):
			fmt.Fprintf(stderr, "nova rerun: execution %s ended %s, but %s has not recorded its end within %v; "+
				"is the audit service running, and writing to that store?\n", id, state.Status, where, recordWait)
			return nil, exitFailed
		case state != nil || errors.Is(err, chainstore.ErrRunning):
			fmt.Fprintf(stderr, "nova rerun: execution %s is running: cancel it (nova cancel), or wait for its end, before rerunning it\n", id)
			return nil, exitInvalid
		default:
			fmt.Fprintf(stderr, "nova rerun: no execution %q in the chain of work of %s\n", id, where)
			return nil, exitInvalid
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(stderr, "nova rerun: execution %s: %v\n", id, ctx.Err())
			return nil, exitFailed
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// newestDefinition is the newest registration of the workflow execution
// id ran; an unknown or running execution wraps chainstore's errors, a
// workflow not registered chainstore.ErrRerun.
func newestDefinition(ctx context.Context, b *bus.Bus, st *chainstore.Store, id string) (*novav1.WorkflowDefinition, error) {
	doc, err := st.Execution(ctx, id)
	if err != nil {
		return nil, err
	}
	if doc.Status == execution.StatusRunning {
		return nil, fmt.Errorf("%w: execution %s is running", chainstore.ErrRunning, id)
	}
	notRegistered := fmt.Errorf("%w: workflow %q is not registered; leave out --newest to rerun the definition execution %s ran",
		chainstore.ErrRerun, doc.WorkflowName, id)
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketWorkflows)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, notRegistered
	}
	if err != nil {
		return nil, fmt.Errorf("the workflow registry: %w", err)
	}
	entry, err := kv.Get(ctx, doc.WorkflowName)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrInvalidKey):
		return nil, notRegistered
	case err != nil:
		return nil, fmt.Errorf("the workflow registry: %w", err)
	}
	def := &novav1.WorkflowDefinition{}
	if err := proto.Unmarshal(entry.Value(), def); err != nil {
		return nil, fmt.Errorf("registered workflow %q: %w", doc.WorkflowName, err)
	}
	return def, nil
}

// engineState is the engine's state of execution id, nil when it has none.
func engineState(ctx context.Context, b *bus.Bus, id string) (*execution.View, error) {
	if !execution.ValidKey(id) {
		return nil, nil
	}
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketExecutions)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return execution.ReadView(ctx, kv, id)
}

// shrinkContext puts the large values of a start's context in the value
// store, as nova run does for its initial context.
func shrinkContext(ctx context.Context, values *valueref.Store, start *novav1.StartWorkflow) error {
	c, err := jsonvalue.FromProto(start.GetContext())
	if err != nil || c == nil {
		return err
	}
	if err := values.Shrink(ctx, c); err != nil {
		return err
	}
	start.Context = c.Proto()
	return nil
}

// flagSet tells whether flag name was given.
func flagSet(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// printRerunStart prints the rerun's id and what it reruns, as soon as it
// started.
func printRerunStart(stdout io.Writer, res rerunResult) {
	fmt.Fprintf(stdout, "execution  %s\nrerun of   %s from node %s\n", res.ExecutionID, res.RerunOf, res.From)
	carried := "none"
	if len(res.CarriedOver) > 0 {
		carried = strings.Join(res.CarriedOver, ", ")
	}
	fmt.Fprintf(stdout, "carried    %s\n", carried)
}

// printRerunEnd prints the rerun's outcome, after printRerunStart's lines
// or as one JSON object, and is nova rerun's exit code.
func printRerunEnd(stdout io.Writer, asJSON bool, res rerunResult) int {
	code := exitOK
	if res.Status != execution.StatusSucceeded && (res.Status != execution.StatusRunning || res.Error != "") {
		code = exitFailed
	}
	if asJSON {
		writeJSONOut(stdout, res)
		return code
	}
	fmt.Fprintf(stdout, "status     %s\n", res.Status)
	if res.Error != "" {
		fmt.Fprintf(stdout, "error      %s\n", res.Error)
	}
	if len(res.Path) > 0 {
		fmt.Fprintf(stdout, "path       %s\n", strings.Join(res.Path, " -> "))
	}
	if len(res.Context) > 0 {
		var ctxJSON bytes.Buffer
		if json.Indent(&ctxJSON, res.Context, "           ", "  ") == nil {
			fmt.Fprintf(stdout, "context    %s\n", ctxJSON.Bytes())
		}
	}
	return code
}
