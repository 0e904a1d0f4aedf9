package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	openai "github.com/sashabaranov/go-openai"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Budgets. The graph engine gives each agent step an allowance
// (novav1.Allowance, in StepRef); pkg/agent puts it in the handler's context
// (WithAllowance) and Client.Chat holds every call of the step to it.
//
// A call's cost is known only once the API reports its usage, so before a call
// its worst case is estimated (EstimateCost): every byte of the messages,
// tool calls and tool definitions counted as one prompt token, plus 4 tokens
// of framing per message and 3 for the reply, all at the uncached input
// price, plus max_tokens at the output price. A call is made only when that
// fits in what the step may still spend. A token of a byte-level BPE
// tokenizer (OpenAI's, Llama's, Mistral's with byte fallback) stands for at
// least one byte, and the API bills at most max_tokens of completion, so a
// call costs at most its estimate: spending never passes a limit. Where that
// does not hold (a server reporting more tokens than bytes, or answering
// under a model name the price table prices higher than the one asked for,
// e.g. an Azure deployment without a price of its own), a step passes its
// allowance by at most its last call's cost beyond that call's estimate:
// less than one call's worth.

// MinBudgetTokens is the smallest max_tokens a call is made with when the
// step's own max_tokens does not fit a hard limit (max_usd, max_usd_per_day
// when it is the whole room left) but a smaller one would: the call is made
// with what fits, down to this (or the step's own max_tokens when smaller).
const MinBudgetTokens = 1024

// DefaultBudgetMaxTokens caps a call under an allowance whose request sets no
// max_tokens, so that its worst case is known.
const DefaultBudgetMaxTokens = 4096

// BudgetError is a call that was not made because it would not fit the
// step's allowance.
type BudgetError struct {
	Exceeded *novav1.BudgetExceeded
}

func (e *BudgetError) Error() string { return DescribeBudgetExceeded(e.Exceeded) }

// AsBudgetError returns what a refused call reports, when err is one.
func AsBudgetError(err error) (*novav1.BudgetExceeded, bool) {
	var be *BudgetError
	if errors.As(err, &be) {
		return be.Exceeded, true
	}
	return nil, false
}

// ErrorKindBudgetExceeded is the error kind of a node that stopped because a
// model call would not fit its budget.
const ErrorKindBudgetExceeded = "budget_exceeded"

// DescribeBudgetExceeded is the message of a refused call, naming the limit,
// what was spent against it and what it allows, e.g.
//
//	budget_exceeded: max_usd of workflow "w": $0.000950 spent of $0.001000 allowed; the next model call (code-generator, gpt-4o-mini) would cost up to $0.000412
func DescribeBudgetExceeded(b *novav1.BudgetExceeded) string {
	l := b.GetLimit()
	var s strings.Builder
	fmt.Fprintf(&s, "%s: %s of %s", ErrorKindBudgetExceeded, l.GetName(), l.GetScope())
	if l.GetDay() != "" {
		fmt.Fprintf(&s, " on %s (UTC)", l.GetDay())
	}
	if l.GetName() == "max_model_calls" {
		fmt.Fprintf(&s, ": %d model calls made of %d allowed", int64(l.GetSpent()+b.GetStepSpent()), int64(l.GetAllowed()))
		return s.String()
	}
	fmt.Fprintf(&s, ": %s spent of %s allowed", usd(l.GetSpent()+b.GetStepSpent()), usd(l.GetAllowed()))
	if l.GetHeld() > 0 {
		fmt.Fprintf(&s, ", %s held by running steps", usd(l.GetHeld()))
	}
	fmt.Fprintf(&s, "; the next model call (%s, %s) would cost up to %s", b.GetAgent(), b.GetModel(), usd(b.GetNeeded()))
	if l.GetShare() {
		fmt.Fprintf(&s, ", more than this step's share of %s", usd(b.GetGiven()))
	}
	return s.String()
}

func usd(x float64) string { return fmt.Sprintf("$%.6f", x) }

// EstimatePromptTokens is an upper bound of the prompt tokens of req: the
// bytes of its text (messages, tool calls, tool definitions) as tokens, and
// the chat format's framing.
func EstimatePromptTokens(req openai.ChatCompletionRequest) int64 {
	n := int64(3) // the reply's priming
	for _, m := range req.Messages {
		n += 4 + int64(len(m.Role)+len(m.Content)+len(m.Name)+len(m.ToolCallID))
		for _, p := range m.MultiContent {
			n += int64(len(p.Text))
			if p.ImageURL != nil {
				n += int64(len(p.ImageURL.URL)) // never sent by NOVA; counted, not priced as an image
			}
		}
		for _, tc := range m.ToolCalls {
			n += 4 + int64(len(tc.ID)+len(tc.Function.Name)+len(tc.Function.Arguments))
		}
	}
	for _, t := range req.Tools {
		if t.Function == nil {
			continue
		}
		n += 16 + int64(len(t.Function.Name)+len(t.Function.Description))
		if b, err := json.Marshal(t.Function.Parameters); err == nil {
			n += int64(len(b)) // as sent
		}
	}
	return n
}

