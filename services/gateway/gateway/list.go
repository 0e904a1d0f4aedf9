package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/execution"
)

// List limits.
const (
	defaultListLimit = 50
	maxListLimit     = 500
)

// statuses an execution can have.
var statuses = []string{execution.StatusRunning, execution.StatusSucceeded, execution.StatusFailed, execution.StatusCancelled}

// listItem is one execution in GET /v1/executions.
type listItem struct {
	ExecutionID  string     `json:"execution_id"`
	WorkflowName string     `json:"workflow_name"`
	Status       string     `json:"status"`
	Error        string     `json:"error,omitempty"`
	StartedAt    *time.Time `json:"started_at,omitempty"`
	CompletedAt  *time.Time `json:"completed_at,omitempty"`
	DurationMs   int64      `json:"duration_ms,omitempty"`
	// What the execution's model calls cost so far and how many (0 while
	// the audit store has not recorded them).
	CostUSD    float64 `json:"cost_usd"`
	ModelCalls int     `json:"model_calls"`
	// A sub-workflow's child: the execution and node that started it.
	ParentExecutionID string `json:"parent_execution_id,omitempty"`
	ParentNode        string `json:"parent_node,omitempty"`
	// ItemsFailed is how many items of its map nodes failed, for an
	// execution that succeeded with them (on_item_failure collect); GET
	// /v1/executions counts them, its stream does not.
	ItemsFailed int `json:"items_failed,omitempty"`
	// Cursor continues a listing after this execution, as next_cursor
	// after a page's last: a list that shows rows it did not read (the
	// stream's) pages on from the last row it shows.
	Cursor string    `json:"cursor"`
	Links  itemLinks `json:"links"`
}

type itemLinks struct {
	Self string `json:"self"`
}

