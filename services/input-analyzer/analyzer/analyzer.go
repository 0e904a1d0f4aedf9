// Package analyzer is NOVA's input analyzer: the first agent of an AI node.
// It decides whether the node's data must be analysed (by generated Python
// that inspects it) before the task code is written. A context of small
// scalar values is decided without the model; otherwise a small fast model
// decides from a summary of the context, never from its values. The decision
// is advice, so the node never fails because of it: when the model cannot
// give a usable answer a rule decides instead, and says so.
package analyzer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/agent"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/contextsummary"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/llm"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// DefaultModel is the model used when neither node nor workflow names one:
// the decision is simple, so a small fast model.
const DefaultModel = "gpt-4o-mini"

// Complexity ratings.
const (
	ComplexityLow    = "low"
	ComplexityMedium = "medium"
	ComplexityHigh   = "high"
)

// largeText is the string length from which text counts as large data that
// is worth analysing before the task.
const largeText = 10_000

// Deps is what the analyzer needs.
type Deps struct {
	Bus            *bus.Bus
	LLM            *llm.Client
	Logger         *slog.Logger
	TracerProvider trace.TracerProvider
	// DefaultModel is used when the command names no model (default
	// DefaultModel).
	DefaultModel string
	Workers      int
}

// Analyzer decides whether a node's data needs analysis.
type Analyzer struct {
	llm          *llm.Client
	log          *slog.Logger
	defaultModel string
}

// New builds an Analyzer.
func New(d Deps) *Analyzer {
	a := &Analyzer{llm: d.LLM, log: d.Logger, defaultModel: d.DefaultModel}
	if a.log == nil {
		a.log = slog.Default()
	}
	if a.defaultModel == "" {
		a.defaultModel = DefaultModel
	}
	return a
}

// start declares the agent's consumer and returns the service that
// answers its commands.
func start(ctx context.Context, d Deps) (*agent.Service, error) {
	if d.Bus == nil || d.LLM == nil {
		return nil, errors.New("input analyzer: bus and model client are required")
	}
	a := New(d)
	spec := agent.Spec{
		Name:        bus.AgentInputAnalyzer,
		Verb:        "analyze",
		CommandType: bus.TypeInputAnalyze,
		ResultType:  bus.TypeInputAnalyzed,
		Workers:     d.Workers,
	}
	return agent.Start(ctx, d.Bus, d.TracerProvider, spec,
		func() *novav1.AnalyzeInput { return &novav1.AnalyzeInput{} },
		func(ctx context.Context, cmd *novav1.AnalyzeInput) (proto.Message, error) {
			return a.Analyze(ctx, cmd)
		})
}

// Analyze decides for one command. It returns an error only when ctx ended
// (so the command is redelivered); everything else is a decision.
func (a *Analyzer) Analyze(ctx context.Context, cmd *novav1.AnalyzeInput) (*novav1.InputAnalyzed, error) {
	start := time.Now()
	res := &novav1.InputAnalyzed{Ref: cmd.GetRef(), Outcome: &novav1.AgentOutcome{Status: "success"}}
	defer func() { res.Outcome.DurationMs = float64(time.Since(start).Microseconds()) / 1000 }()

	summary := contextsummary.Summarize(jsonvalue.Map(cmd.GetContext()), contextsummary.Options{})
	if summary.OnlySmallScalars() {
		res.NeedsAnalysis = false
		res.Complexity = ComplexityLow
		res.DecidedWithoutModel = true
		if keys := summary.Keys(); len(keys) > 0 {
			res.Reasoning = fmt.Sprintf("the context holds only small scalar values (%s); no analysis needed — decided without calling the model",
				strings.Join(keys, ", "))
		} else {
			res.Reasoning = "the context is empty; no analysis needed — decided without calling the model"
		}
		return res, nil
	}

	model := cmd.GetSpec().GetModel()
	if model == "" {
		model = a.defaultModel
	}
	var d decision
	resp, err := a.llm.ChatJSON(ctx, llm.Request{
		Model: model,
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: systemPrompt},
			{Role: openai.ChatMessageRoleUser, Content: userPrompt(cmd.GetSpec(), summary)},
		},
		MaxTokens:   maxTokens(model),
		Temperature: new(float32(0)),
	}, d.accept)
	if resp != nil {
		res.Outcome.ModelCalls = resp.Calls
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("analyze input: %w", ctx.Err())
		}
		if agent.BudgetRefused(res.Outcome, err) {
			// Not a question a rule should answer: the node stops at its budget.
			return res, nil
		}
		why := shortErr(err) // "the model's answer was unusable: ..."
		if !errors.Is(err, llm.ErrUnusableAnswer) {
			why = "the model call failed: " + why
		}
		a.log.WarnContext(ctx, "input analysis falls back to a rule", "model", model, "err", err)
		needs, complexity, because := ruleDecision(summary)
		res.NeedsAnalysis, res.Complexity = needs, complexity
		res.Reasoning = why + "; decided by rule instead: " + because
		return res, nil
	}
	res.NeedsAnalysis = *d.NeedsAnalysis
	res.Reasoning = *d.Reasoning
	res.Complexity = *d.Complexity
	return res, nil
}

