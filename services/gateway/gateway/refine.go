package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// POST /v1/refine is seed 004's refinement loop, for any kind of code: the
// code generator improves code from people's feedback on the fields of its
// output, the sandbox runs each attempt with the test context, and every
// feedback item is checked against the new output (resolve.go says when one
// is resolved), until all are or the attempts run out. The client follows
// on a Server-Sent Events stream of seed 004's messages. Each refinement is
// an execution of its own (refine-<uuid>, one node "refine"), recorded in
// the chain of work like an AI node: a step per generation (model, tokens,
// cost, code) and per run.

// TypeConflict says the resource is not in a state the request needs (an
// execution still running, a definition changed meanwhile).
const TypeConflict = typePrefix + "conflict"

// RefineWorkflow is the workflow name of refinement executions.
const RefineWorkflow = "refine"

// refineNode is the node id of a refinement in its chain of work.
const refineNode = "refine"

const (
	defaultRefineAttempts = 5
	maxRefineAttempts     = 10
	maxFeedbackItems      = 50
	maxFeedbackExamples   = 20
	maxFeedbackText       = 10_000
	// refineGenerationWait bounds the wait for one generation: a model with
	// tool rounds can take minutes, a code generator that is not running
	// answers never.
	refineGenerationWait = 10 * time.Minute
	// stageRefine is the code generator's refinement stage.
	stageRefine = "REFINE"
	// scriptedNote labels what the scripted model server wrote.
	scriptedNote = "[SCRIPTED model: offline rules, not a real model]"
)

// refine is POST /v1/refine.
func (g *Gateway) refine(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if p := checkQuery(r); p != nil {
		return p
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	req, p := parseRefine(body, g.limits.MaxExecuteTimeout)
	if p != nil {
		return p
	}
	if req.executionID != "" {
		if err := g.fromExecution(r, req); err != nil {
			return err
		}
	}
	if p := req.checkWrongFeedback(); p != nil {
		return p
	}
	release, p := g.streams.acquire(keyName(r))
	if p != nil {
		return p
	}
	defer release()

	rf := &refinement{g: g, req: req, id: "refine-" + uuid.NewString(), started: time.Now(), original: originalFields(req.analysis)}
	rf.input = req.context.Clone()
	if g.values != nil {
		if err := g.values.Shrink(ctx, rf.input); err != nil {
			return fmt.Errorf("store a large context value: %w", err)
		}
	}
	if rf.analysisPB, err = structpb.NewStruct(req.analysis); err != nil {
		return invalidField("outputAnalysis", "cannot be carried: "+err.Error())
	}
	// The execution exists before the stream starts: a refinement the bus
	// cannot record is refused, not streamed.
	if err := rf.publish(ctx, bus.KindWorkflowStarted, rf.id+"/started", bus.TypeWorkflowStarted, &novav1.WorkflowStarted{
		ExecutionId: rf.id, WorkflowName: RefineWorkflow, Context: rf.input.Proto(), StartedAt: timestamppb.New(rf.started),
	}); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return g.unavailable(r, "the refinement could not be recorded on the bus; try again", err)
	}
	rf.sse = startSSE(w, g.limits.Timeout)
	rf.run(ctx)
	return nil
}

