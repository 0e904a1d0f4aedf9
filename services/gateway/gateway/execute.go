package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/valueref"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// DefaultMaxExecuteTimeout bounds the timeout of POST /v1/execute.
const DefaultMaxExecuteTimeout = 60 * time.Second

// defaultExecuteTimeout is the timeout of a run that names none.
const defaultExecuteTimeout = 30 * time.Second

// executeRequest is a checked POST /v1/execute body, with NOVA's language
// and context.
type executeRequest struct {
	code     string
	language string
	url      string
	context  jsonvalue.Object
	timeout  time.Duration
}

var executeFields = []string{"code", "language", "args", "url", "context", "timeout"}

// executeResponse is the execute response with its output analysis,
// and what NOVA adds: the context after the run, the kind of failure and
// which limit ended it, the process's own output.
type executeResponse struct {
	Success bool `json:"success"`
	// Result is the value the code gave (JavaScript), or for Python the
	// context members it set or changed.
	Result json.RawMessage `json:"result"`
	// Items is the result as an array (JavaScript).
	Items    json.RawMessage `json:"items,omitempty"`
	Logs     []string        `json:"logs"`
	Duration float64         `json:"duration"`
	Error    string          `json:"error,omitempty"`
	Stack    string          `json:"stack,omitempty"`
	// Analysis is the output's shape: type, isStructured, itemCount and
	// fields (name, type, required, coverage, examples).
	Analysis  map[string]any  `json:"analysis"`
	Context   json.RawMessage `json:"context"`
	ErrorKind string          `json:"errorKind,omitempty"`
	Limit     string          `json:"limit,omitempty"`
	Stdout    string          `json:"stdout,omitempty"`
	Stderr    string          `json:"stderr,omitempty"`
	SandboxID string          `json:"sandboxId,omitempty"`
}

// parseExecute reads the body of POST /v1/execute, naming every field at
// fault. The context keeps every number's text.
func parseExecute(body []byte, maxTimeout time.Duration) (*executeRequest, *Problem) {
	members, err := jsonvalue.ParseObject(body)
	if err != nil {
		return nil, invalid(fmt.Sprintf("the body is not a JSON object: %v", err),
			FieldError{Field: "code", Detail: "a JSON object with code is required"})
	}
	var errs []FieldError
	for _, k := range members.Keys() {
		if !slices.Contains(executeFields, k) {
			errs = append(errs, FieldError{Field: k, Detail: "unknown field (known: " + strings.Join(executeFields, ", ") + ")"})
		}
	}
	req := &executeRequest{language: "javascript", context: jsonvalue.Object{}, timeout: defaultExecuteTimeout}
	str := func(name string, dst *string) {
		raw, ok := members[name]
		if !ok {
			return
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			errs = append(errs, FieldError{Field: name, Detail: "must be a string"})
		}
	}
	before := len(errs)
	str("code", &req.code)
	if len(errs) == before && strings.TrimSpace(req.code) == "" {
		errs = append(errs, FieldError{Field: "code", Detail: "the code to run is required"})
	}
	str("language", &req.language)
	if req.language != "python" && req.language != "javascript" {
		errs = append(errs, FieldError{Field: "language", Detail: fmt.Sprintf("%q is not python or javascript", req.language)})
	}
	if raw, ok := members["context"]; ok {
		c, err := jsonvalue.ParseObject(raw)
		if err != nil {
			errs = append(errs, FieldError{Field: "context", Detail: "must be a JSON object"})
		} else {
			req.context = c
		}
	}
	// The code is called with one argument, the context: args (the
	// arguments of the exported function) may hold one object, whose
	// members join the context.
	if raw, ok := members["args"]; ok {
		var args []json.RawMessage
		if err := json.Unmarshal(raw, &args); err != nil || len(args) > 1 {
			errs = append(errs, FieldError{Field: "args", Detail: "must be an array of at most one object: the exported function is called with one argument, the context, which that object's members join"})
		} else if len(args) == 1 {
			if arg, err := jsonvalue.ParseObject(args[0]); err != nil {
				errs = append(errs, FieldError{Field: "args[0]", Detail: "must be a JSON object (its members join the context)"})
			} else {
				for _, k := range arg.Keys() {
					req.context[k] = arg[k]
				}
			}
		}
	}
	str("url", &req.url)
	if req.url != "" {
		u, err := url.Parse(req.url)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, FieldError{Field: "url", Detail: "must be an absolute http or https URL"})
		} else {
			raw, _ := json.Marshal(req.url)
			req.context["url"] = raw
		}
	}
	if raw, ok := members["timeout"]; ok {
		var ms float64
		if err := json.Unmarshal(raw, &ms); err != nil || ms <= 0 || time.Duration(ms*float64(time.Millisecond)) > maxTimeout {
			errs = append(errs, FieldError{Field: "timeout", Detail: fmt.Sprintf("must be a number of milliseconds, more than 0 and at most %d", maxTimeout.Milliseconds())})
		} else {
			req.timeout = time.Duration(ms * float64(time.Millisecond))
		}
	}
	if len(errs) > 0 {
		return nil, invalid(problemsDetail("the request", len(errs)), errs...)
	}
	return req, nil
}

