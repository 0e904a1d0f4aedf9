// Package outputvalidator is NOVA's output validator: the last agent of an
// AI node's attempt. Deterministic checks run first (the code produced
// updates, they are JSON data, no error text or None passed off as a result,
// a decision value that matches an edge); only when they pass is a small
// fast model asked whether the updates complete the task. Every failure
// carries a reason the code generator can act on.
//
// When the model gives no usable verdict even after being told what was
// wrong, the result's outcome is "error" (valid=false): the engine counts it
// as a failed output validation and tries again, rather than accepting output
// nobody checked. A transient model error that outlasts the client's retries
// is returned to the bus, which redelivers the command, so it does not cost
// the node an attempt.
package outputvalidator

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
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/outputcheck"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// DefaultModel is used when neither node nor workflow names a model.
const DefaultModel = "gpt-4o-mini"

// Deps is what the validator needs.
type Deps struct {
	Bus            *bus.Bus
	LLM            *llm.Client
	Logger         *slog.Logger
	TracerProvider trace.TracerProvider
	// DefaultModel is used when the command names no model (default DefaultModel).
	DefaultModel string
	Workers      int
}

// Validator checks the output of a node's code.
type Validator struct {
	llm          *llm.Client
	log          *slog.Logger
	defaultModel string
}

// New builds a Validator.
func New(d Deps) *Validator {
	v := &Validator{llm: d.LLM, log: d.Logger, defaultModel: d.DefaultModel}
	if v.log == nil {
		v.log = slog.Default()
	}
	if v.defaultModel == "" {
		v.defaultModel = DefaultModel
	}
	return v
}

// start declares the agent's consumer and returns the service that
// answers its commands.
func start(ctx context.Context, d Deps) (*agent.Service, error) {
	if d.Bus == nil || d.LLM == nil {
		return nil, errors.New("output validator: bus and model client are required")
	}
	v := New(d)
	spec := agent.Spec{
		Name:        bus.AgentOutputValidator,
		Verb:        "validate",
		CommandType: bus.TypeOutputValidate,
		ResultType:  bus.TypeOutputValidated,
		Workers:     d.Workers,
	}
	return agent.Start(ctx, d.Bus, d.TracerProvider, spec,
		func() *novav1.ValidateOutput { return &novav1.ValidateOutput{} },
		func(ctx context.Context, cmd *novav1.ValidateOutput) (proto.Message, error) {
			return v.Validate(ctx, cmd)
		})
}

// Validate checks one command's output. An error means the command should be
// redelivered (ctx ended, or the model API kept failing transiently).
func (v *Validator) Validate(ctx context.Context, cmd *novav1.ValidateOutput) (*novav1.OutputValidated, error) {
	start := time.Now()
	res := &novav1.OutputValidated{Ref: cmd.GetRef(), Outcome: &novav1.AgentOutcome{Status: "success"}}
	defer func() { res.Outcome.DurationMs = float64(time.Since(start).Microseconds()) / 1000 }()

	if findings := outputcheck.Run(cmd.GetSpec(), cmd.GetUpdates(), cmd.GetDeletedKeys()); len(findings) > 0 {
		res.FailedChecks, res.Reason = outputcheck.Checks(findings), outputcheck.Reason(findings)
		return res, nil
	}

	if cmd.GetRulesOnly() {
		res.Valid = true
		res.Reason = "the deterministic checks passed; no model consulted (cached code, cache_validate: rules)"
		return res, nil
	}
	model := cmd.GetSpec().GetModel()
	if model == "" {
		model = v.defaultModel
	}
	var verdict verdict
	resp, err := v.llm.ChatJSON(ctx, llm.Request{
		Model: model,
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: systemPrompt},
			{Role: openai.ChatMessageRoleUser, Content: userPrompt(cmd)},
		},
		MaxTokens:   maxTokens(model),
		Temperature: new(float32(0)),
	}, verdict.accept)
	res.ModelConsulted = true
	if resp != nil {
		res.Outcome.ModelCalls = resp.Calls
	}
	switch {
	case err == nil:
		res.Valid = *verdict.Valid
		res.Reason = verdict.reason()
		return res, nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("validate output: %w", ctx.Err())
	case agent.BudgetRefused(res.Outcome, err):
		res.ModelConsulted = len(res.Outcome.ModelCalls) > 0 // the refused call was the first or the corrective one
		res.Reason = res.Outcome.Error
		return res, nil
	case errors.Is(err, llm.ErrUnusableAnswer):
		res.Outcome.Status = "error"
		res.Outcome.Error = "the output validator's model gave no usable verdict after 2 answers: " + err.Error()
	case llm.IsTransient(err):
		return nil, fmt.Errorf("validate output: %w", err)
	default:
		res.Outcome.Status = "error"
		res.Outcome.Error = "the output validator's model call failed: " + err.Error()
	}
	v.log.WarnContext(ctx, "output validation failed to get a verdict", "model", model, "err", err)
	res.Valid = false
	res.Reason = res.Outcome.Error
	return res, nil
}

// verdict is the model's answer; pointers tell missing fields from zero values.
type verdict struct {
	Valid  *bool   `json:"valid"`
	Reason *string `json:"reason"`
}

func (v *verdict) accept(content string) error {
	*v = verdict{}
	if err := llm.DecodeJSON(content, v); err != nil {
		return err
	}
	if v.Valid == nil {
		return errors.New(`missing field "valid" (true or false)`)
	}
	if !*v.Valid && (v.Reason == nil || strings.TrimSpace(*v.Reason) == "") {
		return errors.New(`"valid" is false but "reason" is empty: say what is wrong with the output`)
	}
	return nil
}

func (v *verdict) reason() string {
	if v.Reason == nil || strings.TrimSpace(*v.Reason) == "" {
		return "the model found the output complete"
	}
	return shorten(strings.TrimSpace(*v.Reason), 2000)
}

// maxTokens bounds the short JSON verdict; reasoning models spend completion
// tokens on thinking before they answer.
func maxTokens(model string) int {
	if llm.IsReasoningModel(model) {
		return 4000
	}
	return 500
}
