// Package llm is NOVA's client of OpenAI-compatible chat APIs (OpenAI, Azure
// OpenAI, Ollama, vLLM, llama.cpp, and NOVA's scripted server). On top of
// github.com/sashabaranov/go-openai it adds what every agent needs: transient
// errors retried with backoff (not counted as attempts), a tool-calling loop,
// token and cost accounting from the API's usage and a price table, the
// max_completion_tokens rule for reasoning models, and metrics.
package llm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// ScriptedFingerprint is the system_fingerprint of NOVA's scripted server;
// answers carrying it are marked scripted wherever they are shown.
const ScriptedFingerprint = "nova-scripted"

// AgentHeader names the calling agent on every request.
const AgentHeader = "X-Nova-Agent"

// Config configures a Client.
type Config struct {
	// APIKey is sent as a bearer token (Azure: api-key).
	APIKey string
	// BaseURL of the API, e.g. https://api.openai.com/v1,
	// http://localhost:11434/v1 (Ollama) or the scripted server's URL.
	BaseURL string
	// AzureAPIVersion switches to Azure OpenAI when set.
	AzureAPIVersion string
	// Agent names the caller (sent in the X-Nova-Agent header, used in metrics).
	Agent string
	// Timeout of one HTTP call (default 120s).
	Timeout time.Duration
	// MaxRetries of transient errors per call (default 4).
	MaxRetries int
	// Prices estimates cost; nil means DefaultPrices.
	Prices        PriceTable
	Logger        *slog.Logger
	MeterProvider metric.MeterProvider
	// TracerProvider records a span per model call with the OpenTelemetry
	// GenAI attributes (nil: no spans).
	TracerProvider trace.TracerProvider
	// HTTPClient overrides the transport (tests).
	HTTPClient *http.Client
}

// Client calls a chat-completions API.
type Client struct {
	oc      *openai.Client
	cfg     Config
	metrics clientMetrics
	tracer  trace.Tracer
	// sleep waits between retries; tests shorten it.
	sleep func(context.Context, time.Duration) error
}

// New builds a client.
func New(cfg Config) (*Client, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 120 * time.Second
	}
	if cfg.MaxRetries <= 0 {
		cfg.MaxRetries = 4
	}
	if cfg.Prices == nil {
		cfg.Prices = DefaultPrices()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = metricnoop.NewMeterProvider()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = tracenoop.NewTracerProvider()
	}
	var oc openai.ClientConfig
	if cfg.AzureAPIVersion != "" {
		if cfg.BaseURL == "" {
			return nil, errors.New("llm: Azure OpenAI needs a base URL")
		}
		oc = openai.DefaultAzureConfig(cfg.APIKey, cfg.BaseURL)
		oc.APIVersion = cfg.AzureAPIVersion
	} else {
		oc = openai.DefaultConfig(cfg.APIKey)
		if cfg.BaseURL != "" {
			oc.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
		}
	}
	base := cfg.HTTPClient
	if base == nil {
		base = &http.Client{}
	}
	transport := base.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	oc.HTTPClient = &http.Client{
		Transport: agentTransport{agent: cfg.Agent, next: transport},
		Timeout:   cfg.Timeout,
	}
	m, err := newClientMetrics(cfg.MeterProvider.Meter("github.com/novaflow/nova/pkg/llm"))
	if err != nil {
		return nil, err
	}
	return &Client{oc: openai.NewClientWithConfig(oc), cfg: cfg, metrics: m, sleep: sleepCtx,
		tracer: cfg.TracerProvider.Tracer("github.com/novaflow/nova/pkg/llm")}, nil
}

type agentTransport struct {
	agent string
	next  http.RoundTripper
}

func (t agentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.agent != "" {
		r = r.Clone(r.Context())
		r.Header.Set(AgentHeader, t.agent)
	}
	return t.next.RoundTrip(r)
}

// Tool is a function the model may call.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the arguments.
	Parameters any
	// Handle answers a call; its error is told to the model, not returned.
	Handle func(ctx context.Context, arguments string) (string, error)
}

// Request is one conversation turn (with as many tool rounds as it takes).
type Request struct {
	Model    string
	Messages []openai.ChatCompletionMessage
	Tools    []Tool
	// MaxTokens bounds the answer (sent as max_completion_tokens to
	// reasoning models, max_tokens to others). 0 leaves it to the server.
	MaxTokens int
	// JSON asks for a JSON object answer (response_format json_object).
	JSON bool
	// MaxToolRounds bounds tool calling (default 4).
	MaxToolRounds int
	Temperature   *float32
}

