package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/nova/client"
)

// registerResult is what nova register --json prints.
type registerResult struct {
	Workflow string `json:"workflow"`
	// Revision is the registry's revision of the registration.
	Revision uint64 `json:"revision"`
	// Unchanged: the name held this definition already; nothing new was
	// stored.
	Unchanged bool `json:"unchanged"`
	Nodes     int  `json:"nodes"`
}

// cmdRegister registers a workflow definition with a deployment (or nova
// dev) at NATS_URL, as POST /v1/workflows does: it validates the file as
// nova validate does, checks that every workflow it calls is registered,
// publishes the register command the engine reads and waits until the
// engine has stored it (so that a start by name that follows finds it), or
// refused it. Exit 0 once registered (or when the name holds this
// definition already), 1 when the engine refused it or did not store it
// within the wait, 2 for a definition that cannot be registered.
func cmdRegister(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("register", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the outcome as a JSON object")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the engine to store the definition")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitInvalid
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "nova register: want exactly one workflow FILE")
		return exitInvalid
	}
	if *timeout <= 0 {
		fmt.Fprintln(stderr, "nova register: --timeout must be positive")
		return exitInvalid
	}
	def, err := workflow.Load(pos[0], workflow.ValidateOptions{AllowPrompt: true})
	if err != nil {
		fmt.Fprintf(stderr, "nova register: %v\n", err)
		return exitInvalid
	}
	if !execution.ValidKey(def.GetName()) {
		fmt.Fprintf(stderr, "nova register: %s: workflow name %q cannot be registered: a name is 1 to 200 letters, digits, '-', '_' or '='\n",
			pos[0], def.GetName())
		return exitInvalid
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	b, _, err := connectRemote(ctx, false)
	if err != nil {
		fmt.Fprintf(stderr, "nova register: %v\n", err)
		return exitInvalid
	}
	defer b.Close()
	if missing, err := unregisteredCalls(ctx, b, def); err != nil {
		fmt.Fprintf(stderr, "nova register: %v\n", err)
		return exitFailed
	} else if missing != "" {
		fmt.Fprintf(stderr, "nova register: %s: %s\n", pos[0], missing)
		return exitInvalid
	}
	before, err := registeredEntry(ctx, b, def.GetName())
	if err != nil {
		fmt.Fprintf(stderr, "nova register: %v\n", err)
		return exitFailed
	}
	c := client.New(b, nil)
	defer c.Close()
	if err := c.Register(ctx, def); err != nil {
		fmt.Fprintf(stderr, "nova register: %v\n", err)
		return exitFailed
	}
	entry, err := registeredEntry(ctx, b, def.GetName())
	if err != nil || entry == nil {
		fmt.Fprintf(stderr, "nova register: workflow %q was stored, but cannot be read back: %v\n", def.GetName(), err)
		return exitFailed
	}
	res := registerResult{Workflow: def.GetName(), Revision: entry.Revision(), Nodes: len(def.GetNodes()),
		Unchanged: before != nil && before.Revision() == entry.Revision()}
	if *asJSON {
		writeJSONOut(stdout, res)
		return exitOK
	}
	if res.Unchanged {
		fmt.Fprintf(stdout, "workflow %q unchanged: revision %d is this definition already\n", res.Workflow, res.Revision)
	} else {
		fmt.Fprintf(stdout, "workflow %q registered: revision %d, %d nodes\n", res.Workflow, res.Revision, res.Nodes)
	}
	fmt.Fprintf(stdout, "start it with: nova run --remote %s\n", res.Workflow)
	return exitOK
}

// registeredEntry reads the registry's entry of workflow name, nil when
// there is none.
func registeredEntry(ctx context.Context, b *bus.Bus, name string) (jetstream.KeyValueEntry, error) {
	if !execution.ValidKey(name) {
		return nil, nil
	}
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketWorkflows)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the workflow registry: %w", err)
	}
	entry, err := kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the workflow registry: %w", err)
	}
	return entry, nil
}

// registeredDefinition is the definition registered as name, nil when
// there is none.
func registeredDefinition(ctx context.Context, b *bus.Bus, name string) (*novav1.WorkflowDefinition, error) {
	entry, err := registeredEntry(ctx, b, name)
	if err != nil || entry == nil {
		return nil, err
	}
	def := &novav1.WorkflowDefinition{}
	if err := proto.Unmarshal(entry.Value(), def); err != nil {
		return nil, fmt.Errorf("registered workflow %q: %w", name, err)
	}
	return def, nil
}

// unregisteredCalls says which workflows def calls (workflow and map
// nodes) are not registered on b's deployment, "" when all are.
func unregisteredCalls(ctx context.Context, b *bus.Bus, def *novav1.WorkflowDefinition) (string, error) {
	var missing []string
	for _, name := range slices.Compact(slices.Sorted(slices.Values(workflow.WorkflowRefs(def)))) {
		if name == def.GetName() {
			continue // the engine's own check names a call of itself
		}
		entry, err := registeredEntry(ctx, b, name)
		if err != nil {
			return "", err
		}
		if entry == nil {
			missing = append(missing, fmt.Sprintf("%q (node %s)", name, callingNode(def, name)))
		}
	}
	switch len(missing) {
	case 0:
		return "", nil
	case 1:
		return fmt.Sprintf("workflow %q calls workflow %s, which is not registered at %s: register it first (nova register FILE)",
			def.GetName(), missing[0], b.Conn().ConnectedUrl()), nil
	}
	return fmt.Sprintf("workflow %q calls workflows %s, which are not registered at %s: register them first (nova register FILE)",
		def.GetName(), strings.Join(missing, ", "), b.Conn().ConnectedUrl()), nil
}

// callingNode is the first node of def that calls workflow name.
func callingNode(def *novav1.WorkflowDefinition, name string) string {
	for _, n := range def.GetNodes() {
		if n.GetWorkflow() == name {
			return n.GetId()
		}
	}
	return "?"
}
