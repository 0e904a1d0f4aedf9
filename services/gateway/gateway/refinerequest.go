package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/feedback"
	"github.com/novaflow/nova/pkg/jsonvalue"
)

var (
	refineFields   = []string{"agentType", "originalCode", "language", "outputAnalysis", "feedback", "testContext", "maxAttempts", "timeout", "model", "executionId", "nodeId"}
	feedbackFields = []string{"field", "issue", "correctValue", "correctSelector", "correctExpression", "correctPattern", "notes", "examples"}
	analysisFields = []string{"type", "isStructured", "itemCount", "fields"}
	fieldDefFields = []string{"name", "type", "required", "coverage", "examples"}
	// nodeSources come from the node when a refinement names an execution's node.
	nodeSources = []string{"originalCode", "language", "outputAnalysis", "testContext"}
	agentTypeRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,39}$`)
)

// refineRequest is a checked POST /v1/refine body.
type refineRequest struct {
	agentType   string
	language    string
	code        string
	analysis    map[string]any
	feedback    []feedback.Field
	context     jsonvalue.Object
	network     bool
	allowHosts  []string
	maxAttempts int
	timeout     time.Duration
	timeoutSet  bool
	model       string
	// executionID and nodeID name a node of a finished execution whose code,
	// input and output analysis are refined.
	executionID, nodeID string
}

// parseRefine reads the body of POST /v1/refine, naming every field at fault.
func parseRefine(body []byte, maxTimeout time.Duration) (*refineRequest, *Problem) {
	members, err := jsonvalue.ParseObject(body)
	if err != nil {
		return nil, invalid(fmt.Sprintf("the body is not a JSON object: %v", err),
			FieldError{Field: "body", Detail: "a JSON object with agentType, originalCode, outputAnalysis, feedback and testContext is required"})
	}
	p := &refineParser{members: members,
		req: &refineRequest{language: "javascript", context: jsonvalue.Object{}, maxAttempts: defaultRefineAttempts, timeout: defaultExecuteTimeout}}
	for _, k := range members.Keys() {
		if !slices.Contains(refineFields, k) {
			p.add(k, "unknown field (known: %s)", strings.Join(refineFields, ", "))
		}
	}
	p.agentType()
	_, hasExecution := members["executionId"]
	_, hasNode := members["nodeId"]
	if hasExecution || hasNode {
		p.executionNode()
	} else {
		p.ownCode()
	}
	if raw, ok := members["feedback"]; ok {
		p.req.feedback = parseFeedback(raw, &p.errs)
	} else {
		p.add("feedback", "is required: an array of field feedback (field, issue, ...)")
	}
	p.limits(maxTimeout)
	if len(p.errs) > 0 {
		return nil, invalid(problemsDetail("the request", len(p.errs)), p.errs...)
	}
	return p.req, nil
}

// refineParser reads a refine request's members into req, collecting every
// problem.
type refineParser struct {
	members jsonvalue.Object
	req     *refineRequest
	errs    []FieldError
}

func (p *refineParser) add(field, format string, args ...any) {
	p.errs = append(p.errs, FieldError{Field: field, Detail: fmt.Sprintf(format, args...)})
}

// str reads a string member; ok says it is there and a string.
func (p *refineParser) str(name string, required bool) (string, bool) {
	raw, present := p.members[name]
	if !present {
		if required {
			p.add(name, "is required")
		}
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		p.add(name, "must be a string")
		return "", false
	}
	return s, true
}

func (p *refineParser) agentType() {
	if s, ok := p.str("agentType", true); ok {
		p.req.agentType = strings.ToLower(strings.TrimSpace(s))
		if !agentTypeRE.MatchString(p.req.agentType) {
			p.add("agentType", "must be one word of letters, digits, '-' or '_' (up to 40), such as scraper, transformer, analyzer or api-client; got %q", s)
		}
	}
}

// executionNode reads executionId and nodeId, which name the code, its
// language, output analysis and test context.
func (p *refineParser) executionNode() {
	for _, f := range []struct {
		name string
		dst  *string
	}{{"executionId", &p.req.executionID}, {"nodeId", &p.req.nodeID}} {
		if s, ok := p.str(f.name, true); ok {
			if strings.TrimSpace(s) == "" || len(s) > 200 {
				p.add(f.name, "must be 1 to 200 characters")
			}
			*f.dst = s
		}
	}
	for _, k := range nodeSources {
		if _, ok := p.members[k]; ok {
			p.add(k, "comes from the node of the execution named by executionId and nodeId; leave it out, or refine code of your own without executionId and nodeId")
		}
	}
}

// ownCode reads the code the request brings: originalCode, language,
// outputAnalysis and testContext.
func (p *refineParser) ownCode() {
	if s, ok := p.str("originalCode", true); ok {
		if strings.TrimSpace(s) == "" {
			p.add("originalCode", "the code to refine is required")
		}
		p.req.code = s
	}
	if s, ok := p.str("language", false); ok {
		p.req.language = s
	}
	if p.req.language != "python" && p.req.language != "javascript" {
		p.add("language", "%q is not python or javascript", p.req.language)
	}
	if raw, ok := p.members["outputAnalysis"]; ok {
		p.req.analysis = parseAnalysis(raw, &p.errs)
	} else {
		p.add("outputAnalysis", "is required: the output analysis of the original code (as POST /v1/execute answers it)")
	}
	if raw, ok := p.members["testContext"]; ok {
		parseTestContext(raw, p.req, &p.errs)
	}
}

// limits reads maxAttempts, timeout (each attempt's run, at most
// maxTimeout) and model.
func (p *refineParser) limits(maxTimeout time.Duration) {
	if raw, ok := p.members["maxAttempts"]; ok {
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil || !jsonvalue.IsInteger(n) {
			p.add("maxAttempts", "must be a whole number from 1 to %d", maxRefineAttempts)
		} else if v, ok := jsonvalue.Int64(n); !ok || v < 1 || v > maxRefineAttempts {
			p.add("maxAttempts", "must be a whole number from 1 to %d", maxRefineAttempts)
		} else {
			p.req.maxAttempts = int(v)
		}
	}
	if raw, ok := p.members["timeout"]; ok {
		var ms float64
		if err := json.Unmarshal(raw, &ms); err != nil || ms <= 0 || time.Duration(ms*float64(time.Millisecond)) > maxTimeout {
			p.add("timeout", "must be a number of milliseconds, more than 0 and at most %d (each attempt's run)", maxTimeout.Milliseconds())
		} else {
			p.req.timeout, p.req.timeoutSet = time.Duration(ms*float64(time.Millisecond)), true
		}
	}
	if s, ok := p.str("model", false); ok {
		if strings.TrimSpace(s) == "" || len(s) > 200 || strings.IndexFunc(s, unicode.IsControl) >= 0 {
			p.add("model", "must be a model name, 1 to 200 printable characters")
		}
		p.req.model = s
	}
}

// parseAnalysis checks the request's output analysis.
func parseAnalysis(raw json.RawMessage, errs *[]FieldError) map[string]any {
	add := func(field, detail string) { *errs = append(*errs, FieldError{Field: field, Detail: detail}) }
	v, err := jsonvalue.Decode(raw)
	m, ok := v.(map[string]any)
	if err != nil || !ok {
		add("outputAnalysis", "must be a JSON object: type, isStructured, itemCount, fields")
		return nil
	}
	for _, k := range sortedKeys(m) {
		if !slices.Contains(analysisFields, k) {
			add("outputAnalysis."+k, "unknown field (known: "+strings.Join(analysisFields, ", ")+")")
		}
	}
	if t, ok := m["type"]; ok && t != "array" && t != "object" && t != "primitive" {
		add("outputAnalysis.type", "must be array, object or primitive")
	}
	if s, ok := m["isStructured"]; ok {
		if _, isBool := s.(bool); !isBool {
			add("outputAnalysis.isStructured", "must be true or false")
		}
	}
	if c, ok := m["itemCount"]; ok {
		if n, isNum := c.(json.Number); !isNum || !jsonvalue.IsInteger(n) || strings.HasPrefix(string(n), "-") {
			add("outputAnalysis.itemCount", "must be a whole number, 0 or more")
		}
	}
	if fs, ok := m["fields"]; ok {
		list, isList := fs.([]any)
		if !isList {
			add("outputAnalysis.fields", "must be an array of field definitions (name, type, required, coverage, examples)")
		}
		for i, f := range list {
			at := fmt.Sprintf("outputAnalysis.fields[%d]", i)
			fm, isObj := f.(map[string]any)
			if !isObj {
				add(at, "must be an object: name, type, required, coverage, examples")
				continue
			}
			for _, k := range sortedKeys(fm) {
				if !slices.Contains(fieldDefFields, k) {
					add(at+"."+k, "unknown field (known: "+strings.Join(fieldDefFields, ", ")+")")
				}
			}
			if name, ok := fm["name"].(string); !ok || strings.TrimSpace(name) == "" {
				add(at+".name", "is required: the field's name")
			}
			if t, ok := fm["type"]; ok {
				if _, isStr := t.(string); !isStr {
					add(at+".type", "must be a string")
				}
			}
			if r, ok := fm["required"]; ok {
				if _, isBool := r.(bool); !isBool {
					add(at+".required", "must be true or false")
				}
			}
			if c, ok := fm["coverage"]; ok {
				n, isNum := c.(json.Number)
				x, err := n.Float64()
				if !isNum || err != nil || x < 0 || x > 100 {
					add(at+".coverage", "must be a percentage from 0 to 100")
				}
			}
			if e, ok := fm["examples"]; ok {
				if _, isList := e.([]any); !isList {
					add(at+".examples", "must be an array of values")
				}
			}
		}
	}
	return m
}

// parseTestContext reads what the code runs with: url (the sandbox may reach
// its host; it is context.url too), context (an object whose members join
// the context), args (an array of at most one object, as POST /v1/execute
// takes it) and any other member, which joins the context as it is (seed
// 004's sampleInput, pdfText, endpoint, ...).
func parseTestContext(raw json.RawMessage, req *refineRequest, errs *[]FieldError) {
	add := func(field, detail string) { *errs = append(*errs, FieldError{Field: field, Detail: detail}) }
	tc, err := jsonvalue.ParseObject(raw)
	if err != nil {
		add("testContext", "must be a JSON object: the context, args or url the code runs with")
		return
	}
	for _, k := range tc.Keys() {
		if k != "url" && k != "context" && k != "args" {
			req.context[k] = tc[k]
		}
	}
	if c, ok := tc["context"]; ok {
		obj, err := jsonvalue.ParseObject(c)
		if err != nil {
			add("testContext.context", "must be a JSON object (its members join the context)")
		} else {
			req.context.Merge(obj)
		}
	}
	if a, ok := tc["args"]; ok {
		var args []json.RawMessage
		if err := json.Unmarshal(a, &args); err != nil || len(args) > 1 {
			add("testContext.args", "must be an array of at most one object: the exported function is called with one argument, the context, which that object's members join")
		} else if len(args) == 1 {
			obj, err := jsonvalue.ParseObject(args[0])
			if err != nil {
				add("testContext.args[0]", "must be a JSON object (its members join the context)")
			} else {
				req.context.Merge(obj)
			}
		}
	}
	if u, ok := tc["url"]; ok {
		var s string
		var parsed *url.URL
		err := json.Unmarshal(u, &s)
		if err == nil {
			parsed, err = url.Parse(s)
		}
		if err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
			add("testContext.url", "must be an absolute http or https URL")
		} else {
			req.context["url"] = u
			req.network, req.allowHosts = true, []string{parsed.Host}
		}
	}
}

// parseFeedback checks the request's array of field feedback.
func parseFeedback(raw json.RawMessage, errs *[]FieldError) []feedback.Field {
	add := func(field, format string, args ...any) {
		*errs = append(*errs, FieldError{Field: field, Detail: fmt.Sprintf(format, args...)})
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 || len(items) > maxFeedbackItems {
		add("feedback", "must be an array of 1 to %d field feedback objects (field, issue, correctValue, correctSelector, correctExpression, correctPattern, notes, examples)", maxFeedbackItems)
		return nil
	}
	out := make([]feedback.Field, 0, len(items))
	seen := map[string]int{}
	for i, item := range items {
		at := fmt.Sprintf("feedback[%d]", i)
		m, err := jsonvalue.ParseObject(item)
		if err != nil {
			add(at, "must be an object: field, issue, correctValue, correctSelector, correctExpression, correctPattern, notes, examples")
			continue
		}
		for _, k := range m.Keys() {
			if !slices.Contains(feedbackFields, k) {
				add(at+"."+k, "unknown field (known: %s)", strings.Join(feedbackFields, ", "))
			}
		}
		var f feedback.Field
		text := func(name string, dst *string, required bool) {
			v, ok := m[name]
			if !ok {
				if required {
					add(at+"."+name, "is required")
				}
				return
			}
			if err := json.Unmarshal(v, dst); err != nil {
				add(at+"."+name, "must be a string")
			} else if len(*dst) > maxFeedbackText {
				add(at+"."+name, "must be at most %d bytes", maxFeedbackText)
			}
		}
		text("field", &f.Field, true)
		if _, ok := m["field"]; ok && (strings.TrimSpace(f.Field) == "" || len(f.Field) > 200) {
			add(at+".field", "must name a field of the output, 1 to 200 characters")
		} else if j, dup := seen[f.Field]; dup && f.Field != "" {
			add(at+".field", "feedback on %q is given twice (also feedback[%d]); merge the two", f.Field, j)
		}
		seen[f.Field] = i
		text("issue", &f.Issue, true)
		if _, ok := m["issue"]; ok && !slices.Contains(feedback.Issues, f.Issue) {
			add(at+".issue", "must be missing, wrong, partial or format")
		}
		text("correctSelector", &f.CorrectSelector, false)
		text("correctExpression", &f.CorrectExpression, false)
		text("correctPattern", &f.CorrectPattern, false)
		text("notes", &f.Notes, false)
		if v, ok := m["correctValue"]; ok {
			switch d, err := jsonvalue.Decode(v); d.(type) {
			case string, json.Number, bool:
				if err == nil && len(v) <= maxFeedbackText {
					f.CorrectValue = jsonvalue.Compact(v)
					break
				}
				add(at+".correctValue", "must be at most %d bytes", maxFeedbackText)
			default:
				add(at+".correctValue", "must be a string, a number or a boolean: the value the field should have")
			}
		}
		if v, ok := m["examples"]; ok {
			f.Examples = parseExamples(at+".examples", v, add)
		}
		if f.Issue == feedback.IssueFormat && len(f.Expected()) == 0 {
			add(at, "a format issue needs correctValue or examples with expectedOutput: the format to check the values against")
		}
		out = append(out, f)
	}
	return out
}

func parseExamples(at string, raw json.RawMessage, add func(string, string, ...any)) []feedback.Example {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil || len(list) > maxFeedbackExamples {
		add(at, "must be an array of at most %d examples ({input, expectedOutput})", maxFeedbackExamples)
		return nil
	}
	out := make([]feedback.Example, 0, len(list))
	for i, e := range list {
		where := fmt.Sprintf("%s[%d]", at, i)
		m, err := jsonvalue.ParseObject(e)
		if err != nil {
			add(where, "must be an object: input, expectedOutput")
			continue
		}
		for _, k := range m.Keys() {
			if k != "input" && k != "expectedOutput" {
				add(where+"."+k, "unknown field (known: input, expectedOutput)")
			}
		}
		ex := feedback.Example{Input: m["input"], ExpectedOutput: m["expectedOutput"]}
		if ex.ExpectedOutput == nil {
			add(where+".expectedOutput", "is required: the value the field should have for this input")
		}
		out = append(out, ex)
	}
	return out
}

// checkWrongFeedback refuses a "wrong" issue that nothing could resolve:
// without expected values, only a change from the values the analysis showed
// tells that the field is right now.
func (req *refineRequest) checkWrongFeedback() *Problem {
	original := feedback.Originals(req.analysis)
	var errs []FieldError
	for i := range req.feedback {
		f := &req.feedback[i]
		if f.Issue == feedback.IssueWrong && len(f.Expected()) == 0 && len(original[f.Field].Examples) == 0 {
			errs = append(errs, FieldError{Field: fmt.Sprintf("feedback[%d]", i), Detail: fmt.Sprintf(
				"a wrong issue needs correctValue or examples with expectedOutput: the output analysis shows no values of %q to tell a change by", f.Field)})
		}
	}
	if len(errs) > 0 {
		return invalid(problemsDetail("the request", len(errs)), errs...)
	}
	return nil
}

// fromExecution fills a refinement of an execution's node from the chain of
// work: the code the node ran (an AI node's accepted code), its input
// context and its output analysis, and from the definition its language,
// model, network and timeout.
func (g *Gateway) fromExecution(r *http.Request, req *refineRequest) error {
	ctx := r.Context()
	doc, err := g.store.Execution(ctx, req.executionID)
	switch {
	case errors.Is(err, chainstore.ErrNotFound):
		return newProblem(http.StatusNotFound, TypeNotFound, fmt.Sprintf("no execution %q in the chain of work", req.executionID))
	case err != nil:
		return g.unavailable(r, "the audit store cannot be read", err)
	case doc.Status == chainstore.StatusRunning:
		return newProblem(http.StatusConflict, TypeConflict, fmt.Sprintf(
			"execution %q is still running; refine its nodes once it has finished", req.executionID))
	}
	chain, err := g.store.Chain(ctx, req.executionID)
	if err != nil {
		return g.unavailable(r, "the chain of work cannot be read", err)
	}
	var node *chainstore.NodeDoc
	for i := range chain {
		if chain[i].NodeID == req.nodeID && chain[i].Status != chainstore.StatusRunning {
			node = &chain[i] // the last visit
		}
	}
	if node == nil {
		return newProblem(http.StatusNotFound, TypeNotFound, fmt.Sprintf("execution %q has no node %q", req.executionID, req.nodeID))
	}
	code := node.CodeExecuted
	if node.AIMetadata != nil {
		code, _ = node.AIMetadata["generated_code"].(string) // code_executed holds the prompt when no code was written
	}
	if strings.TrimSpace(code) == "" {
		return newProblem(http.StatusUnprocessableEntity, TypeInvalidRequest, fmt.Sprintf(
			"node %q of execution %q ran no code to refine", req.nodeID, req.executionID),
			FieldError{Field: "nodeId", Detail: "names a node without code (a start or end node, or an AI node whose code generation failed)"})
	}
	req.code = code
	// The store's documents hold its own array type; read as JSON, they are
	// the analysis and the definition as the events carried them.
	if req.analysis, err = plainJSON(node.OutputAnalysis); err != nil {
		return fmt.Errorf("output analysis of %s: %w", node.ID, err)
	}
	def, err := plainJSON(doc.Definition)
	if err != nil {
		return fmt.Errorf("definition of %s: %w", req.executionID, err)
	}
	if req.context, err = jsonvalue.ObjectOf(node.InputContext); err != nil {
		return fmt.Errorf("input context of %s: %w", node.ID, err)
	}
	if req.context == nil {
		req.context = jsonvalue.Object{}
	}
	g.fromDefinition(req, def)
	return nil
}

// fromDefinition takes the node's language, model, network access and
// timeout from the execution's definition, the node's own before the
// workflow's; a request's own model and timeout are kept.
func (g *Gateway) fromDefinition(req *refineRequest, def map[string]any) {
	var nodeDef map[string]any
	nodes, _ := def["nodes"].([]any)
	for _, n := range nodes {
		if m, ok := n.(map[string]any); ok && m["id"] == req.nodeID {
			nodeDef = m
		}
	}
	req.language = "python"
	if l, _ := nodeDef["language"].(string); l != "" {
		req.language = l
	}
	if req.model == "" {
		req.model, _ = nodeDef["model"].(string)
		if req.model == "" {
			req.model, _ = def["model"].(string)
		}
	}
	netOn := func(m map[string]any) bool { b, _ := m["network"].(bool); return b }
	if netOn(def) || netOn(nodeDef) {
		req.network = true
		for _, m := range []map[string]any{def, nodeDef} {
			hosts, _ := m["allow_hosts"].([]any)
			for _, h := range hosts {
				if s, ok := h.(string); ok {
					req.allowHosts = append(req.allowHosts, s)
				}
			}
		}
	}
	if !req.timeoutSet {
		for _, m := range []map[string]any{nodeDef, def} {
			if s := number(m["timeout_seconds"]); s > 0 {
				req.timeout = min(time.Duration(s*float64(time.Second)), g.limits.MaxExecuteTimeout)
				break
			}
		}
	}
}

// plainJSON is m as encoding/json reads it (json.Number numbers); nil is
// an empty object.
func plainJSON(m map[string]any) (map[string]any, error) {
	if m == nil {
		return map[string]any{}, nil
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	v, err := jsonvalue.Decode(raw)
	if err != nil {
		return nil, err
	}
	out, _ := v.(map[string]any)
	return out, nil
}

func number(v any) float64 {
	switch t := v.(type) {
	case float64:
		return t
	case int32:
		return float64(t)
	case int64:
		return float64(t)
	case json.Number:
		f, _ := t.Float64()
		return f
	}
	return 0
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