// Seed 004's messages.
type (
	refineInfo struct {
		Type        string `json:"type"`
		Message     string `json:"message"`
		ExecutionID string `json:"executionId"`
		Attempt     int    `json:"attempt,omitempty"`
		MaxAttempts int    `json:"maxAttempts,omitempty"`
		Model       string `json:"model,omitempty"`
		Scripted    *bool  `json:"scripted,omitempty"`
	}
	refineProgress struct {
		Type        string         `json:"type"`
		Message     string         `json:"message"`
		ExecutionID string         `json:"executionId"`
		Attempt     int            `json:"attempt"`
		Fixed       []string       `json:"fixed"`
		Remaining   []string       `json:"remaining"`
		Error       string         `json:"error,omitempty"`
		Code        string         `json:"code,omitempty"`
		Analysis    map[string]any `json:"analysis,omitempty"`
		Model       string         `json:"model,omitempty"`
		Scripted    bool           `json:"scripted"`
	}
	refineComplete struct {
		Type        string `json:"type"`
		Message     string `json:"message"`
		ExecutionID string `json:"executionId"`
		// Attempt is the attempt whose code this is; Attempts how many ran.
		Attempt  int    `json:"attempt"`
		Attempts int    `json:"attempts"`
		Code     string `json:"code"`
		// Output is the code under seed 004's name.
		Output   string         `json:"output"`
		Language string         `json:"language"`
		Analysis map[string]any `json:"analysis"`
		// Result is the attempt's result as POST /v1/execute answers it.
		Result         json.RawMessage `json:"result,omitempty"`
		Resolved       []string        `json:"resolved"`
		Remaining      []string        `json:"remaining"`
		PartialSuccess bool            `json:"partialSuccess"`
		Model          string          `json:"model,omitempty"`
		Scripted       bool            `json:"scripted"`
		Tokens         tokenCounts     `json:"tokens"`
		CostUSD        float64         `json:"costUsd"`
		Links          refineLinks     `json:"links"`
	}
	refineError struct {
		Type        string `json:"type"`
		ExecutionID string `json:"executionId"`
		Error       string `json:"error"`
	}
	tokenCounts struct {
		Prompt     int64 `json:"prompt"`
		Completion int64 `json:"completion"`
		Total      int64 `json:"total"`
	}
	refineLinks struct {
		Execution string `json:"execution"`
	}
)

// refineAttempt is one attempt's outcome.
type refineAttempt struct {
	n         int
	code      string
	err       string
	ran       bool
	resolved  []string
	remaining []string
	analysis  map[string]any
	result    json.RawMessage
	after     jsonvalue.Object
	calls     []*novav1.ModelCall
}

// better reports whether a is a better result than b: more fields resolved,
// then code that ran, then the later attempt.
func (a *refineAttempt) better(b *refineAttempt) bool {
	if b == nil {
		return true
	}
	if len(a.resolved) != len(b.resolved) {
		return len(a.resolved) > len(b.resolved)
	}
	if a.ran != b.ran {
		return a.ran
	}
	return a.n > b.n
}

// refinement is one run of the loop.
type refinement struct {
	g          *Gateway
	req        *refineRequest
	id         string
	started    time.Time
	input      jsonvalue.Object
	analysisPB *structpb.Struct
	original   map[string]originalField
	sse        *sseWriter
	attempts   []*refineAttempt
	step       int32
}

// errFatal ends a refinement: no further attempt could do better.
type errFatal struct{ msg string }

func (e *errFatal) Error() string { return e.msg }

func (rf *refinement) run(ctx context.Context) {
	n := rf.req.maxAttempts
	rf.sse.send(refineInfo{Type: "info", ExecutionID: rf.id, MaxAttempts: n, Message: fmt.Sprintf(
		"Refinement %s of %s code (%s): feedback on %d field(s), at most %d attempts; its chain of work is GET %s",
		rf.id, rf.req.agentType, rf.req.language, len(rf.req.feedback), n, executionLinks(rf.id).Self)})
	for i := 1; i <= n; i++ {
		rf.sse.send(refineInfo{Type: "info", ExecutionID: rf.id, Attempt: i, MaxAttempts: n,
			Message: fmt.Sprintf("Refinement attempt %d/%d", i, n)})
		a, err := rf.attempt(ctx, i)
		if a != nil {
			rf.attempts = append(rf.attempts, a)
		}
		if err != nil {
			rf.fail(ctx, err)
			return
		}
		if a.ran && len(a.remaining) == 0 {
			rf.complete(a, false)
			return
		}
		msg := fmt.Sprintf("Fixed %d fields, %d remaining", len(a.resolved), len(a.remaining))
		if a.err != "" {
			msg = fmt.Sprintf("Attempt %d failed; %d fields remaining", i, len(a.remaining))
		}
		model, scripted := modelOf(a.calls)
		rf.sse.send(refineProgress{Type: "progress", Message: msg, ExecutionID: rf.id, Attempt: i,
			Fixed: a.resolved, Remaining: a.remaining, Error: a.err, Code: a.code, Analysis: a.analysis,
			Model: model, Scripted: scripted})
	}
	var best *refineAttempt
	for _, a := range rf.attempts {
		if a.better(best) {
			best = a
		}
	}
	if strings.TrimSpace(best.code) == "" {
		rf.fail(ctx, &errFatal{fmt.Sprintf("no attempt produced code; the last failed with: %s", best.err)})
		return
	}
	rf.complete(best, true)
}

