package workflow

import (
	"fmt"
	"math"
	"slices"
	"time"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// The kinds of failure a retry policy's on lists.
const (
	// RetryOnError: the code raised an error or broke a limit other than its
	// time (memory, processes, output size...).
	RetryOnError = "error"
	// RetryOnTimeout: the code ran past its time limit.
	RetryOnTimeout = "timeout"
	// RetryOnSandboxFault: the sandbox failed, not the code.
	RetryOnSandboxFault = "sandbox_fault"
)

var retryKinds = []string{RetryOnError, RetryOnTimeout, RetryOnSandboxFault}

// DefaultBackoffCoefficient multiplies the wait after each failed attempt
// when a retry policy's backoff_coefficient is 0.
const DefaultBackoffCoefficient = 2

// RetryPolicyOf returns the retry policy of node n: its own, else the
// workflow's, else nil (a failure is not retried).
func RetryPolicyOf(def *novav1.WorkflowDefinition, n *novav1.Node) *novav1.RetryPolicy {
	if r := n.GetRetry(); r != nil {
		return r
	}
	return def.GetRetry()
}

// RetryBackoff is how long to wait after failed attempt number attempt
// (1 for the first run) before the next one: initial_interval multiplied by
// backoff_coefficient (2 when 0) once per earlier attempt, at most
// max_interval when that is set. An initial_interval of 0 tries again at
// once. A nil policy gives 0.
func RetryBackoff(p *novav1.RetryPolicy, attempt int32) time.Duration {
	if p == nil {
		return 0
	}
	coeff := p.GetBackoffCoefficient()
	if coeff == 0 {
		coeff = DefaultBackoffCoefficient
	}
	if !(coeff >= 1) {
		coeff = 1 // not a valid policy; never shrink the wait
	}
	s := p.GetInitialIntervalSeconds() * math.Pow(coeff, float64(max(attempt, 1)-1))
	if m := p.GetMaxIntervalSeconds(); m > 0 && !(s <= m) {
		s = m
	}
	return secondsDuration(s)
}

// Retries reports whether a failure of kind after attempt number attempt (1
// for the first run) is tried again under policy p: p allows more attempts
// than attempt, and its on lists the kind (an empty on retries every kind).
//
// kind is a retry kind (error, timeout, sandbox_fault) or the error kind a
// sandbox reports, read as one: code_error and limit (a memory, process or
// output limit) are error, timeout is timeout, sandbox_fault is
// sandbox_fault. Every other failure is never retried, whatever the policy:
// budget_exceeded (a model call would not fit a budget), dead_letter,
// runtime_unavailable (the language's runtime is not deployed), an invalid
// definition, a cancelled execution, and a failure without a kind.
func Retries(p *novav1.RetryPolicy, kind string, attempt int32) bool {
	if p == nil {
		return false
	}
	k := retryKind(kind)
	if k == "" || max(attempt, 1) >= p.GetMaxAttempts() {
		return false
	}
	return len(p.GetOn()) == 0 || slices.Contains(p.GetOn(), k)
}

// retryKind maps a failure's kind to the retry kind it counts as, "" for a
// failure that is never retried.
func retryKind(kind string) string {
	switch kind {
	case RetryOnError, "code_error", "limit":
		return RetryOnError
	case RetryOnTimeout:
		return RetryOnTimeout
	case RetryOnSandboxFault:
		return RetryOnSandboxFault
	default:
		return ""
	}
}

// secondsDuration converts seconds to a Duration: 0 for what is not more
// than 0 (NaN included), the longest Duration for what does not fit.
func secondsDuration(s float64) time.Duration {
	switch {
	case !(s > 0):
		return 0
	case s >= float64(math.MaxInt64)/float64(time.Second):
		return math.MaxInt64
	default:
		return time.Duration(math.Round(s * float64(time.Second)))
	}
}

// retry reads a retry mapping; its fields are reported as "retry.<field>".
// Out-of-range values are kept for Validate to report.
func (p *parser) retry(w where, m map[string]any) *novav1.RetryPolicy {
	rm, in, ok := p.mapping(w, m, "retry", "max_attempts, initial_interval, backoff_coefficient, max_interval and/or on", retryFields)
	if !ok {
		return nil
	}
	r := &novav1.RetryPolicy{
		MaxAttempts:            p.whole(in, rm, "max_attempts"),
		InitialIntervalSeconds: p.seconds(in, rm, "initial_interval"),
		BackoffCoefficient:     p.number(in, rm, "backoff_coefficient"),
		MaxIntervalSeconds:     p.seconds(in, rm, "max_interval"),
	}
	for i, v := range p.list(in, rm, "on") {
		s, ok := v.(string)
		if !ok {
			p.addf(in, fmt.Sprintf("on[%d]", i), "must be error, timeout or sandbox_fault, got %s", kindOf(v))
			continue
		}
		r.On = append(r.On, s)
	}
	return r
}
