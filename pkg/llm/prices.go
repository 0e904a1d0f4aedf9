package llm

import (
	"fmt"
	"strconv"
	"strings"
)

// Price is what a model costs, in USD per million tokens.
type Price struct {
	Input       float64
	CachedInput float64
	Output      float64
}

// PriceTable maps model names to prices. A model not listed is matched by
// the longest listed name it starts with ("gpt-4o-mini-2024-07-18" uses
// "gpt-4o-mini").
type PriceTable map[string]Price

// DefaultPrices are list prices at the time of writing; they are estimates
// and configurable (NOVA_LLM_PRICES).
func DefaultPrices() PriceTable {
	return PriceTable{
		"gpt-4o":       {Input: 2.50, CachedInput: 1.25, Output: 10.00},
		"gpt-4o-mini":  {Input: 0.15, CachedInput: 0.075, Output: 0.60},
		"gpt-4.1":      {Input: 2.00, CachedInput: 0.50, Output: 8.00},
		"gpt-4.1-mini": {Input: 0.40, CachedInput: 0.10, Output: 1.60},
		"gpt-4.1-nano": {Input: 0.10, CachedInput: 0.025, Output: 0.40},
		"gpt-5":        {Input: 1.25, CachedInput: 0.125, Output: 10.00},
		"gpt-5-mini":   {Input: 0.25, CachedInput: 0.025, Output: 2.00},
		"gpt-5-nano":   {Input: 0.05, CachedInput: 0.005, Output: 0.40},
		"o3":           {Input: 2.00, CachedInput: 0.50, Output: 8.00},
		"o4-mini":      {Input: 1.10, CachedInput: 0.275, Output: 4.40},
		// Embeddings bill their input only.
		"text-embedding-3-small": {Input: 0.02},
		"text-embedding-3-large": {Input: 0.13},
		"text-embedding-ada-002": {Input: 0.10},
	}
}

// Lookup finds the price of model.
func (t PriceTable) Lookup(model string) (Price, bool) {
	if p, ok := t[model]; ok {
		return p, true
	}
	best, found := "", false
	for name := range t {
		if strings.HasPrefix(model, name) && len(name) > len(best) {
			best, found = name, true
		}
	}
	return t[best], found
}

// Cost estimates a call's cost; cached prompt tokens are part of the prompt
// tokens and billed at the cached rate. Unknown models cost 0.
func (t PriceTable) Cost(model string, prompt, cached, completion int64) float64 {
	p, ok := t.Lookup(model)
	if !ok {
		return 0
	}
	uncached := max(prompt-cached, 0)
	return (float64(uncached)*p.Input + float64(cached)*p.CachedInput + float64(completion)*p.Output) / 1e6
}

// ParsePrices reads "model=input/cached/output;model=..." (USD per million
// tokens) and merges it over base.
func ParsePrices(s string, base PriceTable) (PriceTable, error) {
	out := PriceTable{}
	for k, v := range base {
		out[k] = v
	}
	for _, item := range strings.Split(s, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, spec, ok := strings.Cut(item, "=")
		parts := strings.Split(spec, "/")
		if !ok || name == "" || len(parts) != 3 {
			return nil, fmt.Errorf("price %q: want model=input/cached/output", item)
		}
		var nums [3]float64
		for i, p := range parts {
			n, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("price %q: %q is not a price", item, p)
			}
			nums[i] = n
		}
		out[strings.TrimSpace(name)] = Price{Input: nums[0], CachedInput: nums[1], Output: nums[2]}
	}
	return out, nil
}
