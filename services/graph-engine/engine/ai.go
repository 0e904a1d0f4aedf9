package engine

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/codecache"
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
	phaseInputAnalysis:    {"input_analysis", bus.AgentInputAnalyzer},
	phaseAnalysisGenerate: {"analysis_generation", bus.AgentCodeGenerator},
	phaseAnalysisValidate: {"analysis_validation", bus.AgentCodeValidator},
	phaseAnalysisExecute:  {"analysis_execution", bus.AgentSandbox},
	phaseGenerate:         {"code_generation", bus.AgentCodeGenerator},
	phaseValidate:         {"code_validation", bus.AgentCodeValidator},
	phaseExecute:          {"code_execution", bus.AgentSandbox},
	phaseOutputValidate:   {"output_validation", bus.AgentOutputValidator},
	phaseCacheLookup:      {"cache_lookup", bus.AgentGraphEngine},
	phaseCacheEvict:       {"cache_eviction", bus.AgentGraphEngine},
	phaseVerdictReuse:     {"code_validation", bus.AgentGraphEngine},
	phaseOutputCheck:      {"output_validation", bus.AgentGraphEngine},
}

func (t *transition) startAI(node *novav1.Node) {
	model := node.Model
	if model == "" {
		model = t.st.Definition.Model
	}
	t.st.Ai = &novav1.AIRun{Model: model}
	t.nodeState(node.Id).Attempts = 0
	if t.runCached(node) {
		return
	}
	t.aiNext(node, phaseInputAnalysis)
}

// runCached looks the node's task up in the code cache and, on a hit, runs
// the cached code (useCached), skipping input analysis and generation. After an exact miss the semantic level, when on, looks for
// the code of a similar task in the same group. The cache is used only for
// Python (the runtime with a published fingerprint) and when the node or
// workflow does not opt out.
func (t *transition) runCached(node *novav1.Node) bool {
	if t.lookup == nil || t.runtime == "" || languageOf(node) != "python" || !workflow.CacheEnabled(t.st.Definition, node) {
		return false
	}
	ai, spec := t.st.Ai, t.taskSpec(node)
	in := codecache.Input{Task: spec.Task, NodeType: spec.NodeType, DecisionValues: spec.DecisionValues,
		Shape: codecache.Shape(t.st.NodeInput.GetRaw()), Model: ai.Model, Language: spec.Language, Runtime: t.runtime}
	ai.CacheKey = codecache.Key(in)
	if t.semantic != nil {
		ai.CacheGroup = codecache.Group(in, t.semanticModel)
	}
	if entry := t.lookup(ai.CacheKey); entry != nil {
		t.useCached(node, entry, nil)
		return true
	}
	if t.semantic != nil {
		allowance, _, _ := t.allowance(node)
		res := t.semantic(semanticQuery{group: ai.CacheGroup, task: spec.Task, allowance: allowance})
		if res.entry != nil {
			t.useCached(node, res.entry, &res)
			return true
		}
		if !res.quiet {
			t.semanticMiss(node, res)
		}
	}
	t.cacheFx.misses++
	return false
}

// useCached runs entry's code: found by the task's own key, or by the
// semantic level (sem). The code goes to the sandbox at once when the entry
// keeps a verdict of the deployed code validator (reuseVerdict), else to the
// validator first.
func (t *transition) useCached(node *novav1.Node, entry *codecache.Entry, sem *semanticResult) {
	ai := t.st.Ai
	ai.CacheHit, ai.CacheMatch, ai.CachedFromExecution, ai.CachedFromNode = true, matchExact, entry.Execution, entry.Node
	ai.SavedTokens, ai.SavedCostUsd, ai.SavedModelCalls = entry.Tokens, entry.CostUSD, entry.ModelCalls
	ai.Code, ai.Stage, ai.StagesUsed = entry.Code, stageTask, 1
	t.nodeState(node.Id).Attempts = 1
	input := map[string]any{"cache_key": ai.CacheKey}
	output := map[string]any{"cache_hit": true, "cache_match": matchExact, "cached_from_execution": entry.Execution,
		"cached_from_node": entry.Node, "tokens_saved": float64(entry.Tokens), "cost_usd_saved": entry.CostUSD}
	outcome := &novav1.AgentOutcome{Status: nodeSuccess}
	if sem != nil {
		ai.CacheMatch, ai.CacheSimilarity, ai.CachedKey = matchSemantic, sem.match.Similarity, sem.match.Key
		input["task"] = node.Prompt
		output["cache_match"] = matchSemantic
		output["similarity"] = sem.match.Similarity
		output["threshold"] = t.e.cfg.Semantic.Similarity
		output["compared"] = float64(sem.ranking.Compared)
		output["matched_key"] = sem.match.Key
		output["matched_task"] = entry.Task
		outcome.ModelCalls, outcome.DurationMs = embeddingCalls(sem.call)
	}
	t.cacheFx.hit(ai.CacheMatch)
	ref := t.aiRef(node, phaseCacheLookup)
	t.aiStep(node, ref, outcome, entry.Code, input, output, nil)
	if t.reuseVerdict(node, entry) {
		return
	}
	t.aiNext(node, phaseValidate)
}