type listPage struct {
	Executions []listItem `json:"executions"`
	// NextCursor continues the listing; absent on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// cursor is the position after which the next page starts, sent to the
// client as opaque base64url JSON.
type cursor struct {
	StartedAtMs *int64 `json:"s,omitempty"`
	ExecutionID string `json:"id"`
}

func encodeCursor(p chainstore.ListPosition) string {
	c := cursor{ExecutionID: p.ExecutionID}
	if !p.StartedAt.IsZero() {
		ms := p.StartedAt.UnixMilli()
		c.StartedAtMs = &ms
	}
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (*chainstore.ListPosition, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, false
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil || c.ExecutionID == "" {
		return nil, false
	}
	p := &chainstore.ListPosition{ExecutionID: c.ExecutionID}
	if c.StartedAtMs != nil {
		p.StartedAt = time.UnixMilli(*c.StartedAtMs).UTC()
	}
	return p, true
}

// parseList reads the query of GET /v1/executions, naming every parameter
// at fault.
func parseList(r *http.Request) (chainstore.ListFilter, *Problem) {
	if p := checkQuery(r, "id", "parent", "workflow", "status", "since", "until", "limit", "cursor"); p != nil {
		return chainstore.ListFilter{}, p
	}
	f, errs := listFilterOf(r.URL.Query(), "")
	if len(errs) > 0 {
		return f, invalid(problemsDetail("the query", len(errs)), errs...)
	}
	return f, nil
}

// listFilterOf reads the filters of GET /v1/executions from q, naming each
// at fault as field+its name.
func listFilterOf(q url.Values, field string) (chainstore.ListFilter, []FieldError) {
	f := chainstore.ListFilter{IDPrefix: q.Get("id"), Parent: q.Get("parent"), Workflow: q.Get("workflow"), Status: q.Get("status"), Limit: defaultListLimit}
	var errs []FieldError
	if _, given := q["id"]; given && !engineKey.MatchString(f.IDPrefix) {
		errs = append(errs, FieldError{Field: "id", Detail: fmt.Sprintf("%q is no execution id nor the start of one: 1 to 200 letters, digits, '-', '_' or '='", f.IDPrefix)})
	}
	if _, given := q["parent"]; given && !engineKey.MatchString(f.Parent) {
		errs = append(errs, FieldError{Field: "parent", Detail: fmt.Sprintf("%q is no execution id: 1 to 200 letters, digits, '-', '_' or '='", f.Parent)})
	}
	if f.Status != "" && !slices.Contains(statuses, f.Status) {
		errs = append(errs, FieldError{Field: "status", Detail: fmt.Sprintf("%q is not running, succeeded, failed or cancelled", f.Status)})
	}
	for _, tp := range []struct {
		name string
		t    *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		v := q.Get(tp.name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			errs = append(errs, FieldError{Field: tp.name, Detail: fmt.Sprintf("%q is not an RFC 3339 time such as 2025-03-01T12:00:00Z", v)})
			continue
		}
		*tp.t = t
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		errs = append(errs, FieldError{Field: "until", Detail: "must be after since"})
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			errs = append(errs, FieldError{Field: "limit", Detail: fmt.Sprintf("%q is not a whole number from 1 to %d", v, maxListLimit)})
		} else {
			f.Limit = n
		}
	}
	if v := q.Get("cursor"); v != "" {
		p, ok := decodeCursor(v)
		if !ok {
			errs = append(errs, FieldError{Field: "cursor", Detail: "is not a next_cursor this API gave"})
		}
		f.After = p
	}
	for i := range errs {
		errs[i].Field = field + errs[i].Field
	}
	return f, errs
}

// listExecutions is GET /v1/executions: newest first, one page at a time.
func (g *Gateway) listExecutions(w http.ResponseWriter, r *http.Request) error {
	f, p := parseList(r)
	if p != nil {
		return p
	}
	limit := f.Limit
	f.Limit++ // one more tells whether there is a next page
	docs, err := g.store.ListExecutions(r.Context(), f)
	if err != nil {
		return g.unavailable(r, "the audit store cannot be read", err)
	}
	page := listPage{Executions: []listItem{}}
	if len(docs) > limit {
		docs = docs[:limit]
		page.NextCursor = encodeCursor(docs[limit-1].Position())
	}
	var succeeded []string
	for _, d := range docs {
		page.Executions = append(page.Executions, listItemOf(&d))
		if d.Status == execution.StatusSucceeded {
			succeeded = append(succeeded, d.ExecutionID)
		}
	}
	failed, err := g.store.FailedItems(r.Context(), succeeded)
	if err != nil {
		return g.unavailable(r, "the audit store cannot be read", err)
	}
	for i := range page.Executions {
		page.Executions[i].ItemsFailed = failed[page.Executions[i].ExecutionID]
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// listTotals is GET /v1/execution-totals: how many executions the filters
// of GET /v1/executions select, over every page, and what their model
// calls cost, as of a moment.
type listTotals struct {
	Executions int64     `json:"executions"`
	CostUSD    float64   `json:"cost_usd"`
	ModelCalls int64     `json:"model_calls"`
	AsOf       time.Time `json:"as_of"`
}

// totalExecutions is GET /v1/execution-totals, with the filters of GET
// /v1/executions (limit and cursor are refused: totals have no page).
func (g *Gateway) totalExecutions(w http.ResponseWriter, r *http.Request) error {
	if p := checkQuery(r, "id", "parent", "workflow", "status", "since", "until"); p != nil {
		return p
	}
	f, errs := listFilterOf(r.URL.Query(), "")
	if len(errs) > 0 {
		return invalid(problemsDetail("the query", len(errs)), errs...)
	}
	key := fmt.Sprintf("%s\x00%s\x00%s\x00%s\x00%d\x00%d", f.IDPrefix, f.Parent, f.Workflow, f.Status, f.Since.UnixNano(), f.Until.UnixNano())
	t, at, err := g.totals.get(r.Context(), key, func(ctx context.Context) (chainstore.ListTotals, error) {
		return g.store.TotalsOf(ctx, f)
	})
	if err != nil {
		if r.Context().Err() != nil {
			return r.Context().Err()
		}
		return g.unavailable(r, "the audit store cannot be read", err)
	}
	writeJSON(w, http.StatusOK, listTotals{Executions: t.Executions, CostUSD: t.CostUSD, ModelCalls: t.ModelCalls, AsOf: at.UTC()})
	return nil
}

// Totals are computed again once they are totalsFresh old, and no sooner
// than totalsDuty times the last computation took: a store that reads every
// execution to count them (the embedded one, about 1.5 ms each) spends at
// most a quarter of its time on it, however many lists are open. A count
// may take up to totalsTimeout (the route's limit too): on the embedded
// store 10,000 executions take 18 s on an idle machine, more on a busy one.
const (
	totalsFresh   = time.Second
	totalsDuty    = 3
	totalsTimeout = 5 * time.Minute
	maxTotals     = 256
)

// totalsCache runs one aggregation per filter at a time, shared by every
// request that comes while it runs, and reuses its answer while fresh.
type totalsCache struct {
	mu      sync.Mutex
	entries map[string]*totalsEntry
}

type totalsEntry struct {
	done chan struct{} // closed once computed
	t    chainstore.ListTotals
	err  error
	at   time.Time
	took time.Duration
}

func (e *totalsEntry) fresh(now time.Time) bool {
	select {
	case <-e.done:
	default:
		return true // being computed: wait for it
	}
	return e.err == nil && now.Sub(e.at) < max(totalsFresh, totalsDuty*e.took)
}

// get answers the totals of key, computing them (with compute) when none
// are fresh. The request that computes them finishes the computation even
// if its client goes, so that those waiting, and the next, get it.
func (c *totalsCache) get(ctx context.Context, key string, compute func(context.Context) (chainstore.ListTotals, error)) (chainstore.ListTotals, time.Time, error) {
	now := time.Now()
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[string]*totalsEntry{}
	}
	e := c.entries[key]
	mine := e == nil || !e.fresh(now)
	if mine {
		if len(c.entries) >= maxTotals {
			for k, old := range c.entries {
				if !old.fresh(now) {
					delete(c.entries, k)
				}
			}
		}
		e = &totalsEntry{done: make(chan struct{})}
		c.entries[key] = e
	}
	c.mu.Unlock()
	if mine {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), totalsTimeout)
		t, err := compute(cctx)
		cancel()
		e.t, e.err, e.at, e.took = t, err, time.Now(), time.Since(now)
		close(e.done)
		if err := ctx.Err(); err != nil {
			return chainstore.ListTotals{}, time.Time{}, err
		}
	}
	select {
	case <-e.done:
		return e.t, e.at, e.err
	case <-ctx.Done():
		return chainstore.ListTotals{}, time.Time{}, ctx.Err()
	}
}

// listItemOf is an execution document as GET /v1/executions lists it (and
// GET /v1/executions/events streams it).
func listItemOf(d *chainstore.ExecutionDoc) listItem {
	return listItem{
		ExecutionID: d.ExecutionID, WorkflowName: d.WorkflowName, Status: d.Status, Error: d.Error,
		StartedAt: d.StartedAt, CompletedAt: d.CompletedAt, DurationMs: d.DurationMs,
		CostUSD: d.CostUSD, ModelCalls: d.ModelCalls,
		ParentExecutionID: d.ParentExecutionID, ParentNode: d.ParentNode,
		Cursor: encodeCursor(d.Position()),
		Links:  itemLinks{Self: executionLinks(d.ExecutionID).Self},
	}
}