// completionCap is the request's max_tokens (max_completion_tokens for
// reasoning models), 0 when it sets none.
func completionCap(req openai.ChatCompletionRequest) int {
	return max(req.MaxTokens, req.MaxCompletionTokens)
}

func setCompletionCap(req *openai.ChatCompletionRequest, n int) {
	if IsReasoningModel(req.Model) {
		req.MaxCompletionTokens, req.MaxTokens = n, 0
	} else {
		req.MaxTokens, req.MaxCompletionTokens = n, 0
	}
}

// EstimateCost is the worst case of one call of req in USD: prompt tokens
// as EstimatePromptTokens counts them at the uncached input price, and the
// request's max_tokens at the output price. Models the table does not price
// cost 0.
func (t PriceTable) EstimateCost(req openai.ChatCompletionRequest) float64 {
	return t.Cost(req.Model, EstimatePromptTokens(req), 0, int64(completionCap(req)))
}

type allowanceKey struct{}

// allowance is one step's Allowance and what its calls have used of it.
type allowance struct {
	mu    sync.Mutex
	a     *novav1.Allowance
	spent float64
	calls int32
}

// WithAllowance returns ctx whose model calls (Client.Chat) are held to a;
// nil or an empty allowance sets no limit.
func WithAllowance(ctx context.Context, a *novav1.Allowance) context.Context {
	if a == nil || (a.Usd == nil && a.ModelCalls == nil) {
		return ctx
	}
	return context.WithValue(ctx, allowanceKey{}, &allowance{a: a})
}

func allowanceFrom(ctx context.Context) *allowance {
	a, _ := ctx.Value(allowanceKey{}).(*allowance)
	return a
}

// admit decides whether req may be sent and returns its estimated worst
// case. Under a hard USD limit a max_tokens that does not fit is lowered to
// what does, down to MinBudgetTokens; under a share (which the engine grows
// on request) it is not, so that the answer is never cut short for want of a
// share.
func (a *allowance) admit(prices PriceTable, agent string, req *openai.ChatCompletionRequest) (float64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	refuse := func(l *novav1.BudgetLimit, stepSpent, needed, given float64) error {
		return refusal(l, stepSpent, needed, given, agent, req.Model)
	}
	if err := a.callsLeft(agent, req.Model); err != nil {
		return 0, err
	}
	if a.a.Usd != nil && completionCap(*req) == 0 {
		setCompletionCap(req, DefaultBudgetMaxTokens)
	}
	est := prices.EstimateCost(*req)
	if a.a.Usd == nil {
		return est, nil
	}
	room := a.a.GetUsd() - a.spent
	if est <= room+1e-12 {
		return est, nil
	}
	if price, ok := prices.Lookup(req.Model); ok && price.Output > 0 && !a.a.GetUsdLimit().GetShare() {
		promptCost := prices.Cost(req.Model, EstimatePromptTokens(*req), 0, 0)
		afford := math.Floor((room - promptCost) * 1e6 / price.Output)
		if floor := min(completionCap(*req), MinBudgetTokens); afford >= float64(floor) && floor > 0 {
			setCompletionCap(req, int(afford))
			return prices.EstimateCost(*req), nil
		}
	}
	return 0, refuse(a.a.GetUsdLimit(), a.spent, est, a.a.GetUsd())
}

// admitCost decides whether a call whose worst case is known up front (an
// embeddings call: no completion) may be made.
func (a *allowance) admitCost(agent, model string, est float64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.callsLeft(agent, model); err != nil {
		return err
	}
	if a.a.Usd != nil && est > a.a.GetUsd()-a.spent+1e-12 {
		return refusal(a.a.GetUsdLimit(), a.spent, est, a.a.GetUsd(), agent, model)
	}
	return nil
}

// callsLeft refuses a call beyond max_model_calls.
func (a *allowance) callsLeft(agent, model string) error {
	if a.a.ModelCalls != nil && a.calls+1 > a.a.GetModelCalls() {
		return refusal(a.a.GetCallsLimit(), float64(a.calls), 1, float64(a.a.GetModelCalls()), agent, model)
	}
	return nil
}

func refusal(l *novav1.BudgetLimit, stepSpent, needed, given float64, agent, model string) error {
	return &BudgetError{Exceeded: &novav1.BudgetExceeded{Limit: l, StepSpent: stepSpent, Needed: needed, Given: given,
		Agent: agent, Model: model}}
}

// record counts a call that was made.
func (a *allowance) record(call *novav1.ModelCall) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.spent += call.GetCostUsd()
	a.calls++
}