// execute is POST /v1/execute: the execute server for code outside
// any workflow. The code runs in the sandbox service, sent as a command on
// the bus like every node's code, with the same isolation and limits; with
// a url, the sandbox may reach that URL's host and no other.
func (g *Gateway) execute(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if p := checkQuery(r); p != nil {
		return p
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	req, p := parseExecute(body, g.limits.MaxExecuteTimeout)
	if p != nil {
		return p
	}
	res, err := g.runCode(ctx, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// runCode runs one program in the sandbox and waits for its result.
func (g *Gateway) runCode(ctx context.Context, req *executeRequest) (*executeResponse, error) {
	input := req.context.Clone()
	if g.values != nil {
		if err := g.values.Shrink(ctx, input); err != nil {
			return nil, fmt.Errorf("store a large context value: %w", err)
		}
	}
	id := "run-" + uuid.NewString()
	cmd := &novav1.ExecuteCode{
		ExecutionId: id, NodeId: "execute", StepId: id + "/execute/1/1", Visit: 1, Attempt: 1, StepNumber: 1,
		Language: req.language, Code: req.code, Context: input.Proto(), TimeoutSeconds: req.timeout.Seconds(),
		Stage: "TASK", ReplyKind: bus.ReplyKind(bus.AgentSandbox),
	}
	if req.url != "" {
		u, _ := url.Parse(req.url)
		cmd.Network, cmd.AllowHosts = true, []string{u.Host}
	}
	// Waited for before the command goes (the run's id is new, so its answer
	// cannot come before), with the gateway's one consumer of the sandbox's
	// answers (bus.Waits): a run costs the server no consumer of its own.
	done, stop, err := bus.WaitFirst[novav1.CodeExecuted](ctx, g.sandboxReplies, bus.EventSubject(id, cmd.ReplyKind))
	if err != nil {
		return nil, fmt.Errorf("wait for the sandbox's answer: %w", err)
	}
	defer stop()
	if err := g.bus.PublishProto(ctx, bus.CommandSubject(bus.AgentSandbox), cmd.StepId+"/cmd", bus.TypeSandboxExecute, cmd,
		map[string]string{bus.ExtensionExecutionID: id}); err != nil {
		return nil, fmt.Errorf("send the code to the sandbox: %w", err)
	}
	var r *novav1.CodeExecuted
	select {
	case r = <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.executeResponse(ctx, req.context, r)
}

// executeResponse describes a sandbox result as the execute response, large
// values read back from the object store.
func (g *Gateway) executeResponse(ctx context.Context, input jsonvalue.Object, r *novav1.CodeExecuted) (*executeResponse, error) {
	// The input holds no references (it is the request's context); only
	// the updates may, and each is read once.
	updates := jsonvalue.MustObject(r.GetContextUpdates())
	if g.values != nil {
		if err := g.values.Expand(ctx, updates); err != nil {
			return nil, fmt.Errorf("read a large result value: %w", err)
		}
	}
	after := input.Clone()
	for _, k := range r.GetDeletedKeys() {
		delete(after, k)
	}
	after.Merge(updates)
	res := &executeResponse{
		Success:   r.GetStatus() == "success",
		Logs:      r.GetLogs(),
		Duration:  r.GetDurationMs(),
		Error:     r.GetError(),
		Stack:     r.GetTraceback(),
		Analysis:  r.GetOutputAnalysis().AsMap(),
		Context:   after.Bytes(),
		ErrorKind: r.GetErrorKind(),
		Limit:     r.GetLimit(),
		Stdout:    r.GetStdout(),
		Stderr:    r.GetStderr(),
		SandboxID: r.GetSandboxId(),
	}
	if res.Logs == nil {
		res.Logs = []string{}
	}
	if res.Analysis == nil {
		res.Analysis = map[string]any{}
	}
	var err error
	if r.GetResult() != nil {
		if res.Result, err = g.valueOf(ctx, r.GetResult()); err != nil {
			return nil, err
		}
	} else {
		res.Result = updates.Bytes()
	}
	if r.GetItems() != nil {
		if res.Items, err = g.valueOf(ctx, r.GetItems()); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// valueOf is a value as JSON, read from the object store when the sandbox
// kept it there by reference.
func (g *Gateway) valueOf(ctx context.Context, v *novav1.JSONValue) (json.RawMessage, error) {
	raw := json.RawMessage(v.GetRaw())
	if ref, ok := valueref.RawRef(raw); ok && g.values != nil {
		data, err := g.values.Get(ctx, ref)
		if err != nil {
			return nil, fmt.Errorf("read a large result value: %w", err)
		}
		return data, nil
	}
	return raw, nil
}
