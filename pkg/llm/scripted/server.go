package scripted

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Fingerprint is the system_fingerprint of every answer; clients show output carrying it as
// scripted.
const Fingerprint = "nova-scripted"

// HeaderScripted is set to "true" on every answer.
const HeaderScripted = "X-Nova-Scripted"

// HeaderAgent names the NOVA agent making a request; rules match it with match.agent.
const HeaderAgent = "X-Nova-Agent"

// DefaultAddr is where Start listens when given no address: loopback only.
const DefaultAddr = "127.0.0.1:0"

const defaultMaxBody = 32 << 20

// Server is a scripted OpenAI-compatible HTTP server. It is an http.Handler; Serve or Start
// run it on a listener.
type Server struct {
	log         *slog.Logger
	apiKey      string
	optFallback *Response
	maxBody     int64
	created     int64

	mu       sync.Mutex
	rules    []*compiledRule
	models   []string
	fallback *compiledResponse
	// embeddings configures /v1/embeddings (nil: the defaults).
	embeddings *EmbeddingsSpec
	records    []Recorded
	url        string
}

// Option configures a Server.
type Option func(*Server)

// WithAPIKey makes the server answer 401, as OpenAI does, unless requests carry
// "Authorization: Bearer <key>" (or Azure's "api-key: <key>").
func WithAPIKey(key string) Option { return func(s *Server) { s.apiKey = key } }

// WithFallback answers requests no rule matches, overriding the rules file's fallback.
func WithFallback(r Response) Option { return func(s *Server) { s.optFallback = &r } }

// WithLogger logs one line per answered request.
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithMaxBodyBytes limits request bodies (default 32 MiB); larger ones get 413.
func WithMaxBodyBytes(n int64) Option { return func(s *Server) { s.maxBody = n } }

// New returns a server answering from rules; it fails if a rule cannot be used.
func New(rules Rules, opts ...Option) (*Server, error) {
	s := &Server{
		log:     slog.New(slog.DiscardHandler),
		maxBody: defaultMaxBody,
		created: time.Now().Unix(),
	}
	for _, o := range opts {
		o(s)
	}
	if err := s.SetRules(rules); err != nil {
		return nil, err
	}
	return s, nil
}

// SetRules replaces the rules and restarts every rule's sequence; recordings are kept.
func (s *Server) SetRules(rules Rules) error {
	compiled, err := compileRules(rules)
	if err != nil {
		return err
	}
	var fallback *compiledResponse
	fb := rules.Fallback
	if s.optFallback != nil {
		fb = s.optFallback
	}
	if fb != nil {
		c, err := compileResponse(*fb)
		if err != nil {
			return fmt.Errorf("scripted fallback: %w", err)
		}
		fallback = &c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = compiled
	s.models = modelIDs(rules)
	s.fallback = fallback
	s.embeddings = rules.Embeddings
	return nil
}

func modelIDs(r Rules) []string {
	var ids []string
	add := func(id string) {
		if id != "" && !isGlob(id) && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	for _, m := range r.Models {
		add(m)
	}
	for _, rule := range r.Rules {
		add(rule.Match.Model)
	}
	return ids
}

// URL is the server's root URL ("http://127.0.0.1:PORT") once it serves, else "".
// Clients use URL()+"/v1" as their base URL.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// BaseURL is URL()+"/v1", what OpenAI clients take as their base URL.
func (s *Server) BaseURL() string { return s.URL() + "/v1" }

// Requests returns a copy of every request received since the start or the last Reset, in
// order. Treat the slices inside as read-only.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.records)
}

// Reset forgets the recorded requests and restarts every rule's sequence and count.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = nil
	for _, r := range s.rules {
		r.used = 0
	}
}

// Serve answers on ln until ctx is done, then shuts down gracefully. It returns nil after a
// shutdown caused by ctx.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.setURL(ln.Addr())
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		// Scripted delays end when the server stops.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("scripted llm server: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if serveErr := <-errc; serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) && err == nil {
		err = serveErr
	}
	if err != nil {
		return fmt.Errorf("scripted llm server shutdown: %w", err)
	}
	return nil
}

