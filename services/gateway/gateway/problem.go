package gateway

import (
	"encoding/json"
	"net/http"

	"github.com/novaflow/nova/pkg/redact"
)

// Problem is an RFC 9457 problem document; every error the gateway answers
// is one (Content-Type application/problem+json). A handler returns it as
// its error.
type Problem struct {
	// Type identifies the kind of problem (a URN: urn:nova:problem:<kind>).
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Errors name each field at fault.
	Errors []FieldError `json:"errors,omitempty"`

	// header is set on the response with the problem (Allow, WWW-Authenticate).
	header http.Header
}

// FieldError is one field at fault. Field is where it is: a member of the
// request body ("context", "definition.edges[2].to"), a query parameter
// ("limit") or a header ("Idempotency-Key"). Node names the workflow node
// when the problem belongs to one; Line is the line of a workflow
// definition sent as the body (from 1) it is at, where the text shows it.
type FieldError struct {
	Field  string `json:"field"`
	Node   string `json:"node,omitempty"`
	Detail string `json:"detail"`
	Line   int    `json:"line,omitempty"`
}

func (p *Problem) Error() string { return p.Title + ": " + p.Detail }

// Problem types.
const (
	typePrefix           = "urn:nova:problem:"
	TypeInvalidRequest   = typePrefix + "invalid-request"
	TypeInvalidWorkflow  = typePrefix + "invalid-workflow"
	TypeUnknownWorkflow  = typePrefix + "unknown-workflow"
	TypeUnauthorized     = typePrefix + "unauthorized"
	TypeForbidden        = typePrefix + "forbidden"
	TypeNotFound         = typePrefix + "not-found"
	TypeMethodNotAllowed = typePrefix + "method-not-allowed"
	TypeBodyTooLarge     = typePrefix + "body-too-large"
	TypeTimeout          = typePrefix + "timeout"
	TypeUnavailable      = typePrefix + "unavailable"
	TypeInternal         = typePrefix + "internal"
)

func newProblem(status int, typ, detail string, errs ...FieldError) *Problem {
	return &Problem{Type: typ, Title: http.StatusText(status), Status: status, Detail: detail, Errors: errs}
}

// invalid is a 400 naming the fields at fault.
func invalid(detail string, errs ...FieldError) *Problem {
	return newProblem(http.StatusBadRequest, TypeInvalidRequest, detail, errs...)
}

// invalidField is a 400 for one field.
func invalidField(field, detail string) *Problem {
	return invalid(field+": "+detail, FieldError{Field: field, Detail: detail})
}

func (p *Problem) with(key, value string) *Problem {
	if p.header == nil {
		p.header = http.Header{}
	}
	p.header.Set(key, value)
	return p
}

// writeProblem answers with p. Details and field messages may quote what a
// client sent; any secret in them is hidden, as everywhere NOVA writes text.
func writeProblem(w http.ResponseWriter, p *Problem) {
	for k, v := range p.header {
		w.Header()[k] = v
	}
	out := *p
	out.Detail = redact.Scrub(out.Detail, nil)
	out.Errors = make([]FieldError, len(p.Errors))
	for i, e := range p.Errors {
		e.Detail = redact.Scrub(e.Detail, nil)
		out.Errors[i] = e
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(out)
}
