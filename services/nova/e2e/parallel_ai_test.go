package e2e

import (
	"maps"
	"testing"
)

// A map whose body is a prompt: an AI node per item. The first item runs
// alone; its code, once it passes, is cached, and every other item runs it
// without a model call.
func TestMapOverPrompt(t *testing.T) {
	const rules = `
rules:
  - name: score-code
    match: {agent: code-generator, user_contains: ["Score the order"]}
    respond:
      content: |
        context["result"] = context["item"] / 100
  - name: output-validator
    match: {agent: output-validator}
    respond:
      content: '{"valid": true, "reason": "the score is the total over 100 (scripted verdict)."}'
`
	e := startAIEnv(t, rules)
	e.waitRuntimeDocs()
	def := parseAI(t, `
name: score-orders
nodes:
  - {id: start, type: start}
  - {id: score, type: map, items: totals, concurrency: 4, output: scores, prompt: "Score the order: its total divided by 100"}
  - {id: done, type: end}
edges:
  - {from: start, to: score}
  - {from: score, to: done}
`)
	totals := []int{150, 200, 300, 450, 500, 800, 1000, 1200}
	wc := e.run(def, map[string]any{"totals": totals})
	succeeded(t, wc)
	scores, _ := ctxMap(wc.Context)["scores"].([]any)
	if len(scores) != len(totals) {
		t.Fatalf("scores = %v", ctxMap(wc.Context)["scores"])
	}
	for i, s := range scores {
		if s != float64(totals[i])/100 {
			t.Errorf("scores[%d] = %v, want %v", i, s, float64(totals[i])/100)
		}
	}
	checkScripted(t, e.modelRequests(""))
	if got, want := e.requestCounts(), map[string]int{codeGenerator: 1, outputValidator: 1}; !maps.Equal(got, want) {
		t.Errorf("model requests by agent = %v, want %v: the first item's code, then the cache", got, want)
	}
	hits := 0
	for _, n := range visits(e.chain(wc.ExecutionId), "score") {
		if n.Item != nil && n.AIMetadata["cache_hit"] == true {
			hits++
		}
	}
	if hits != len(totals)-1 {
		t.Errorf("%d items ran cached code, want %d (all but the first)", hits, len(totals)-1)
	}
}
