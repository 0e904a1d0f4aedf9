package flow

import (
	"cmp"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus/busname"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/redact"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// codeKind: action and decision nodes. Each visit runs the node's code in
// the sandbox (or, with a prompt, the AI pipeline, ai.go), takes its
// result (CodeExecuted), and goes on: along every plain edge, or, for a
// decision, the edge its branch_decision names. A retry policy's next
// attempt waits for a timer.
type codeKind struct{ noCancel }

func (codeKind) enter(t *Transition, node *novav1.Node) {
	if node.Type == novav1.NodeType_NODE_TYPE_DECISION {
		// A decision is made by this node's code only, never by a
		// branch_decision left over from an earlier node.
		if _, ok := t.ctx[branchDecision]; ok {
			delete(t.ctx, branchDecision)
			t.SetContext()
		}
	}
	ns, ok := t.beginVisit(node)
	if !ok {
		return
	}
	t.nodeStarted(node, ns)
	if node.Prompt != "" {
		t.startAI(node)
		return
	}
	ns.Attempts = 1
	t.dispatch(node, ns)
}

func (codeKind) timer(t *Transition, node *novav1.Node, ns *novav1.NodeState, tm *novav1.Timer) {
	if tm.Kind == timerRetry {
		t.retryNow(node, ns)
		return
	}
	noTimer{}.timer(t, node, ns, tm)
}

// dispatch runs a code node's code in the sandbox.
func (t *Transition) dispatch(node *novav1.Node, ns *novav1.NodeState) {
	step := fmt.Sprintf("%s/%d", t.visitKey(node.Id, ns.Visits), ns.Attempts)
	t.execute(node, step, ns.Visits, ns.Attempts, ns.Attempts, node.Code, "TASK", t.ln.Context)
}

// execute issues an ExecuteCode command for the pending step.
// execute sends code to the sandbox as step stepNumber of the node's
// attempt (a code node has one step per attempt).
func (t *Transition) execute(node *novav1.Node, step string, visit, attempt, stepNumber int32, code, stage string, context *novav1.JSONValue) {
	timeout := workflow.NodeTimeout(t.st.Definition, node, t.cfg.DefaultNodeTimeout)
	if stage == stageAnalysis {
		timeout = min(timeout, t.cfg.AnalysisTimeout)
	}
	t.command(node, step, busname.AgentSandbox, busname.TypeSandboxExecute, func(seq int32) proto.Message {
		return &novav1.ExecuteCode{
			ExecutionId:    t.st.ExecutionId,
			NodeId:         node.Id,
			StepId:         step,
			Visit:          visit,
			Attempt:        attempt,
			StepNumber:     stepNumber,
			Language:       languageOf(node),
			Code:           code,
			Context:        context,
			TimeoutSeconds: timeout.Seconds(),
			Network:        node.Network || t.st.Definition.Network,
			AllowHosts:     append(slices.Clone(t.st.Definition.AllowHosts), node.AllowHosts...),
			Stage:          stage,
			Sequence:       seq,
		}
	})
}

// CodeExecuted applies the sandbox's result for the pending step.
func (t *Transition) CodeExecuted(r *novav1.CodeExecuted) error {
	if err := t.CheckPending(r.StepId, r.Sequence); err != nil {
		return err
	}
	t.scrubSecrets(r)
	if t.st.Refine != nil {
		return t.refineExecuted(r)
	}
	if t.ln.Ai != nil {
		return t.aiExecuted(r)
	}
	node := t.graph.Node(t.ln.CurrentNode)
	ns := t.nodeState(node.Id)
	t.stepCompleted(node, r)

	if r.Status != nodeSuccess {
		if t.retryLater(node, ns, r) {
			return nil
		}
		if r.ErrorKind == errorKindSandboxFault && int(ns.Attempts) < t.cfg.SandboxAttempts {
			ns.Attempts++
			t.dispatch(node, ns)
			return nil
		}
		msg := r.Error
		if msg == "" {
			msg = "the code failed without a message"
		}
		t.nodeFailed(node, ns, msg, r)
		return nil
	}

	t.merge(r)
	t.route(node, ns, r)
	return nil
}

// scrubSecrets hides, in what the code raised, printed or logged, the values
// of the node input's secret keys and every secret recognised by its look
// (redact.Scrub): a traceback may quote a password, and this text goes on to
// the chain of work, the traces and the model's next prompt.
func (t *Transition) scrubSecrets(r *novav1.CodeExecuted) {
	if r.Error == "" && r.Traceback == "" && r.Stdout == "" && r.Stderr == "" && len(r.Logs) == 0 {
		return
	}
	var secrets []string
	if input, err := jsonvalue.MustObject(t.ln.NodeInput).Decoded(); err == nil {
		secrets = redact.SecretValues(input)
	}
	for _, s := range []*string{&r.Error, &r.Traceback, &r.Stdout, &r.Stderr} {
		*s = redact.Scrub(*s, secrets)
	}
	for i, l := range r.Logs {
		r.Logs[i] = redact.Scrub(l, secrets)
	}
}

// merge applies a run's updates to the context: merged, never replaced.
func (t *Transition) merge(r *novav1.CodeExecuted) {
	t.ctx.Merge(jsonvalue.MustObject(r.GetContextUpdates()))
	for _, k := range r.DeletedKeys {
		delete(t.ctx, k)
	}
	t.SetContext()
}

// stepCompleted records the sandbox run as a chain-of-work step.
func (t *Transition) stepCompleted(node *novav1.Node, r *novav1.CodeExecuted) {
	output := map[string]any{
		"status":       r.Status,
		"updated_keys": stringsToAny(jsonvalue.MustObject(r.GetContextUpdates()).Keys()),
		"deleted_keys": stringsToAny(r.DeletedKeys),
	}
	if r.ErrorKind != "" {
		output["error_kind"] = r.ErrorKind
	}
	if r.Traceback != "" {
		output["traceback"] = r.Traceback
	}
	if r.Stdout != "" {
		output["stdout"] = r.Stdout
	}
	if r.Stderr != "" {
		output["stderr"] = r.Stderr
	}
	out, _ := newStruct(output)
	in, _ := newStruct(map[string]any{"language": languageOf(node), "context_keys": stringsToAny(jsonvalue.MustObject(t.ln.NodeInput).Keys())})
	t.emit(busname.KindStepCompleted, r.StepId+"/step", busname.TypeStepCompleted, &novav1.StepCompleted{
		ExecutionId:     t.st.ExecutionId,
		NodeId:          node.Id,
		Visit:           r.Visit,
		StepNumber:      cmp.Or(r.StepNumber, r.Attempt), // commands issued before step_number had none
		StepName:        "code_execution",
		AgentName:       "sandbox",
		AttemptNumber:   r.Attempt,
		InputData:       in,
		OutputData:      out,
		GeneratedCode:   node.Code,
		SandboxId:       r.SandboxId,
		Status:          map[bool]string{true: nodeSuccess, false: nodeFailed}[r.Status == nodeSuccess],
		ErrorMessage:    r.Error,
		ExecutionTimeMs: r.DurationMs,
		Timestamp:       tsNow(t.now),
		StepId:          r.StepId,
		Item:            t.itemIndex(),
	})
}

// retryLater records a failed run of a code node as a failed attempt and
// sets the timer of the next one, when the node's retry policy tries this
// failure again; it reports whether it did.
func (t *Transition) retryLater(node *novav1.Node, ns *novav1.NodeState, r *novav1.CodeExecuted) bool {
	p := workflow.RetryPolicyOf(t.st.Definition, node)
	attempt := max(ns.RetryAttempt, 1)
	if p == nil || !workflow.Retries(p, r.ErrorKind, attempt) {
		return false
	}
	due := t.now.Add(workflow.RetryBackoff(p, attempt))
	msg := cmp.Or(r.Error, "the code failed without a message")
	t.ReleaseHold()
	ns.Status, ns.Error = "retrying", msg
	nc := t.nodeCompleted(node, ns.Visits, nodeFailed, msg, "", "", r)
	nc.NextAttemptAt = tsNow(due)
	t.ln.PendingStepId, t.ln.Ai = "", nil
	t.setTimer(timerRetry, node, ns, due)
	t.waiting(&novav1.NodeWaiting{ExecutionId: t.st.ExecutionId, NodeId: node.Id, Visit: ns.Visits, Kind: waitingRetry,
		Attempt: attempt + 1, Until: tsNow(due), Sequence: t.st.Sequence})
	return true
}

// retryNow runs a node's next attempt as a new visit (one that does not
// count against max_visits).
func (t *Transition) retryNow(node *novav1.Node, ns *novav1.NodeState) {
	ns.Visits++
	ns.Retried++
	ns.RetryAttempt = max(ns.RetryAttempt, 1) + 1
	ns.Attempts = 1
	ns.Status, ns.Error = "", ""
	t.st.Sequence++
	t.ln.NodeStartedAt = tsNow(t.now)
	t.ln.NodeInput = t.ln.Context
	t.ln.Visit = ns.Visits
	t.nodeStarted(node, ns)
	if node.Prompt != "" {
		t.startAI(node)
		return
	}
	t.dispatch(node, ns)
}

// AIInfraFailed fails an AI node whose pipeline met an infrastructure
// fault (a command no agent could handle, a program the sandbox could not
// run), or, when the node's retry policy retries sandbox faults, runs the
// whole node again later. Its generation loop is its own: failed code
// goes back to generation, not here.
func (t *Transition) AIInfraFailed(node *novav1.Node, msg string, r *novav1.CodeExecuted) {
	fault := r
	if fault == nil {
		fault = &novav1.CodeExecuted{Status: "error", Error: msg}
	}
	fault = proto.Clone(fault).(*novav1.CodeExecuted)
	fault.ErrorKind, fault.Error = workflow.RetryOnSandboxFault, msg
	if t.retryLater(node, t.nodeState(node.Id), fault) {
		return
	}
	t.nodeFailed(node, t.nodeState(node.Id), msg, r)
}
