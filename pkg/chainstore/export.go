package chainstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// ExecutionChain is one execution whole: its document and its node visits
// in the order they ran, each with its agent steps. It is what `nova chain
// --json` prints, and one line of an export (Export, `nova chain export`,
// GET /v1/executions/export).
type ExecutionChain struct {
	Execution *ExecutionDoc `json:"execution"`
	Nodes     []NodeDoc     `json:"nodes"`
}

// WriteLine writes c as one line of JSON, numbers as they are and without
// HTML escaping: a line of an export.
func (c *ExecutionChain) WriteLine(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(c); err != nil {
		return fmt.Errorf("write execution %s: %w", c.id(), err)
	}
	return nil
}

func (c *ExecutionChain) id() string {
	if c.Execution == nil {
		return "(none)"
	}
	return strconv.Quote(c.Execution.ExecutionID)
}

// UnmarshalJSON reads c with the values the store's readers give: the
// contexts' numbers exact (json.Number, 150.0 stays 150.0), those of the
// other documents (definition, ai_metadata, output_analysis, a step's data
// and tool calls) float64, so that an execution read back from an export
// prints as the one read from the store did.
func (c *ExecutionChain) UnmarshalJSON(data []byte) error {
	type chainFields ExecutionChain // without this method
	var p chainFields
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		return err
	}
	if e := p.Execution; e != nil {
		e.Definition = floatMap(e.Definition)
	}
	for i := range p.Nodes {
		n := &p.Nodes[i]
		n.AIMetadata, n.OutputAnalysis = floatMap(n.AIMetadata), floatMap(n.OutputAnalysis)
		for j := range n.Steps {
			s := &n.Steps[j]
			s.InputData, s.OutputData = floatMap(s.InputData), floatMap(s.OutputData)
			if s.ToolCalls != nil {
				s.ToolCalls, _ = floatNumbers(s.ToolCalls).([]any)
			}
		}
	}
	*c = ExecutionChain(p)
	return nil
}

func floatMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out, _ := floatNumbers(m).(map[string]any)
	return out
}

// floatNumbers turns the json.Numbers of v into float64s, as the store
// reads the numbers of a document stored from a protobuf Struct (doubles).
func floatNumbers(v any) any {
	switch t := v.(type) {
	case json.Number:
		if f, err := t.Float64(); err == nil {
			return f
		}
		return t
	case map[string]any:
		for k, e := range t {
			t[k] = floatNumbers(e)
		}
	case []any:
		for i, e := range t {
			t[i] = floatNumbers(e)
		}
	}
	return v
}

// DefaultExportPage is how many executions Export lists at a time when
// ExportFilter.PageSize is 0.
const DefaultExportPage = 100

// ExportFilter selects the executions Export reads. Zero fields select
// everything.
type ExportFilter struct {
	// Workflow selects one workflow's executions.
	Workflow string
	// Since (inclusive) and Until (exclusive) bound the start time, as in
	// ListFilter: an execution without a recorded start time matches
	// neither.
	Since, Until time.Time
	// PageSize is how many executions are listed at a time (1 to
	// MaxListLimit; 0: DefaultExportPage).
	PageSize int
}

// Export calls emit with every execution f selects, whole (Execution and
// Chain), in the order ListExecutions lists them: newest start first, then
// by execution id, those without a recorded start time last. It lists a
// page of executions at a time, each page after the last execution of the
// one before, and reads one execution at a time, so that what it holds is
// one page of listed executions (without their contexts) and the execution
// being emitted, whatever the number of executions selected.
//
// An execution is read as it stands when its turn comes: a running one is
// emitted running. Those that start after Export listed its first page are
// not emitted (they sort before it); one deleted between its listing and
// its reading (the retention) is left out. An error of emit ends Export
// and is returned as it is.
func (s *Store) Export(ctx context.Context, f ExportFilter, emit func(*ExecutionChain) error) error {
	page := f.PageSize
	if page == 0 {
		page = DefaultExportPage
	}
	if page < 1 || page > MaxListLimit {
		return fmt.Errorf("export: %w: page size %d is not between 1 and %d", ErrInvalidFilter, f.PageSize, MaxListLimit)
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return fmt.Errorf("export: %w: since %s is not before until %s", ErrInvalidFilter,
			f.Since.Format(time.RFC3339Nano), f.Until.Format(time.RFC3339Nano))
	}
	list := ListFilter{Workflow: f.Workflow, Since: f.Since, Until: f.Until, Limit: page}
	for {
		docs, err := s.ListExecutions(ctx, list)
		if err != nil {
			return fmt.Errorf("export: %w", err)
		}
		for i := range docs {
			c, err := s.executionChain(ctx, docs[i].ExecutionID)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("export: %w", err)
			}
			if err := emit(c); err != nil {
				return err
			}
		}
		if len(docs) < page {
			return nil
		}
		after := docs[len(docs)-1].Position()
		list.After = &after
	}
}

// executionChain reads one execution whole.
func (s *Store) executionChain(ctx context.Context, id string) (*ExecutionChain, error) {
	exec, err := s.Execution(ctx, id)
	if err != nil {
		return nil, err
	}
	nodes, err := s.Chain(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("chain of work of %q: %w", id, err)
	}
	return &ExecutionChain{Execution: exec, Nodes: nodes}, nil
}

// ParseTime reads a bound of an export's scope (ExportFilter.Since, Until):
// an RFC 3339 time such as 2026-11-01T12:00:00Z (with a fraction of a
// second or not, any offset), or a date such as 2026-11-01, which is its
// midnight UTC.
func ParseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time such as 2026-11-01T12:00:00Z nor a date such as 2026-11-01", s)
}