// reuseVerdict records, as the hit's code_validation step, the verdict its
// entry keeps, when that verdict is the deployed validator's (the same
// fingerprint) on this runtime, and sends the code to the sandbox. The
// validator's answer is a function of the code, the node's type and
// decision values, the context's keys and the runtime, all of which the
// cache key (or a semantic group) covers, and of the validator itself,
// which the fingerprint names; so the same validator would say the same.
func (t *transition) reuseVerdict(node *novav1.Node, entry *codecache.Entry) bool {
	v := entry.Verdict
	if v == nil || t.validator == "" || v.Validator != t.validator || entry.Runtime != t.runtime || v.Code != codecache.CodeDigest(entry.Code) {
		return false
	}
	ai := t.st.Ai
	ai.ValidatorFingerprint, ai.VerdictReused = v.Validator, true
	ref := t.aiRef(node, phaseVerdictReuse)
	t.aiStep(node, ref, &novav1.AgentOutcome{Status: nodeSuccess}, ai.Code, map[string]any{"stage": stageTask},
		map[string]any{"valid": true, "findings": []any{}, "verdict_reused": true,
			"reason":                 "verdict of the same validator on the same code, reused",
			"validator_fingerprint":  v.Validator,
			"verdict_from_execution": v.Execution}, nil)
	t.aiNext(node, phaseExecute)
	return true
}

// semanticMiss records what the semantic level compared, and the
// embeddings call it made, as the visit's cache_lookup step.
func (t *transition) semanticMiss(node *novav1.Node, res semanticResult) {
	threshold := t.e.cfg.Semantic.Similarity
	output := map[string]any{"cache_hit": false, "threshold": threshold, "compared": float64(res.ranking.Compared)}
	if best := res.ranking.Best; best.Key != "" {
		output["best_similarity"] = best.Similarity
		output["best_key"] = best.Key
		if res.ranking.OtherLiterals && best.Similarity >= threshold {
			output["best_names_other_literals"] = true
		}
	}
	outcome := &novav1.AgentOutcome{Status: nodeSuccess, Error: res.note}
	outcome.ModelCalls, outcome.DurationMs = embeddingCalls(res.call)
	ref := t.aiRef(node, phaseCacheLookup)
	t.aiStep(node, ref, outcome, "", map[string]any{"cache_key": t.st.Ai.CacheKey, "task": node.Prompt}, output, nil)
}

func embeddingCalls(call *novav1.ModelCall) ([]*novav1.ModelCall, float64) {
	if call == nil {
		return nil, 0
	}
	return []*novav1.ModelCall{call}, call.DurationMs
}

func (fx *cacheEffects) hit(match string) {
	if fx.hits == nil {
		fx.hits = map[string]int64{}
	}
	fx.hits[match]++
}

