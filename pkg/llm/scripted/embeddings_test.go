package scripted_test

import (
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/novaflow/nova/pkg/llm/scripted"
)

func cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	return dot / math.Sqrt(na*nb)
}

// TestEmbedSimilarity: the scripted vectors put rewordings of a task near
// it and other tasks far from it, the same every time.
func TestEmbedSimilarity(t *testing.T) {
	const task = "Calculate discount (10% if total > 1000)"
	tests := []struct {
		other    string
		min, max float64
	}{
		{"Calculate the discount (10% when total > 1000)", 0.97, 1},
		{"calculate discount (10% if total > 1000).", 0.999, 1.0001},
		{"Calculate a discount of 10% when the total is over 1000", 0.85, 0.95},
		{"Calculate discount (15% if total > 1000)", 0.7, 0.9},
		{"Format the total as currency", 0, 0.6},
		{"Summarize the invoice and extract the vendor name", -0.2, 0.2},
	}
	base := scripted.Embed(task, 0)
	if len(base) != scripted.DefaultEmbeddingDimensions {
		t.Fatalf("%d dimensions, want %d", len(base), scripted.DefaultEmbeddingDimensions)
	}
	for _, tc := range tests {
		s := cosine(base, scripted.Embed(tc.other, 0))
		t.Logf("%.4f %q", s, tc.other)
		if s < tc.min || s > tc.max {
			t.Errorf("similarity with %q = %.4f, want %.2f to %.2f", tc.other, s, tc.min, tc.max)
		}
	}
	if !slices.Equal(base, scripted.Embed(task, 0)) {
		t.Error("the same text embedded twice differs")
	}
	for _, text := range []string{task, "", "!!!", "é"} {
		var n float64
		for _, x := range scripted.Embed(text, 64) {
			n += float64(x) * float64(x)
		}
		if math.Abs(n-1) > 1e-5 {
			t.Errorf("|Embed(%q)|² = %v, want 1", text, n)
		}
	}
}

// TestEmbeddingsEndpoint: /v1/embeddings answers the official client as
// OpenAI does (float and base64, dimensions, usage), says it is scripted,
// is recorded, and rejects what OpenAI rejects.
func TestEmbeddingsEndpoint(t *testing.T) {
	srv := start(t, `rules: []`)
	c := client(t, srv, "graph-engine")
	texts := []string{"Calculate discount (10% if total > 1000)", "Format the total as currency"}
	resp, err := c.CreateEmbeddings(t.Context(), openai.EmbeddingRequest{Input: texts, Model: "text-embedding-3-small"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Data) != 2 || resp.Model != "text-embedding-3-small" || resp.Usage.PromptTokens != 10+7 || resp.Usage.TotalTokens != 17 {
		t.Fatalf("answer: %d vectors, model %q, usage %+v", len(resp.Data), resp.Model, resp.Usage)
	}
	for i, d := range resp.Data {
		if d.Index != i || !slices.Equal(d.Embedding, scripted.Embed(texts[i], 0)) {
			t.Errorf("data[%d]: index %d, not Embed of its text", i, d.Index)
		}
	}
	if resp.Header().Get(scripted.HeaderScripted) != "true" {
		t.Error("the answer does not say it is scripted")
	}
	b64, err := c.CreateEmbeddings(t.Context(), openai.EmbeddingRequest{Input: texts[:1], Model: "m",
		EncodingFormat: openai.EmbeddingEncodingFormatBase64, Dimensions: 32})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b64.Data[0].Embedding, scripted.Embed(texts[0], 32)) {
		t.Errorf("base64 with 32 dimensions: %v", b64.Data[0].Embedding)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || reqs[0].Path != "/v1/embeddings" || reqs[0].Agent != "graph-engine" || reqs[0].Model != "text-embedding-3-small" ||
		!slices.Equal(reqs[0].Input, texts) || reqs[0].Status != http.StatusOK || reqs[0].Rule != "embeddings" {
		t.Errorf("recorded: %+v", reqs)
	}

	for _, tc := range []struct{ body, want string }{
		{`{"input": "x"}`, "you must provide a model parameter"},
		{`{"model": "m"}`, "Missing required parameter: 'input'"},
		{`{"model": "m", "input": []}`, "empty array"},
		{`{"model": "m", "input": [[1, 2]]}`, "not token arrays"},
		{`{"model": "m", "input": "x", "encoding_format": "int8"}`, "Supported values are: 'float' and 'base64'"},
		{`{"model": "m", "input": "x", "dimensions": 0}`, "Invalid 'dimensions'"},
	} {
		status, body := post(t, srv.BaseURL()+"/embeddings", tc.body, nil)
		msg, _ := body["error"].(map[string]any)["message"].(string)
		if status != http.StatusBadRequest || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: %d %v, want 400 with %q", tc.body, status, body, tc.want)
		}
	}
	if status, _ := post(t, srv.URL()+"/embeddings", `{"model": "m", "input": "x"}`, nil); status != http.StatusOK {
		t.Errorf("without /v1: %d", status)
	}
}

// TestEmbeddingsOptions: the rules may turn the endpoint off (a server
// without embeddings answers 404) or set the dimensions; a bad value is
// refused when the rules are read.
func TestEmbeddingsOptions(t *testing.T) {
	off := start(t, "rules: []\nembeddings: {disabled: true}\n")
	_, err := client(t, off, "").CreateEmbeddings(t.Context(), openai.EmbeddingRequest{Input: []string{"x"}, Model: "m"})
	var reqErr *openai.RequestError
	if apiErr := (*openai.APIError)(nil); !(errors.As(err, &apiErr) && apiErr.HTTPStatusCode == 404 ||
		errors.As(err, &reqErr) && reqErr.HTTPStatusCode == 404) {
		t.Errorf("embeddings disabled: %v, want 404", err)
	}
	small := start(t, "rules: []\nembeddings: {dimensions: 8}\n")
	resp, err := client(t, small, "").CreateEmbeddings(t.Context(), openai.EmbeddingRequest{Input: []string{"x"}, Model: "m"})
	if err != nil || len(resp.Data[0].Embedding) != 8 {
		t.Errorf("dimensions 8: %v, %v", resp.Data, err)
	}
	if _, err := scripted.ParseRules([]byte("embeddings: {dimensions: 100000}")); err == nil || !strings.Contains(err.Error(), "dimensions") {
		t.Errorf("dimensions 100000: %v, want an error naming them", err)
	}
	if _, err := scripted.ParseRules([]byte("embeddings: {size: 3}")); err == nil {
		t.Error("an unknown field under embeddings was accepted")
	}
}
