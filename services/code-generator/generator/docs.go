package generator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/runtimeinfo"
)

// SearchTool is the name of the documentation tool offered to the model.
const SearchTool = "search_documentation"

// docsUnavailable is the tool's answer when the sandbox has not published
// its runtime (the model then writes code without it).
const docsUnavailable = "documentation index unavailable"

const (
	searchLimit    = 5
	maxToolAnswer  = 8_000
	reloadInterval = 15 * time.Second
)

// runtimeDocs holds the sandbox runtime's documentation index. The sandbox
// publishes it at start-up, possibly after this service started, so a
// missing index is looked up again, at most every reloadInterval.
type runtimeDocs struct {
	js  jetstream.JetStream
	log *slog.Logger

	mu       sync.Mutex
	info     *runtimeinfo.Info
	lastLoad time.Time
}

func newRuntimeDocs(js jetstream.JetStream, info *runtimeinfo.Info, log *slog.Logger) *runtimeDocs {
	return &runtimeDocs{js: js, info: info, log: log}
}

// get returns the index, loading it when it is missing and the last
// attempt is old enough; nil when there is none.
func (d *runtimeDocs) get(ctx context.Context) *runtimeinfo.Info { return d.load(ctx, false) }

// load is get; force looks for a missing index however recently it was
// looked for: the model asked for documentation, and answering "unavailable"
// when the sandbox published it a moment ago would cost it a guess.
func (d *runtimeDocs) load(ctx context.Context, force bool) *runtimeinfo.Info {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.info != nil || d.js == nil || (!force && time.Since(d.lastLoad) < reloadInterval) {
		return d.info
	}
	d.lastLoad = time.Now()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := runtimeinfo.Load(lctx, d.js)
	if err != nil {
		d.log.WarnContext(ctx, "sandbox runtime documentation not loaded", "err", err)
		return nil
	}
	d.info = info
	d.log.InfoContext(ctx, "sandbox runtime documentation loaded", "modules", len(info.Modules))
	return info
}

// firstIndexWait is how long search_documentation waits for a first index
// (a sandbox starting on a fresh machine takes a few seconds to describe its
// runtime) before it answers that there is none.
var firstIndexWait = 8 * time.Second

// await is load(force) that waits up to firstIndexWait for an index that is
// not published yet.
func (d *runtimeDocs) await(ctx context.Context) *runtimeinfo.Info {
	deadline := time.Now().Add(firstIndexWait)
	for {
		if info := d.load(ctx, true); info != nil || d.js == nil || time.Now().After(deadline) {
			return info
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// libraries lists what the prompt offers: the runtime's third-party
// libraries when known, else the sandbox image's.
func (d *runtimeDocs) libraries(ctx context.Context) []string {
	info := d.get(ctx)
	if info == nil {
		return DefaultLibraries
	}
	if libs := info.InstalledLibraries(); len(libs) > 0 {
		return libs
	}
	return DefaultLibraries
}

type searchArgs struct {
	Library string `json:"library"`
	Query   string `json:"query"`
}

// tool is search_documentation for the model.
func (d *runtimeDocs) tool() llm.Tool {
	return llm.Tool{
		Name: SearchTool,
		Description: "Search the documentation (signatures and docstrings) of a Python library installed in the sandbox " +
			"that runs the code, for example library \"fitz\" and query \"extract text from page\".",
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"library": map[string]any{"type": "string", "description": "The import name of the library, e.g. fitz, pandas, PIL, bs4."},
				"query":   map[string]any{"type": "string", "description": "What you are looking for, in a few words or a function name."},
			},
			"required":             []string{"library", "query"},
			"additionalProperties": false,
		},
		Handle: d.search,
	}
}

func (d *runtimeDocs) search(ctx context.Context, arguments string) (string, error) {
	var args searchArgs
	if err := json.Unmarshal([]byte(arguments), &args); err != nil {
		return "", fmt.Errorf("arguments must be a JSON object with \"library\" and \"query\": %w", err)
	}
	args.Library, args.Query = strings.TrimSpace(args.Library), strings.TrimSpace(args.Query)
	if args.Library == "" || args.Query == "" {
		return "", errors.New("both \"library\" and \"query\" are required")
	}
	info := d.await(ctx)
	if info == nil {
		return docsUnavailable, nil
	}
	library := args.Library
	if lib := info.Library(library); lib != nil {
		library = lib.Name // "pymupdf" is fitz
	}
	if !info.HasModule(library) {
		return fmt.Sprintf("%q is not installed in the sandbox runtime; do not import it. Installed libraries besides the standard library: %s.",
			args.Library, strings.Join(d.libraries(ctx), ", ")), nil
	}
	entries := info.Search(library, args.Query, searchLimit)
	if len(entries) == 0 {
		return fmt.Sprintf("No documentation of %s matches %q; try other words or a function name.", library, args.Query), nil
	}
	return shortenHead(info.Format(entries), maxToolAnswer), nil
}