// evictCached removes cached code that failed, records why as a step, and
// starts the normal pipeline with that failure in the history. A semantic
// hit's code is evicted from the entry it came from, as an exact hit's is.
func (t *transition) evictCached(node *novav1.Node, phase, msg string) {
	ai := t.st.Ai
	key := cmp.Or(ai.CachedKey, ai.CacheKey)
	ai.History = append(ai.History, &novav1.AttemptRecord{Attempt: 0, Code: ai.Code, Phase: "cached_code_" + phase, Error: msg})
	t.cacheFx.deletes = append(t.cacheFx.deletes, cacheDelete{key: key, group: ai.CacheGroup})
	t.cacheFx.evictions++
	ref := t.aiRef(node, phaseCacheEvict)
	t.aiStep(node, ref, &novav1.AgentOutcome{Status: nodeFailed, Error: "cached code failed " + phase + ": " + msg}, ai.Code,
		map[string]any{"cache_key": key}, map[string]any{"evicted": true, "cache_match": cmp.Or(ai.CacheMatch, matchExact),
			"cached_from_execution": ai.CachedFromExecution}, nil)
	ai.CacheHit, ai.CacheEvicted = false, true
	ai.CacheMatch, ai.CacheSimilarity, ai.CachedKey = "", 0, ""
	ai.ValidatorFingerprint, ai.VerdictReused = "", false
	ai.Code, ai.Stage, ai.Execution, ai.StagesUsed = "", "", nil, 0
	t.nodeState(node.Id).Attempts = 0
	t.aiNext(node, phaseInputAnalysis)
}

// cacheAccepted stores the code the pipeline just accepted, with what it
// cost to produce. The code of a semantic hit that passed is stored under
// this task's own key too, so that its next run hits exactly.
func (t *transition) cacheAccepted(node *novav1.Node) {
	ai := t.st.Ai
	if ai.CacheKey == "" {
		return
	}
	if ai.CacheHit {
		if ai.CacheMatch == matchSemantic {
			t.cacheSemanticHit(node)
		} else if !ai.VerdictReused && ai.ValidatorFingerprint != "" {
			t.cacheVerdict()
		}
		return
	}
	entry := &codecache.Entry{Code: ai.Code, Language: languageOf(node), Model: ai.Model, Task: node.Prompt, NodeType: nodeTypeName(node),
		Shape: codecache.Shape(t.st.NodeInput.GetRaw()), Runtime: t.runtime, Workflow: t.st.Definition.GetName(),
		Execution: t.st.ExecutionId, Node: node.Id, CreatedAt: t.now.UTC()}
	if ai.StagesUsed == 2 && ai.DataInsights != nil {
		entry.AnalysisCode = ai.AnalysisCode
	}
	entry.Verdict = t.verdict()
	for _, s := range ai.Steps {
		if s.Agent == bus.AgentGraphEngine {
			continue // the lookup's embeddings call is not what producing the code cost
		}
		for _, c := range s.ModelCalls {
			entry.Tokens += c.PromptTokens + c.CompletionTokens
			entry.CostUSD += c.CostUsd
			entry.ModelCalls++
			if s.Agent == bus.AgentCodeGenerator {
				entry.Model = c.Model
			}
		}
	}
	t.cachePut(ai.CacheKey, entry)
}

// cacheSemanticHit stores the entry a semantic hit took its code from under
// this task's key (a read of that entry, then a put once the state is
// stored); nothing when it is gone meanwhile.
func (t *transition) cacheSemanticHit(node *novav1.Node) {
	ai := t.st.Ai
	src := t.lookup(ai.CachedKey)
	if src == nil || src.Code != ai.Code {
		return
	}
	entry := *src
	entry.Task, entry.Shape, entry.Runtime, entry.CreatedAt = node.Prompt, codecache.Shape(t.st.NodeInput.GetRaw()), t.runtime, t.now.UTC()
	entry.Workflow, entry.NodeType, entry.Embedding = t.st.Definition.GetName(), nodeTypeName(node), nil
	entry.SemanticOrigin = &codecache.SemanticOrigin{Key: ai.CachedKey, Task: src.Task, Similarity: ai.CacheSimilarity,
		Execution: t.st.ExecutionId}
	if v := t.verdict(); v != nil {
		entry.Verdict = v
	}
	t.cachePut(ai.CacheKey, &entry)
}

// cacheVerdict keeps, in the entry of an exact hit whose code the
// validator passed again (its entry had no verdict of the deployed
// validator), that verdict, so the next hit reuses it.
func (t *transition) cacheVerdict() {
	ai := t.st.Ai
	src := t.lookup(ai.CacheKey)
	if src == nil || src.Code != ai.Code {
		return
	}
	entry := *src
	entry.Verdict = t.verdict()
	t.cachePut(ai.CacheKey, &entry)
}

