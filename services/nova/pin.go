package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/redact"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// pinError says what was asked cannot be pinned: the user's mistake (exit 2).
type pinError struct{ msg string }

func (e *pinError) Error() string { return e.msg }

// nodeSucceeded is the status of a node visit that succeeded.
const nodeSucceeded = "success"

// pinned is a workflow definition with AI nodes pinned to their code.
type pinned struct {
	def *novav1.WorkflowDefinition
	// nodes are the pinned nodes; left are the AI nodes left as they were
	// when every one was asked for, with why.
	nodes, left []string
}

func cmdPin(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	store := addStoreFlags(fs)
	outFile := fs.String("o", "", "write the definition to `FILE` instead of stdout")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitInvalid
	}
	if len(pos) == 0 {
		fmt.Fprintln(stderr, "nova pin: want an EXECUTION_ID, then the AI NODEs to pin (default: every AI node that succeeded)")
		return exitInvalid
	}
	st, release, _, err := store.open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "nova pin: %v\n", err)
		return exitFailed
	}
	defer release()
	p, err := pinExecution(ctx, st, pos[0], pos[1:])
	if err != nil {
		fmt.Fprintf(stderr, "nova pin: %v\n", err)
		if bad := (*pinError)(nil); errors.As(err, &bad) || errors.Is(err, chainstore.ErrNotFound) {
			return exitInvalid
		}
		return exitFailed
	}
	text, err := pinnedYAML(p, pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "nova pin: %v\n", err)
		return exitFailed
	}
	for _, l := range p.left {
		fmt.Fprintf(stderr, "nova pin: left %s\n", l)
	}
	if *outFile == "" {
		_, err = stdout.Write(text)
	} else if err = os.WriteFile(*outFile, text, 0o644); err == nil {
		fmt.Fprintf(stdout, "%s: workflow %q with %s pinned to the code execution %s accepted\n",
			*outFile, p.def.GetName(), strings.Join(p.nodes, ", "), pos[0])
	}
	if err != nil {
		fmt.Fprintf(stderr, "nova pin: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// pinExecution reads execution executionID and the definition it ran from
// the chain of work, and pins each AI node of wanted (every AI node that
// succeeded when there are none) to the code it ran there, with
// workflow.PinCode. A node that does not exist, is not an AI node or did not
// succeed is a *pinError naming it.
func pinExecution(ctx context.Context, st *chainstore.Store, executionID string, wanted []string) (*pinned, error) {
	def, err := finishedDefinition(ctx, st, executionID)
	if err != nil {
		return nil, err
	}
	chain, err := st.Chain(ctx, executionID)
	if err != nil {
		return nil, fmt.Errorf("chain of work of %s: %w", executionID, err)
	}
	src := pinSource{executionID: executionID, last: lastVisits(chain)}
	p := &pinned{def: def}
	if len(wanted) == 0 {
		if wanted, err = src.succeededAINodes(p); err != nil {
			return nil, err
		}
	}
	if err := src.pinNodes(p, wanted); err != nil {
		return nil, err
	}
	return p, nil
}

// finishedDefinition is the definition execution executionID ran, once it
// has finished: a running one's nodes may still change their code.
func finishedDefinition(ctx context.Context, st *chainstore.Store, executionID string) (*novav1.WorkflowDefinition, error) {
	exec, err := st.Execution(ctx, executionID)
	if errors.Is(err, chainstore.ErrNotFound) {
		return nil, fmt.Errorf("no execution %q in the chain of work: %w", executionID, chainstore.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if exec.Status == chainstore.StatusRunning {
		return nil, &pinError{fmt.Sprintf("execution %s is still running; pin its nodes once it has finished", executionID)}
	}
	return chainstore.ExecutionDefinition(exec)
}

// lastVisits maps each node of chain to its last finished visit. A node's
// last visit decides: its code is the one proven last.
func lastVisits(chain []chainstore.NodeDoc) map[string]*chainstore.NodeDoc {
	last := map[string]*chainstore.NodeDoc{}
	for i := range chain {
		if n := &chain[i]; n.Status != chainstore.StatusRunning && (last[n.NodeID] == nil || n.Visit > last[n.NodeID].Visit) {
			last[n.NodeID] = n
		}
	}
	return last
}

// isAINode says whether n asks a model for its code.
func isAINode(n *novav1.Node) bool { return strings.TrimSpace(n.GetPrompt()) != "" }

// pinSource is the code an execution's nodes ran, by their last visits.
type pinSource struct {
	executionID string
	last        map[string]*chainstore.NodeDoc
}

// code is what the AI node id ran, or why it cannot be pinned.
func (s pinSource) code(id string) (string, string) {
	n := s.last[id]
	switch {
	case n == nil:
		return "", "did not run in execution " + s.executionID
	case n.Status != nodeSucceeded:
		why := fmt.Sprintf("did not succeed in execution %s (visit %d %s", s.executionID, n.Visit, n.Status)
		if n.ErrorMessage != "" {
			why += ": " + firstLine(n.ErrorMessage)
		}
		return "", why + ")"
	}
	c, _ := n.AIMetadata["generated_code"].(string)
	switch {
	case strings.TrimSpace(c) == "":
		return "", "has no generated code in the chain of work of " + s.executionID
	case strings.Contains(c, redact.Placeholder):
		return "", fmt.Sprintf("has secrets hidden (%s) in its code in the chain of work of %s, so the code that ran is not known; keep secrets in the context, not in the code",
			redact.Placeholder, s.executionID)
	}
	return c, ""
}

// succeededAINodes is every AI node of p's definition that can be pinned;
// those that cannot go to p.left with why, so that pinning them all still
// says what it left. None to pin is a *pinError.
func (s pinSource) succeededAINodes(p *pinned) ([]string, error) {
	var ids []string
	for _, n := range p.def.GetNodes() {
		if !isAINode(n) {
			continue
		}
		if _, why := s.code(n.GetId()); why != "" {
			p.left = append(p.left, fmt.Sprintf("%q an AI node: it %s", n.GetId(), why))
			continue
		}
		ids = append(ids, n.GetId())
	}
	if len(ids) > 0 {
		return ids, nil
	}
	if len(p.left) == 0 {
		return nil, &pinError{fmt.Sprintf("workflow %q of execution %s has no AI node to pin", p.def.GetName(), s.executionID)}
	}
	return nil, &pinError{fmt.Sprintf("no AI node of execution %s succeeded, so there is nothing to pin: %s", s.executionID, strings.Join(p.left, "; "))}
}

// pinNodes pins each node of wanted in p to the code it ran. Every node
// that cannot be pinned is named in one *pinError, so that one try shows
// all the mistakes.
func (s pinSource) pinNodes(p *pinned, wanted []string) error {
	def := p.def
	var problems []string
	seen := map[string]bool{}
	for _, id := range wanted {
		if seen[id] {
			continue
		}
		seen[id] = true
		n := nodeOf(def, id)
		switch {
		case n == nil:
			problems = append(problems, fmt.Sprintf("workflow %q has no node %q (its nodes: %s)", def.GetName(), id, strings.Join(nodeIDs(def), ", ")))
			continue
		case !isAINode(n) && strings.TrimSpace(n.GetCode()) != "":
			problems = append(problems, fmt.Sprintf("node %q is not an AI node: it runs code as written already", id))
			continue
		case !isAINode(n):
			problems = append(problems, fmt.Sprintf("node %q is not an AI node: it is a %s node", id, workflow.TypeName(n.GetType())))
			continue
		}
		c, why := s.code(id)
		if why != "" {
			problems = append(problems, fmt.Sprintf("AI node %q %s", id, why))
			continue
		}
		var err error
		if p.def, err = workflow.PinCode(p.def, id, c, ""); err != nil {
			return fmt.Errorf("pin node %q: %w", id, err)
		}
		p.nodes = append(p.nodes, id)
	}
	if len(problems) > 0 {
		return &pinError{"cannot pin: " + strings.Join(problems, "; ")}
	}
	return nil
}

func nodeOf(def *novav1.WorkflowDefinition, id string) *novav1.Node {
	for _, n := range def.GetNodes() {
		if n.GetId() == id {
			return n
		}
	}
	return nil
}

// pinnedYAML is the definition file of p, under a comment that says where
// it comes from. It is read back before it is returned: what nova pin
// writes, nova validate and nova run accept as this definition.
func pinnedYAML(p *pinned, executionID string) ([]byte, error) {
	body, err := workflow.FormatYAML(p.def)
	if err != nil {
		return nil, err
	}
	back, err := workflow.Parse(body)
	if err == nil {
		err = workflow.Validate(back, workflow.ValidateOptions{AllowPrompt: true})
	}
	if err == nil && !proto.Equal(back, p.def) {
		err = errors.New("it reads back as another definition")
	}
	if err != nil {
		return nil, fmt.Errorf("the pinned definition of workflow %q cannot be written as YAML: %w", p.def.GetName(), err)
	}
	head := fmt.Sprintf("# Workflow %q, pinned by nova pin from execution %s.\n"+
		"# Pinned AI nodes (they run the code they generated there and call no model;\n"+
		"# each keeps its prompt in its description and atop its code):\n#   %s\n",
		p.def.GetName(), executionID, strings.Join(p.nodes, ", "))
	return append([]byte(head), body...), nil
}
