package flow

import (
	"cmp"
	"encoding/json"
	"maps"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/novaflow/nova/pkg/bus/busname"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// What an AI node records: each agent step in the chain of work, and the
// node's ai_metadata.

// aiStep records an agent step: in the AI run (for ai_metadata) and as a
// chain-of-work step document.
func (t *Transition) aiStep(node *novav1.Node, ref *novav1.StepRef, outcome *novav1.AgentOutcome, code string,
	input, output map[string]any, tools []*novav1.ToolCall) {
	ai := t.ln.Ai
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
		Item:            t.itemIndex(),
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
	t.emit(busname.KindStepCompleted, ref.StepId+"/step", busname.TypeStepCompleted, step)
}

// aiMetadata is the node's ai_metadata, named as in the original NOVA.
func (t *Transition) aiMetadata(node *novav1.Node, status, errMsg string) *structpb.Struct {
	ai := t.ln.Ai
	u := aiUsageOf(ai)
	u.timings["total_ms"] = float64(t.now.Sub(t.ln.NodeStartedAt.AsTime()).Microseconds()) / 1000
	m := map[string]any{
		"model":          u.model,
		"prompt_task":    node.Prompt,
		"generated_code": ai.Code,
		"attempts":       float64(ai.Attempt),
		"stages_used":    float64(ai.StagesUsed),
		"tool_calls":     toolCallsMetadata(ai.ToolCalls),
		"tokens": map[string]any{"prompt": float64(u.prompt), "completion": float64(u.completion), "cached": float64(u.cached),
			"total": float64(u.prompt + u.completion)},
		"cost_usd":    u.cost,
		"model_calls": float64(u.calls),
		"timings":     u.timings,
		"steps":       stepsMetadata(ai.Steps),
		"cache_hit":   ai.CacheHit,
		"scripted":    u.scripted,
		"status":      status,
	}
	cacheMetadata(ai, m)
	if ia := ai.InputAnalysis; ia != nil {
		m["input_analysis"] = map[string]any{"needs_analysis": ia.NeedsAnalysis, "reasoning": ia.Reasoning,
			"complexity": ia.Complexity, "decided_without_model": ia.DecidedWithoutModel}
	}
	if ai.StagesUsed == 2 {
		m["analysis_metadata"] = analysisMetadata(ai, u.timings)
	}
	if status != nodeSuccess {
		t.failureMetadata(m, errMsg)
	}
	st, err := structpb.NewStruct(m)
	if err != nil {
		// Never lose the metadata over one odd value: keep it as JSON text.
		b, _ := protojson.Marshal(ai)
		st, _ = structpb.NewStruct(map[string]any{"raw": string(b), "encode_error": err.Error()})
	}
	return st
}

// aiUsage is what an AI run's steps took and what their model calls cost.
type aiUsage struct {
	model                      string
	prompt, completion, cached int64
	cost                       float64
	calls                      int
	scripted                   bool
	timings                    map[string]any
}

// aiUsageOf adds up the steps of ai: time per step name, tokens, cost and
// calls; the model is the code generator's (the node's model else).
func aiUsageOf(ai *novav1.AIRun) aiUsage {
	u := aiUsage{model: ai.Model, timings: map[string]any{}}
	for _, s := range ai.Steps {
		key := s.StepName + "_ms"
		u.timings[key] = asFloat(u.timings[key]) + s.DurationMs
		for _, c := range s.ModelCalls {
			u.prompt += c.PromptTokens
			u.completion += c.CompletionTokens
			u.cached += c.CachedTokens
			u.cost += c.CostUsd
			u.calls++
			u.scripted = u.scripted || c.Scripted
			if s.Agent == busname.AgentCodeGenerator {
				u.model = c.Model
			}
		}
	}
	return u
}

func stepsMetadata(steps []*novav1.AIStep) []any {
	out := []any{}
	for _, s := range steps {
		out = append(out, map[string]any{"step_number": float64(s.StepNumber), "agent": s.Agent, "step_name": s.StepName,
			"attempt": float64(s.Attempt), "status": s.Status, "duration_ms": s.DurationMs, "model_calls": float64(len(s.ModelCalls))})
	}
	return out
}

func toolCallsMetadata(calls []*novav1.ToolCall) []any {
	out := []any{}
	for _, tc := range calls {
		out = append(out, map[string]any{"name": tc.Name, "arguments": tc.Arguments, "result": tc.Result})
	}
	return out
}

// cacheMetadata says how the code cache served the visit: its key, and for
// a hit how it matched and what it saved.
func cacheMetadata(ai *novav1.AIRun, m map[string]any) {
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
}

// analysisMetadata is the data analysis stage: its code, timings, result
// and error.
func analysisMetadata(ai *novav1.AIRun, timings map[string]any) map[string]any {
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
	return analysis
}

// failureMetadata says why the visit failed: after its retries, or for
// want of budget, with every attempt.
func (t *Transition) failureMetadata(m map[string]any, errMsg string) {
	m["status"] = statusFailedAfterRetries
	if be := t.budgetExceeded; be != nil {
		m["status"] = errorKindBudgetExceeded
		m["budget_exceeded"] = budgetMetadata(be)
	}
	all := []any{}
	for _, h := range t.ln.Ai.History {
		all = append(all, map[string]any{"attempt": float64(h.Attempt), "code": h.Code, "phase": h.Phase, "error": h.Error})
	}
	m["all_attempts"] = all
	m["final_error"] = errMsg
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
