package flow

import (
	"cmp"

	"github.com/novaflow/nova/pkg/bus/busname"
	"github.com/novaflow/nova/pkg/codecache/cacheentry"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// The code cache around an AI node: a hit runs cached code instead of the
// pipeline, a failing cached code is evicted, accepted code is stored.

// runCached looks the node's task up in the code cache and, on a hit, runs
// the cached code (useCached), skipping input analysis and generation. After an exact miss the semantic level, when on, looks for
// the code of a similar task in the same group. The cache is used only for
// Python (the runtime with a published fingerprint) and when the node or
// workflow does not opt out.
func (t *Transition) runCached(node *novav1.Node) bool {
	in, ok := t.cacheInput(node)
	if !ok {
		return false
	}
	ai, spec := t.ln.Ai, t.taskSpec(node)
	ai.CacheKey = cacheentry.Key(in)
	if t.Semantic != nil {
		ai.CacheGroup = cacheentry.Group(in, t.SemanticModel)
	}
	if entry := t.cached(ai.CacheKey); entry != nil {
		t.useCached(node, entry, nil)
		return true
	}
	if t.Semantic != nil {
		allowance, _, _ := t.allowance(node)
		res := t.Semantic(SemanticQuery{Group: ai.CacheGroup, Task: spec.Task, Allowance: allowance})
		if res.Entry != nil {
			t.useCached(node, res.Entry, &res)
			return true
		}
		if !res.Quiet {
			t.semanticMiss(node, res)
		}
	}
	t.CacheFx.Misses++
	return false
}

// cached is the cache's entry of key: one this transition is about to
// store (a map's first item, whose code the next items run), else the
// stored one.
func (t *Transition) cached(key string) *cacheentry.Entry {
	if p, ok := t.CacheFx.Puts[key]; ok {
		return p.Entry
	}
	return t.Lookup(key)
}

// cacheInput is what the node's cache key is made of; ok is false when the
// cache cannot be used for it (no cache, the runtime's fingerprint not
// published yet, a language other than Python, the cache off for the node).
func (t *Transition) cacheInput(node *novav1.Node) (in cacheentry.Input, ok bool) {
	if t.Lookup == nil || t.Runtime == "" || languageOf(node) != "python" || !workflow.CacheEnabled(t.st.Definition, node) {
		return cacheentry.Input{}, false
	}
	spec := t.taskSpec(node)
	return cacheentry.Input{Task: spec.Task, NodeType: spec.NodeType, DecisionValues: spec.DecisionValues,
		Shape: cacheentry.Shape(t.ln.NodeInput.GetRaw()), Model: t.ln.Ai.Model, Language: spec.Language, Runtime: t.Runtime}, true
}

// useCached runs entry's code: found by the task's own key, or by the
// semantic level (sem). The code goes to the sandbox at once when the entry
// keeps a verdict of the deployed code validator (reuseVerdict), else to the
// validator first.
func (t *Transition) useCached(node *novav1.Node, entry *cacheentry.Entry, sem *SemanticResult) {
	ai := t.ln.Ai
	ai.CacheHit, ai.CacheMatch, ai.CachedFromExecution, ai.CachedFromNode = true, matchExact, entry.Execution, entry.Node
	ai.SavedTokens, ai.SavedCostUsd, ai.SavedModelCalls = entry.Tokens, entry.CostUSD, entry.ModelCalls
	ai.Code, ai.Stage, ai.StagesUsed = entry.Code, stageTask, 1
	t.nodeState(node.Id).Attempts = 1
	input := map[string]any{"cache_key": ai.CacheKey}
	output := map[string]any{"cache_hit": true, "cache_match": matchExact, "cached_from_execution": entry.Execution,
		"cached_from_node": entry.Node, "tokens_saved": float64(entry.Tokens), "cost_usd_saved": entry.CostUSD}
	outcome := &novav1.AgentOutcome{Status: nodeSuccess}
	if sem != nil {
		ai.CacheMatch, ai.CacheSimilarity, ai.CachedKey = matchSemantic, sem.Match.Similarity, sem.Match.Key
		input["task"] = node.Prompt
		output["cache_match"] = matchSemantic
		output["similarity"] = sem.Match.Similarity
		output["threshold"] = t.cfg.Similarity
		output["compared"] = float64(sem.Ranking.Compared)
		output["matched_key"] = sem.Match.Key
		output["matched_task"] = entry.Task
		outcome.ModelCalls, outcome.DurationMs = embeddingCalls(sem.Call)
	}
	t.CacheFx.hit(ai.CacheMatch)
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
func (t *Transition) reuseVerdict(node *novav1.Node, entry *cacheentry.Entry) bool {
	v := entry.Verdict
	if v == nil || t.Validator == "" || v.Validator != t.Validator || entry.Runtime != t.Runtime || v.Code != cacheentry.CodeDigest(entry.Code) {
		return false
	}
	ai := t.ln.Ai
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
func (t *Transition) semanticMiss(node *novav1.Node, res SemanticResult) {
	threshold := t.cfg.Similarity
	output := map[string]any{"cache_hit": false, "threshold": threshold, "compared": float64(res.Ranking.Compared)}
	if best := res.Ranking.Best; best.Key != "" {
		output["best_similarity"] = best.Similarity
		output["best_key"] = best.Key
		if res.Ranking.OtherLiterals && best.Similarity >= threshold {
			output["best_names_other_literals"] = true
		}
	}
	outcome := &novav1.AgentOutcome{Status: nodeSuccess, Error: res.Note}
	outcome.ModelCalls, outcome.DurationMs = embeddingCalls(res.Call)
	ref := t.aiRef(node, phaseCacheLookup)
	t.aiStep(node, ref, outcome, "", map[string]any{"cache_key": t.ln.Ai.CacheKey, "task": node.Prompt}, output, nil)
}

func embeddingCalls(call *novav1.ModelCall) ([]*novav1.ModelCall, float64) {
	if call == nil {
		return nil, 0
	}
	return []*novav1.ModelCall{call}, call.DurationMs
}

func (fx *CacheEffects) hit(match string) {
	if fx.Hits == nil {
		fx.Hits = map[string]int64{}
	}
	fx.Hits[match]++
}

// evictCached removes cached code that failed, records why as a step, and
// starts the normal pipeline with that failure in the history. A semantic
// hit's code is evicted from the entry it came from, as an exact hit's is.
func (t *Transition) evictCached(node *novav1.Node, phase, msg string) {
	ai := t.ln.Ai
	key := cmp.Or(ai.CachedKey, ai.CacheKey)
	ai.History = append(ai.History, &novav1.AttemptRecord{Attempt: 0, Code: ai.Code, Phase: "cached_code_" + phase, Error: msg})
	t.CacheFx.Deletes = append(t.CacheFx.Deletes, CacheDelete{Key: key, Group: ai.CacheGroup})
	t.CacheFx.Evictions++
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
func (t *Transition) cacheAccepted(node *novav1.Node) {
	ai := t.ln.Ai
	if ai.CacheKey == "" {
		// The runtime's fingerprint may have been published while the
		// node ran (the first node of a fresh deployment): the code ran on
		// that runtime, so it is kept under the key the next run looks up.
		if t.Runtime == "" && t.RecheckRuntime != nil {
			t.RecheckRuntime()
		}
		in, ok := t.cacheInput(node)
		if !ok {
			return
		}
		ai.CacheKey = cacheentry.Key(in)
	}
	if ai.CacheHit {
		if ai.CacheMatch == matchSemantic {
			t.cacheSemanticHit(node)
		} else if !ai.VerdictReused && ai.ValidatorFingerprint != "" {
			t.cacheVerdict()
		}
		return
	}
	entry := &cacheentry.Entry{Code: ai.Code, Language: languageOf(node), Model: ai.Model, Task: node.Prompt, NodeType: nodeTypeName(node),
		Shape: cacheentry.Shape(t.ln.NodeInput.GetRaw()), Runtime: t.Runtime, Workflow: t.st.Definition.GetName(),
		Execution: t.st.ExecutionId, Node: node.Id, CreatedAt: t.now.UTC()}
	if ai.StagesUsed == 2 && ai.DataInsights != nil {
		entry.AnalysisCode = ai.AnalysisCode
	}
	entry.Verdict = t.verdict()
	for _, s := range ai.Steps {
		if s.Agent == busname.AgentGraphEngine {
			continue // the lookup's embeddings call is not what producing the code cost
		}
		for _, c := range s.ModelCalls {
			entry.Tokens += c.PromptTokens + c.CompletionTokens
			entry.CostUSD += c.CostUsd
			entry.ModelCalls++
			if s.Agent == busname.AgentCodeGenerator {
				entry.Model = c.Model
			}
		}
	}
	t.cachePut(ai.CacheKey, entry)
}

// cacheSemanticHit stores the entry a semantic hit took its code from under
// this task's key (a read of that entry, then a put once the state is
// stored); nothing when it is gone meanwhile.
func (t *Transition) cacheSemanticHit(node *novav1.Node) {
	ai := t.ln.Ai
	src := t.Lookup(ai.CachedKey)
	if src == nil || src.Code != ai.Code {
		return
	}
	entry := *src
	entry.Task, entry.Shape, entry.Runtime, entry.CreatedAt = node.Prompt, cacheentry.Shape(t.ln.NodeInput.GetRaw()), t.Runtime, t.now.UTC()
	entry.Workflow, entry.NodeType, entry.Embedding = t.st.Definition.GetName(), nodeTypeName(node), nil
	entry.SemanticOrigin = &cacheentry.SemanticOrigin{Key: ai.CachedKey, Task: src.Task, Similarity: ai.CacheSimilarity,
		Execution: t.st.ExecutionId}
	if v := t.verdict(); v != nil {
		entry.Verdict = v
	}
	t.cachePut(ai.CacheKey, &entry)
}

// cacheVerdict keeps, in the entry of an exact hit whose code the
// validator passed again (its entry had no verdict of the deployed
// validator), that verdict, so the next hit reuses it.
func (t *Transition) cacheVerdict() {
	ai := t.ln.Ai
	src := t.Lookup(ai.CacheKey)
	if src == nil || src.Code != ai.Code {
		return
	}
	entry := *src
	entry.Verdict = t.verdict()
	t.cachePut(ai.CacheKey, &entry)
}

// verdict is the code validator's pass of the current task code, to keep
// with it in the cache; nil when no complete check on this runtime passed it.
func (t *Transition) verdict() *cacheentry.Verdict {
	ai := t.ln.Ai
	if ai.ValidatorFingerprint == "" {
		return nil
	}
	return &cacheentry.Verdict{Validator: ai.ValidatorFingerprint, Code: cacheentry.CodeDigest(ai.Code), Execution: t.st.ExecutionId,
		At: t.now.UTC()}
}

func (t *Transition) cachePut(key string, entry *cacheentry.Entry) {
	if t.CacheFx.Puts == nil {
		t.CacheFx.Puts = map[string]CachePut{}
	}
	t.CacheFx.Puts[key] = CachePut{Entry: entry, Group: t.ln.Ai.CacheGroup}
}