// attempt asks the code generator for improved code, runs it and checks
// the feedback against its output. A failure of either is the attempt's
// outcome; only what no further attempt can overcome is an error, which
// comes with the attempt as far as it went once its code was written.
func (rf *refinement) attempt(ctx context.Context, n int) (*refineAttempt, error) {
	a := &refineAttempt{n: n, resolved: []string{}, remaining: fieldNames(rf.req.feedback)}
	gen, err := rf.generate(ctx, n)
	if err != nil {
		return nil, err
	}
	a.code, a.calls = gen.GetCode(), gen.GetOutcome().GetModelCalls()
	if gen.GetOutcome().GetStatus() == "error" || strings.TrimSpace(a.code) == "" {
		a.err = "code generation failed: " + cmp.Or(gen.GetOutcome().GetError(), "the model returned no code")
		return a, nil
	}
	model, scripted := modelOf(a.calls)
	written := "Testing improved code..."
	if model != "" {
		written += " (written by " + model
		if scripted {
			written += " " + scriptedNote
		}
		written += ")"
	}
	rf.sse.send(refineInfo{Type: "info", ExecutionID: rf.id, Attempt: n, Message: written, Model: model, Scripted: &scripted})
	res, err := rf.execute(ctx, n, a)
	if err != nil {
		a.err = err.Error()
		return a, err
	}
	if !res.Success {
		a.err = "the code failed when run: " + res.Error
		if res.Stack != "" {
			a.err += "\n" + tailText(res.Stack, 3000)
		}
		return a, nil
	}
	a.ran, a.analysis, a.result = true, res.Analysis, res.Result
	a.after, _ = jsonvalue.ParseObject(res.Context)
	output, err := analysedOutput(res)
	if err != nil {
		a.ran, a.err = false, "the output cannot be read: "+err.Error()
		return a, nil
	}
	a.resolved, a.remaining = checkFeedback(rf.req.feedback, output, rf.original)
	return a, nil
}

// analysedOutput is the value the output analysis describes: the value
// JavaScript code gave, or for Python the only key it set (the updates when
// it set several).
func analysedOutput(res *executeResponse) (any, error) {
	v, err := jsonvalue.Decode(res.Result)
	if err != nil {
		return nil, err
	}
	if res.Items == nil { // Python: the updates
		if m, ok := v.(map[string]any); ok && len(m) == 1 {
			for _, only := range m {
				return only, nil
			}
		}
	}
	return v, nil
}

