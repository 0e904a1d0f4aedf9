package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestPrintAICache: the chain of work says where an AI node's code came
// from: generated, the cache's exact or semantic level, or a cached code
// that failed.
func TestPrintAICache(t *testing.T) {
	base := func(extra map[string]any) map[string]any {
		m := map[string]any{"prompt_task": "Calculate the discount (10% when total > 1000)", "model": "gpt-4o", "attempts": 1.0,
			"stages_used": 1.0, "model_calls": 1.0, "status": "success"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name string
		ai   map[string]any
		want string
	}{
		{"generated", base(map[string]any{"cache_hit": false}), ""},
		{"exact", base(map[string]any{"cache_hit": true, "cache_match": "exact", "cached_from_execution": "e1",
			"model_calls_saved": 2.0, "cost_usd_saved": 0.0042}),
			"   AI: code from the cache (exact), produced by execution e1; saved 2 model calls, $0.004200\n"},
		{"exact, before cache_match was kept", base(map[string]any{"cache_hit": true, "cached_from_execution": "e1",
			"model_calls_saved": 2.0, "cost_usd_saved": 0.0042}),
			"   AI: code from the cache (exact), produced by execution e1; saved 2 model calls, $0.004200\n"},
		{"semantic", base(map[string]any{"cache_hit": true, "cache_match": "semantic", "cache_similarity": 0.99231,
			"cached_key": "44c2ef77aa0b1c2d3e4f", "cached_from_execution": "e1", "model_calls_saved": 2.0, "cost_usd_saved": 0.0042}),
			"   AI: code from the cache (semantic, similarity 0.9923 to entry 44c2ef77aa0b), produced by execution e1; saved 2 model calls, $0.004200\n"},
		{"evicted", base(map[string]any{"cache_hit": false, "cache_evicted": true}),
			"   AI: cached code failed and was evicted; the pipeline wrote new code\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			printAI(&b, tc.ai)
			var got string
			for _, line := range strings.SplitAfter(b.String(), "\n") {
				if strings.Contains(line, "cache") {
					got += line
				}
			}
			if got != tc.want {
				t.Errorf("cache lines:\n%q\nwant\n%q\nof\n%s", got, tc.want, b.String())
			}
		})
	}
}
