package scripted

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"text/template"
	"time"

	"sigs.k8s.io/yaml"
)

// Rules is a parsed rules file. See the package documentation for the format.
type Rules struct {
	Rules []Rule `json:"rules"`
	// Models are listed by /v1/models in addition to the exact models the rules match.
	Models []string `json:"models,omitempty"`
	// Fallback answers requests no rule matches; nil means a 500 error that names the request.
	Fallback *Response `json:"fallback,omitempty"`
	// Embeddings configures POST /v1/embeddings, which answers without rules.
	Embeddings *EmbeddingsSpec `json:"embeddings,omitempty"`
}

// Rule answers the requests its Match accepts, with Respond or with Responses in sequence.
type Rule struct {
	Name      string     `json:"name,omitempty"`
	Match     Match      `json:"match,omitempty"`
	Respond   *Response  `json:"respond,omitempty"`
	Responses []Response `json:"responses,omitempty"`
	// Times, when above zero, is how many requests the rule answers before it stops matching.
	Times int `json:"times,omitempty"`
}

// Match holds the conditions of a rule; the zero Match accepts every request.
type Match struct {
	Model          string  `json:"model,omitempty"`
	Agent          string  `json:"agent,omitempty"`
	SystemContains Strings `json:"system_contains,omitempty"`
	UserContains   Strings `json:"user_contains,omitempty"`
	Contains       Strings `json:"contains,omitempty"`
	Regex          Strings `json:"regex,omitempty"`
	HasToolResult  *bool   `json:"has_tool_result,omitempty"`
}

// Response is one scripted answer: content and/or tool calls, or an HTTP error.
type Response struct {
	// Content is sent verbatim. Template is rendered with TemplateData instead; the two are
	// separate so that code containing "{{" is never mangled.
	Content      string            `json:"content,omitempty"`
	Template     string            `json:"template,omitempty"`
	ToolCalls    []ToolCallSpec    `json:"tool_calls,omitempty"`
	FinishReason string            `json:"finish_reason,omitempty"`
	Usage        *Usage            `json:"usage,omitempty"`
	Status       int               `json:"status,omitempty"`
	Error        *ErrorSpec        `json:"error,omitempty"`
	Headers      map[string]string `json:"headers,omitempty"`
	Delay        Duration          `json:"delay,omitempty"`
}

// ToolCallSpec is a scripted tool call. Arguments is a JSON value; an object is sent as its
// compact JSON text, a string is sent as is (even if it is not valid JSON, as models do).
type ToolCallSpec struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Usage overrides the estimated token counts; zero fields keep the estimate.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens,omitempty"`
	CompletionTokens int `json:"completion_tokens,omitempty"`
	CachedTokens     int `json:"cached_tokens,omitempty"`
	ReasoningTokens  int `json:"reasoning_tokens,omitempty"`
}

// ErrorSpec is the body of a scripted error; in a rules file it may also be a plain message.
type ErrorSpec struct {
	Message string `json:"message,omitempty"`
	Type    string `json:"type,omitempty"`
	Param   string `json:"param,omitempty"`
	Code    string `json:"code,omitempty"`
}

// UnmarshalJSON accepts a message string or an object.
func (e *ErrorSpec) UnmarshalJSON(b []byte) error {
	var msg string
	if err := json.Unmarshal(b, &msg); err == nil {
		*e = ErrorSpec{Message: msg}
		return nil
	}
	type plain ErrorSpec
	var p plain
	if err := strictUnmarshal(b, &p); err != nil {
		return err
	}
	*e = ErrorSpec(p)
	return nil
}

// Strings is a list that a rules file may also write as a single string.
type Strings []string

// UnmarshalJSON accepts a string or a list of strings.
func (s *Strings) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = Strings{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("want a string or a list of strings")
	}
	*s = many
	return nil
}

// Duration is a time.Duration written as a Go duration string ("250ms", "2s").
type Duration time.Duration

// UnmarshalJSON accepts a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string like \"250ms\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// LoadRules reads and validates a rules file (YAML or JSON).
func LoadRules(path string) (Rules, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Rules{}, fmt.Errorf("load scripted rules: %w", err)
	}
	r, err := ParseRules(b)
	if err != nil {
		return Rules{}, fmt.Errorf("load scripted rules %q: %w", path, err)
	}
	return r, nil
}

// ParseRules parses and validates rules written as YAML or JSON. Unknown fields are errors,
// so a misspelt condition cannot silently match everything.
func ParseRules(b []byte) (Rules, error) {
	js, err := yaml.YAMLToJSON(b)
	if err != nil {
		return Rules{}, fmt.Errorf("parse scripted rules: %w", err)
	}
	var r Rules
	if trimmed := bytes.TrimSpace(js); len(trimmed) > 0 && trimmed[0] == '[' {
		err = strictUnmarshal(js, &r.Rules)
	} else {
		err = strictUnmarshal(js, &r)
	}
	if err != nil {
		return Rules{}, fmt.Errorf("parse scripted rules: %w", err)
	}
	if err := r.Validate(); err != nil {
		return Rules{}, err
	}
	return r, nil
}