// generate asks the code generator for one attempt's code and records the
// step.
func (rf *refinement) generate(ctx context.Context, n int) (*novav1.CodeGenerated, error) {
	rf.step++
	ref := &novav1.StepRef{ExecutionId: rf.id, NodeId: refineNode, StepId: fmt.Sprintf("%s/%s/1/%d", rf.id, refineNode, rf.step),
		Visit: 1, Attempt: int32(n), StepNumber: rf.step, ReplyKind: bus.ReplyKind(bus.AgentCodeGenerator)}
	cmd := &novav1.GenerateCode{
		Ref:   ref,
		Spec:  &novav1.TaskSpec{Task: "Refine " + rf.req.agentType + " code from field feedback", NodeType: "action", Model: rf.req.model, Language: rf.req.language},
		Stage: stageRefine,
		Refinement: &novav1.Refinement{
			AgentType: rf.req.agentType, OriginalCode: rf.req.code, OutputAnalysis: rf.analysisPB,
			Feedback: feedbackProto(rf.req.feedback), TestContext: rf.input.Proto(), Attempts: rf.history(),
		},
	}
	if err := rf.g.bus.PublishProto(ctx, bus.CommandSubject(bus.AgentCodeGenerator), ref.StepId+"/cmd", bus.TypeCodeGenerate, cmd,
		map[string]string{"executionid": rf.id}); err != nil {
		return nil, fmt.Errorf("send the refinement to the code generator: %w", err)
	}
	got, stop, err := awaitStep[novav1.CodeGenerated](ctx, rf.g.bus, bus.EventSubject(rf.id, ref.ReplyKind), ref.StepId,
		func(m *novav1.CodeGenerated) string { return m.GetRef().GetStepId() })
	if err != nil {
		return nil, err
	}
	defer stop()
	res, err := rf.wait(ctx, got, refineGenerationWait, "the code generator")
	if err != nil {
		return nil, err
	}
	out := res.(*novav1.CodeGenerated)
	outcome := out.GetOutcome()
	calls := outcome.GetModelCalls()
	output := map[string]any{"stage": cmp.Or(out.GetStage(), stageRefine), "prompt_bytes": float64(out.GetPromptBytes()),
		"code_bytes": float64(len(out.GetCode()))}
	step := &novav1.StepCompleted{
		ExecutionId: rf.id, NodeId: refineNode, Visit: 1, StepNumber: ref.StepNumber, StepName: "code_refinement",
		AgentName: bus.AgentCodeGenerator, AttemptNumber: int32(n), GeneratedCode: out.GetCode(), Status: cmp.Or(outcome.GetStatus(), "success"),
		ErrorMessage: outcome.GetError(), ExecutionTimeMs: outcome.GetDurationMs(), Timestamp: timestamppb.Now(), StepId: ref.StepId,
	}
	var cached int64
	for _, c := range calls {
		step.ModelUsed = c.GetModel()
		step.TokensInput += c.GetPromptTokens()
		step.TokensOutput += c.GetCompletionTokens()
		step.CostUsd += c.GetCostUsd()
		cached += c.GetCachedTokens()
	}
	if len(calls) > 0 {
		_, scripted := modelOf(calls)
		output["model_calls"], output["cached_tokens"], output["scripted"] = float64(len(calls)), float64(cached), scripted
	}
	step.InputData, _ = structpb.NewStruct(map[string]any{"stage": stageRefine, "agent_type": rf.req.agentType, "language": rf.req.language,
		"feedback_fields": stringsToAny(fieldNames(rf.req.feedback)), "history_attempts": float64(n - 1)})
	step.OutputData, _ = structpb.NewStruct(output)
	if tools := out.GetToolCalls(); len(tools) > 0 {
		list := &structpb.ListValue{}
		for _, tc := range tools {
			v, _ := structpb.NewValue(map[string]any{"name": tc.GetName(), "arguments": tc.GetArguments(), "result": tc.GetResult()})
			list.Values = append(list.Values, v)
		}
		step.ToolCalls = list
	}
	if err := rf.publish(ctx, bus.KindStepCompleted, ref.StepId+"/step", bus.TypeStepCompleted, step); err != nil {
		return nil, fmt.Errorf("record the generation step: %w", err)
	}
	return out, nil
}

