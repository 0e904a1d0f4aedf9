package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/novaflow/nova/pkg/chainstore"
)

// parseExport reads the query of GET /v1/executions/export, naming every
// parameter at fault.
func parseExport(r *http.Request) (chainstore.ExportFilter, *Problem) {
	if p := checkQuery(r, "since", "until", "workflow"); p != nil {
		return chainstore.ExportFilter{}, p
	}
	q := r.URL.Query()
	f := chainstore.ExportFilter{Workflow: q.Get("workflow")}
	var errs []FieldError
	for _, tp := range []struct {
		name string
		t    *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		v := q.Get(tp.name)
		if v == "" {
			continue
		}
		t, err := chainstore.ParseTime(v)
		if err != nil {
			errs = append(errs, FieldError{Field: tp.name, Detail: err.Error()})
			continue
		}
		*tp.t = t
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		errs = append(errs, FieldError{Field: "until", Detail: "must be after since"})
	}
	if len(errs) > 0 {
		return f, invalid(problemsDetail("the query", len(errs)), errs...)
	}
	return f, nil
}

// exportExecutions is GET /v1/executions/export: every execution the query
// selects, whole, as one line of JSON each (what GET /v1/executions/{id}
// answers, without current_node), newest first, each line sent as soon as
// it is read. It takes one of the key's stream slots. An export that fails
// once lines were sent (the store, the stream time limit) ends the
// connection without the response's end, so that the client sees it
// incomplete rather than short.
func (g *Gateway) exportExecutions(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	f, p := parseExport(r)
	if p != nil {
		return p
	}
	release, p := g.streams.acquire(keyName(r))
	if p != nil {
		return p
	}
	defer release()

	rc := http.NewResponseController(w)
	started := false
	start := func() {
		if started {
			return
		}
		started = true
		h := w.Header()
		h.Set("Content-Type", "application/x-ndjson")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
	}
	var line bytes.Buffer
	sent := 0
	err := g.store.Export(ctx, f, func(c *chainstore.ExecutionChain) error {
		line.Reset()
		if err := c.WriteLine(&line); err != nil {
			return err
		}
		start()
		// Each line has its own deadline, as an export outlives the server's
		// write timeout: a client that stops reading is let go.
		_ = rc.SetWriteDeadline(time.Now().Add(g.limits.Timeout))
		if _, err := w.Write(line.Bytes()); err != nil {
			return fmt.Errorf("send execution %s: %w", c.Execution.ExecutionID, err)
		}
		if err := rc.Flush(); err != nil {
			return fmt.Errorf("send execution %s: %w", c.Execution.ExecutionID, err)
		}
		sent++
		return nil
	})
	switch {
	case err == nil:
		start() // an export of nothing is an empty 200
		return nil
	case !started && ctx.Err() != nil:
		return ctx.Err()
	case !started:
		return g.unavailable(r, "the audit store cannot be read", err)
	}
	level := slog.LevelWarn
	if errors.Is(err, context.Canceled) {
		level = slog.LevelInfo // the client went away
	}
	g.log.Log(ctx, level, "export cut short", "sent", sent, "err", err)
	// How net/http aborts a response: the server closes the connection
	// without the response's end (no last chunk), and logs nothing more.
	panic(http.ErrAbortHandler)
}
