package flow

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus/busname"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/outputcheck"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// The AI pipeline of a prompt node, driven by the agents' results:
//
//	input analysis -> [analysis code: generate, validate, execute] ->
//	task code: generate -> validate -> execute -> validate output
//
// A failure in generation, validation, execution or output validation goes
// back to generation with the history of every failed attempt, at most
// MaxAttempts times. Input and data analysis run once per visit; a failed
// analysis leaves the task without insights rather than failing the node.

const (
	phaseInputAnalysis    = "input_analysis"
	phaseAnalysisGenerate = "analysis_generate"
	phaseAnalysisValidate = "analysis_validate"
	phaseAnalysisExecute  = "analysis_execute"
	phaseGenerate         = "generate"
	phaseValidate         = "validate"
	phaseExecute          = "execute"
	phaseOutputValidate   = "output_validate"
	// The engine's own steps around the code cache.
	phaseCacheLookup = "cache_lookup"
	phaseCacheEvict  = "cache_evict"
	// phaseVerdictReuse: a hit's code_validation step that reuses the
	// verdict its entry keeps, of the same validator (validatorinfo);
	// phaseOutputCheck: a rules-only hit's output_validation step, the
	// deterministic checks (outputcheck) run in the engine. Neither is a
	// trip over the bus.
	phaseVerdictReuse = "verdict_reuse"
	phaseOutputCheck  = "output_check"

	stageAnalysis = "ANALYSIS"
	stageTask     = "TASK"

	// analysisKey is where analysis code puts its findings.
	analysisKey = "_data_analysis"

	statusFailedAfterRetries = "failed_after_retries"
)

// stepNames name each phase's step in the chain of work, with its agent.
var stepNames = map[string][2]string{
	phaseInputAnalysis:    {"input_analysis", busname.AgentInputAnalyzer},
	phaseAnalysisGenerate: {"analysis_generation", busname.AgentCodeGenerator},
	phaseAnalysisValidate: {"analysis_validation", busname.AgentCodeValidator},
	phaseAnalysisExecute:  {"analysis_execution", busname.AgentSandbox},
	phaseGenerate:         {"code_generation", busname.AgentCodeGenerator},
	phaseValidate:         {"code_validation", busname.AgentCodeValidator},
	phaseExecute:          {"code_execution", busname.AgentSandbox},
	phaseOutputValidate:   {"output_validation", busname.AgentOutputValidator},
	phaseCacheLookup:      {"cache_lookup", busname.AgentGraphEngine},
	phaseCacheEvict:       {"cache_eviction", busname.AgentGraphEngine},
	phaseVerdictReuse:     {"code_validation", busname.AgentGraphEngine},
	phaseOutputCheck:      {"output_validation", busname.AgentGraphEngine},
}

func (t *Transition) startAI(node *novav1.Node) {
	model := node.Model
	if model == "" {
		model = t.st.Definition.Model
	}
	t.ln.Ai = &novav1.AIRun{Model: model}
	t.nodeState(node.Id).Attempts = 0
	if t.runCached(node) {
		return
	}
	t.aiNext(node, phaseInputAnalysis)
}

// aiRef starts the next step of phase and returns its reference.
func (t *Transition) aiRef(node *novav1.Node, phase string) *novav1.StepRef {
	ai := t.ln.Ai
	ai.Phase = phase
	ai.StepNumber++
	ns := t.nodeState(node.Id)
	return &novav1.StepRef{
		ExecutionId: t.st.ExecutionId,
		NodeId:      node.Id,
		StepId:      fmt.Sprintf("%s/s%d", t.visitKey(node.Id, ns.Visits), ai.StepNumber),
		Visit:       ns.Visits,
		Attempt:     ai.Attempt,
		Sequence:    t.st.Dispatch + 1,
		StepNumber:  ai.StepNumber,
	}
}

func (t *Transition) taskSpec(node *novav1.Node) *novav1.TaskSpec {
	spec := &novav1.TaskSpec{Task: node.Prompt, NodeType: nodeTypeName(node), Model: t.ln.Ai.Model, Language: languageOf(node)}
	if node.Type == novav1.NodeType_NODE_TYPE_DECISION {
		for _, e := range t.graph.Outgoing(node.Id) {
			spec.DecisionValues = append(spec.DecisionValues, e.Condition)
		}
		slices.Sort(spec.DecisionValues)
	}
	return spec
}

