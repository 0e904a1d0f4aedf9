package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// TimeoutCondition is the condition of the edge a wait node takes when its
// timeout passes before its signal comes.
const TimeoutCondition = "timeout"

// WaitTimeout is how long wait node n waits for its signal: its timeout, 0
// when it waits for ever.
func WaitTimeout(n *novav1.Node) time.Duration {
	return secondsDuration(n.GetTimeoutSeconds())
}

// SleepFor is how long sleep node n sleeps when it sleeps for a duration
// (0 when it sleeps until the time in a context key: see Node.until).
func SleepFor(n *novav1.Node) time.Duration {
	return secondsDuration(n.GetDurationSeconds())
}

// token is what a signal name or a schedule id may be: it becomes a URL path
// segment and a subject token.
var token = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// ValidToken reports whether s is a single token of letters, digits, '-'
// and '_', as signal names and schedule ids must be.
func ValidToken(s string) bool { return token.MatchString(s) }

// PayloadError says why a signal's payload does not meet its wait node's
// schema: the first field that fails, and how.
type PayloadError struct {
	// Field is the path of the failing field, its keys (and list indexes)
	// joined by dots ("address.city", "lines.0.amount"); "" for the payload
	// as a whole.
	Field string
	// Problem says what the value must be ("must be a number", "is required").
	Problem string
}

func (e *PayloadError) Error() string {
	if e.Field == "" {
		return "payload: " + e.Problem
	}
	return fmt.Sprintf("payload field %q: %s", e.Field, e.Problem)
}

// CompileSchema compiles text, a JSON Schema written as JSON, as a wait node's
// payload schema. A schema without $schema is read as draft 2020-12; format
// is asserted ("format": "date" refuses "tomorrow"); $ref may point inside
// the schema and to the JSON Schema meta-schemas, never to a file or a URL
// to fetch. The error says what is wrong and where.
func CompileSchema(text string) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("is not JSON: %v", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, fmt.Errorf("is not a JSON Schema: want a mapping (an object), got %s", jsonvalue.KindOf([]byte(text)))
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(jsonschema.SchemeURLLoader{}) // no files, no network
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("is not a JSON Schema: %v", err)
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("is not a valid JSON Schema: %s", schemaError(err))
	}
	return s, nil
}

// schemaURL is where a compiled schema is, for resolving its $refs; a
// relative $ref resolves to a URL that is never fetched.
const (
	schemaBase = "https://nova.invalid/"
	schemaURL  = schemaBase + "signal.schema.json"
)

// schemaError describes why a schema does not compile in one line.
func schemaError(err error) string {
	var serr *jsonschema.SchemaValidationError
	var verr *jsonschema.ValidationError
	if errors.As(err, &serr) && errors.As(serr.Err, &verr) {
		f := firstFailure(verr)
		if f.path == "" {
			return f.problem
		}
		return fmt.Sprintf("at %q: %s", f.path, f.problem)
	}
	var lerr *jsonschema.LoadURLError
	if errors.As(err, &lerr) {
		return fmt.Sprintf("it refers to %q, outside the schema; a schema must hold all it refers to (no file or URL is fetched)", strings.TrimPrefix(lerr.URL, schemaBase))
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}

// CheckPayload checks a signal's payload (decoded with numbers as
// json.Number, as jsonvalue does) against wait node n's schema. A node
// without a schema takes any payload. The error says that the node's schema
// does not compile (which Validate refuses), or names every field at fault:
// its text is that of the first field in path order (errors.As finds that
// *PayloadError), and its Unwrap() []error is a *PayloadError for each
// field and problem, in path order, so that a form can mark them all at once.
func CheckPayload(n *novav1.Node, payload map[string]any) error {
	text := n.GetSchema()
	if text == "" {
		return nil
	}
	s, err := cachedSchema(text)
	if err != nil {
		return fmt.Errorf("wait node %q: its schema %v", n.GetId(), err)
	}
	if payload == nil {
		payload = map[string]any{}
	}
	err = s.Validate(payload)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return &PayloadError{Problem: err.Error()}
	}
	var all []failure
	collectFailures(verr, &all)
	if len(all) == 0 {
		f := firstFailure(verr)
		return &PayloadError{Field: f.path, Problem: f.problem}
	}
	// Stable: of one field's problems the first found stays first, as
	// firstFailure picks it.
	slices.SortStableFunc(all, func(a, b failure) int { return strings.Compare(a.path, b.path) })
	seen := map[failure]bool{}
	var errs []any
	for _, f := range all {
		if !seen[f] {
			seen[f] = true
			errs = append(errs, &PayloadError{Field: f.path, Problem: f.problem})
		}
	}
	if len(errs) == 1 {
		return errs[0].(error)
	}
	// "%w" prints the first; each "%.0w" prints nothing (a precision of
	// zero) but still wraps its error.
	return fmt.Errorf("%w"+strings.Repeat("%.0w", len(errs)-1), errs...)
}