// verdict is the code validator's pass of the current task code, to keep
// with it in the cache; nil when no complete check on this runtime passed it.
func (t *transition) verdict() *codecache.Verdict {
	ai := t.st.Ai
	if ai.ValidatorFingerprint == "" {
		return nil
	}
	return &codecache.Verdict{Validator: ai.ValidatorFingerprint, Code: codecache.CodeDigest(ai.Code), Execution: t.st.ExecutionId,
		At: t.now.UTC()}
}

func (t *transition) cachePut(key string, entry *codecache.Entry) {
	if t.cacheFx.puts == nil {
		t.cacheFx.puts = map[string]cachePut{}
	}
	t.cacheFx.puts[key] = cachePut{entry: entry, group: t.st.Ai.CacheGroup}
}

// aiRef starts the next step of phase and returns its reference.
func (t *transition) aiRef(node *novav1.Node, phase string) *novav1.StepRef {
	ai := t.st.Ai
	ai.Phase = phase
	ai.StepNumber++
	ns := t.nodeState(node.Id)
	return &novav1.StepRef{
		ExecutionId: t.st.ExecutionId,
		NodeId:      node.Id,
		StepId:      fmt.Sprintf("%s/%s/%d/s%d", t.st.ExecutionId, node.Id, ns.Visits, ai.StepNumber),
		Visit:       ns.Visits,
		Attempt:     ai.Attempt,
		Sequence:    t.st.Dispatch + 1,
		StepNumber:  ai.StepNumber,
	}
}

func (t *transition) taskSpec(node *novav1.Node) *novav1.TaskSpec {
	spec := &novav1.TaskSpec{Task: node.Prompt, NodeType: nodeTypeName(node), Model: t.st.Ai.Model, Language: languageOf(node)}
	if node.Type == novav1.NodeType_NODE_TYPE_DECISION {
		for _, e := range t.graph.Outgoing(node.Id) {
			spec.DecisionValues = append(spec.DecisionValues, e.Condition)
		}
		slices.Sort(spec.DecisionValues)
	}
	return spec
}

// aiNext issues the command of phase.
func (t *transition) aiNext(node *novav1.Node, phase string) {
	ai := t.st.Ai
	ref := t.aiRef(node, phase)
	spec := t.taskSpec(node)
	input := t.st.NodeInput
	rulesOnly := phase == phaseOutputValidate && ai.CacheHit && workflow.CacheValidate(t.st.Definition, node) != workflow.CacheValidateModel
	if budgetPhase(phase) && !rulesOnly {
		t.allow(node, ref)
	}
	switch phase {
	case phaseInputAnalysis:
		t.command(node, ref.StepId, bus.AgentInputAnalyzer, bus.TypeInputAnalyze, func(int32) proto.Message {
			return &novav1.AnalyzeInput{Ref: ref, Spec: spec, Context: input}
		})
	case phaseAnalysisGenerate, phaseGenerate:
		stage := stageTask
		if phase == phaseAnalysisGenerate {
			stage = stageAnalysis
		}
		t.command(node, ref.StepId, bus.AgentCodeGenerator, bus.TypeCodeGenerate, func(int32) proto.Message {
			return &novav1.GenerateCode{Ref: ref, Spec: spec, Context: input, Stage: stage,
				DataInsights: ai.DataInsights, History: ai.History}
		})
	case phaseAnalysisValidate, phaseValidate:
		code, stage := ai.Code, stageTask
		if phase == phaseAnalysisValidate {
			code, stage = ai.AnalysisCode, stageAnalysis
		}
		t.command(node, ref.StepId, bus.AgentCodeValidator, bus.TypeCodeValidate, func(int32) proto.Message {
			return &novav1.ValidateCode{Ref: ref, Spec: spec, Code: code, Stage: stage,
				ContextKeys: jsonvalue.MustObject(input).Keys()}
		})
	case phaseAnalysisExecute:
		t.execute(node, ref.StepId, ref.Visit, ref.Attempt, ref.StepNumber, ai.AnalysisCode, stageAnalysis, input)
	case phaseExecute:
		t.execute(node, ref.StepId, ref.Visit, ref.Attempt, ref.StepNumber, ai.Code, stageTask, input)
	case phaseOutputValidate:
		r := ai.Execution
		t.command(node, ref.StepId, bus.AgentOutputValidator, bus.TypeOutputValidate, func(int32) proto.Message {
			return &novav1.ValidateOutput{Ref: ref, Spec: spec, ContextBefore: input,
				Updates: r.GetContextUpdates(), DeletedKeys: r.DeletedKeys, Code: ai.Code, Stdout: shorten(r.Stdout, 4000),
				RulesOnly: rulesOnly}
		})
	}
}

