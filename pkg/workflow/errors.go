package workflow

import (
	"errors"
	"fmt"
	"strings"
)

// ErrMalformed marks input that is not YAML or JSON at all, or whose top level
// is not a mapping; field-level mistakes are reported as a *ValidationError.
var ErrMalformed = errors.New("malformed workflow definition")

// ErrUnknownNode is returned by Graph methods for an id the workflow does not have.
var ErrUnknownNode = errors.New("unknown node")

// Problem is one thing wrong with a workflow definition.
type Problem struct {
	// NodeID is the node the problem belongs to, empty for workflow-level and
	// edge problems where no single node is at fault.
	NodeID string
	// Field names the offending field, relative to the node when NodeID is set
	// ("code"), otherwise a path into the document ("edges[2].to").
	Field   string
	Message string
}

func (p Problem) String() string {
	switch {
	case p.NodeID != "" && p.Field != "":
		return fmt.Sprintf("node %q, field %q: %s", p.NodeID, p.Field, p.Message)
	case p.NodeID != "":
		return fmt.Sprintf("node %q: %s", p.NodeID, p.Message)
	case p.Field != "":
		return fmt.Sprintf("%s: %s", p.Field, p.Message)
	default:
		return p.Message
	}
}

// ValidationError lists every problem found in a definition, so a user can fix
// them all in one pass instead of one per run.
type ValidationError struct {
	Workflow string
	Problems []Problem
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	if e.Workflow != "" {
		fmt.Fprintf(&b, "workflow %q", e.Workflow)
	} else {
		b.WriteString("workflow definition")
	}
	noun := "problems"
	if len(e.Problems) == 1 {
		noun = "problem"
	}
	fmt.Fprintf(&b, " has %d %s:", len(e.Problems), noun)
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p.String())
	}
	return b.String()
}

// NoMatchingEdgeError means a decision node produced a branch_decision, or a
// wait node's signal carried a decide_on value, that no outgoing edge's
// condition accepts.
type NoMatchingEdgeError struct {
	NodeID string
	Value  string
	// Allowed holds the conditions of the node's outgoing edges, sorted (a
	// wait node's timeout edge left out).
	Allowed []string
	// DecideOn is the payload field a wait node decides on; empty for a
	// decision node.
	DecideOn string
}

func (e *NoMatchingEdgeError) Error() string {
	quoted := make([]string, len(e.Allowed))
	for i, a := range e.Allowed {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	allowed := strings.Join(quoted, ", ")
	if e.DecideOn != "" {
		if e.Value == "" {
			return fmt.Sprintf("wait node %q: the payload has no value for %q (allowed: %s)", e.NodeID, e.DecideOn, allowed)
		}
		return fmt.Sprintf("wait node %q: %s %q matches no outgoing edge (allowed: %s)", e.NodeID, e.DecideOn, e.Value, allowed)
	}
	if e.Value == "" {
		return fmt.Sprintf("decision node %q: branch_decision is empty or not set (allowed: %s)", e.NodeID, allowed)
	}
	return fmt.Sprintf("decision node %q: branch_decision %q matches no outgoing edge (allowed: %s)", e.NodeID, e.Value, allowed)
}