// Response is the model's final answer and what it cost.
type Response struct {
	Content   string
	Calls     []*novav1.ModelCall
	ToolCalls []*novav1.ToolCall
	Scripted  bool
}

// PromptTokens sums the prompt tokens of every call.
func (r *Response) PromptTokens() int64 {
	var n int64
	for _, c := range r.Calls {
		n += c.PromptTokens
	}
	return n
}

// ErrToolRounds is returned when the model keeps calling tools.
var ErrToolRounds = errors.New("llm: the model kept calling tools")

// Chat runs the conversation: it calls the model, runs the tools it asks
// for, feeds their answers back, and returns the final content.
func (c *Client) Chat(ctx context.Context, req Request) (*Response, error) {
	if req.MaxToolRounds <= 0 {
		req.MaxToolRounds = 4
	}
	msgs := append([]openai.ChatCompletionMessage(nil), req.Messages...)
	tools, handlers := toolDefinitions(req.Tools)
	res := &Response{}
	for round := 0; ; round++ {
		lastRound := round >= req.MaxToolRounds
		msg, err := c.callModel(ctx, completionRequest(req, msgs, tools, lastRound), res)
		if err != nil {
			return res, err
		}
		if len(msg.ToolCalls) == 0 {
			res.Content = msg.Content
			return res, nil
		}
		if lastRound {
			return res, ErrToolRounds
		}
		msgs = append(msgs, msg)
		for _, tc := range msg.ToolCalls {
			answer := c.runTool(ctx, handlers, tc)
			res.ToolCalls = append(res.ToolCalls, &novav1.ToolCall{
				Name: tc.Function.Name, Arguments: tc.Function.Arguments, Result: shorten(answer, 2000),
			})
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: tc.ID, Content: answer})
		}
	}
}

// toolDefinitions are the tools as the API declares them, and their
// handlers by name.
func toolDefinitions(ts []Tool) ([]openai.Tool, map[string]Tool) {
	var tools []openai.Tool
	handlers := map[string]Tool{}
	for _, t := range ts {
		tools = append(tools, openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: t.Name, Description: t.Description, Parameters: t.Parameters,
		}})
		handlers[t.Name] = t
	}
	return tools, handlers
}

// completionRequest is one call of the conversation so far; the last round
// offers no tools, to make the model answer.
func completionRequest(req Request, msgs []openai.ChatCompletionMessage, tools []openai.Tool, lastRound bool) openai.ChatCompletionRequest {
	creq := openai.ChatCompletionRequest{Model: req.Model, Messages: msgs, Tools: tools}
	if req.Temperature != nil && !IsReasoningModel(req.Model) {
		creq.Temperature = *req.Temperature
		if creq.Temperature == 0 {
			// go-openai omits a zero temperature (omitempty) and the API
			// then uses its default, 1: send the smallest positive one.
			creq.Temperature = math.SmallestNonzeroFloat32
		}
	}
	if req.MaxTokens > 0 {
		if IsReasoningModel(req.Model) {
			creq.MaxCompletionTokens = req.MaxTokens
		} else {
			creq.MaxTokens = req.MaxTokens
		}
	}
	if req.JSON {
		creq.ResponseFormat = &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONObject}
	}
	if lastRound {
		creq.Tools = nil
	}
	return creq
}

// callModel makes one call held to the context's allowance, counts it in
// res, and returns the message of its first choice.
func (c *Client) callModel(ctx context.Context, creq openai.ChatCompletionRequest, res *Response) (openai.ChatCompletionMessage, error) {
	estimate := c.cfg.Prices.EstimateCost(creq)
	budget := allowanceFrom(ctx)
	if budget != nil {
		var err error
		if estimate, err = budget.admit(c.cfg.Prices, c.cfg.Agent, &creq); err != nil {
			be, _ := AsBudgetError(err)
			c.metrics.rejections.Add(ctx, 1, metric.WithAttributes(attribute.String("agent", c.cfg.Agent),
				attribute.String("model", creq.Model), attribute.String("limit", be.GetLimit().GetName())))
			c.cfg.Logger.WarnContext(ctx, "model call not made: it would not fit the budget", "model", creq.Model, "err", err)
			return openai.ChatCompletionMessage{}, err
		}
	}
	resp, call, err := c.complete(ctx, creq)
	if call != nil {
		if completionCap(creq) > 0 {
			call.EstimatedUsd = estimate
		}
		if budget != nil {
			budget.record(call)
		}
		res.Calls = append(res.Calls, call)
		res.Scripted = res.Scripted || call.Scripted
	}
	if err != nil {
		return openai.ChatCompletionMessage{}, err
	}
	if len(resp.Choices) == 0 {
		return openai.ChatCompletionMessage{}, fmt.Errorf("llm: %s answered no choices", creq.Model)
	}
	return resp.Choices[0].Message, nil
}