// Start listens on addr (DefaultAddr when empty) and serves in the background until ctx is
// done or stop is called. stop waits for the server to finish; calling it again is harmless.
func (s *Server) Start(ctx context.Context, addr string) (url string, stop func() error, err error) {
	if addr == "" {
		addr = DefaultAddr
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("scripted llm server: listen %s: %w", addr, err)
	}
	url = s.setURL(ln.Addr())
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	var once sync.Once
	var stopErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			stopErr = <-done
		})
		return stopErr
	}
	return url, stop, nil
}

func (s *Server) setURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		host, port = addr.String(), ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	url := "http://" + net.JoinHostPort(host, port)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.url = url
	return url
}

// ServeHTTP routes OpenAI's paths, with or without the /v1 prefix, and the /_nova ones.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(HeaderScripted, "true")
	w.Header().Set("X-Request-Id", "req_"+rand.Text())
	p := strings.TrimSuffix(r.URL.Path, "/")
	switch p {
	case "/_nova/requests":
		s.handleRecordings(w, r)
		return
	case "/_nova/health":
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return
	}
	api := p
	if strings.HasPrefix(p, "/v1/") {
		api = strings.TrimPrefix(p, "/v1")
	}
	var method string
	var handle func(http.ResponseWriter, *http.Request, *Recorded)
	switch {
	case api == "/chat/completions":
		method, handle = http.MethodPost, s.handleChat
	case api == "/embeddings":
		method, handle = http.MethodPost, s.handleEmbeddings
	case api == "/models":
		method, handle = http.MethodGet, s.handleModels
	case strings.HasPrefix(api, "/models/") && len(api) > len("/models/"):
		method, handle = http.MethodGet, s.handleModel
	default:
		writeError(w, http.StatusNotFound, ErrorSpec{
			Message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path),
			Type:    "invalid_request_error",
		})
		return
	}
	rec := &Recorded{Time: time.Now(), Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone()}
	rec.Header.Del("Authorization")
	rec.Header.Del("Api-Key")
	defer s.record(rec)
	if r.Method != method {
		rec.Status, rec.Response = writeError(w, http.StatusMethodNotAllowed, ErrorSpec{
			Message: fmt.Sprintf("Invalid method for URL (%s %s)", r.Method, r.URL.Path),
			Type:    "invalid_request_error",
		})
		return
	}
	if e, ok := s.checkAuth(r); !ok {
		rec.Status, rec.Response = writeError(w, http.StatusUnauthorized, e)
		return
	}
	handle(w, r, rec)
}

func (s *Server) record(rec *Recorded) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = append(s.records, *rec)
}

func (s *Server) checkAuth(r *http.Request) (ErrorSpec, bool) {
	if s.apiKey == "" {
		return ErrorSpec{}, true
	}
	key, hasBearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !hasBearer {
		key = r.Header.Get("Api-Key")
	}
	key = strings.TrimSpace(key)
	switch {
	case key == "":
		return ErrorSpec{
			Message: "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
			Type:    "invalid_request_error",
		}, false
	case key != s.apiKey:
		return ErrorSpec{
			Message: fmt.Sprintf("Incorrect API key provided: %s.", maskKey(key)),
			Type:    "invalid_request_error",
			Code:    "invalid_api_key",
		}, false
	}
	return ErrorSpec{}, true
}

func maskKey(k string) string {
	if len(k) <= 8 {
		return "****"
	}
	return k[:3] + strings.Repeat("*", 8) + k[len(k)-4:]
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request, rec *Recorded) {
	s.mu.Lock()
	ids := slices.Clone(s.models)
	s.mu.Unlock()
	list := wireModelList{Object: "list", Data: []wireModel{}}
	for _, id := range ids {
		list.Data = append(list.Data, s.model(id))
	}
	rec.Status, rec.Response = writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request, rec *Recorded) {
	id := r.URL.Path[strings.LastIndex(r.URL.Path, "/models/")+len("/models/"):]
	id = strings.TrimSuffix(id, "/")
	s.mu.Lock()
	known := slices.Contains(s.models, id)
	s.mu.Unlock()
	if !known {
		rec.Status, rec.Response = writeError(w, http.StatusNotFound, ErrorSpec{
			Message: fmt.Sprintf("The model '%s' does not exist or you do not have access to it.", id),
			Type:    "invalid_request_error",
			Code:    "model_not_found",
		})
		return
	}
	rec.Status, rec.Response = writeJSON(w, http.StatusOK, s.model(id))
}

