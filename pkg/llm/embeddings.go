package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// ErrEmbeddingsUnsupported is returned when the API answers that it has no
// embeddings (404, 405, 501), or none for the model (400): a deployment
// whose endpoint lacks them simply goes without what needs them.
var ErrEmbeddingsUnsupported = errors.New("the API offers no embeddings")

// headerScripted is set to "true" by NOVA's scripted server on every answer;
// an embeddings answer has no system_fingerprint to say so.
const headerScripted = "X-Nova-Scripted"

// Embeddings are the vectors of an Embed call's texts, in their order, and
// the call's accounting.
type Embeddings struct {
	Vectors [][]float32
	Call    *novav1.ModelCall
}

// Embed asks the API's /embeddings for one vector per text (OpenAI's
// request and response; Azure by deployment). Transient errors are retried
// as chat calls are; a call is held to the context's allowance
// (WithAllowance) with its worst case estimated as every byte a token at
// the model's input price. An endpoint or model without embeddings gives an
// error that wraps ErrEmbeddingsUnsupported.
func (c *Client) Embed(ctx context.Context, model string, texts []string) (*Embeddings, error) {
	if model == "" {
		return nil, errors.New("llm: embeddings: no model given")
	}
	if len(texts) == 0 {
		return nil, fmt.Errorf("llm: embeddings with %s: no text given", model)
	}
	estimate, err := c.admitEmbeddings(ctx, model, texts)
	if err != nil {
		return nil, err
	}
	ctx, span := c.startSpan(ctx, "embeddings", model)
	defer span.End()
	start := time.Now()
	resp, retries, err := c.createEmbeddings(ctx, model, texts)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(attribute.String("error.type", errorType(err)))
		return nil, err
	}
	out := &Embeddings{Vectors: make([][]float32, len(texts))}
	for _, d := range resp.Data {
		out.Vectors[d.Index] = d.Embedding
	}
	out.Call = c.accountEmbeddings(ctx, model, resp, time.Since(start), retries, estimate)
	span.SetAttributes(
		attribute.String("gen_ai.response.model", out.Call.Model),
		attribute.Int64("gen_ai.usage.input_tokens", out.Call.PromptTokens),
		attribute.Int("gen_ai.embeddings.dimension.count", len(out.Vectors[0])),
		attribute.Float64("nova.cost_usd", out.Call.CostUsd),
		attribute.Bool("nova.scripted", out.Call.Scripted),
		attribute.Int("nova.retries", retries))
	return out, nil
}

// admitEmbeddings holds a call to the context's allowance, its worst case
// estimated as every byte of the texts a token; it returns that estimate.
func (c *Client) admitEmbeddings(ctx context.Context, model string, texts []string) (float64, error) {
	var prompt int64
	for _, s := range texts {
		prompt += int64(len(s))
	}
	estimate := c.cfg.Prices.Cost(model, prompt, 0, 0)
	if budget := allowanceFrom(ctx); budget != nil {
		if err := budget.admitCost(c.cfg.Agent, model, estimate); err != nil {
			be, _ := AsBudgetError(err)
			c.metrics.rejections.Add(ctx, 1, metric.WithAttributes(attribute.String("agent", c.cfg.Agent),
				attribute.String("model", model), attribute.String("limit", be.GetLimit().GetName())))
			return 0, err
		}
	}
	return estimate, nil
}

// createEmbeddings makes the call, retrying transient errors, and checks the
// answer; it returns how many retries it took.
func (c *Client) createEmbeddings(ctx context.Context, model string, texts []string) (openai.EmbeddingResponse, int, error) {
	var resp openai.EmbeddingResponse
	retries, err := c.withRetries(ctx, model, func() (err error) {
		resp, err = c.oc.CreateEmbeddings(ctx, openai.EmbeddingRequest{Input: texts, Model: openai.EmbeddingModel(model),
			EncodingFormat: openai.EmbeddingEncodingFormatFloat})
		return err
	})
	if err == nil {
		err = checkEmbeddings(model, len(texts), resp)
	}
	if err != nil {
		if unsupportedEmbeddings(err) {
			return resp, retries, fmt.Errorf("llm: embeddings with %s: %w (%v)", model, ErrEmbeddingsUnsupported, err)
		}
		return resp, retries, fmt.Errorf("llm: embeddings with %s: %w", model, err)
	}
	return resp, retries, nil
}

// accountEmbeddings is the call's record, charged to the context's
// allowance and counted in the metrics.
func (c *Client) accountEmbeddings(ctx context.Context, model string, resp openai.EmbeddingResponse, d time.Duration, retries int, estimate float64) *novav1.ModelCall {
	answered := model
	if resp.Model != "" {
		answered = string(resp.Model)
	}
	call := &novav1.ModelCall{
		Model:        answered,
		PromptTokens: int64(resp.Usage.PromptTokens),
		DurationMs:   float64(d.Microseconds()) / 1000,
		Scripted:     resp.Header().Get(headerScripted) == "true",
		Retries:      int32(retries),
		EstimatedUsd: estimate,
	}
	call.CostUsd = c.cfg.Prices.Cost(answered, call.PromptTokens, 0, 0)
	if budget := allowanceFrom(ctx); budget != nil {
		budget.record(call)
	}
	attrs := []attribute.KeyValue{attribute.String("agent", c.cfg.Agent), attribute.String("model", answered)}
	c.metrics.calls.Add(ctx, 1, metric.WithAttributes(append(attrs, attribute.String("outcome", "ok"))...))
	c.metrics.tokens.Add(ctx, call.PromptTokens, metric.WithAttributes(append(attrs, attribute.String("kind", "prompt"))...))
	c.metrics.cost.Add(ctx, call.CostUsd, metric.WithAttributes(attrs...))
	return call
}

// checkEmbeddings rejects an answer that does not hold one non-empty vector
// per text, all of one length.
func checkEmbeddings(model string, n int, resp openai.EmbeddingResponse) error {
	if len(resp.Data) != n {
		return fmt.Errorf("the API answered %d embeddings for %d texts", len(resp.Data), n)
	}
	seen := make([]bool, n)
	dims := len(resp.Data[0].Embedding)
	for _, d := range resp.Data {
		if d.Index < 0 || d.Index >= n || seen[d.Index] {
			return fmt.Errorf("the API answered an embedding with index %d for %d texts", d.Index, n)
		}
		seen[d.Index] = true
		if len(d.Embedding) == 0 || len(d.Embedding) != dims {
			return fmt.Errorf("the API answered embeddings of %d and %d dimensions", dims, len(d.Embedding))
		}
	}
	return nil
}

// unsupportedEmbeddings tells an endpoint or model without embeddings from
// other failures: OpenAI-compatible servers answer 404 for an unknown path or
// model, 405 or 501 for an unimplemented one, and 400 for a chat-only model.
func unsupportedEmbeddings(err error) bool {
	status := 0
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	switch {
	case errors.As(err, &apiErr):
		status = apiErr.HTTPStatusCode
	case errors.As(err, &reqErr):
		status = reqErr.HTTPStatusCode
	}
	switch status {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	}
	return false
}
