package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
)

var saveCodeFields = []string{"code", "language", "revision"}

// savedCode is the answer of POST /v1/workflows/{name}/nodes/{id}/code: the
// new registration, the one it replaced, and the new definition.
type savedCode struct {
	workflowSummary
	PreviousRevision uint64          `json:"previous_revision"`
	Node             string          `json:"node"`
	Definition       json.RawMessage `json:"definition"`
}

// saveNodeCode is POST /v1/workflows/{name}/nodes/{id}/code: accepted code
// (a refinement's, for one) becomes the node's code in a new registration
// of the workflow, so that its next runs use it and, for an AI node, call no
// model: the node becomes a code node that keeps its prompt in its
// description and atop the code (workflow.PinCode). The body is {"code",
// "language" (python or javascript; default the node's), "revision" (the
// registration the code was made for: 409 when the workflow has been
// registered again since)}.
func (g *Gateway) saveNodeCode(w http.ResponseWriter, r *http.Request) error {
	if p := checkQuery(r); p != nil {
		return p
	}
	name, nodeID := r.PathValue("name"), r.PathValue("id")
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	code, language, revision, p := parseSaveCode(body)
	if p != nil {
		return p
	}
	entry, def, err := g.registeredWorkflow(r, name)
	if err != nil {
		return err
	}
	if revision != 0 && revision != entry.Revision() {
		return newProblem(http.StatusConflict, TypeConflict, fmt.Sprintf(
			"workflow %q is at revision %d, not %d: it was registered again since; refine against the current definition",
			name, entry.Revision(), revision), FieldError{Field: "revision", Detail: fmt.Sprintf("the current revision is %d", entry.Revision())})
	}
	pinned, err := workflow.PinCode(def, nodeID, code, language)
	var verr *workflow.ValidationError
	switch {
	case errors.Is(err, workflow.ErrUnknownNode):
		return newProblem(http.StatusNotFound, TypeNotFound, fmt.Sprintf("workflow %q has no node %q", name, nodeID))
	case errors.Is(err, workflow.ErrNotRunnable):
		return newProblem(http.StatusUnprocessableEntity, TypeInvalidWorkflow, fmt.Sprintf(
			"node %q of workflow %q is a start or end node, which runs no code", nodeID, name))
	case errors.As(err, &verr):
		return invalidWorkflow(verr)
	case err != nil:
		return invalidField("code", err.Error())
	}
	saved, err := g.register(r, pinned)
	if err != nil {
		return err
	}
	text, err := definitionJSON.Marshal(pinned)
	if err != nil {
		return fmt.Errorf("workflow %q: %w", name, err)
	}
	writeJSON(w, http.StatusOK, savedCode{workflowSummary: summarize(saved, pinned), PreviousRevision: entry.Revision(),
		Node: nodeID, Definition: text})
	return nil
}

// parseSaveCode reads the body of a code to save, naming every field at fault.
func parseSaveCode(body []byte) (code, language string, revision uint64, p *Problem) {
	members, err := jsonvalue.ParseObject(body)
	if err != nil {
		return "", "", 0, invalid(fmt.Sprintf("the body is not a JSON object: %v", err),
			FieldError{Field: "code", Detail: "a JSON object with code is required"})
	}
	var errs []FieldError
	for _, k := range members.Keys() {
		if !slices.Contains(saveCodeFields, k) {
			errs = append(errs, FieldError{Field: k, Detail: "unknown field (known: " + strings.Join(saveCodeFields, ", ") + ")"})
		}
	}
	if raw, ok := members["code"]; !ok || json.Unmarshal(raw, &code) != nil || strings.TrimSpace(code) == "" {
		errs = append(errs, FieldError{Field: "code", Detail: "the code to save is required, a string"})
	}
	if raw, ok := members["language"]; ok {
		if json.Unmarshal(raw, &language) != nil || (language != "python" && language != "javascript") {
			errs = append(errs, FieldError{Field: "language", Detail: "must be python or javascript"})
		}
	}
	if raw, ok := members["revision"]; ok {
		var n json.Number
		v, isInt := int64(0), false
		if json.Unmarshal(raw, &n) == nil && jsonvalue.IsInteger(n) {
			v, isInt = jsonvalue.Int64(n)
		}
		if !isInt || v < 1 {
			errs = append(errs, FieldError{Field: "revision", Detail: "must be a registry revision, a whole number from 1"})
		}
		revision = uint64(v)
	}
	if len(errs) > 0 {
		return "", "", 0, invalid(problemsDetail("the request", len(errs)), errs...)
	}
	return code, language, revision, nil
}
