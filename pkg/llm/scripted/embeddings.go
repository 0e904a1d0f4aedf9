package scripted

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"strings"
	"unicode"
)

// DefaultEmbeddingDimensions is the length of the scripted vectors when
// neither the rules nor the request set one.
const DefaultEmbeddingDimensions = 512

// maxEmbeddingDimensions bounds what a request or the rules may ask for.
const maxEmbeddingDimensions = 4096

// EmbeddingsSpec configures POST /v1/embeddings.
type EmbeddingsSpec struct {
	// Disabled answers 404, as an OpenAI-compatible server without embeddings.
	Disabled bool `json:"disabled,omitempty"`
	// Dimensions of the vectors (default DefaultEmbeddingDimensions); a
	// request's own "dimensions" wins.
	Dimensions int `json:"dimensions,omitempty"`
}

func (e *EmbeddingsSpec) validate() error {
	if e != nil && (e.Dimensions < 0 || e.Dimensions > maxEmbeddingDimensions) {
		return fmt.Errorf("scripted embeddings: dimensions %d: want 1 to %d (or 0 for %d)", e.Dimensions,
			maxEmbeddingDimensions, DefaultEmbeddingDimensions)
	}
	return nil
}

// Embed is the scripted embedding of text: not a model's, a deterministic
// vector of length dims built so that rewordings are near and different
// subjects far. The text is lower-cased and split into words of letters and
// digits; each word, and each character trigram of each word that is not a
// stop word ("the", "if", "when", ...), is hashed (FNV-1a) to a dimension and
// a sign; stop words weigh 0.2, other words 1, trigrams 0.3; the vector is
// normalized to length 1. So "Calculate discount (10% if total > 1000)" and
// "Calculate the discount (10% when total > 1000)" have a cosine similarity
// about 0.99, while a text sharing no words with them is near 0. A text
// without words is one fixed vector.
func Embed(text string, dims int) []float32 {
	if dims <= 0 {
		dims = DefaultEmbeddingDimensions
	}
	v := make([]float64, dims)
	add := func(feature string, w float64) {
		h := fnv.New64a()
		_, _ = io.WriteString(h, feature)
		x := h.Sum64()
		if x>>63 == 1 {
			w = -w
		}
		v[x%uint64(dims)] += w
	}
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	for _, w := range words {
		if stopWords[w] {
			add("w:"+w, 0.2)
			continue
		}
		add("w:"+w, 1)
		r := []rune("^" + w + "$")
		for i := 0; i+3 <= len(r); i++ {
			add("g:"+string(r[i:i+3]), 0.3)
		}
	}
	if len(words) == 0 {
		add("", 1)
	}
	var norm float64
	for _, x := range v {
		norm += x * x
	}
	norm = math.Sqrt(norm)
	out := make([]float32, dims)
	for i, x := range v {
		out[i] = float32(x / norm)
	}
	return out
}

var stopWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a an the and or but if when then else than of to in on at by for from with
		as is are be been was were it its this that these those into onto per each every any all`) {
		m[w] = true
	}
	return m
}()

type embeddingsRequest struct {
	Model          *string         `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"`
}

type embeddingsResponse struct {
	Object string          `json:"object"`
	Data   []wireEmbedding `json:"data"`
	Model  string          `json:"model"`
	Usage  embeddingsUsage `json:"usage"`
	// Not in OpenAI's answer; says, beside the header, that it is scripted.
	SystemFingerprint string `json:"system_fingerprint"`
}

type wireEmbedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string of little-endian float32s
}

type embeddingsUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// handleEmbeddings answers POST /v1/embeddings with Embed's vectors, or
// 404 when the rules disable embeddings (recorded, so tests see the try).
func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request, rec *Recorded) {
	s.mu.Lock()
	spec := s.embeddings
	s.mu.Unlock()
	rec.Agent = r.Header.Get(HeaderAgent)
	if spec != nil && spec.Disabled {
		rec.Status, rec.Response = writeError(w, http.StatusNotFound, ErrorSpec{
			Message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path),
			Type:    "invalid_request_error",
		})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		status, msg := http.StatusBadRequest, "Could not read the request body: "+err.Error()
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			status, msg = http.StatusRequestEntityTooLarge, fmt.Sprintf("Request body exceeds %d bytes.", s.maxBody)
		}
		rec.Status, rec.Response = writeError(w, status, ErrorSpec{Message: msg, Type: "invalid_request_error"})
		return
	}
	rec.Body = body
	var req embeddingsRequest
	if err := json.Unmarshal(body, &req); err != nil {
		rec.Status, rec.Response = writeError(w, http.StatusBadRequest, ErrorSpec{
			Message: fmt.Sprintf("We could not parse the JSON body of your request (%v). The OpenAI API expects a JSON payload.", err),
			Type:    "invalid_request_error",
		})
		return
	}
	if req.Model != nil {
		rec.Model = *req.Model
	}
	texts, apiErr := embeddingInput(req.Input)
	rec.Input = texts
	dims := DefaultEmbeddingDimensions
	if spec != nil && spec.Dimensions > 0 {
		dims = spec.Dimensions
	}
	switch {
	case apiErr != nil:
	case req.Model == nil || *req.Model == "":
		apiErr = invalid("you must provide a model parameter", "", "")
	case req.EncodingFormat != "" && req.EncodingFormat != "float" && req.EncodingFormat != "base64":
		apiErr = invalid(fmt.Sprintf("Invalid value: '%s'. Supported values are: 'float' and 'base64'.", req.EncodingFormat),
			"encoding_format", "invalid_value")
	case req.Dimensions != nil && (*req.Dimensions < 1 || *req.Dimensions > maxEmbeddingDimensions):
		apiErr = invalid(fmt.Sprintf("Invalid 'dimensions': the NOVA scripted server makes 1 to %d, got %d.",
			maxEmbeddingDimensions, *req.Dimensions), "dimensions", "invalid_value")
	case req.Dimensions != nil:
		dims = *req.Dimensions
	}
	if apiErr != nil {
		rec.Status, rec.Response = writeError(w, http.StatusBadRequest, *apiErr)
		return
	}
	resp := embeddingsResponse{Object: "list", Model: *req.Model, SystemFingerprint: Fingerprint, Data: []wireEmbedding{}}
	for i, text := range texts {
		v := Embed(text, dims)
		var emb any = v
		if req.EncodingFormat == "base64" {
			b := make([]byte, 4*len(v))
			for j, x := range v {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(x))
			}
			emb = base64.StdEncoding.EncodeToString(b)
		}
		resp.Data = append(resp.Data, wireEmbedding{Object: "embedding", Index: i, Embedding: emb})
		resp.Usage.PromptTokens += estimateTokens(text)
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens
	rec.Rule = "embeddings"
	rec.Status, rec.Response = writeJSON(w, http.StatusOK, resp)
	s.log.InfoContext(r.Context(), "scripted llm embedded", "agent", rec.Agent, "model", rec.Model, "texts", len(texts), "dimensions", dims)
}

// embeddingInput reads "input": a string or a list of strings (OpenAI also
// takes token arrays, which a scripted server cannot read back as text).
func embeddingInput(raw json.RawMessage) ([]string, *ErrorSpec) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, invalid("Missing required parameter: 'input'.", "input", "missing_required_parameter")
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, invalid("'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.", "input", "")
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, invalid("Invalid 'input': the NOVA scripted server embeds a string or a list of strings (not token arrays).", "input", "invalid_type")
	}
	if len(many) == 0 {
		return nil, invalid("Invalid 'input': empty array. Expected an array with minimum length 1, but got an empty array instead.", "input", "empty_array")
	}
	for i, s := range many {
		if s == "" {
			return nil, invalid(fmt.Sprintf("Invalid 'input[%d]': empty string.", i), fmt.Sprintf("input[%d]", i), "")
		}
	}
	return many, nil
}
