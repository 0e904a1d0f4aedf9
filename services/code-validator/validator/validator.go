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
// input costs no process.
//
// At start it publishes its fingerprint (validatorinfo: the checker, the
// Go checks' build, the interpreter, the forbidden list and the prelude),
// and every complete verdict names it, so the graph engine can keep a
// cached code's verdict and reuse it on a hit while this same validator is
// deployed.
package validator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/agent"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/codecache"
	"github.com/novaflow/nova/pkg/runtimeinfo"
	"github.com/novaflow/nova/pkg/validatorinfo"
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
	// Replicas of the fingerprint's bucket when it is created.
	Replicas int
}

// Validator checks programs.
type Validator struct {
	d    Deps
	log  *slog.Logger
	memo *Memo
	// fingerprint names this validator in complete verdicts; empty until
	// Run computed it, or when it could not.
	fingerprint string
}

// New builds a Validator.
func New(d Deps) *Validator {
	if d.Runtime == nil && d.Bus != nil {
		d.Runtime = runtimeinfo.NewCache(d.Bus.JetStream())
	}
	return &Validator{d: d, log: cmp.Or(d.Logger, slog.Default()), memo: NewMemo(DefaultMemoEntries)}
}

// start loads the runtime description, publishes the validator's
// fingerprint and declares the code-validator queue's consumer.
func start(ctx context.Context, d Deps) (*agent.Service, error) {
	if d.Bus == nil {
		return nil, errors.New("code validator: bus is required")
	}
	v := New(d)
	if info, err := v.d.Runtime.Get(ctx); err != nil {
		v.log.Warn("sandbox runtime description not available yet; imports are checked against it once it is",
			"err", err)
	} else {
		v.log.Info("sandbox runtime description loaded", "python", info.Python, "modules", len(info.Modules))
	}
	if fp, err := v.Fingerprint(ctx); err != nil {
		v.log.Warn("validator fingerprint unknown; cached code is validated on every hit", "err", err)
	} else if err := validatorinfo.Publish(ctx, d.Bus.JetStream(), fp, d.Replicas); err != nil {
		v.log.Warn("validator fingerprint not published; cached code is validated on every hit", "err", err)
	} else {
		v.fingerprint = fp
		v.log.Info("validator fingerprint published", "fingerprint", fp)
	}
	spec := agent.Spec{
		Name:        bus.AgentCodeValidator,
		Verb:        "validate",
		CommandType: bus.TypeCodeValidate,
		ResultType:  bus.TypeCodeValidated,
		Workers:     d.Workers,
	}
	return agent.Start(ctx, d.Bus, d.TracerProvider, spec,
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
	if info != nil {
		// Every check ran: a verdict another hit of this code may reuse.
		res.ValidatorFingerprint, res.RuntimeFingerprint = v.fingerprint, codecache.RuntimeFingerprint(info)
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.Bool("code.valid", res.Valid), attribute.StringSlice("code.findings", rules))
	v.log.InfoContext(ctx, "code validated", "step", cmd.GetRef().GetStepId(), "valid", res.Valid, "findings", rules,
		"runtime_known", info != nil)
	return res, nil
}

// fingerprintVersion changes when what a verdict means changes in a way the
// build's digest cannot show (never so far).
const fingerprintVersion = "1"

// Fingerprint names this validator: everything its verdict depends on
// besides the command (the build, which holds the Go checks and the
// embedded checker, the interpreter's version, the forbidden list and the
// prelude). It runs the interpreter once.
func (v *Validator) Fingerprint(ctx context.Context) (string, error) {
	python := cmp.Or(v.d.Python, DefaultPython)
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	out, err := exec.CommandContext(cctx, python, "-c", "import sys; print(sys.version)").Output()
	if err != nil {
		return "", fmt.Errorf("ask %s its version: %w", python, err)
	}
	forbidden, prelude := v.d.Forbidden, v.d.Prelude
	if forbidden == nil {
		forbidden = DefaultForbidden
	}
	if prelude == nil {
		prelude = DefaultPrelude
	}
	return validatorinfo.Fingerprint(fingerprintVersion, checkerScript, python, strings.TrimSpace(string(out)),
		strings.Join(forbidden, ","), strings.Join(prelude, ","), strconv.Itoa(MaxCodeBytes))
}