// Compiled schemas by their text: wait nodes are few, signals many.
var schemas = struct {
	sync.Mutex
	m map[string]*jsonschema.Schema
}{m: map[string]*jsonschema.Schema{}}

const maxCachedSchemas = 256

func cachedSchema(text string) (*jsonschema.Schema, error) {
	schemas.Lock()
	s := schemas.m[text]
	schemas.Unlock()
	if s != nil {
		return s, nil
	}
	s, err := CompileSchema(text)
	if err != nil {
		return nil, err
	}
	schemas.Lock()
	if len(schemas.m) >= maxCachedSchemas {
		clear(schemas.m)
	}
	schemas.m[text] = s
	schemas.Unlock()
	return s, nil
}

// failure is one way a value fails a schema: where, and what it must be.
type failure struct {
	path    string
	problem string
}

// firstFailure picks, of the ways a value fails, the one of the first field
// (in path order, the whole value first), so that the answer does not
// depend on the order the validator went through the keys.
func firstFailure(e *jsonschema.ValidationError) failure {
	var all []failure
	collectFailures(e, &all)
	if len(all) == 0 {
		return failure{path: fieldPath(e.InstanceLocation), problem: "does not match the schema"}
	}
	return slices.MinFunc(all, func(a, b failure) int {
		return strings.Compare(a.path, b.path)
	})
}

func collectFailures(e *jsonschema.ValidationError, out *[]failure) {
	at := func(extra ...string) string {
		return fieldPath(append(slices.Clone(e.InstanceLocation), extra...))
	}
	switch k := e.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.Reference, *kind.AllOf:
		for _, c := range e.Causes {
			collectFailures(c, out)
		}
		if len(e.Causes) == 0 {
			*out = append(*out, failure{at(), "does not match the schema"})
		}
	case *kind.AnyOf:
		*out = append(*out, alternatives(e, at()))
	case *kind.OneOf:
		if len(k.Subschemas) > 1 {
			*out = append(*out, failure{at(), "matches more than one of the allowed forms; it must match exactly one"})
		} else {
			*out = append(*out, alternatives(e, at()))
		}
	case *kind.Required:
		for _, m := range k.Missing {
			*out = append(*out, failure{at(m), "is required"})
		}
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			*out = append(*out, failure{at(p), "is not allowed"})
		}
	case *kind.DependentRequired:
		for _, m := range k.Missing {
			*out = append(*out, failure{at(m), fmt.Sprintf("is required when %q is set", k.Prop)})
		}
	case *kind.Dependency:
		for _, m := range k.Missing {
			*out = append(*out, failure{at(m), fmt.Sprintf("is required when %q is set", k.Prop)})
		}
	default:
		*out = append(*out, failure{at(), problemOf(e.ErrorKind)})
	}
}

// alternatives describes a value that matches none of anyOf's or oneOf's
// schemas: the types they allow when each wants another type, else how it
// fails the first.
func alternatives(e *jsonschema.ValidationError, path string) failure {
	var want []string
	for _, c := range e.Causes {
		t, ok := c.ErrorKind.(*kind.Type)
		if !ok || fieldPath(c.InstanceLocation) != path {
			want = nil
			break
		}
		want = append(want, t.Want...)
	}
	if len(want) > 0 {
		return failure{path, "must be " + typeNames(want)}
	}
	if len(e.Causes) > 0 {
		var first []failure
		collectFailures(e.Causes[0], &first)
		if len(first) > 0 {
			return first[0]
		}
	}
	return failure{path, "does not match any of the allowed forms"}
}