// execute runs one attempt's code in the sandbox and records the step.
func (rf *refinement) execute(ctx context.Context, n int, a *refineAttempt) (*executeResponse, error) {
	rf.step++
	stepID := fmt.Sprintf("%s/%s/1/%d", rf.id, refineNode, rf.step)
	cmd := &novav1.ExecuteCode{
		ExecutionId: rf.id, NodeId: refineNode, StepId: stepID, Visit: 1, Attempt: int32(n), StepNumber: rf.step,
		Language: rf.req.language, Code: a.code, Context: rf.input.Proto(), TimeoutSeconds: rf.req.timeout.Seconds(),
		Network: rf.req.network, AllowHosts: rf.req.allowHosts, Stage: "TASK", ReplyKind: bus.ReplyKind(bus.AgentSandbox),
	}
	if err := rf.g.bus.PublishProto(ctx, bus.CommandSubject(bus.AgentSandbox), stepID+"/cmd", bus.TypeSandboxExecute, cmd,
		map[string]string{"executionid": rf.id}); err != nil {
		return nil, fmt.Errorf("send the code to the sandbox: %w", err)
	}
	got, stop, err := awaitStep[novav1.CodeExecuted](ctx, rf.g.bus, bus.EventSubject(rf.id, cmd.ReplyKind), stepID,
		func(m *novav1.CodeExecuted) string { return m.GetStepId() })
	if err != nil {
		return nil, err
	}
	defer stop()
	m, err := rf.wait(ctx, got, rf.req.timeout+rf.g.limits.Timeout, "the sandbox")
	if err != nil {
		return nil, err
	}
	r := m.(*novav1.CodeExecuted)
	if r.GetErrorKind() == "runtime_unavailable" {
		return nil, &errFatal{"the sandbox cannot run " + rf.req.language + ": " + r.GetError()}
	}
	res, err := rf.g.executeResponse(ctx, rf.req.context, r)
	if err != nil {
		return nil, err
	}
	output := map[string]any{"status": r.GetStatus(), "updated_keys": stringsToAny(jsonvalue.MustObject(r.GetContextUpdates()).Keys()),
		"sandbox_id": r.GetSandboxId()}
	for k, v := range map[string]string{"error_kind": r.GetErrorKind(), "traceback": r.GetTraceback(), "stdout": r.GetStdout(),
		"stderr": r.GetStderr(), "limit": r.GetLimit()} {
		if v != "" {
			output[k] = v
		}
	}
	if res.Success {
		if v, err := analysedOutput(res); err == nil {
			resolved, remaining := checkFeedback(rf.req.feedback, v, rf.original)
			output["resolved"], output["remaining"] = stringsToAny(resolved), stringsToAny(remaining)
		}
	}
	status := "success"
	if !res.Success {
		status = "failed"
	}
	step := &novav1.StepCompleted{
		ExecutionId: rf.id, NodeId: refineNode, Visit: 1, StepNumber: rf.step, StepName: "code_execution",
		AgentName: bus.AgentSandbox, AttemptNumber: int32(n), GeneratedCode: a.code, SandboxId: r.GetSandboxId(), Status: status,
		ErrorMessage: r.GetError(), ExecutionTimeMs: r.GetDurationMs(), Timestamp: timestamppb.Now(), StepId: stepID,
	}
	step.InputData, _ = structpb.NewStruct(map[string]any{"language": rf.req.language, "context_keys": stringsToAny(rf.input.Keys())})
	step.OutputData, _ = structpb.NewStruct(output)
	if err := rf.publish(ctx, bus.KindStepCompleted, stepID+"/step", bus.TypeStepCompleted, step); err != nil {
		return nil, fmt.Errorf("record the execution step: %w", err)
	}
	return res, nil
}

// wait waits for a step's answer, keeping the stream alive meanwhile.
func (rf *refinement) wait(ctx context.Context, got <-chan proto.Message, limit time.Duration, who string) (proto.Message, error) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case m := <-got:
			return m, nil
		case <-tick.C:
			rf.sse.keepAlive()
		case <-deadline.C:
			return nil, &errFatal{fmt.Sprintf("%s did not answer within %s; is it running?", who, limit)}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// awaitStep watches subject of the events stream, from its start, for the
// answer to step stepID (earlier attempts' answers share the subject). It
// may start after the command is published: the stream keeps the answer
// (as POST /v1/execute and a start, the command goes first, without
// waiting for a watch to be made).
func awaitStep[M any, PM interface {
	*M
	proto.Message
}](ctx context.Context, b *bus.Bus, subject, stepID string, stepOf func(PM) string) (<-chan proto.Message, func(), error) {
	got := make(chan proto.Message, 1)
	stop, err := b.Watch(ctx, "watch "+subject, bus.StreamEvents,
		jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}},
		func(_ jetstream.Msg, ev *event.Event) {
			msg := PM(new(M))
			if bus.Decode(*ev, msg) == nil && stepOf(msg) == stepID {
				select {
				case got <- msg:
				default:
				}
			}
		})
	if err != nil {
		return nil, nil, err
	}
	return got, stop, nil
}

// history is every attempt so far, for the next generation.
func (rf *refinement) history() []*novav1.RefineAttempt {
	out := make([]*novav1.RefineAttempt, 0, len(rf.attempts))
	for _, a := range rf.attempts {
		h := &novav1.RefineAttempt{Attempt: int32(a.n), Code: a.code, Error: a.err, Resolved: a.resolved, Remaining: a.remaining}
		if a.analysis != nil {
			h.OutputAnalysis, _ = structpb.NewStruct(a.analysis)
		}
		out = append(out, h)
	}
	return out
}