// aiNext issues the command of phase.
func (t *Transition) aiNext(node *novav1.Node, phase string) {
	ai := t.ln.Ai
	ref := t.aiRef(node, phase)
	spec := t.taskSpec(node)
	input := t.ln.NodeInput
	rulesOnly := phase == phaseOutputValidate && ai.CacheHit && workflow.CacheValidate(t.st.Definition, node) != workflow.CacheValidateModel
	if budgetPhase(phase) && !rulesOnly {
		t.allow(node, ref)
	}
	switch phase {
	case phaseInputAnalysis:
		t.command(node, ref.StepId, busname.AgentInputAnalyzer, busname.TypeInputAnalyze, func(int32) proto.Message {
			return &novav1.AnalyzeInput{Ref: ref, Spec: spec, Context: input}
		})
	case phaseAnalysisGenerate, phaseGenerate:
		stage := stageTask
		if phase == phaseAnalysisGenerate {
			stage = stageAnalysis
		}
		t.command(node, ref.StepId, busname.AgentCodeGenerator, busname.TypeCodeGenerate, func(int32) proto.Message {
			return &novav1.GenerateCode{Ref: ref, Spec: spec, Context: input, Stage: stage,
				DataInsights: ai.DataInsights, History: ai.History}
		})
	case phaseAnalysisValidate, phaseValidate:
		code, stage := ai.Code, stageTask
		if phase == phaseAnalysisValidate {
			code, stage = ai.AnalysisCode, stageAnalysis
		}
		t.command(node, ref.StepId, busname.AgentCodeValidator, busname.TypeCodeValidate, func(int32) proto.Message {
			return &novav1.ValidateCode{Ref: ref, Spec: spec, Code: code, Stage: stage,
				ContextKeys: jsonvalue.MustObject(input).Keys()}
		})
	case phaseAnalysisExecute:
		t.execute(node, ref.StepId, ref.Visit, ref.Attempt, ref.StepNumber, ai.AnalysisCode, stageAnalysis, input)
	case phaseExecute:
		t.execute(node, ref.StepId, ref.Visit, ref.Attempt, ref.StepNumber, ai.Code, stageTask, input)
	case phaseOutputValidate:
		r := ai.Execution
		t.command(node, ref.StepId, busname.AgentOutputValidator, busname.TypeOutputValidate, func(int32) proto.Message {
			return &novav1.ValidateOutput{Ref: ref, Spec: spec, ContextBefore: input,
				Updates: r.GetContextUpdates(), DeletedKeys: r.DeletedKeys, Code: ai.Code, Stdout: shorten(r.Stdout, 4000),
				RulesOnly: rulesOnly}
		})
	}
}

// generate starts the next generation attempt, or fails the node when the
// attempts are used up.
func (t *Transition) generate(node *novav1.Node) {
	ai := t.ln.Ai
	if int(ai.Attempt) >= t.cfg.MaxAttempts {
		last := ai.History[len(ai.History)-1]
		msg := fmt.Sprintf("failed after %d attempts; last error (%s): %s", ai.Attempt, last.Phase, last.Error)
		t.nodeFailed(node, t.nodeState(node.Id), msg, ai.Execution)
		return
	}
	ai.Attempt++
	ai.Code, ai.Execution, ai.ValidatorFingerprint = "", nil, ""
	t.nodeState(node.Id).Attempts = ai.Attempt
	t.aiNext(node, phaseGenerate)
}

// attemptFailed records why the current attempt failed and tries again.
func (t *Transition) attemptFailed(node *novav1.Node, phase, msg string) {
	ai := t.ln.Ai
	if ai.CacheHit {
		t.evictCached(node, phase, msg)
		return
	}
	ai.History = append(ai.History, &novav1.AttemptRecord{Attempt: ai.Attempt, Code: ai.Code, Phase: phase, Error: msg})
	t.generate(node)
}

// skipAnalysis goes on to the task without insights, noting why.
func (t *Transition) skipAnalysis(node *novav1.Node, why string) {
	t.ln.Ai.AnalysisError = why
	t.generate(node)
}

func (t *Transition) aiNode(ref *novav1.StepRef) *novav1.Node { return t.graph.Node(ref.GetNodeId()) }

// InputAnalyzed applies the input analyzer's result for the pending step.
func (t *Transition) InputAnalyzed(r *novav1.InputAnalyzed) error {
	if err := t.CheckAI(r.Ref); err != nil {
		return err
	}
	node, ai := t.aiNode(r.Ref), t.ln.Ai
	t.aiStep(node, r.Ref, r.Outcome, "", map[string]any{"task": node.Prompt},
		map[string]any{"needs_analysis": r.NeedsAnalysis, "reasoning": r.Reasoning, "complexity": r.Complexity,
			"decided_without_model": r.DecidedWithoutModel}, nil)
	if t.budgetStopped(node, r.Outcome) {
		return nil
	}
	if r.GetOutcome().GetStatus() == "error" {
		t.nodeFailed(node, t.nodeState(node.Id), "input analysis failed: "+r.Outcome.Error, nil)
		return nil
	}
	ai.InputAnalysis = r
	if r.NeedsAnalysis {
		ai.StagesUsed = 2
		t.aiNext(node, phaseAnalysisGenerate)
		return nil
	}
	ai.StagesUsed = 1
	t.generate(node)
	return nil
}