func (c *Client) runTool(ctx context.Context, handlers map[string]Tool, tc openai.ToolCall) string {
	t, ok := handlers[tc.Function.Name]
	if !ok {
		return fmt.Sprintf("error: there is no tool named %q", tc.Function.Name)
	}
	answer, err := t.Handle(ctx, tc.Function.Arguments)
	if err != nil {
		return "error: " + err.Error()
	}
	return answer
}

type spanAttrsKey struct{}

// WithSpanAttributes returns ctx whose model-call spans also carry attrs (an
// agent adds the step's execution and node).
func WithSpanAttributes(ctx context.Context, attrs ...attribute.KeyValue) context.Context {
	prev, _ := ctx.Value(spanAttrsKey{}).([]attribute.KeyValue)
	return context.WithValue(ctx, spanAttrsKey{}, append(slices.Clip(prev), attrs...))
}

// complete makes one call, retrying transient errors with backoff. Its span
// carries the OpenTelemetry GenAI attributes (never the messages).
func (c *Client) complete(ctx context.Context, req openai.ChatCompletionRequest) (resp openai.ChatCompletionResponse, call *novav1.ModelCall, err error) {
	ctx, span := c.startSpan(ctx, "chat", req.Model)
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(attribute.String("error.type", errorType(err)))
		} else {
			span.SetAttributes(
				attribute.String("gen_ai.response.model", call.Model),
				attribute.String("gen_ai.response.id", resp.ID),
				attribute.Int64("gen_ai.usage.input_tokens", call.PromptTokens),
				attribute.Int64("gen_ai.usage.output_tokens", call.CompletionTokens),
				attribute.Int64("gen_ai.usage.cache_read.input_tokens", call.CachedTokens),
				attribute.Float64("nova.cost_usd", call.CostUsd),
				attribute.Bool("nova.scripted", call.Scripted),
				attribute.Int("nova.retries", int(call.Retries)))
			if len(resp.Choices) > 0 {
				span.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", []string{string(resp.Choices[0].FinishReason)}))
			}
		}
		span.End()
	}()
	start := time.Now()
	retries, err := c.withRetries(ctx, req.Model, func() (err error) {
		resp, err = c.oc.CreateChatCompletion(ctx, req)
		return err
	})
	if err != nil {
		return openai.ChatCompletionResponse{}, nil, fmt.Errorf("llm: %s: %w", req.Model, err)
	}
	return resp, c.account(req.Model, resp, time.Since(start), retries), nil
}

// startSpan starts the client span of a call of model with the
// OpenTelemetry GenAI attributes and those of WithSpanAttributes.
func (c *Client) startSpan(ctx context.Context, operation, model string) (context.Context, trace.Span) {
	ctx, span := c.tracer.Start(ctx, operation+" "+model, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("gen_ai.operation.name", operation),
			attribute.String("gen_ai.provider.name", c.provider()),
			attribute.String("gen_ai.request.model", model),
			attribute.String("nova.agent", c.cfg.Agent)))
	if attrs, ok := ctx.Value(spanAttrsKey{}).([]attribute.KeyValue); ok {
		span.SetAttributes(attrs...)
	}
	return ctx, span
}

// withRetries makes a call of model, retrying transient errors with
// backoff, and returns how many retries it took. A failed attempt counts in
// nova.llm.calls as an error.
func (c *Client) withRetries(ctx context.Context, model string, call func() error) (int, error) {
	var lastErr error
	for attempt := 0; attempt <= c.cfg.MaxRetries; attempt++ {
		if attempt > 0 {
			backoff := time.Duration(float64(250*time.Millisecond) * float64(int(1)<<(attempt-1)) * (0.75 + rand.Float64()/2))
			if err := c.sleep(ctx, min(backoff, 8*time.Second)); err != nil {
				return attempt, err
			}
		}
		err := call()
		if err == nil {
			return attempt, nil
		}
		lastErr = err
		c.metrics.calls.Add(ctx, 1, metric.WithAttributes(
			attribute.String("agent", c.cfg.Agent), attribute.String("model", model), attribute.String("outcome", "error")))
		if !IsTransient(err) || ctx.Err() != nil {
			return attempt, err
		}
		c.cfg.Logger.WarnContext(ctx, "transient model error, retrying", "model", model, "attempt", attempt+1, "err", err)
	}
	return c.cfg.MaxRetries, fmt.Errorf("gave up after %d retries: %w", c.cfg.MaxRetries, lastErr)
}

