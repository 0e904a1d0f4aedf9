package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/services/nova/client"
)

// progressPrinter writes a line per node as it starts and ends, and for AI
// nodes a line per agent step, as `nova run` on a terminal and `nova watch`
// show an execution.
type progressPrinter struct {
	w io.Writer

	mu    sync.Mutex
	width int
	ai    map[string]bool
	// ended is closed when the completion has been seen, so the caller
	// prints its summary after every node's line.
	ended chan struct{}
}

func newProgressPrinter(w io.Writer, nodeIDs []string) *progressPrinter {
	p := &progressPrinter{w: w, width: 8, ai: map[string]bool{}, ended: make(chan struct{})}
	for _, id := range nodeIDs {
		p.width = max(p.width, len(id))
	}
	return p
}

// print shows one fact; the workflow's completion is left to the caller.
func (p *progressPrinter) print(ev client.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case ev.Completed != nil:
		select {
		case <-p.ended:
		default:
			close(p.ended)
		}
	case ev.NodeStarted != nil:
		n := ev.NodeStarted
		kind := n.GetNodeType()
		if n.GetAi() {
			kind += ", AI"
			p.ai[n.GetNodeId()] = true
		}
		visit := ""
		if n.GetVisit() > 1 {
			visit = fmt.Sprintf(" (visit %d)", n.GetVisit())
		}
		fmt.Fprintf(p.w, "  ▶ %-*s started  %s%s%s\n", p.width, nodeLabel(n.GetNodeId(), n.Item), kind, visit, branchNote(n.GetBranch(), n.Item))
	case ev.StepCompleted != nil:
		s := ev.StepCompleted
		if !p.ai[s.GetNodeId()] && s.GetAttemptNumber() <= 1 {
			return // a code node's one run is its node line
		}
		attempt := fmt.Sprintf("attempt %d", s.GetAttemptNumber())
		if s.GetAttemptNumber() == 0 {
			attempt = "before   " // input analysis precedes the attempts
		}
		status := s.GetStatus()
		out := s.GetOutputData().GetFields()
		if v, ok := out["valid"]; ok && status == "success" && !v.GetBoolValue() {
			status = "rejected" // the agent worked and found the code or output wanting
		}
		line := fmt.Sprintf("      %s  %-17s %-8s %7.1f ms", attempt, s.GetStepName(), status, s.GetExecutionTimeMs())
		if m := s.GetModelUsed(); m != "" {
			if v := out["scripted"]; v != nil && v.GetBoolValue() {
				m += " (SCRIPTED, not a real model)"
			}
			line += fmt.Sprintf("  %s, %d tokens", m, s.GetTokensInput()+s.GetTokensOutput())
		}
		if e := s.GetErrorMessage(); e != "" {
			line += "  " + firstLine(e)
		}
		fmt.Fprintln(p.w, line)
	case ev.Waiting != nil && ev.Waiting.GetKind() == "lock":
		w := ev.Waiting
		fmt.Fprintf(p.w, "  … %-*s %s\n", p.width, w.GetNodeId(), w.GetDescription())
	case ev.Kept != nil:
		k := ev.Kept
		fmt.Fprintf(p.w, "  ⧗ signal %q kept: no wait node waits for it yet (%d kept)\n", k.GetSignal(), k.GetKept())
	case ev.NodeCompleted != nil:
		n := ev.NodeCompleted
		mark, status := "✓", execution.StatusSucceeded
		switch n.GetStatus() {
		case execution.NodeSuccess:
		case execution.NodeCancelled:
			mark, status = "–", execution.StatusCancelled // why is its error
		default:
			mark, status = "✗", execution.StatusFailed
		}
		line := fmt.Sprintf("  %s %-*s %-8s %.1f ms", mark, p.width, nodeLabel(n.GetNodeId(), n.Item), status, n.GetExecutionTimeMs())
		if a := n.GetAiMetadata().GetFields()["attempts"]; a != nil && a.GetNumberValue() > 1 {
			line += fmt.Sprintf(", %d attempts", int(a.GetNumberValue()))
		}
		if d := n.GetDecisionResult(); d != "" {
			line += "  decision " + d
		}
		if e := n.GetErrorMessage(); e != "" {
			line += "  " + firstLine(e)
		}
		line += branchNote(n.GetBranch(), n.Item)
		fmt.Fprintln(p.w, line)
	}
}

// nodeLabel names a node visit: a map's item by its position, "orders[3]".
func nodeLabel(node string, item *int32) string {
	if item == nil {
		return node
	}
	return fmt.Sprintf("%s[%d]", node, *item)
}

// branchNote says which branch a visit ran in, when the execution ran
// several at once ("" for a map's item, which its label names).
func branchNote(branch string, item *int32) string {
	if branch == "" || item != nil {
		return ""
	}
	return "  branch " + branch
}

// wait returns when the completion has been shown, or after at most d.
func (p *progressPrinter) wait(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.ended:
	case <-t.C:
	}
}

// isTerminal tells whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