// problemOf says what a value must be to pass the check that it failed.
func problemOf(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Type:
		return "must be " + typeNames(k.Want)
	case *kind.Enum:
		vals := make([]string, len(k.Want))
		for i, v := range k.Want {
			vals[i] = jsonText(v)
		}
		if len(vals) == 1 {
			return "must be " + vals[0]
		}
		return "must be one of " + strings.Join(vals, ", ")
	case *kind.Const:
		return "must be " + jsonText(k.Want)
	case *kind.Format:
		return fmt.Sprintf("must be a valid %s", k.Want)
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %d characters long", k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters long", k.Want)
	case *kind.Pattern:
		return fmt.Sprintf("must match the pattern %q", k.Want)
	case *kind.Minimum:
		return "must be at least " + ratText(k.Want)
	case *kind.Maximum:
		return "must be at most " + ratText(k.Want)
	case *kind.ExclusiveMinimum:
		return "must be more than " + ratText(k.Want)
	case *kind.ExclusiveMaximum:
		return "must be less than " + ratText(k.Want)
	case *kind.MultipleOf:
		return "must be a multiple of " + ratText(k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d items", k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d items", k.Want)
	case *kind.MinProperties:
		return fmt.Sprintf("must have at least %d fields", k.Want)
	case *kind.MaxProperties:
		return fmt.Sprintf("must have at most %d fields", k.Want)
	case *kind.UniqueItems:
		return fmt.Sprintf("must not repeat an item (items %d and %d are equal)", k.Duplicates[0], k.Duplicates[1])
	case *kind.FalseSchema:
		return "is not allowed"
	case *kind.Not:
		return "matches a form the schema does not allow"
	case *kind.PropertyNames:
		return fmt.Sprintf("has a field whose name is not allowed (%q)", k.Property)
	case *kind.AdditionalItems:
		return fmt.Sprintf("has %d items more than allowed", k.Count)
	case *kind.Contains, *kind.MinContains, *kind.MaxContains:
		return "does not hold the items the schema asks for (contains)"
	case *kind.ContentEncoding:
		return fmt.Sprintf("must be %s encoded", k.Want)
	case *kind.ContentMediaType:
		return fmt.Sprintf("must hold %s", k.Want)
	case *kind.InvalidJsonValue:
		return fmt.Sprintf("is not a JSON value (%T)", k.Value)
	default:
		return "does not match the schema"
	}
}

func typeNames(want []string) string {
	names := make([]string, 0, len(want))
	for _, t := range want {
		var name string
		switch t {
		case "number":
			name = "a number"
		case "integer":
			name = "a whole number"
		case "string":
			name = "a string"
		case "boolean":
			name = "true or false"
		case "object":
			name = "an object"
		case "array":
			name = "a list"
		case "null":
			name = "null"
		default:
			name = t
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	if i := slices.Index(names, "null"); i >= 0 && len(names) > 1 {
		names = append(slices.Delete(names, i, i+1), "null") // "a string or null"
	}
	switch len(names) {
	case 0:
		return "of another type"
	case 1:
		return names[0]
	default:
		return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	}
}

// jsonText writes a schema's value as JSON ("approved", 3, null).
func jsonText(v any) string {
	b, err := jsonvalue.Encode(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func ratText(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'f', -1, 64)
}

func fieldPath(loc []string) string { return strings.Join(loc, ".") }

// schema reads a wait node's schema: a mapping (a JSON Schema written in the
// definition) or its JSON text. It is kept as compact JSON with sorted keys,
// numbers as written; Validate compiles it.
func (p *parser) schema(w where, m map[string]any, key string) string {
	v, ok := m[key]
	if !ok || v == nil {
		return ""
	}
	if s, isStr := v.(string); isStr {
		dec := json.NewDecoder(strings.NewReader(s))
		dec.UseNumber()
		var doc any
		if err := dec.Decode(&doc); err != nil || dec.More() {
			p.addf(w, key, "must be a JSON Schema: a mapping, or its JSON text; the text is not JSON")
			return ""
		}
		v = doc
	}
	obj, isObj := v.(map[string]any)
	if !isObj {
		p.addf(w, key, "must be a JSON Schema: a mapping such as {type: object, required: [approved]}, got %s", kindOf(v))
		return ""
	}
	return string(canonicalJSON(obj))
}

// canonicalJSON writes a decoded JSON value compactly, keys sorted, numbers
// as written.
func canonicalJSON(v any) []byte {
	b, err := jsonvalue.Encode(v)
	if err != nil {
		// Values decoded from JSON always encode.
		return nil
	}
	return bytes.TrimSpace(b)
}