func (rf *refinement) complete(a *refineAttempt, partial bool) {
	u := rf.usage()
	msg := fmt.Sprintf("All %d fields resolved in attempt %d", len(a.resolved), a.n)
	if partial {
		msg = fmt.Sprintf("%d of %d fields resolved after %d attempts; the best attempt was %d", len(a.resolved),
			len(rf.req.feedback), len(rf.attempts), a.n)
	}
	if u.scripted {
		msg += " " + scriptedNote
	}
	analysis := a.analysis
	if analysis == nil {
		analysis = map[string]any{}
	}
	rf.sse.send(refineComplete{Type: "complete", Message: msg, ExecutionID: rf.id, Attempt: a.n, Attempts: len(rf.attempts),
		Code: a.code, Output: a.code, Language: rf.req.language, Analysis: analysis, Result: a.result, Resolved: a.resolved, Remaining: a.remaining,
		PartialSuccess: partial, Model: u.model, Scripted: u.scripted, Tokens: u.tokens, CostUSD: u.cost,
		Links: refineLinks{Execution: executionLinks(rf.id).Self}})
	errMsg := ""
	if len(a.remaining) > 0 {
		errMsg = fmt.Sprintf("feedback on %s is unresolved after %d attempts", strings.Join(a.remaining, ", "), len(rf.attempts))
	}
	rf.finish(a, errMsg, map[string]any{"partial_success": partial})
}

// usage is what the model calls of every attempt so far cost.
type usage struct {
	model    string
	scripted bool
	calls    int
	tokens   tokenCounts
	cached   int64
	cost     float64
}

func (rf *refinement) usage() usage {
	var u usage
	var calls []*novav1.ModelCall
	for _, at := range rf.attempts {
		calls = append(calls, at.calls...)
	}
	for _, c := range calls {
		u.tokens.Prompt += c.GetPromptTokens()
		u.tokens.Completion += c.GetCompletionTokens()
		u.cached += c.GetCachedTokens()
		u.cost += c.GetCostUsd()
	}
	u.tokens.Total = u.tokens.Prompt + u.tokens.Completion
	u.model, u.scripted = modelOf(calls)
	u.calls = len(calls)
	return u
}

// fail ends the stream with an error message.
func (rf *refinement) fail(ctx context.Context, err error) {
	msg := err.Error()
	var fatal *errFatal
	switch {
	case errors.As(err, &fatal):
	case errors.Is(err, context.DeadlineExceeded):
		msg = "the refinement took longer than the gateway allows a stream"
	case ctx.Err() != nil:
		msg = "the client went away"
	default:
		rf.g.log.ErrorContext(ctx, "refinement failed", "execution", rf.id, "err", err)
		msg = "the refinement failed: the bus could not be used"
	}
	rf.sse.send(refineError{Type: "error", ExecutionID: rf.id, Error: msg})
	var last *refineAttempt
	if len(rf.attempts) > 0 {
		last = rf.attempts[len(rf.attempts)-1]
	}
	rf.finish(last, msg, map[string]any{})
}