// provider is gen_ai.provider.name: azure.ai.openai or openai (also for
// OpenAI-compatible servers, whose API is OpenAI's).
func (c *Client) provider() string {
	if c.cfg.AzureAPIVersion != "" {
		return "azure.ai.openai"
	}
	return "openai"
}

// errorType is error.type of a failed call: the API's HTTP status, or
// the error's kind.
func errorType(err error) string {
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) && apiErr.HTTPStatusCode != 0 {
		return strconv.Itoa(apiErr.HTTPStatusCode)
	}
	var reqErr *openai.RequestError
	if errors.As(err, &reqErr) && reqErr.HTTPStatusCode != 0 {
		return strconv.Itoa(reqErr.HTTPStatusCode)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return "_OTHER"
}

func (c *Client) account(model string, resp openai.ChatCompletionResponse, d time.Duration, retries int) *novav1.ModelCall {
	u := resp.Usage
	var cached int64
	if u.PromptTokensDetails != nil {
		cached = int64(u.PromptTokensDetails.CachedTokens)
	}
	if resp.Model != "" {
		model = resp.Model
	}
	call := &novav1.ModelCall{
		Model:            model,
		PromptTokens:     int64(u.PromptTokens),
		CompletionTokens: int64(u.CompletionTokens),
		CachedTokens:     cached,
		DurationMs:       float64(d.Microseconds()) / 1000,
		Scripted:         resp.SystemFingerprint == ScriptedFingerprint,
		Retries:          int32(retries),
	}
	call.CostUsd = c.cfg.Prices.Cost(model, call.PromptTokens, call.CachedTokens, call.CompletionTokens)
	ctx := context.Background()
	attrs := []attribute.KeyValue{attribute.String("agent", c.cfg.Agent), attribute.String("model", model)}
	c.metrics.calls.Add(ctx, 1, metric.WithAttributes(append(attrs, attribute.String("outcome", "ok"))...))
	for kind, n := range map[string]int64{"prompt": call.PromptTokens, "completion": call.CompletionTokens, "cached": call.CachedTokens} {
		c.metrics.tokens.Add(ctx, n, metric.WithAttributes(append(attrs, attribute.String("kind", kind))...))
	}
	c.metrics.cost.Add(ctx, call.CostUsd, metric.WithAttributes(attrs...))
	return call
}

// IsTransient reports whether err is worth retrying: rate limits, server
// errors and timeouts.
func IsTransient(err error) bool {
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) {
		return transientStatus(apiErr.HTTPStatusCode)
	}
	var reqErr *openai.RequestError
	if errors.As(err, &reqErr) {
		return transientStatus(reqErr.HTTPStatusCode)
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

func transientStatus(code int) bool {
	// 501 Not Implemented stays so.
	return code == http.StatusTooManyRequests || code == http.StatusRequestTimeout || (code >= 500 && code != http.StatusNotImplemented)
}

// IsReasoningModel reports whether model takes max_completion_tokens (and no
// temperature): the o-series and gpt-5.
func IsReasoningModel(model string) bool {
	m := strings.ToLower(model)
	if i := strings.LastIndex(m, "/"); i >= 0 {
		m = m[i+1:]
	}
	for _, p := range []string{"o1", "o3", "o4", "gpt-5"} {
		if strings.HasPrefix(m, p) {
			return true
		}
	}
	return false
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "… [shortened]"
}

type clientMetrics struct {
	calls  metric.Int64Counter
	tokens metric.Int64Counter
	cost   metric.Float64Counter
	// rejections counts calls not made because they would not fit a budget.
	rejections metric.Int64Counter
}

func newClientMetrics(m metric.Meter) (clientMetrics, error) {
	var cm clientMetrics
	var err error
	if cm.calls, err = m.Int64Counter("nova.llm.calls", metric.WithDescription("Model calls by agent, model and outcome")); err != nil {
		return cm, err
	}
	if cm.tokens, err = m.Int64Counter("nova.llm.tokens", metric.WithDescription("Tokens by agent, model and kind (prompt, completion, cached)")); err != nil {
		return cm, err
	}
	if cm.cost, err = m.Float64Counter("nova.llm.cost_usd", metric.WithDescription("Estimated cost in USD by agent and model")); err != nil {
		return cm, err
	}
	if cm.rejections, err = m.Int64Counter("nova.llm.budget_rejections",
		metric.WithDescription("Model calls not made because their worst case would not fit a budget, by agent, model and limit")); err != nil {
		return cm, err
	}
	return cm, nil
}