// CodeGenerated applies the code generator's result for the pending step
// (an AI node's or a refinement's).
func (t *Transition) CodeGenerated(r *novav1.CodeGenerated) error {
	if t.st.Refine != nil {
		return t.refineGenerated(r)
	}
	if err := t.CheckAI(r.Ref); err != nil {
		return err
	}
	node, ai := t.aiNode(r.Ref), t.ln.Ai
	phase := ai.Phase
	ai.ToolCalls = append(ai.ToolCalls, r.ToolCalls...)
	t.aiStep(node, r.Ref, r.Outcome, r.Code, map[string]any{"stage": stageOf(phase), "history_attempts": float64(len(ai.History))},
		map[string]any{"stage": r.Stage, "prompt_bytes": float64(r.PromptBytes), "code_bytes": float64(len(r.Code))}, r.ToolCalls)
	if t.budgetStopped(node, r.Outcome) {
		return nil
	}
	failed := r.GetOutcome().GetStatus() == "error" || strings.TrimSpace(r.Code) == ""
	reason := r.GetOutcome().GetError()
	if reason == "" {
		reason = "the model returned no code"
	}
	if phase == phaseAnalysisGenerate {
		if failed {
			t.skipAnalysis(node, "analysis code generation failed: "+reason)
			return nil
		}
		ai.AnalysisCode = r.Code
		t.aiNext(node, phaseAnalysisValidate)
		return nil
	}
	if !failed && r.Stage == stageAnalysis && ai.AnalysisCode == "" && ai.DataInsights == nil {
		// The stage marker is honoured: the generator chose to look at the
		// data first. That is the analysis stage, not a task attempt.
		ai.Attempt--
		t.nodeState(node.Id).Attempts = ai.Attempt
		ai.AnalysisCode, ai.StagesUsed = r.Code, 2
		t.aiNext(node, phaseAnalysisValidate)
		return nil
	}
	ai.Code, ai.Stage = r.Code, r.Stage
	if failed {
		t.attemptFailed(node, "generation", reason)
		return nil
	}
	t.aiNext(node, phaseValidate)
	return nil
}

// CodeValidated applies the code validator's result for the pending step.
func (t *Transition) CodeValidated(r *novav1.CodeValidated) error {
	if err := t.CheckAI(r.Ref); err != nil {
		return err
	}
	node, ai := t.aiNode(r.Ref), t.ln.Ai
	phase := ai.Phase
	var findings []any
	var msgs []string
	for _, f := range r.Findings {
		findings = append(findings, map[string]any{"rule": f.Rule, "message": f.Message, "line": float64(f.Line)})
		msgs = append(msgs, fmt.Sprintf("line %d: %s [%s]", f.Line, f.Message, f.Rule))
	}
	code := ai.Code
	if phase == phaseAnalysisValidate {
		code = ai.AnalysisCode
	}
	t.aiStep(node, r.Ref, r.Outcome, code, map[string]any{"stage": stageOf(phase)},
		map[string]any{"valid": r.Valid, "findings": findings}, nil)
	valid := r.Valid && r.GetOutcome().GetStatus() != "error"
	reason := strings.Join(msgs, "\n")
	if r.GetOutcome().GetStatus() == "error" {
		reason = "the code validator failed: " + r.Outcome.Error
	}
	switch {
	case phase == phaseAnalysisValidate && valid:
		t.aiNext(node, phaseAnalysisExecute)
	case phase == phaseAnalysisValidate:
		t.skipAnalysis(node, "analysis code did not pass validation: "+reason)
	case valid:
		if r.ValidatorFingerprint != "" && r.RuntimeFingerprint == t.Runtime {
			ai.ValidatorFingerprint = r.ValidatorFingerprint
		}
		t.aiNext(node, phaseExecute)
	default:
		t.attemptFailed(node, "validation", "static checks failed:\n"+reason)
	}
	return nil
}

