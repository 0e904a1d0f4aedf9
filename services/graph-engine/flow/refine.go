package flow

import (
	"cmp"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/novaflow/nova/pkg/bus/busname"
	"github.com/novaflow/nova/pkg/execution/execstate"
	"github.com/novaflow/nova/pkg/feedback"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// A refinement improves code from people's feedback on the fields of its
// output (StartRefinement). Like an AI node's pipeline, it runs here, driven
// by the agents' results, with its state in the executions bucket, so it
// survives the loss of any process:
//
//	attempt n: generate (code generator, stage REFINE, with every earlier
//	attempt) -> run (sandbox, the test context) -> check each feedback item
//	against the output
//
// until every item is resolved or max_attempts ran; then the best attempt
// (most fields resolved, then code that ran, then the later one) is the
// result. Each step is recorded in the chain of work as an AI node's is, and
// each turn of the loop is told as a RefinementProgress message.

const (
	refinePhaseGenerate = "generate"
	refinePhaseExecute  = "execute"
	// stageRefine is the code generator's refinement stage.
	stageRefine = "REFINE"
	// scriptedNote labels what the scripted model server wrote.
	scriptedNote = "[SCRIPTED model: offline rules, not a real model]"
)

// refineNode is the one node of a refinement's chain of work.
var refineNode = &novav1.Node{Id: execstate.RefineNode, Type: novav1.NodeType_NODE_TYPE_ACTION}

// RefineStart records the execution's and its node's start and says what
// the refinement will do.
func (t *Transition) RefineStart() {
	st, req := t.st, t.st.Refine.Request
	if t.ln == nil {
		t.StartLine()
	}
	st.Sequence = 1
	st.Path = []string{refineNode.Id}
	t.ln.NodeStartedAt = tsNow(t.now)
	t.ln.NodeInput = st.Context
	ns := t.nodeState(refineNode.Id)
	ns.Visits = 1
	t.emit(busname.KindWorkflowStarted, st.ExecutionId+"/started", busname.TypeWorkflowStarted, &novav1.WorkflowStarted{
		ExecutionId: st.ExecutionId, WorkflowName: execstate.RefineWorkflow, Context: st.Context, StartedAt: st.StartedAt,
	})
	t.emit(busname.KindNodeStarted, fmt.Sprintf("%s/%s/1/started", st.ExecutionId, refineNode.Id), busname.TypeNodeStarted, &novav1.NodeStarted{
		ExecutionId: st.ExecutionId, NodeId: refineNode.Id, NodeType: "action", Visit: 1, Ai: true, Sequence: 1, StartedAt: t.ln.NodeStartedAt,
	})
	rf := req.GetRefinement()
	t.refineMessage(&novav1.RefinementProgress{Type: "info", MaxAttempts: req.MaxAttempts, Message: fmt.Sprintf(
		"Refinement %s of %s code (%s): feedback on %d field(s), at most %d attempts; its chain of work is GET /v1/executions/%s",
		st.ExecutionId, rf.GetAgentType(), req.GetLanguage(), len(rf.GetFeedback()), req.MaxAttempts, st.ExecutionId)})
}

// refineMessage publishes the next message of the refinement's stream.
func (t *Transition) refineMessage(m *novav1.RefinementProgress) {
	rr := t.st.Refine
	rr.Messages++
	m.ExecutionId, m.Sequence = t.st.ExecutionId, rr.Messages
	t.emit(busname.KindRefinement, fmt.Sprintf("%s/refinement/%d", t.st.ExecutionId, m.Sequence), busname.TypeRefinementProgress, m)
}

// RefineAttempt begins attempt n: its code is generated first.
func (t *Transition) RefineAttempt(n int32) {
	rr := t.st.Refine
	rr.Attempt, rr.Code, rr.ModelCalls = n, "", nil
	t.nodeState(refineNode.Id).Attempts = n
	t.refineMessage(&novav1.RefinementProgress{Type: "info", Attempt: n, MaxAttempts: rr.Request.MaxAttempts,
		Message: fmt.Sprintf("Refinement attempt %d/%d", n, rr.Request.MaxAttempts)})
	t.refineGenerate()
}

// refineStepID is the id of the refinement's next agent step.
func (t *Transition) refineStepID() (string, int32) {
	rr := t.st.Refine
	rr.StepNumber++
	return fmt.Sprintf("%s/%s/1/%d", t.st.ExecutionId, refineNode.Id, rr.StepNumber), rr.StepNumber
}

// refineGenerate asks the code generator for the attempt's code, with every
// earlier attempt.
func (t *Transition) refineGenerate() {
	rr := t.st.Refine
	req := rr.Request
	rr.Phase = refinePhaseGenerate
	step, number := t.refineStepID()
	rf := proto.Clone(req.GetRefinement()).(*novav1.Refinement)
	rf.TestContext = t.st.Context
	for _, a := range rr.Attempts {
		rf.Attempts = append(rf.Attempts, a.Outcome)
	}
	t.command(refineNode, step, busname.AgentCodeGenerator, busname.TypeCodeGenerate, func(seq int32) proto.Message {
		return &novav1.GenerateCode{
			Ref: &novav1.StepRef{ExecutionId: t.st.ExecutionId, NodeId: refineNode.Id, StepId: step, Visit: 1, Attempt: rr.Attempt,
				Sequence: seq, StepNumber: number},
			Spec: &novav1.TaskSpec{Task: "Refine " + rf.GetAgentType() + " code from field feedback", NodeType: "action",
				Model: req.GetModel(), Language: req.GetLanguage()},
			Stage:      stageRefine,
			Refinement: rf,
		}
	})
}

// refineGenerated applies the code generator's answer: the code is run, or
// the attempt failed.
func (t *Transition) refineGenerated(r *novav1.CodeGenerated) error {
	if err := t.CheckPending(r.GetRef().GetStepId(), r.GetRef().GetSequence()); err != nil {
		return err
	}
	rr := t.st.Refine
	if rr.Phase != refinePhaseGenerate {
		return ErrStale
	}
	outcome := r.GetOutcome()
	rr.ModelCalls = outcome.GetModelCalls()
	t.account(refineNode, r.GetRef(), rr.ModelCalls)
	t.refineGenerationStep(r)
	if outcome.GetStatus() == "error" || strings.TrimSpace(r.GetCode()) == "" {
		t.refineAttemptDone(&novav1.RefineAttemptRun{ModelCalls: rr.ModelCalls, Outcome: &novav1.RefineAttempt{
			Attempt: rr.Attempt, Code: r.GetCode(), Resolved: []string{}, Remaining: t.refineFields(),
			Error: "code generation failed: " + cmp.Or(outcome.GetError(), "the model returned no code")}})
		return nil
	}
	rr.Code = r.GetCode()
	model, scripted := modelOf(rr.ModelCalls)
	written := "Testing improved code..."
	if model != "" {
		written += " (written by " + model
		if scripted {
			written += " " + scriptedNote
		}
		written += ")"
	}
	t.refineMessage(&novav1.RefinementProgress{Type: "info", Attempt: rr.Attempt, Message: written, Model: model, Scripted: &scripted})
	t.refineExecute()
	return nil
}

// refineGenerationStep records a generation in the chain of work.
func (t *Transition) refineGenerationStep(r *novav1.CodeGenerated) {
	rr := t.st.Refine
	outcome, ref := r.GetOutcome(), r.GetRef()
	calls := outcome.GetModelCalls()
	output := map[string]any{"stage": cmp.Or(r.GetStage(), stageRefine), "prompt_bytes": float64(r.GetPromptBytes()),
		"code_bytes": float64(len(r.GetCode()))}
	step := &novav1.StepCompleted{
		ExecutionId: t.st.ExecutionId, NodeId: refineNode.Id, Visit: 1, StepNumber: ref.GetStepNumber(), StepName: "code_refinement",
		AgentName: busname.AgentCodeGenerator, AttemptNumber: rr.Attempt, GeneratedCode: r.GetCode(),
		Status: cmp.Or(outcome.GetStatus(), nodeSuccess), ErrorMessage: outcome.GetError(), ExecutionTimeMs: outcome.GetDurationMs(),
		Timestamp: tsNow(t.now), StepId: ref.GetStepId(),
	}
	var cached int64
	for _, c := range calls {
		step.ModelUsed = c.GetModel()
		step.TokensInput += c.GetPromptTokens()
		step.TokensOutput += c.GetCompletionTokens()
		step.CostUsd += c.GetCostUsd()
		cached += c.GetCachedTokens()
	}
	if len(calls) > 0 {
		_, scripted := modelOf(calls)
		output["model_calls"], output["cached_tokens"], output["scripted"] = float64(len(calls)), float64(cached), scripted
	}
	req := rr.Request
	step.InputData, _ = structpb.NewStruct(map[string]any{"stage": stageRefine, "agent_type": req.GetRefinement().GetAgentType(),
		"language": req.GetLanguage(), "feedback_fields": stringsToAny(t.refineFields()), "history_attempts": float64(len(rr.Attempts))})
	step.OutputData, _ = structpb.NewStruct(output)
	if tools := r.GetToolCalls(); len(tools) > 0 {
		list := &structpb.ListValue{}
		for _, tc := range tools {
			v, _ := structpb.NewValue(map[string]any{"name": tc.GetName(), "arguments": tc.GetArguments(), "result": tc.GetResult()})
			list.Values = append(list.Values, v)
		}
		step.ToolCalls = list
	}
	t.emit(busname.KindStepCompleted, ref.GetStepId()+"/step", busname.TypeStepCompleted, step)
}

// refineExecute runs the attempt's code in the sandbox with the test context.
func (t *Transition) refineExecute() {
	rr := t.st.Refine
	req := rr.Request
	rr.Phase = refinePhaseExecute
	step, number := t.refineStepID()
	t.command(refineNode, step, busname.AgentSandbox, busname.TypeSandboxExecute, func(seq int32) proto.Message {
		return &novav1.ExecuteCode{
			ExecutionId: t.st.ExecutionId, NodeId: refineNode.Id, StepId: step, Visit: 1, Attempt: rr.Attempt, StepNumber: number,
			Language: req.GetLanguage(), Code: rr.Code, Context: t.st.Context, TimeoutSeconds: req.GetTimeoutSeconds(),
			Network: req.GetNetwork(), AllowHosts: req.GetAllowHosts(), Stage: stageTask, Sequence: seq,
		}
	})
}

// refineExecuted applies the sandbox's run of the attempt's code: its output
// is checked against every feedback item.
func (t *Transition) refineExecuted(r *novav1.CodeExecuted) error {
	rr := t.st.Refine
	if rr.Phase != refinePhaseExecute {
		return ErrStale
	}
	a := &novav1.RefineAttemptRun{ModelCalls: rr.ModelCalls, Outcome: &novav1.RefineAttempt{
		Attempt: rr.Attempt, Code: rr.Code, Resolved: []string{}, Remaining: t.refineFields()}}
	var fatal string
	switch {
	case r.GetErrorKind() == errorKindRuntimeUnavailable:
		fatal = "the sandbox cannot run " + rr.Request.GetLanguage() + ": " + r.GetError()
	case r.GetErrorKind() == ErrorKindDeadLetter:
		fatal = r.GetError()
	case r.GetStatus() != nodeSuccess:
		a.Outcome.Error = "the code failed when run: " + r.GetError()
		if r.GetTraceback() != "" {
			a.Outcome.Error += "\n" + tail(r.GetTraceback(), 3000)
		}
	default:
		a.Outcome.OutputAnalysis = r.GetOutputAnalysis()
		output, err := t.refineOutput(r)
		if err != nil {
			a.Outcome.Error = "the output cannot be read: " + err.Error()
			break
		}
		fb := feedback.FromProto(rr.Request.GetRefinement().GetFeedback())
		a.Ran, a.Execution = true, r
		a.Outcome.Resolved, a.Outcome.Remaining = feedback.Check(fb, output, feedback.Originals(rr.Request.GetRefinement().GetOutputAnalysis().AsMap()))
	}
	t.refineExecutionStep(r, a)
	if fatal != "" {
		a.Outcome.Error = fatal
		rr.Attempts = append(rr.Attempts, a)
		t.RefineFail(fatal)
		return nil
	}
	t.refineAttemptDone(a)
	return nil
}

// refineOutput is the value the output analysis describes: the value
// JavaScript code gave, or for Python the only key it set (the updates when
// it set several); large values are read back from the value store.
func (t *Transition) refineOutput(r *novav1.CodeExecuted) (any, error) {
	raw := r.GetResult().GetRaw()
	if r.GetResult() == nil {
		updates := jsonvalue.MustObject(r.GetContextUpdates())
		if t.Expand != nil {
			if err := t.Expand(updates); err != nil {
				return nil, err
			}
		}
		raw = updates.Bytes()
	} else if t.ReadValue != nil {
		var err error
		if raw, err = t.ReadValue(raw); err != nil {
			return nil, err
		}
	}
	v, err := jsonvalue.Decode(raw)
	if err != nil {
		return nil, err
	}
	if r.GetItems() == nil { // Python: the updates
		if m, ok := v.(map[string]any); ok && len(m) == 1 {
			for _, only := range m {
				return only, nil
			}
		}
	}
	return v, nil
}

// refineExecutionStep records a run of an attempt's code in the chain of work.
func (t *Transition) refineExecutionStep(r *novav1.CodeExecuted, a *novav1.RefineAttemptRun) {
	output := map[string]any{"status": r.GetStatus(), "updated_keys": stringsToAny(jsonvalue.MustObject(r.GetContextUpdates()).Keys()),
		"sandbox_id": r.GetSandboxId()}
	for k, v := range map[string]string{"error_kind": r.GetErrorKind(), "traceback": r.GetTraceback(), "stdout": r.GetStdout(),
		"stderr": r.GetStderr(), "limit": r.GetLimit()} {
		if v != "" {
			output[k] = v
		}
	}
	if a.Ran {
		output["resolved"], output["remaining"] = stringsToAny(a.Outcome.Resolved), stringsToAny(a.Outcome.Remaining)
	}
	status := nodeSuccess
	if r.GetStatus() != nodeSuccess {
		status = nodeFailed
	}
	step := &novav1.StepCompleted{
		ExecutionId: t.st.ExecutionId, NodeId: refineNode.Id, Visit: 1, StepNumber: r.GetStepNumber(), StepName: "code_execution",
		AgentName: busname.AgentSandbox, AttemptNumber: a.Outcome.Attempt, GeneratedCode: a.Outcome.Code, SandboxId: r.GetSandboxId(),
		Status: status, ErrorMessage: r.GetError(), ExecutionTimeMs: r.GetDurationMs(), Timestamp: tsNow(t.now), StepId: r.GetStepId(),
	}
	step.InputData, _ = structpb.NewStruct(map[string]any{"language": t.st.Refine.Request.GetLanguage(),
		"context_keys": stringsToAny(t.ctx.Keys())})
	step.OutputData, _ = structpb.NewStruct(output)
	t.emit(busname.KindStepCompleted, r.GetStepId()+"/step", busname.TypeStepCompleted, step)
}

// refineAttemptDone keeps an attempt's outcome and decides what follows:
// the result when every field is resolved, else the next attempt, else the
// best attempt.
func (t *Transition) refineAttemptDone(a *novav1.RefineAttemptRun) {
	rr := t.st.Refine
	rr.Attempts = append(rr.Attempts, a)
	rr.Phase = ""
	o := a.Outcome
	if a.Ran && len(o.Remaining) == 0 {
		t.refineComplete(a, false)
		return
	}
	msg := fmt.Sprintf("Fixed %d fields, %d remaining", len(o.Resolved), len(o.Remaining))
	if o.Error != "" {
		msg = fmt.Sprintf("Attempt %d failed; %d fields remaining", o.Attempt, len(o.Remaining))
	}
	model, scripted := modelOf(a.ModelCalls)
	t.refineMessage(&novav1.RefinementProgress{Type: "progress", Message: msg, Attempt: o.Attempt, Resolved: o.Resolved,
		Remaining: o.Remaining, Error: o.Error, Code: o.Code, Analysis: o.OutputAnalysis, Model: model, Scripted: &scripted})
	if rr.Attempt < rr.Request.MaxAttempts {
		t.RefineAttempt(rr.Attempt + 1)
		return
	}
	var best *novav1.RefineAttemptRun
	for _, a := range rr.Attempts {
		if betterAttempt(a, best) {
			best = a
		}
	}
	if strings.TrimSpace(best.Outcome.Code) == "" {
		t.RefineFail("no attempt produced code; the last failed with: " + best.Outcome.Error)
		return
	}
	t.refineComplete(best, true)
}

// betterAttempt reports whether a is a better result than b: more fields
// resolved, then code that ran, then the later attempt.
func betterAttempt(a, b *novav1.RefineAttemptRun) bool {
	if b == nil {
		return true
	}
	if len(a.Outcome.Resolved) != len(b.Outcome.Resolved) {
		return len(a.Outcome.Resolved) > len(b.Outcome.Resolved)
	}
	if a.Ran != b.Ran {
		return a.Ran
	}
	return a.Outcome.Attempt > b.Outcome.Attempt
}

// refineComplete ends the refinement with attempt a's code.
func (t *Transition) refineComplete(a *novav1.RefineAttemptRun, partial bool) {
	rr := t.st.Refine
	o := a.Outcome
	u := refineUsage(rr.Attempts)
	msg := fmt.Sprintf("All %d fields resolved in attempt %d", len(o.Resolved), o.Attempt)
	if partial {
		msg = fmt.Sprintf("%d of %d fields resolved after %d attempts; the best attempt was %d", len(o.Resolved),
			len(t.refineFields()), len(rr.Attempts), o.Attempt)
	}
	if u.scripted {
		msg += " " + scriptedNote
	}
	analysis := o.OutputAnalysis
	if analysis == nil {
		analysis = &structpb.Struct{}
	}
	t.refineMessage(&novav1.RefinementProgress{Type: "complete", Message: msg, Attempt: o.Attempt, Attempts: int32(len(rr.Attempts)),
		Code: o.Code, Language: rr.Request.GetLanguage(), Analysis: analysis, Resolved: o.Resolved, Remaining: o.Remaining,
		PartialSuccess: partial, Model: u.model, Scripted: &u.scripted, PromptTokens: u.prompt, CompletionTokens: u.completion,
		CostUsd: u.cost, Execution: a.Execution})
	errMsg := ""
	if len(o.Remaining) > 0 {
		errMsg = fmt.Sprintf("feedback on %s is unresolved after %d attempts", strings.Join(o.Remaining, ", "), len(rr.Attempts))
	}
	t.refineFinish(a, errMsg, map[string]any{"partial_success": partial})
}

// RefineFail ends the refinement with an error message.
func (t *Transition) RefineFail(msg string) {
	rr := t.st.Refine
	t.refineMessage(&novav1.RefinementProgress{Type: "error", Error: msg})
	var last *novav1.RefineAttemptRun
	if n := len(rr.Attempts); n > 0 {
		last = rr.Attempts[n-1]
	}
	t.refineFinish(last, msg, map[string]any{})
}

// refineFinish records the refinement's node visit and ends the execution:
// succeeded when errMsg is empty.
func (t *Transition) refineFinish(a *novav1.RefineAttemptRun, errMsg string, meta map[string]any) {
	st, rr := t.st, t.st.Refine
	req, rf := rr.Request, rr.Request.GetRefinement()
	nodeStatus, status := nodeSuccess, statusSucceeded
	switch {
	case st.CancelledBy != "":
		nodeStatus, status = nodeCancelled, statusCancelled
	case errMsg != "":
		nodeStatus, status = nodeFailed, statusFailed
	}
	input := st.Context
	nc := &novav1.NodeCompleted{
		ExecutionId: st.ExecutionId, NodeId: refineNode.Id, NodeType: "action", Visit: 1, Status: nodeStatus, InputContext: input,
		OutputResult: input, ErrorMessage: errMsg, Sequence: 1, StartedAt: t.ln.NodeStartedAt, CompletedAt: tsNow(t.now),
		ExecutionTimeMs: float64(t.now.Sub(t.ln.NodeStartedAt.AsTime()).Microseconds()) / 1000,
	}
	// Named as an AI node's ai_metadata, so that readers of the chain of
	// work show a refinement as they show an AI node.
	fields := t.refineFields()
	meta["prompt_task"] = fmt.Sprintf("refine %s code from feedback on %s", rf.GetAgentType(), strings.Join(fields, ", "))
	meta["stages_used"] = float64(1)
	meta["agent_type"], meta["language"], meta["refinement"] = rf.GetAgentType(), req.GetLanguage(), true
	meta["attempts"], meta["status"] = float64(len(rr.Attempts)), nodeStatus
	meta["feedback_fields"] = stringsToAny(fields)
	if req.GetRefinedExecution() != "" {
		meta["refined_execution"], meta["refined_node"] = req.GetRefinedExecution(), req.GetRefinedNode()
	}
	if a != nil {
		o := a.Outcome
		nc.CodeExecuted = o.Code
		meta["generated_code"], meta["best_attempt"] = o.Code, float64(o.Attempt)
		meta["resolved"], meta["remaining"] = stringsToAny(o.Resolved), stringsToAny(o.Remaining)
		if r := a.Execution; r != nil {
			after := t.ctx.Clone()
			for _, k := range r.GetDeletedKeys() {
				delete(after, k)
			}
			after.Merge(jsonvalue.MustObject(r.GetContextUpdates()))
			nc.OutputResult = after.Proto()
		}
		nc.OutputAnalysis = o.OutputAnalysis
	}
	u := refineUsage(rr.Attempts)
	meta["model"], meta["scripted"], meta["cost_usd"], meta["model_calls"] = u.model, u.scripted, u.cost, float64(u.calls)
	meta["tokens"] = map[string]any{"prompt": float64(u.prompt), "completion": float64(u.completion),
		"cached": float64(u.cached), "total": float64(u.prompt + u.completion)}
	nc.AiMetadata, _ = structpb.NewStruct(meta)
	nc.CostUsd, nc.ModelCalls = u.cost, int32(u.calls)
	t.emit(busname.KindNodeCompleted, fmt.Sprintf("%s/%s/1/completed", st.ExecutionId, refineNode.Id), busname.TypeNodeCompleted, nc)

	ns := t.nodeState(refineNode.Id)
	ns.Status, ns.Error = status, errMsg
	t.ln.CurrentNode, t.ln.PendingStepId = "", ""
	st.Context = nc.OutputResult
	st.Status, st.Error = status, errMsg
	t.completed()
}

// refineFields are the fields the feedback is on.
func (t *Transition) refineFields() []string {
	fb := t.st.Refine.GetRequest().GetRefinement().GetFeedback()
	out := make([]string, len(fb))
	for i, f := range fb {
		out[i] = f.GetField()
	}
	return out
}

// usage is what the model calls of a refinement's attempts cost.
type usage struct {
	model              string
	scripted           bool
	calls              int
	prompt, completion int64
	cached             int64
	cost               float64
}

func refineUsage(attempts []*novav1.RefineAttemptRun) usage {
	var u usage
	var calls []*novav1.ModelCall
	for _, a := range attempts {
		calls = append(calls, a.ModelCalls...)
	}
	for _, c := range calls {
		u.prompt += c.GetPromptTokens()
		u.completion += c.GetCompletionTokens()
		u.cached += c.GetCachedTokens()
		u.cost += c.GetCostUsd()
	}
	u.model, u.scripted = modelOf(calls)
	u.calls = len(calls)
	return u
}

// modelOf names the model of calls and whether the scripted server answered
// any of them.
func modelOf(calls []*novav1.ModelCall) (model string, scripted bool) {
	for _, c := range calls {
		model = c.GetModel()
		scripted = scripted || c.GetScripted()
	}
	return model, scripted
}