// generate starts the next generation attempt, or fails the node when the
// attempts are used up.
func (t *transition) generate(node *novav1.Node) {
	ai := t.st.Ai
	if int(ai.Attempt) >= t.e.cfg.MaxAttempts {
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
func (t *transition) attemptFailed(node *novav1.Node, phase, msg string) {
	ai := t.st.Ai
	if ai.CacheHit {
		t.evictCached(node, phase, msg)
		return
	}
	ai.History = append(ai.History, &novav1.AttemptRecord{Attempt: ai.Attempt, Code: ai.Code, Phase: phase, Error: msg})
	t.generate(node)
}

// skipAnalysis goes on to the task without insights, noting why.
func (t *transition) skipAnalysis(node *novav1.Node, why string) {
	t.st.Ai.AnalysisError = why
	t.generate(node)
}

// aiStep records an agent step: in the AI run (for ai_metadata) and as a
// chain-of-work step document.
func (t *transition) aiStep(node *novav1.Node, ref *novav1.StepRef, outcome *novav1.AgentOutcome, code string,
	input, output map[string]any, tools []*novav1.ToolCall) {
	ai := t.st.Ai
	names := stepNames[ai.Phase]
	status := outcome.GetStatus()
	if status == "" {
		status = nodeSuccess
	}
	ai.Steps = append(ai.Steps, &novav1.AIStep{
		Agent: names[1], StepName: names[0], Attempt: ref.Attempt, Status: status, Error: outcome.GetError(),
		DurationMs: outcome.GetDurationMs(), ModelCalls: outcome.GetModelCalls(), StepNumber: ref.StepNumber,
	})
	t.account(node, ref, outcome.GetModelCalls())
	errMsg := outcome.GetError()
	if status == nodeSuccess && errMsg != "" {
		// A successful agent may leave a note (a check it skipped); it is
		// not an error.
		output = maps.Clone(output)
		output["note"] = errMsg
		errMsg = ""
	}
	step := &novav1.StepCompleted{
		ExecutionId:     t.st.ExecutionId,
		NodeId:          node.Id,
		Visit:           ref.Visit,
		StepNumber:      ref.StepNumber,
		StepName:        names[0],
		AgentName:       names[1],
		AttemptNumber:   ref.Attempt,
		GeneratedCode:   code,
		Status:          status,
		ErrorMessage:    errMsg,
		ExecutionTimeMs: outcome.GetDurationMs(),
		Timestamp:       tsNow(t.now),
		StepId:          ref.StepId,
	}
	if id, ok := output["sandbox_id"].(string); ok {
		step.SandboxId = id
	}
	calls := outcome.GetModelCalls()
	for _, c := range calls {
		step.ModelUsed = c.Model
		step.TokensInput += c.PromptTokens
		step.TokensOutput += c.CompletionTokens
		step.CostUsd += c.CostUsd
	}
	if len(calls) > 0 {
		output = maps.Clone(output)
		if output == nil {
			output = map[string]any{}
		}
		output["model_calls"] = float64(len(calls))
		output["cached_tokens"] = float64(sumCalls(calls, func(c *novav1.ModelCall) int64 { return c.CachedTokens }))
		var estimated float64
		for _, c := range calls {
			estimated += c.EstimatedUsd
		}
		// The worst case the agent estimated before its calls (the budget's
		// check), beside cost_usd, what they cost.
		output["estimated_usd"] = estimated
		output["scripted"] = calls[0].Scripted
	}
	step.InputData, _ = structpb.NewStruct(input)
	step.OutputData, _ = structpb.NewStruct(output)
	if len(tools) > 0 {
		list := &structpb.ListValue{}
		for _, tc := range tools {
			v, _ := structpb.NewValue(map[string]any{"name": tc.Name, "arguments": tc.Arguments, "result": tc.Result})
			list.Values = append(list.Values, v)
		}
		step.ToolCalls = list
	}
	t.emit(bus.KindStepCompleted, ref.StepId+"/step", bus.TypeStepCompleted, step)
}

func (t *transition) aiNode(ref *novav1.StepRef) *novav1.Node { return t.graph.Node(ref.GetNodeId()) }

func (t *transition) inputAnalyzed(r *novav1.InputAnalyzed) error {
	if err := t.checkAI(r.Ref); err != nil {
		return err
	}
	node, ai := t.aiNode(r.Ref), t.st.Ai
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

func (t *transition) codeGenerated(r *novav1.CodeGenerated) error {
	if t.st.Refine != nil {
		return t.refineGenerated(r)
	}
	if err := t.checkAI(r.Ref); err != nil {
		return err
	}
	node, ai := t.aiNode(r.Ref), t.st.Ai
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

func (t *transition) codeValidated(r *novav1.CodeValidated) error {
	if err := t.checkAI(r.Ref); err != nil {
		return err
	}
	node, ai := t.aiNode(r.Ref), t.st.Ai
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
		if r.ValidatorFingerprint != "" && r.RuntimeFingerprint == t.runtime {
			ai.ValidatorFingerprint = r.ValidatorFingerprint
		}
		t.aiNext(node, phaseExecute)
	default:
		t.attemptFailed(node, "validation", "static checks failed:\n"+reason)
	}
	return nil
}

// aiExecuted takes the sandbox's result of analysis or task code.
func (t *transition) aiExecuted(r *novav1.CodeExecuted) error {
	node, ai := t.graph.Node(r.NodeId), t.st.Ai
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
		if r.ErrorKind == errorKindDeadLetter || r.ErrorKind == errorKindRuntimeUnavailable {
			// Another attempt cannot help when the runtime is missing.
			t.nodeFailed(node, t.nodeState(node.Id), r.Error, r)
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
func (t *transition) checkOutput(node *novav1.Node) {
	ai := t.st.Ai
	ref := t.aiRef(node, phaseOutputCheck)
	start := time.Now()
	findings := outputcheck.Run(t.taskSpec(node), ai.Execution.GetContextUpdates(), ai.Execution.DeletedKeys)
	r := &novav1.OutputValidated{Ref: ref, Outcome: &novav1.AgentOutcome{Status: nodeSuccess}, Valid: len(findings) == 0,
		Reason: "the deterministic checks passed; no model consulted (cached code, cache_validate: rules)"}
	if !r.Valid {
		r.Reason, r.FailedChecks = outputcheck.Reason(findings), outputcheck.Checks(findings)
	}
	r.Outcome.DurationMs = float64(time.Since(start).Microseconds()) / 1000
	t.outputChecked(node, r, bus.AgentGraphEngine)
}

func (t *transition) outputValidated(r *novav1.OutputValidated) error {
	if err := t.checkAI(r.Ref); err != nil {
		return err
	}
	t.outputChecked(t.aiNode(r.Ref), r, bus.AgentOutputValidator)
	return nil
}

// outputChecked takes the output checks' verdict, from the output
// validator or run here (checkedIn names which).
func (t *transition) outputChecked(node *novav1.Node, r *novav1.OutputValidated, checkedIn string) {
	ai := t.st.Ai
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

// checkAI is checkPending for agent results, which must also find an AI run.
func (t *transition) checkAI(ref *novav1.StepRef) error {
	if err := t.checkPending(ref.GetStepId(), ref.GetSequence()); err != nil {
		return err
	}
	if t.st.Ai == nil {
		return errStale
	}
	return nil
}

// aiMetadata is the node's ai_metadata, named as in the original NOVA.
func (t *transition) aiMetadata(node *novav1.Node, status, errMsg string) *structpb.Struct {
	ai := t.st.Ai
	timings := map[string]any{}
	var prompt, completion, cached int64
	var cost float64
	var calls int
	scripted := false
	model := ai.Model
	for _, s := range ai.Steps {
		key := s.StepName + "_ms"
		timings[key] = asFloat(timings[key]) + s.DurationMs
		for _, c := range s.ModelCalls {
			prompt += c.PromptTokens
			completion += c.CompletionTokens
			cached += c.CachedTokens
			cost += c.CostUsd
			calls++
			scripted = scripted || c.Scripted
			if s.Agent == bus.AgentCodeGenerator {
				model = c.Model
			}
		}
	}
	timings["total_ms"] = float64(t.now.Sub(t.st.NodeStartedAt.AsTime()).Microseconds()) / 1000
	steps := []any{}
	for _, s := range ai.Steps {
		steps = append(steps, map[string]any{"step_number": float64(s.StepNumber), "agent": s.Agent, "step_name": s.StepName,
			"attempt": float64(s.Attempt), "status": s.Status, "duration_ms": s.DurationMs, "model_calls": float64(len(s.ModelCalls))})
	}
	tools := []any{}
	for _, tc := range ai.ToolCalls {
		tools = append(tools, map[string]any{"name": tc.Name, "arguments": tc.Arguments, "result": tc.Result})
	}
	m := map[string]any{
		"model":          model,
		"prompt_task":    node.Prompt,
		"generated_code": ai.Code,
		"attempts":       float64(ai.Attempt),
		"stages_used":    float64(ai.StagesUsed),
		"tool_calls":     tools,
		"tokens": map[string]any{"prompt": float64(prompt), "completion": float64(completion), "cached": float64(cached),
			"total": float64(prompt + completion)},
		"cost_usd":    cost,
		"model_calls": float64(calls),
		"timings":     timings,
		"steps":       steps,
		"cache_hit":   ai.CacheHit,
		"scripted":    scripted,
		"status":      status,
	}
	if ai.CacheKey != "" {
		m["cache_key"] = ai.CacheKey
	}
	if ai.CacheHit {
		m["cache_match"] = cmp.Or(ai.CacheMatch, matchExact)
		if ai.CacheMatch == matchSemantic {
			m["cache_similarity"] = ai.CacheSimilarity
			m["cached_key"] = ai.CachedKey
		}
		m["attempts"] = 1.0
		m["cached_from_execution"] = ai.CachedFromExecution
		m["cached_from_node"] = ai.CachedFromNode
		m["tokens_saved"] = float64(ai.SavedTokens)
		m["cost_usd_saved"] = ai.SavedCostUsd
		m["model_calls_saved"] = float64(ai.SavedModelCalls)
	}
	if ai.CacheEvicted {
		m["cache_evicted"] = true
	}
	if ia := ai.InputAnalysis; ia != nil {
		m["input_analysis"] = map[string]any{"needs_analysis": ia.NeedsAnalysis, "reasoning": ia.Reasoning,
			"complexity": ia.Complexity, "decided_without_model": ia.DecidedWithoutModel}
	}
	if ai.StagesUsed == 2 {
		analysis := map[string]any{"code": ai.AnalysisCode, "timings": map[string]any{
			"generation_ms": timings["analysis_generation_ms"], "validation_ms": timings["analysis_validation_ms"],
			"execution_ms": timings["analysis_execution_ms"]}}
		if ai.DataInsights != nil {
			// Metadata for people: the exact text is in the node's output.
			var result any
			_ = json.Unmarshal(ai.DataInsights.GetRaw(), &result)
			analysis["result"] = result
		}
		if ai.AnalysisError != "" {
			analysis["error"] = ai.AnalysisError
		}
		m["analysis_metadata"] = analysis
	}
	if status != nodeSuccess {
		m["status"] = statusFailedAfterRetries
		if be := t.budgetExceeded; be != nil {
			m["status"] = errorKindBudgetExceeded
			m["budget_exceeded"] = budgetMetadata(be)
		}
		all := []any{}
		for _, h := range ai.History {
			all = append(all, map[string]any{"attempt": float64(h.Attempt), "code": h.Code, "phase": h.Phase, "error": h.Error})
		}
		m["all_attempts"] = all
		m["final_error"] = errMsg
	}
	st, err := structpb.NewStruct(m)
	if err != nil {
		// Never lose the metadata over one odd value: keep it as JSON text.
		b, _ := protojson.Marshal(ai)
		st, _ = structpb.NewStruct(map[string]any{"raw": string(b), "encode_error": err.Error()})
	}
	return st
}

func stageOf(phase string) string {
	if strings.HasPrefix(phase, "analysis") {
		return stageAnalysis
	}
	return stageTask
}

func nodeTypeName(n *novav1.Node) string {
	if n.Type == novav1.NodeType_NODE_TYPE_DECISION {
		return "decision"
	}
	return "action"
}

func sumCalls(calls []*novav1.ModelCall, f func(*novav1.ModelCall) int64) int64 {
	var n int64
	for _, c := range calls {
		n += f(c)
	}
	return n
}

func asFloat(v any) float64 {
	f, _ := v.(float64)
	return f
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "\n... [shortened]"
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "... " + s[len(s)-n:]
}