// aiExecuted takes the sandbox's result of analysis or task code.
func (t *Transition) aiExecuted(r *novav1.CodeExecuted) error {
	node, ai := t.graph.Node(r.NodeId), t.ln.Ai
	ref := &novav1.StepRef{ExecutionId: r.ExecutionId, NodeId: r.NodeId, StepId: r.StepId, Visit: r.Visit,
		Attempt: ai.Attempt, StepNumber: ai.StepNumber}
	outcome := &novav1.AgentOutcome{Status: r.Status, Error: r.Error, DurationMs: r.DurationMs}
	output := map[string]any{
		"status":       r.Status,
		"updated_keys": stringsToAny(jsonvalue.MustObject(r.GetContextUpdates()).Keys()),
		"sandbox_id":   r.SandboxId,
	}
	for k, v := range map[string]string{"error_kind": r.ErrorKind, "traceback": r.Traceback, "stdout": r.Stdout, "stderr": r.Stderr, "limit": r.Limit} {
		if v != "" {
			output[k] = v
		}
	}
	code := ai.Code
	if ai.Phase == phaseAnalysisExecute {
		code = ai.AnalysisCode
	}
	t.aiStep(node, ref, outcome, code, map[string]any{"stage": stageOf(ai.Phase)}, output, nil)
	failure := r.Error
	if r.Traceback != "" {
		failure += "\n" + tail(r.Traceback, 3000)
	}
	if ai.Phase == phaseAnalysisExecute {
		if r.Status != nodeSuccess {
			t.skipAnalysis(node, "analysis code failed: "+failure)
			return nil
		}
		insights := r.GetContextUpdates()
		if raw, ok := jsonvalue.MustObject(insights)[analysisKey]; ok && len(raw) > 0 && raw[0] == '{' {
			insights = jsonvalue.Proto(raw)
		}
		ai.DataInsights = insights
		t.generate(node)
		return nil
	}
	if r.Status != nodeSuccess {
		if r.ErrorKind == errorKindRuntimeUnavailable {
			// Another attempt cannot help when the runtime is missing.
			t.nodeFailed(node, t.nodeState(node.Id), r.Error, r)
			return nil
		}
		if r.ErrorKind == ErrorKindDeadLetter {
			t.AIInfraFailed(node, r.Error, r)
			return nil
		}
		t.attemptFailed(node, "execution", failure)
		return nil
	}
	ai.Execution = r
	if ai.CacheHit && workflow.CacheValidate(t.st.Definition, node) != workflow.CacheValidateModel {
		t.checkOutput(node)
		return nil
	}
	t.aiNext(node, phaseOutputValidate)
	return nil
}

// checkOutput runs a rules-only hit's output checks (cache_validate: rules)
// here: the same deterministic checks the output validator runs
// (outputcheck), without the trip to it.
func (t *Transition) checkOutput(node *novav1.Node) {
	ai := t.ln.Ai
	ref := t.aiRef(node, phaseOutputCheck)
	start := time.Now()
	findings := outputcheck.Run(t.taskSpec(node), ai.Execution.GetContextUpdates(), ai.Execution.DeletedKeys)
	r := &novav1.OutputValidated{Ref: ref, Outcome: &novav1.AgentOutcome{Status: nodeSuccess}, Valid: len(findings) == 0,
		Reason: "the deterministic checks passed; no model consulted (cached code, cache_validate: rules)"}
	if !r.Valid {
		r.Reason, r.FailedChecks = outputcheck.Reason(findings), outputcheck.Checks(findings)
	}
	r.Outcome.DurationMs = float64(time.Since(start).Microseconds()) / 1000
	t.outputChecked(node, r, busname.AgentGraphEngine)
}

// OutputValidated applies the output validator's result for the pending
// step.
func (t *Transition) OutputValidated(r *novav1.OutputValidated) error {
	if err := t.CheckAI(r.Ref); err != nil {
		return err
	}
	t.outputChecked(t.aiNode(r.Ref), r, busname.AgentOutputValidator)
	return nil
}

// outputChecked takes the output checks' verdict, from the output
// validator or run here (checkedIn names which).
func (t *Transition) outputChecked(node *novav1.Node, r *novav1.OutputValidated, checkedIn string) {
	ai := t.ln.Ai
	t.aiStep(node, r.Ref, r.Outcome, "", map[string]any{"task": node.Prompt},
		map[string]any{"valid": r.Valid, "reason": r.Reason, "failed_checks": stringsToAny(r.FailedChecks),
			"model_consulted": r.ModelConsulted, "checked_in": checkedIn}, nil)
	if t.budgetStopped(node, r.Outcome) {
		return
	}
	if r.GetOutcome().GetStatus() == "error" {
		t.attemptFailed(node, "output_validation", "the output validator failed: "+r.Outcome.Error)
		return
	}
	if !r.Valid {
		t.attemptFailed(node, "output_validation", r.Reason)
		return
	}
	exec := ai.Execution
	t.cacheAccepted(node)
	t.merge(exec)
	t.route(node, t.nodeState(node.Id), exec)
}

// CheckAI is CheckPending for agent results, which must also find an AI run.
func (t *Transition) CheckAI(ref *novav1.StepRef) error {
	if err := t.CheckPending(ref.GetStepId(), ref.GetSequence()); err != nil {
		return err
	}
	if t.ln.Ai == nil {
		return ErrStale
	}
	return nil
}