// Validate reports the first rule that cannot be used: a bad regex, glob or template, or a
// rule without an answer.
func (r Rules) Validate() error {
	_, err := compileRules(r)
	return err
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// compiledRule is a Rule with its patterns compiled and its use counted.
type compiledRule struct {
	Rule
	name      string
	model     *regexp.Regexp
	agent     *regexp.Regexp
	regexes   []*regexp.Regexp
	responses []compiledResponse
	used      int
}

type compiledResponse struct {
	Response
	tmpl      *template.Template
	toolCalls []ToolCall // arguments resolved to the text sent on the wire
}

func compileRules(r Rules) ([]*compiledRule, error) {
	out := make([]*compiledRule, 0, len(r.Rules))
	for i, rule := range r.Rules {
		name := rule.Name
		if name == "" {
			name = fmt.Sprintf("rules[%d]", i)
		}
		c, err := compileRule(rule, name)
		if err != nil {
			return nil, fmt.Errorf("scripted rule %q: %w", name, err)
		}
		out = append(out, c)
	}
	if r.Fallback != nil {
		if _, err := compileResponse(*r.Fallback); err != nil {
			return nil, fmt.Errorf("scripted fallback: %w", err)
		}
	}
	if err := r.Embeddings.validate(); err != nil {
		return nil, err
	}
	return out, nil
}

func compileRule(rule Rule, name string) (*compiledRule, error) {
	c := &compiledRule{Rule: rule, name: name}
	if rule.Times < 0 {
		return nil, errors.New("times must not be negative")
	}
	var err error
	if c.model, err = compileGlob(rule.Match.Model); err != nil {
		return nil, fmt.Errorf("match.model: %w", err)
	}
	if c.agent, err = compileGlob(rule.Match.Agent); err != nil {
		return nil, fmt.Errorf("match.agent: %w", err)
	}
	for _, expr := range rule.Match.Regex {
		re, err := regexp.Compile(expr)
		if err != nil {
			return nil, fmt.Errorf("match.regex: %w", err)
		}
		c.regexes = append(c.regexes, re)
	}
	switch {
	case rule.Respond != nil && len(rule.Responses) > 0:
		return nil, errors.New("give either respond or responses, not both")
	case rule.Respond != nil:
		rule.Responses = []Response{*rule.Respond}
	case len(rule.Responses) == 0:
		return nil, errors.New("needs respond or responses")
	}
	for i, resp := range rule.Responses {
		cr, err := compileResponse(resp)
		if err != nil {
			return nil, fmt.Errorf("responses[%d]: %w", i, err)
		}
		c.responses = append(c.responses, cr)
	}
	return c, nil
}

func compileResponse(r Response) (compiledResponse, error) {
	c := compiledResponse{Response: r}
	isError := r.Status != 0 || r.Error != nil
	if r.Status != 0 && (r.Status < 400 || r.Status > 599) {
		return c, fmt.Errorf("status %d: want an HTTP error status (400-599)", r.Status)
	}
	if isError && (r.Content != "" || r.Template != "" || len(r.ToolCalls) > 0) {
		return c, errors.New("an error answer has no content, template or tool_calls")
	}
	if !isError && r.Content == "" && r.Template == "" && len(r.ToolCalls) == 0 {
		return c, errors.New("needs content, template, tool_calls or an error")
	}
	if r.Content != "" && r.Template != "" {
		return c, errors.New("give either content or template, not both")
	}
	if r.Template != "" {
		t, err := template.New("content").Option("missingkey=error").Funcs(templateFuncs).Parse(r.Template)
		if err != nil {
			return c, fmt.Errorf("template: %w", err)
		}
		c.tmpl = t
	}
	for i, tc := range r.ToolCalls {
		if !toolNameRE.MatchString(tc.Name) {
			return c, fmt.Errorf("tool_calls[%d]: name %q must match %s", i, tc.Name, toolNameRE)
		}
		args, err := argumentsText(tc.Arguments)
		if err != nil {
			return c, fmt.Errorf("tool_calls[%d].arguments: %w", i, err)
		}
		c.toolCalls = append(c.toolCalls, ToolCall{ID: tc.ID, Name: tc.Name, Arguments: args})
	}
	return c, nil
}

// argumentsText turns scripted arguments into the JSON string OpenAI puts on the wire.
func argumentsText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "{}", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return "", err
	}
	return buf.String(), nil
}

var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// compileGlob turns a pattern with * and ? into an anchored regexp; "" means any value.
// path.Match is not used because model names may contain "/".
func compileGlob(pattern string) (*regexp.Regexp, error) {
	if pattern == "" {
		return nil, nil
	}
	var b strings.Builder
	b.WriteString(`^`)
	for _, r := range pattern {
		switch r {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString(`$`)
	return regexp.Compile(b.String())
}

func isGlob(pattern string) bool { return strings.ContainsAny(pattern, "*?") }

// TemplateData is what a response template sees.
type TemplateData struct {
	Model          string
	Agent          string
	System         string
	LastUser       string
	LastToolResult string
	Messages       []Message
	// Call counts the requests this rule has answered, this one included (1 for the first).
	Call int
}

var templateFuncs = template.FuncMap{
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
}