func (s *Server) model(id string) wireModel {
	return wireModel{ID: id, Object: "model", Created: s.created, OwnedBy: Fingerprint}
}

func (s *Server) handleRecordings(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, http.StatusOK, s.Requests())
	case http.MethodDelete:
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
	default:
		writeError(w, http.StatusMethodNotAllowed, ErrorSpec{
			Message: fmt.Sprintf("Invalid method for URL (%s %s)", r.Method, r.URL.Path),
			Type:    "invalid_request_error",
		})
	}
}

// handleChat answers POST /v1/chat/completions.
func (s *Server) handleChat(w http.ResponseWriter, r *http.Request, rec *Recorded) {
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

	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		rec.Status, rec.Response = writeError(w, http.StatusBadRequest, ErrorSpec{
			Message: fmt.Sprintf("We could not parse the JSON body of your request (%v). The OpenAI API expects a JSON payload.", err),
			Type:    "invalid_request_error",
		})
		return
	}
	in, apiErr := newInput(&req, r.Header.Get(HeaderAgent))
	if in != nil {
		rec.Model, rec.Agent, rec.Messages = in.model, in.agent, in.messages
		rec.Tools = in.tools
		if req.ResponseFormat != nil {
			rec.ResponseFormat = req.ResponseFormat.Type
		}
		rec.MaxTokens = deref(req.MaxTokens)
		rec.MaxCompletionTokens = deref(req.MaxCompletionTokens)
	}
	if apiErr == nil {
		apiErr = validate(&req, in)
	}
	if apiErr != nil {
		rec.Status, rec.Response = writeError(w, http.StatusBadRequest, *apiErr)
		return
	}

	resp, rule, call, matched := s.pick(in)
	rep := s.reply(in, &req, resp, rule, call, matched)
	rec.Rule = rep.rule
	if rep.delay > 0 {
		t := time.NewTimer(rep.delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return // the client left; Status stays 0
		}
	}
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	rec.Status, rec.Response = writeJSON(w, rep.status, rep.body)
	s.log.InfoContext(r.Context(), "scripted llm answered",
		slog.String("rule", rep.rule), slog.String("agent", in.agent),
		slog.String("model", in.model), slog.Int("status", rep.status))
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// input is a decoded request as the rules see it.
type input struct {
	model          string
	agent          string
	messages       []Message
	system         string
	lastUser       string
	all            string
	hasToolResult  bool
	lastToolResult string
	tools          []string
	toolsJSON      string
}

var agentMarker = regexp.MustCompile(`NOVA agent:\s*([A-Za-z0-9_.-]+)`)

