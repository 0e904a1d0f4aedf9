package service

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/sandbox/runner"
)

// executionMetrics count and time programs by outcome and language: what an
// operator watches to tell broken node code (code_error) from a broken
// sandbox (sandbox_fault, runtime_unavailable) or tight limits (timeout, limit).
type executionMetrics struct {
	executions metric.Int64Counter
	duration   metric.Float64Histogram
}

func newExecutionMetrics(mp metric.MeterProvider) (executionMetrics, error) {
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter("github.com/novaflow/nova/services/sandbox/service")
	var em executionMetrics
	var err error
	if em.executions, err = m.Int64Counter("nova.sandbox.executions",
		metric.WithDescription("Programs run, by outcome (success, code_error, timeout, limit, sandbox_fault, runtime_unavailable, cancelled) and language")); err != nil {
		return em, err
	}
	if em.duration, err = m.Float64Histogram("nova.sandbox.execution.duration",
		metric.WithUnit("s"), metric.WithDescription("Time to run a program, resolving and storing large values included"),
		metric.WithExplicitBucketBoundaries(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)); err != nil {
		return em, err
	}
	return em, nil
}

func (m executionMetrics) record(ctx context.Context, language, outcome string, d time.Duration) {
	attrs := metric.WithAttributes(attribute.String("outcome", outcome), attribute.String("language", languageLabel(language)))
	m.executions.Add(ctx, 1, attrs)
	m.duration.Record(ctx, d.Seconds(), attrs)
}

// outcomeOf is a run's outcome: success, the runner's error kind, or
// sandbox_fault when this replica could not run the program at all (the
// command is then redelivered).
func outcomeOf(res *novav1.CodeExecuted, err error) string {
	switch {
	case err != nil:
		return runner.KindSandboxFault
	case res.GetStatus() == runner.StatusSuccess:
		return runner.StatusSuccess
	case res.GetErrorKind() != "":
		return res.GetErrorKind()
	default:
		return runner.KindCodeError
	}
}

// languageLabel bounds the label's values whatever a command says.
func languageLabel(language string) string {
	switch language {
	case "", "python", "python3":
		return "python"
	case "javascript", "js":
		return "javascript"
	default:
		return "other"
	}
}