// finish records the refinement's node and its completion, also when the
// client went away.
func (rf *refinement) finish(a *refineAttempt, errMsg string, meta map[string]any) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(context.Background()), rf.g.limits.Timeout)
	defer cancel()
	now := timestamppb.Now()
	nodeStatus, status := "success", "succeeded"
	if errMsg != "" {
		nodeStatus, status = "failed", "failed"
	}
	nc := &novav1.NodeCompleted{
		ExecutionId: rf.id, NodeId: refineNode, NodeType: "action", Visit: 1, Status: nodeStatus, InputContext: rf.input.Proto(),
		OutputResult: rf.input.Proto(), ErrorMessage: errMsg, Sequence: 1, StartedAt: timestamppb.New(rf.started), CompletedAt: now,
		ExecutionTimeMs: float64(time.Since(rf.started).Microseconds()) / 1000,
	}
	// Named as an AI node's ai_metadata, so that readers of the chain of
	// work (nova chain) show a refinement as they show an AI node.
	meta["prompt_task"] = fmt.Sprintf("refine %s code from feedback on %s", rf.req.agentType, strings.Join(fieldNames(rf.req.feedback), ", "))
	meta["stages_used"] = float64(1)
	meta["agent_type"], meta["language"], meta["refinement"] = rf.req.agentType, rf.req.language, true
	meta["attempts"], meta["status"] = float64(len(rf.attempts)), nodeStatus
	meta["feedback_fields"] = stringsToAny(fieldNames(rf.req.feedback))
	if rf.req.executionID != "" {
		meta["refined_execution"], meta["refined_node"] = rf.req.executionID, rf.req.nodeID
	}
	if a != nil {
		nc.CodeExecuted = a.code
		meta["generated_code"], meta["best_attempt"] = a.code, float64(a.n)
		meta["resolved"], meta["remaining"] = stringsToAny(a.resolved), stringsToAny(a.remaining)
		if a.after != nil {
			nc.OutputResult = a.after.Proto()
		}
		if a.analysis != nil {
			nc.OutputAnalysis, _ = structpb.NewStruct(a.analysis)
		}
	}
	u := rf.usage()
	meta["model"], meta["scripted"], meta["cost_usd"], meta["model_calls"] = u.model, u.scripted, u.cost, float64(u.calls)
	meta["tokens"] = map[string]any{"prompt": float64(u.tokens.Prompt), "completion": float64(u.tokens.Completion),
		"cached": float64(u.cached), "total": float64(u.tokens.Total)}
	nc.AiMetadata, _ = structpb.NewStruct(meta)
	wc := &novav1.WorkflowCompleted{
		ExecutionId: rf.id, WorkflowName: RefineWorkflow, Status: status, Context: nc.OutputResult, Path: []string{refineNode},
		Nodes: []*novav1.NodeSummary{{Id: refineNode, Status: nodeStatus, Attempts: int32(len(rf.attempts)), Error: errMsg, Visits: 1}},
		Error: errMsg, StartedAt: timestamppb.New(rf.started), CompletedAt: now,
	}
	err := rf.publish(ctx, bus.KindNodeCompleted, fmt.Sprintf("%s/%s/1/completed", rf.id, refineNode), bus.TypeNodeCompleted, nc)
	if err == nil {
		err = rf.publish(ctx, bus.KindWorkflowCompleted, rf.id+"/completed", bus.TypeWorkflowCompleted, wc)
	}
	if err != nil {
		rf.g.log.ErrorContext(ctx, "refinement not recorded as completed", "execution", rf.id, "err", err)
	}
}

func (rf *refinement) publish(ctx context.Context, kind, id, typ string, msg proto.Message) error {
	return rf.g.bus.PublishProto(ctx, bus.EventSubject(rf.id, kind), id, typ, msg, map[string]string{"executionid": rf.id})
}

// modelOf names the model of calls and whether the scripted server answered
// any of them.
func modelOf(calls []*novav1.ModelCall) (model string, scripted bool) {
	for _, c := range calls {
		model = c.GetModel()
		scripted = scripted || c.GetScripted()
	}
	return model, scripted
}

func feedbackProto(fb []fieldFeedback) []*novav1.FieldFeedback {
	out := make([]*novav1.FieldFeedback, len(fb))
	for i, f := range fb {
		p := &novav1.FieldFeedback{Field: f.Field, Issue: f.Issue, CorrectSelector: f.CorrectSelector,
			CorrectExpression: f.CorrectExpression, CorrectPattern: f.CorrectPattern, Notes: f.Notes, CorrectValue: jsonvalue.Proto(f.CorrectValue)}
		for _, e := range f.Examples {
			p.Examples = append(p.Examples, &novav1.FeedbackExample{Input: jsonvalue.Proto(e.Input), ExpectedOutput: jsonvalue.Proto(e.ExpectedOutput)})
		}
		out[i] = p
	}
	return out
}

func fieldNames(fb []fieldFeedback) []string {
	out := make([]string, len(fb))
	for i, f := range fb {
		out[i] = f.Field
	}
	return out
}

func stringsToAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// tailText keeps the end of s (a traceback's end names the error).
func tailText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