func newInput(req *chatRequest, agentHeader string) (*input, *ErrorSpec) {
	in := &input{agent: strings.TrimSpace(agentHeader)}
	if req.Model != nil {
		in.model = *req.Model
	}
	var system, all []string
	for i, wm := range req.Messages {
		text, err := contentText(wm.Content)
		if err != nil {
			return in, invalid(fmt.Sprintf("Invalid 'messages[%d].content': %v.", i, err), fmt.Sprintf("messages.[%d].content", i), "invalid_type")
		}
		m := Message{Role: wm.Role, Content: text, Name: wm.Name, ToolCallID: wm.ToolCallID}
		for _, tc := range wm.ToolCalls {
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		in.messages = append(in.messages, m)
		all = append(all, m.text())
		switch m.Role {
		case "system", "developer":
			system = append(system, text)
		case "user":
			in.lastUser = text
		case "tool":
			in.hasToolResult = true
			in.lastToolResult = text
		}
	}
	in.system = strings.Join(system, "\n")
	in.all = strings.Join(all, "\n")
	if in.agent == "" {
		if m := agentMarker.FindStringSubmatch(in.system); m != nil {
			in.agent = m[1]
		}
	}
	for _, t := range req.Tools {
		if t.Function != nil {
			in.tools = append(in.tools, t.Function.Name)
		}
	}
	if len(req.Tools) > 0 {
		b, _ := json.Marshal(req.Tools)
		in.toolsJSON = string(b)
	}
	return in, nil
}

func invalid(msg, param, code string) *ErrorSpec {
	return &ErrorSpec{Message: msg, Type: "invalid_request_error", Param: param, Code: code}
}

var validRoles = []string{"system", "assistant", "user", "function", "tool", "developer"}

// validate rejects what OpenAI rejects, with OpenAI's messages, so that a client bug shows
// here and not first in production.
func validate(req *chatRequest, in *input) *ErrorSpec {
	if req.Model == nil || *req.Model == "" {
		return invalid("you must provide a model parameter", "", "")
	}
	if req.Stream {
		return invalid("stream=true is not supported by the NOVA scripted server; send stream=false.", "stream", "unsupported_value")
	}
	if req.Messages == nil {
		return invalid("Missing required parameter: 'messages'.", "messages", "missing_required_parameter")
	}
	if len(req.Messages) == 0 {
		return invalid("Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.", "messages", "empty_array")
	}
	if req.N != nil && *req.N != 1 {
		return invalid(fmt.Sprintf("Invalid 'n': the NOVA scripted server answers n=1 only, got %d.", *req.N), "n", "unsupported_value")
	}
	if t := req.Temperature; t != nil && (*t < 0 || *t > 2) {
		return invalid(fmt.Sprintf("Invalid 'temperature': expected a value between 0 and 2, but got %v instead.", *t), "temperature", "invalid_value")
	}
	for name, v := range map[string]*int{"max_tokens": req.MaxTokens, "max_completion_tokens": req.MaxCompletionTokens} {
		if v != nil && *v < 1 {
			return invalid(fmt.Sprintf("Invalid '%s': integer below minimum value. Expected a value >= 1, but got %d instead.", name, *v), name, "integer_below_min_value")
		}
	}
	if e := validateMessages(in.messages, req.Messages); e != nil {
		return e
	}
	if e := validateTools(req); e != nil {
		return e
	}
	if rf := req.ResponseFormat; rf != nil {
		switch rf.Type {
		case "text", "json_schema":
		case "json_object":
			if !strings.Contains(strings.ToLower(in.all), "json") {
				return invalid("'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'.", "messages", "")
			}
		default:
			return invalid(fmt.Sprintf("Invalid value: '%s'. Supported values are: 'text', 'json_object', and 'json_schema'.", rf.Type), "response_format.type", "invalid_value")
		}
	}
	return nil
}

func validateMessages(msgs []Message, wire []wireMessage) *ErrorSpec {
	pending := map[string]bool{} // tool call ids still owed a tool message
	pendingFrom := -1
	for i, m := range msgs {
		if !slices.Contains(validRoles, m.Role) {
			return invalid(fmt.Sprintf("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.", m.Role),
				fmt.Sprintf("messages[%d].role", i), "invalid_value")
		}
		if m.Role == "tool" {
			if m.ToolCallID == "" {
				return invalid("Missing parameter 'tool_call_id': messages with role 'tool' must have a 'tool_call_id'.", fmt.Sprintf("messages.[%d].tool_call_id", i), "")
			}
			if !pending[m.ToolCallID] {
				return invalid("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.", fmt.Sprintf("messages.[%d].role", i), "")
			}
			delete(pending, m.ToolCallID)
			continue
		}
		if len(pending) > 0 {
			return missingToolResponses(pendingFrom, pending)
		}
		if m.Role == "assistant" {
			for j, tc := range wire[i].ToolCalls {
				if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" {
					return invalid(fmt.Sprintf("Invalid 'messages[%d].tool_calls[%d]': a tool call needs an id, type 'function' and a function name.", i, j),
						fmt.Sprintf("messages.[%d].tool_calls", i), "")
				}
				pending[tc.ID] = true
				pendingFrom = i
			}
		}
		if m.Role == "user" && m.Content == "" && len(wire[i].Content) == 0 {
			return invalid(fmt.Sprintf("Missing required parameter: 'messages[%d].content'.", i), fmt.Sprintf("messages.[%d].content", i), "missing_required_parameter")
		}
	}
	if len(pending) > 0 {
		return missingToolResponses(pendingFrom, pending)
	}
	return nil
}

