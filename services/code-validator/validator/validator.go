// Package validator is NOVA's code validator: it checks generated Python
// before the sandbox runs it, without a model and without running it. It
// finds syntax errors, names used before they are assigned or never
// defined, context keys read that neither exist nor are set by the code,
// imports that are forbidden or not installed in the sandbox runtime, and
// decision code that never sets branch_decision (or sets it to a value no
// edge has). Each finding is worded for the model that wrote the code, which
// gets it back on the next attempt.
//
// The checks are Python's own parser and compiler (ast, compile) driven by
// an embedded script in a short-lived python3 process (about 20 ms); its
// answers are remembered (Memo), so code checked again against the same
// input, as a code-cache hit's is, costs no process.
package validator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/agent"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/runtimeinfo"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// RuntimeSource gives the sandbox runtime's description; *runtimeinfo.Cache
// is one.
type RuntimeSource interface {
	Get(ctx context.Context) (*runtimeinfo.Info, error)
}

// Deps is what the validator needs.
type Deps struct {
	Bus            *bus.Bus
	Logger         *slog.Logger
	TracerProvider trace.TracerProvider
	// Runtime defaults to the description the sandbox publishes on the bus.
	Runtime RuntimeSource
	Workers int
	// Python runs the checker (DefaultPython when empty).
	Python string
	// Forbidden and Prelude replace DefaultForbidden and DefaultPrelude when not nil.
	Forbidden []string
	Prelude   []string
}

// Validator checks programs.
type Validator struct {
	d    Deps
	log  *slog.Logger
	memo *Memo
}

// New builds a Validator.
func New(d Deps) *Validator {
	if d.Runtime == nil && d.Bus != nil {
		d.Runtime = runtimeinfo.NewCache(d.Bus.JetStream())
	}
	return &Validator{d: d, log: cmp.Or(d.Logger, slog.Default()), memo: NewMemo(DefaultMemoEntries)}
}

// Run serves the code-validator queue until ctx ends.
func Run(ctx context.Context, d Deps) error {
	if d.Bus == nil {
		return errors.New("code validator: bus is required")
	}
	v := New(d)
	if info, err := v.d.Runtime.Get(ctx); err != nil {
		v.log.Warn("sandbox runtime description not available yet; imports are checked against it once it is",
			"err", err)
	} else {
		v.log.Info("sandbox runtime description loaded", "python", info.Python, "modules", len(info.Modules))
	}
	spec := agent.Spec{
		Name:        bus.AgentCodeValidator,
		Verb:        "validate",
		CommandType: bus.TypeCodeValidate,
		ResultType:  bus.TypeCodeValidated,
		Workers:     d.Workers,
	}
	return agent.Serve(ctx, d.Bus, d.TracerProvider, spec,
		func() *novav1.ValidateCode { return &novav1.ValidateCode{} },
		func(ctx context.Context, cmd *novav1.ValidateCode) (proto.Message, error) {
			return v.Validate(ctx, cmd)
		})
}

// Validate checks one command's code. It returns an error only when ctx
// ended (the command is then redelivered); a checker that cannot run is an
// outcome with status "error".
func (v *Validator) Validate(ctx context.Context, cmd *novav1.ValidateCode) (*novav1.CodeValidated, error) {
	start := time.Now()
	res := &novav1.CodeValidated{Ref: cmd.GetRef(), Outcome: &novav1.AgentOutcome{Status: "success"}}
	defer func() { res.Outcome.DurationMs = float64(time.Since(start).Microseconds()) / 1000 }()

	var info *runtimeinfo.Info
	if v.d.Runtime != nil {
		var err error
		if info, err = v.d.Runtime.Get(ctx); err != nil {
			info = nil
			// Not a failure: the other checks ran. Said here so that a
			// missing-module problem found later is not a surprise.
			res.Outcome.Error = "note: the installed-module check was skipped: the sandbox runtime description is not available (" + err.Error() + ")"
		}
	}
	spec := cmd.GetSpec()
	if !IsPython(spec.GetLanguage()) {
		res.Valid = true
		res.Outcome.Error = "note: " + spec.GetLanguage() + " code is not checked statically; its errors are found when it runs"
		return res, nil
	}
	findings, err := Check(ctx, Input{
		Code:           cmd.GetCode(),
		Stage:          cmd.GetStage(),
		NodeType:       spec.GetNodeType(),
		DecisionValues: spec.GetDecisionValues(),
		ContextKeys:    cmd.GetContextKeys(),
		Language:       spec.GetLanguage(),
		Python:         v.d.Python,
		Forbidden:      v.d.Forbidden,
		Prelude:        v.d.Prelude,
		Runtime:        info,
		Memo:           v.memo,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("validate code: %w", ctx.Err())
		}
		v.log.ErrorContext(ctx, "code not validated", "step", cmd.GetRef().GetStepId(), "err", err)
		res.Outcome.Status, res.Outcome.Error = "error", err.Error()
		return res, nil
	}
	res.Valid = len(findings) == 0
	rules := make([]string, 0, len(findings))
	for _, f := range findings {
		res.Findings = append(res.Findings, &novav1.Finding{Rule: f.Rule, Message: f.Message, Line: int32(f.Line)})
		rules = append(rules, f.Rule)
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.Bool("code.valid", res.Valid), attribute.StringSlice("code.findings", rules))
	v.log.InfoContext(ctx, "code validated", "step", cmd.GetRef().GetStepId(), "valid", res.Valid, "findings", rules,
		"runtime_known", info != nil)
	return res, nil
}