// decision is the model's answer; pointers tell missing fields from zero values.
type decision struct {
	NeedsAnalysis *bool   `json:"needs_analysis"`
	Reasoning     *string `json:"reasoning"`
	Complexity    *string `json:"complexity"`
}

// accept decodes and checks one answer, describing what is wrong so the
// model can correct it.
func (d *decision) accept(content string) error {
	*d = decision{}
	if err := llm.DecodeJSON(content, d); err != nil {
		return err
	}
	var missing []string
	if d.NeedsAnalysis == nil {
		missing = append(missing, `"needs_analysis" (true or false)`)
	}
	if d.Reasoning == nil || strings.TrimSpace(*d.Reasoning) == "" {
		missing = append(missing, `"reasoning" (a sentence)`)
	}
	if d.Complexity == nil {
		missing = append(missing, `"complexity" ("low", "medium" or "high")`)
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing fields: %s", strings.Join(missing, ", "))
	}
	c := strings.ToLower(strings.TrimSpace(*d.Complexity))
	switch c {
	case ComplexityLow, ComplexityMedium, ComplexityHigh:
		d.Complexity = &c
	default:
		return fmt.Errorf(`"complexity" is %q; it must be "low", "medium" or "high"`, *d.Complexity)
	}
	r := strings.TrimSpace(*d.Reasoning)
	if len(r) > 1000 {
		r = r[:1000] + "…"
	}
	d.Reasoning = &r
	return nil
}

// ruleDecision decides without a usable model answer: data that cannot be
// understood from its summary (encoded, stored by reference, nested, large
// text) is analysed first.
func ruleDecision(s contextsummary.Summary) (needs bool, complexity, because string) {
	var encoded, nested, large []string
	for _, f := range s.Fields {
		switch {
		case f.Secret:
		case f.Encoded || f.Type == contextsummary.TypeReference:
			encoded = append(encoded, f.Name)
		case f.Type == contextsummary.TypeObject || f.Type == contextsummary.TypeArray:
			nested = append(nested, f.Name)
		case f.Type == contextsummary.TypeString && f.Size >= largeText:
			large = append(large, f.Name)
		}
	}
	var parts []string
	if len(encoded) > 0 {
		parts = append(parts, "binary, base64 or stored-by-reference data ("+strings.Join(encoded, ", ")+")")
	}
	if len(nested) > 0 {
		parts = append(parts, "nested data ("+strings.Join(nested, ", ")+")")
	}
	if len(large) > 0 {
		parts = append(parts, "large text ("+strings.Join(large, ", ")+")")
	}
	switch {
	case len(encoded) > 0:
		complexity = ComplexityHigh
	case len(parts) > 0:
		complexity = ComplexityMedium
	default:
		return false, ComplexityLow, "the context holds no binary, nested or large data, so no analysis is needed"
	}
	return true, complexity, "the context holds " + strings.Join(parts, " and ") + ", so it is analysed first"
}

// maxTokens bounds the short JSON answer; reasoning models spend completion
// tokens on thinking before they answer.
func maxTokens(model string) int {
	if llm.IsReasoningModel(model) {
		return 4000
	}
	return 400
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