func missingToolResponses(at int, pending map[string]bool) *ErrorSpec {
	ids := make([]string, 0, len(pending))
	for id := range pending {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return invalid("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: "+strings.Join(ids, ", "),
		fmt.Sprintf("messages.[%d].role", at), "")
}

func validateTools(req *chatRequest) *ErrorSpec {
	var names []string
	for i, t := range req.Tools {
		if t.Type != "function" {
			return invalid(fmt.Sprintf("Invalid value: '%s'. Supported values are: 'function'.", t.Type), fmt.Sprintf("tools[%d].type", i), "invalid_value")
		}
		if t.Function == nil || t.Function.Name == "" {
			return invalid(fmt.Sprintf("Missing required parameter: 'tools[%d].function.name'.", i), fmt.Sprintf("tools[%d].function.name", i), "missing_required_parameter")
		}
		if !toolNameRE.MatchString(t.Function.Name) {
			return invalid(fmt.Sprintf("Invalid 'tools[%d].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", i), fmt.Sprintf("tools[%d].function.name", i), "invalid_value")
		}
		if p := bytes.TrimSpace(t.Function.Parameters); len(p) > 0 && p[0] != '{' {
			return invalid(fmt.Sprintf("Invalid schema for function '%s': schema must be a JSON Schema of 'type: \"object\"'.", t.Function.Name), fmt.Sprintf("tools[%d].function.parameters", i), "invalid_function_parameters")
		}
		names = append(names, t.Function.Name)
	}
	choice, err := parseToolChoice(req.ToolChoice)
	if err != nil {
		return invalid(err.Error(), "tool_choice", "invalid_value")
	}
	if choice.set && len(req.Tools) == 0 {
		return invalid("Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.", "tool_choice", "")
	}
	if choice.function != "" && !slices.Contains(names, choice.function) {
		return invalid(fmt.Sprintf("Invalid value for 'tool_choice': function '%s' is not among the tools.", choice.function), "tool_choice", "invalid_value")
	}
	return nil
}

type toolChoice struct {
	set      bool
	mode     string // none, auto, required; "" when a function is named
	function string
}

func parseToolChoice(raw json.RawMessage) (toolChoice, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return toolChoice{}, nil
	}
	var mode string
	if err := json.Unmarshal(raw, &mode); err == nil {
		if mode != "none" && mode != "auto" && mode != "required" {
			return toolChoice{}, fmt.Errorf("Invalid value: '%s'. Supported values are: 'none', 'auto', and 'required'.", mode)
		}
		return toolChoice{set: true, mode: mode}, nil
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &named); err != nil || named.Type != "function" || named.Function.Name == "" {
		return toolChoice{}, errors.New("Invalid 'tool_choice': expected 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}.")
	}
	return toolChoice{set: true, function: named.Function.Name}, nil
}

// pick finds the first usable rule that matches and advances its sequence.
func (s *Server) pick(in *input) (resp *compiledResponse, rule string, call int, matched bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rules {
		if r.Times > 0 && r.used >= r.Times {
			continue
		}
		if !r.matches(in) {
			continue
		}
		idx := min(r.used, len(r.responses)-1)
		r.used++
		return &r.responses[idx], r.name, r.used, true
	}
	return s.fallback, "fallback", 0, false
}

