// Package cacheentry is an entry of the generated-code cache and how it is
// found: the key over everything that decides whether the same code fits
// again, the semantic group it is compared in, and what a comparison found.
// It imports no NATS client, so that the graph engine's state machine can
// decide what to look up and keep; package codecache keeps entries in their
// bucket and repeats each name for its callers.
package cacheentry

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// keyVersion changes when what the key covers changes, so that old entries
// miss instead of hitting wrongly.
const keyVersion = "v1"

// Input is what a key covers.
type Input struct {
	Task     string
	NodeType string
	// DecisionValues are a decision node's edge conditions (order ignored).
	DecisionValues []string
	// Shape is Shape of the context the code sees.
	Shape    string
	Model    string
	Language string
	// Runtime is the sandbox runtime's fingerprint (RuntimeFingerprint).
	Runtime string
}

// Key is the hex sha256 of the input's fields, each length-prefixed so that
// no two inputs share an encoding.
func Key(in Input) string {
	h := sha256.New()
	write := func(s string) { fmt.Fprintf(h, "%d:%s;", len(s), s) }
	write(keyVersion)
	write(in.Task)
	write(in.NodeType)
	values := slices.Clone(in.DecisionValues)
	slices.Sort(values)
	write(fmt.Sprint(len(values)))
	for _, v := range values {
		write(v)
	}
	write(in.Shape)
	write(in.Model)
	write(in.Language)
	write(in.Runtime)
	return hex.EncodeToString(h.Sum(nil))
}

// Shape describes a JSON object by its keys, the JSON types of their values
// and their nesting, never the values: {"total":1500} and {"total":20} have
// the same shape, {"total":"1500"} another. Keys are sorted; an array's
// shape lists the distinct shapes of its elements, so its length does not
// matter. Input that is not JSON has the shape "invalid".
func Shape(raw []byte) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "invalid"
	}
	var b strings.Builder
	shape(&b, v)
	return b.String()
}

func shape(b *strings.Builder, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString("boolean")
	case json.Number:
		b.WriteString("number")
	case string:
		b.WriteString("string")
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteByte(':')
			shape(b, v[k])
		}
		b.WriteByte('}')
	case []any:
		var elems []string
		for _, e := range v {
			var eb strings.Builder
			shape(&eb, e)
			elems = append(elems, eb.String())
		}
		slices.Sort(elems)
		b.WriteByte('[')
		b.WriteString(strings.Join(slices.Compact(elems), "|"))
		b.WriteByte(']')
	}
}

// Entry is a cached code, stored as JSON so that `nats kv get` shows it.
type Entry struct {
	// Code is the accepted TASK code.
	Code string `json:"code"`
	// AnalysisCode is the ANALYSIS code whose findings the task code was
	// written with, when there was one; the task code does not need it run.
	AnalysisCode string `json:"analysis_code,omitempty"`
	Language     string `json:"language"`
	Model        string `json:"model"`
	Task         string `json:"task"`
	// NodeType is the node's type, action or decision (empty in entries
	// stored before it was kept).
	NodeType string `json:"node_type,omitempty"`
	Shape    string `json:"context_shape"`
	Runtime  string `json:"runtime"`
	// Where the code was accepted.
	Workflow  string    `json:"workflow,omitempty"`
	Execution string    `json:"execution_id"`
	Node      string    `json:"node_id"`
	CreatedAt time.Time `json:"created_at"`
	// What producing it cost: what a hit saves.
	Tokens     int64   `json:"tokens"`
	CostUSD    float64 `json:"cost_usd"`
	ModelCalls int32   `json:"model_calls"`
	// Embedding is set when the entry is in its group's semantic index;
	// without it the entry is found by its exact key only.
	Embedding *EntryEmbedding `json:"embedding,omitempty"`
	// SemanticOrigin is set when the code was found by the semantic level
	// for another task and, having passed again, stored under this task's
	// key too. Execution and Node above are where it was first accepted.
	SemanticOrigin *SemanticOrigin `json:"semantic_origin,omitempty"`
	// Verdict is the code validator's pass of Code with every check, on
	// Runtime; a hit reuses it while the same validator is deployed (nil:
	// every hit sends the code to the validator).
	Verdict *Verdict `json:"code_validation,omitempty"`
}

// Verdict names the validator that passed an entry's code.
type Verdict struct {
	// Validator is its fingerprint (validatorinfo).
	Validator string `json:"validator"`
	// Code is CodeDigest of the code it passed: an entry whose code was
	// replaced does not carry the old code's verdict over.
	Code string `json:"code_sha256"`
	// Execution is the one whose validation step passed the code.
	Execution string    `json:"execution_id"`
	At        time.Time `json:"validated_at"`
}

// EntryEmbedding says how an entry's task is indexed.
type EntryEmbedding struct {
	Model      string `json:"model"`
	Dimensions int    `json:"dimensions"`
	Group      string `json:"group"`
}

// SemanticOrigin is the entry a semantic hit took its code from.
type SemanticOrigin struct {
	Key        string  `json:"key"`
	Task       string  `json:"task"`
	Similarity float64 `json:"similarity"`
	// Execution is the one whose semantic hit stored this entry.
	Execution string `json:"execution_id"`
}

// CodeDigest is the hex sha256 of code.
func CodeDigest(code string) string {
	sum := sha256.Sum256([]byte(code))
	return hex.EncodeToString(sum[:])
}

// Decode reads an entry stored by Encode.
func Decode(data []byte) (*Entry, error) {
	e := &Entry{}
	if err := json.Unmarshal(data, e); err != nil {
		return nil, fmt.Errorf("decode code cache entry: %w", err)
	}
	if strings.TrimSpace(e.Code) == "" {
		return nil, fmt.Errorf("decode code cache entry: no code")
	}
	return e, nil
}

// Encode is the stored form of e.
func (e *Entry) Encode() ([]byte, error) { return json.Marshal(e) }

// Group names the entries a task is compared with: those whose key has the
// same input but for the task, embedded by the same model.
func Group(in Input, embeddingModel string) string {
	in.Task = ""
	h := sha256.New()
	fmt.Fprintf(h, "group;%s;%d:%s", Key(in), len(embeddingModel), embeddingModel)
	return hex.EncodeToString(h.Sum(nil))
}

// Match is a member and its similarity to a task.
type Match struct {
	Key        string
	Similarity float64
}

// Ranking is what comparing a task with a group found.
type Ranking struct {
	// Matches reach the threshold and name the task's literals, most similar
	// first.
	Matches []Match
	// Best is the most similar member, whatever its literals; OtherLiterals
	// says its literals differ from the task's.
	Best          Match
	OtherLiterals bool
	// Compared is how many members were compared.
	Compared int
}