func (r *compiledRule) matches(in *input) bool {
	m := r.Match
	switch {
	case r.model != nil && !r.model.MatchString(in.model),
		r.agent != nil && !r.agent.MatchString(in.agent),
		!containsAll(in.system, m.SystemContains),
		!containsAll(in.lastUser, m.UserContains),
		!containsAll(in.all, m.Contains),
		m.HasToolResult != nil && *m.HasToolResult != in.hasToolResult:
		return false
	}
	for _, re := range r.regexes {
		if !re.MatchString(in.all) {
			return false
		}
	}
	return true
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// reply is one prepared HTTP answer.
type reply struct {
	status int
	header map[string]string
	body   any
	rule   string
	delay  time.Duration
}

func (s *Server) reply(in *input, req *chatRequest, resp *compiledResponse, rule string, call int, matched bool) reply {
	if resp == nil { // no rule and no fallback
		return reply{status: http.StatusInternalServerError, rule: "", body: newWireError(ErrorSpec{
			Message: fmt.Sprintf("no scripted rule matches this request (model %q, agent %q, %d messages); last user message: %q",
				in.model, in.agent, len(in.messages), truncate(in.lastUser, 200)),
			Type: "server_error",
			Code: "no_scripted_rule",
		})}
	}
	if !matched {
		rule = "fallback"
	}
	rep := reply{rule: rule, header: resp.Headers, delay: time.Duration(resp.Delay)}
	if resp.Status != 0 || resp.Error != nil {
		rep.status = resp.Status
		if rep.status == 0 {
			rep.status = http.StatusInternalServerError
		}
		e := defaultError(rep.status)
		if resp.Error != nil {
			e = mergeError(e, *resp.Error)
		}
		rep.body = newWireError(e)
		return rep
	}
	content, err := renderContent(in, resp, call)
	if err == nil {
		err = checkAnswer(in, req, resp, content)
	}
	if err != nil {
		// A rule that cannot answer this request is the script's mistake:
		// say so rather than answer what no API would.
		rep.status = http.StatusInternalServerError
		rep.body = newWireError(ErrorSpec{
			Message: fmt.Sprintf("scripted rule %q: %v", rule, err),
			Type:    "server_error",
			Code:    "scripted_rule_error",
		})
		return rep
	}
	rep.status = http.StatusOK
	rep.body = chatCompletion(in, resp, content)
	return rep
}

// renderContent is the answer's content: the response's, or its template
// executed on the request.
func renderContent(in *input, resp *compiledResponse, call int) (string, error) {
	if resp.tmpl == nil {
		return resp.Content, nil
	}
	var b strings.Builder
	data := TemplateData{
		Model: in.model, Agent: in.agent, System: in.system, LastUser: in.lastUser,
		LastToolResult: in.lastToolResult, Messages: in.messages, Call: call,
	}
	if err := resp.tmpl.Execute(&b, data); err != nil {
		return "", fmt.Errorf("template: %v", err)
	}
	return b.String(), nil
}

// checkAnswer tells why the rule's answer does not fit the request: tool
// calls it does not offer or allow, no tool call where one is required, or
// content that is not the JSON its response_format asks for.
func checkAnswer(in *input, req *chatRequest, resp *compiledResponse, content string) error {
	choice, _ := parseToolChoice(req.ToolChoice) // validated already
	if len(resp.toolCalls) == 0 {
		if choice.mode == "required" || choice.function != "" {
			return errors.New("answers without a tool call, but tool_choice requires one")
		}
		if rf := req.ResponseFormat; rf != nil && (rf.Type == "json_object" || rf.Type == "json_schema") && !json.Valid([]byte(content)) {
			return fmt.Errorf("answers content that is not JSON to a request with response_format %q: %q", rf.Type, truncate(content, 200))
		}
		return nil
	}
	if len(in.tools) == 0 {
		return errors.New("answers tool calls, but the request offers no tools")
	}
	if choice.mode == "none" {
		return errors.New("answers tool calls, but the request has tool_choice \"none\"")
	}
	for _, tc := range resp.toolCalls {
		if !slices.Contains(in.tools, tc.Name) {
			return fmt.Errorf("calls tool %q, but the request offers only %v", tc.Name, in.tools)
		}
		if choice.function != "" && tc.Name != choice.function {
			return fmt.Errorf("calls tool %q, but tool_choice names %q", tc.Name, choice.function)
		}
	}
	return nil
}

// chatCompletion is the completion answering with content and the
// response's tool calls, its usage estimated from the request.
func chatCompletion(in *input, resp *compiledResponse, content string) chatResponse {
	msg := wireAnswer{Role: "assistant", Annotations: []struct{}{}}
	if content != "" || len(resp.toolCalls) == 0 {
		msg.Content = &content
	}
	completionTokens := estimateTokens(content)
	for _, tc := range resp.toolCalls {
		id := tc.ID
		if id == "" {
			id = "call_" + rand.Text()
		}
		msg.ToolCalls = append(msg.ToolCalls, wireToolCall{ID: id, Type: "function", Function: wireFunction{Name: tc.Name, Arguments: tc.Arguments}})
		completionTokens += estimateTokens(tc.Name) + estimateTokens(tc.Arguments)
	}
	finish := resp.FinishReason
	if finish == "" {
		finish = "stop"
		if len(msg.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	}
	return chatResponse{
		ID:                "chatcmpl-" + rand.Text(),
		Object:            "chat.completion",
		Created:           time.Now().Unix(),
		Model:             in.model,
		Choices:           []wireChoice{{Index: 0, Message: msg, FinishReason: finish}},
		Usage:             usage(in, completionTokens, resp.Usage),
		ServiceTier:       "default",
		SystemFingerprint: Fingerprint,
	}
}

// usage estimates token counts the way OpenAI's cookbook counts chat messages (3 tokens of
// framing per message, 3 to prime the answer) and applies a rule's overrides.
func usage(in *input, completion int, override *Usage) wireUsage {
	prompt := 3 + estimateTokens(in.toolsJSON)
	for _, m := range in.messages {
		prompt += 3 + estimateTokens(m.text())
	}
	var u wireUsage
	if o := override; o != nil {
		if o.PromptTokens > 0 {
			prompt = o.PromptTokens
		}
		if o.CompletionTokens > 0 {
			completion = o.CompletionTokens
		} else {
			completion += o.ReasoningTokens // reasoning tokens are part of completion tokens
		}
		u.PromptTokensDetails.CachedTokens = min(o.CachedTokens, prompt)
		u.CompletionTokensDetails.ReasoningTokens = o.ReasoningTokens
	}
	u.PromptTokens = prompt
	u.CompletionTokens = completion
	u.TotalTokens = prompt + completion
	return u
}

func defaultError(status int) ErrorSpec {
	switch {
	case status == http.StatusUnauthorized:
		return ErrorSpec{Message: "Incorrect API key provided (scripted).", Type: "invalid_request_error", Code: "invalid_api_key"}
	case status == http.StatusNotFound:
		return ErrorSpec{Message: "The model does not exist or you do not have access to it (scripted).", Type: "invalid_request_error", Code: "model_not_found"}
	case status == http.StatusTooManyRequests:
		return ErrorSpec{Message: "Rate limit reached for requests (scripted). Please try again in 1s.", Type: "requests", Code: "rate_limit_exceeded"}
	case status == http.StatusServiceUnavailable:
		return ErrorSpec{Message: "The engine is currently overloaded, please try again later (scripted).", Type: "server_error"}
	case status >= 500:
		return ErrorSpec{Message: "The server had an error while processing your request. Sorry about that! (scripted)", Type: "server_error"}
	default:
		return ErrorSpec{Message: fmt.Sprintf("%s (scripted).", http.StatusText(status)), Type: "invalid_request_error"}
	}
}

func mergeError(base, over ErrorSpec) ErrorSpec {
	if over.Message != "" {
		base.Message = over.Message
	}
	if over.Type != "" {
		base.Type = over.Type
	}
	if over.Param != "" {
		base.Param = over.Param
	}
	if over.Code != "" {
		base.Code = over.Code
	}
	return base
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

func writeJSON(w http.ResponseWriter, status int, v any) (int, []byte) {
	b, err := json.Marshal(v)
	if err != nil { // only our own wire types are written; this is a programming error
		status = http.StatusInternalServerError
		b, _ = json.Marshal(newWireError(ErrorSpec{Message: "encode response: " + err.Error(), Type: "server_error"}))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
	return status, b
}

func writeError(w http.ResponseWriter, status int, e ErrorSpec) (int, []byte) {
	return writeJSON(w, status, newWireError(e))
}
