package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/codecache"
)

const cacheUsage = `Usage:
  nova cache list  [--json]
  nova cache show  KEY [--json]
  nova cache purge (KEY... | --all)

The code cache keeps the code AI nodes' pipelines accepted (the JetStream KV
bucket nova_codecache), so that a repeated task calls no model. KEY is an
entry's key, or any prefix of it that names one entry: list shows the first
12 characters, ai_metadata.cache_key in the chain of work the whole key.
show says whether an entry is in the semantic level's index; purge --all
also removes that index and the kept embeddings of tasks.
NATS_URL (and NATS credentials, as for the services) names the server;
without it the embedded server of --data-dir is started, unless nova dev
runs: then set NATS_URL=nats://127.0.0.1:4222 to use its server.
`

// shortKey is how many characters of a key list shows.
const shortKey = 12

// badKeyError says KEY names no single entry: the user's mistake (exit 2).
type badKeyError struct{ msg string }

func (e *badKeyError) Error() string { return e.msg }

// cacheEntryView is one entry of the code cache as list and show print it;
// list leaves out the context shape, the runtime and the code.
type cacheEntryView struct {
	Key       string    `json:"key"`
	NodeType  string    `json:"node_type,omitempty"`
	Model     string    `json:"model"`
	Language  string    `json:"language"`
	CreatedAt time.Time `json:"created_at"`
	Size      int       `json:"size"`
	Workflow  string    `json:"workflow,omitempty"`
	Node      string    `json:"node_id"`
	Execution string    `json:"execution_id"`
	Task      string    `json:"task"`
	Shape     string    `json:"context_shape,omitempty"`
	Runtime   string    `json:"runtime,omitempty"`
	// Stages are the code the entry holds, the analysis stage's first
	// when there was one.
	Stages []cacheStage `json:"stages,omitempty"`
	// What producing the code cost, which is what each hit saves.
	Tokens     int64   `json:"tokens"`
	CostUSD    float64 `json:"cost_usd"`
	ModelCalls int32   `json:"model_calls"`
	// Embedding is set when the semantic level can find the entry.
	Embedding      *codecache.EntryEmbedding `json:"embedding,omitempty"`
	SemanticOrigin *codecache.SemanticOrigin `json:"semantic_origin,omitempty"`
	// Unreadable says why an entry could not be decoded.
	Unreadable string `json:"unreadable,omitempty"`
}

type cacheStage struct {
	Stage string `json:"stage"`
	Code  string `json:"code"`
}

func newCacheEntryView(key string, value []byte) *cacheEntryView {
	v := &cacheEntryView{Key: key, Size: len(value)}
	e, err := codecache.Decode(value)
	if err != nil {
		v.Unreadable = err.Error()
		return v
	}
	v.NodeType, v.Model, v.Language, v.CreatedAt = e.NodeType, e.Model, e.Language, e.CreatedAt
	v.Workflow, v.Node, v.Execution, v.Task, v.Shape, v.Runtime = e.Workflow, e.Node, e.Execution, e.Task, e.Shape, e.Runtime
	v.Tokens, v.CostUSD, v.ModelCalls = e.Tokens, e.CostUSD, e.ModelCalls
	v.Embedding, v.SemanticOrigin = e.Embedding, e.SemanticOrigin
	if e.AnalysisCode != "" {
		v.Stages = append(v.Stages, cacheStage{Stage: "analysis", Code: e.AnalysisCode})
	}
	v.Stages = append(v.Stages, cacheStage{Stage: "task", Code: e.Code})
	return v
}

func cmdCache(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, cacheUsage)
		return exitInvalid
	}
	sub, rest := args[0], args[1:]
	fs := flag.NewFlagSet("cache "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", "./.nova", "data directory of the embedded NATS (when NATS_URL is not set)")
	var asJSON, all *bool
	switch sub {
	case "list", "show":
		asJSON = fs.Bool("json", false, "print JSON")
	case "purge":
		all = fs.Bool("all", false, "remove every entry")
	default:
		fmt.Fprintf(stderr, "nova cache: unknown command %q\n\n%s", sub, cacheUsage)
		return exitInvalid
	}
	keys, err := parseFlags(fs, rest)
	if err != nil {
		return exitInvalid
	}
	switch {
	case sub == "list" && len(keys) != 0:
		fmt.Fprintf(stderr, "nova cache list: unexpected argument %q\n", keys[0])
		return exitInvalid
	case sub == "show" && len(keys) != 1:
		fmt.Fprintln(stderr, "nova cache show: want exactly one KEY (nova cache list shows them)")
		return exitInvalid
	case sub == "purge" && *all && len(keys) > 0:
		fmt.Fprintln(stderr, "nova cache purge: give KEYs or --all, not both")
		return exitInvalid
	case sub == "purge" && !*all && len(keys) == 0:
		fmt.Fprintln(stderr, "nova cache purge: name the entries to remove (KEY..., see nova cache list), or give --all to remove every entry")
		return exitInvalid
	}

	b, closeBus, err := connectNATS(ctx, *dataDir, devNATSAddr, "nova-cache", "code cache")
	if err != nil {
		fmt.Fprintf(stderr, "nova cache: %v\n", err)
		return exitFailed
	}
	defer closeBus()
	c := &codeCacheCLI{}
	c.kv, err = b.JetStream().KeyValue(ctx, codecache.Bucket)
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		fmt.Fprintf(stderr, "nova cache: open KV %s: %v\n", codecache.Bucket, err)
		return exitFailed
	}
	switch sub {
	case "list":
		return c.list(ctx, *asJSON, stdout, stderr)
	case "show":
		return c.show(ctx, keys[0], *asJSON, stdout, stderr)
	default:
		return c.purge(ctx, keys, *all, stdout, stderr)
	}
}

// codeCacheCLI reads and purges the code cache; kv is nil when no graph
// engine has declared the bucket yet: then the cache is empty.
type codeCacheCLI struct{ kv jetstream.KeyValue }

// entries reads every entry, oldest first.
func (c *codeCacheCLI) entries(ctx context.Context) ([]*cacheEntryView, error) {
	if c.kv == nil {
		return nil, nil
	}
	w, err := c.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	byKey := map[string]*cacheEntryView{}
	for {
		select {
		case e := <-w.Updates():
			if e == nil { // the current entries have all been delivered
				views := slices.Collect(maps.Values(byKey))
				slices.SortFunc(views, func(a, b *cacheEntryView) int {
					return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.Key, b.Key))
				})
				return views, nil
			}
			if codecache.IsEntryKey(e.Key()) { // not a semantic index or a kept embedding
				byKey[e.Key()] = newCacheEntryView(e.Key(), e.Value())
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// keys lists every key of the bucket: entries, semantic indexes and kept
// embeddings (codecache.IsEntryKey tells them apart).
func (c *codeCacheCLI) keys(ctx context.Context) ([]string, error) {
	if c.kv == nil {
		return nil, nil
	}
	keys, err := c.kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	return keys, err
}

// resolveCacheKey finds the one key that prefix begins; a *badKeyError when it
// names none or several.
func resolveCacheKey(prefix string, keys []string) (string, error) {
	p := strings.ToLower(strings.TrimSpace(prefix))
	if p == "" || strings.Trim(p, "0123456789abcdef") != "" {
		return "", &badKeyError{fmt.Sprintf("%q is not a code cache key: keys are hexadecimal (nova cache list shows them)", prefix)}
	}
	var found []string
	for _, k := range keys {
		if codecache.IsEntryKey(k) && strings.HasPrefix(k, p) {
			found = append(found, k)
		}
	}
	switch len(found) {
	case 0:
		return "", &badKeyError{fmt.Sprintf("no entry of the code cache has a key starting with %q (nova cache list shows them)", prefix)}
	case 1:
		return found[0], nil
	}
	shown := make([]string, 0, 3)
	for _, k := range found[:min(len(found), 3)] {
		shown = append(shown, k[:min(len(k), len(p)+4)]+"…")
	}
	if len(found) > 3 {
		shown = append(shown, "…")
	}
	return "", &badKeyError{fmt.Sprintf("key prefix %q is ambiguous: %d entries start with it (%s); give more of the key",
		prefix, len(found), strings.Join(shown, ", "))}
}

// cacheExitCode is 2 for a KEY that names no single entry, else 1.
func cacheExitCode(err error) int {
	if bad := (*badKeyError)(nil); errors.As(err, &bad) {
		return exitInvalid
	}
	return exitFailed
}

func (c *codeCacheCLI) list(ctx context.Context, asJSON bool, stdout, stderr io.Writer) int {
	views, err := c.entries(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "nova cache list: %v\n", err)
		return exitFailed
	}
	if asJSON {
		for _, v := range views {
			v.Shape, v.Runtime, v.Stages = "", "", nil
		}
		if views == nil {
			views = []*cacheEntryView{}
		}
		return printJSON(stdout, stderr, views)
	}
	if len(views) == 0 {
		fmt.Fprintln(stdout, "the code cache is empty")
		return exitOK
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tNODE TYPE\tMODEL\tLANGUAGE\tCREATED\tSIZE\tEXECUTION\tTASK")
	for _, v := range views {
		if v.Unreadable != "" {
			fmt.Fprintf(w, "%s\t-\t-\t-\t-\t%s\t-\t(unreadable: %s)\n", v.Key[:min(len(v.Key), shortKey)], byteSize(uint64(v.Size)), v.Unreadable)
			continue
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Key[:min(len(v.Key), shortKey)], cmp.Or(v.NodeType, "-"), v.Model, v.Language,
			v.CreatedAt.Local().Format(time.DateTime), byteSize(uint64(v.Size)), cmp.Or(v.Execution, "-"), oneLine(v.Task, 60))
	}
	_ = w.Flush()
	return exitOK
}

func (c *codeCacheCLI) show(ctx context.Context, prefix string, asJSON bool, stdout, stderr io.Writer) int {
	keys, err := c.keys(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "nova cache show: %v\n", err)
		return exitFailed
	}
	key, err := resolveCacheKey(prefix, keys)
	var entry jetstream.KeyValueEntry
	if err == nil {
		entry, err = c.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			err = &badKeyError{fmt.Sprintf("the code cache entry %s was removed meanwhile (it expired, failed or was purged)", key)}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "nova cache show: %v\n", err)
		return cacheExitCode(err)
	}
	v := newCacheEntryView(key, entry.Value())
	if asJSON {
		return printJSON(stdout, stderr, v)
	}
	fmt.Fprintf(stdout, "code cache entry %s\n", v.Key)
	if v.Unreadable != "" {
		fmt.Fprintf(stdout, "  unreadable: %s\n  stored value (%s):\n%s", v.Unreadable, byteSize(uint64(v.Size)), indent(string(entry.Value()), "    | "))
		return exitFailed
	}
	fmt.Fprintf(stdout, "  workflow:      %s\n  node:          %s (%s)\n  produced by:   execution %s\n  created:       %s\n",
		cmp.Or(v.Workflow, "-"), v.Node, cmp.Or(v.NodeType, "type not recorded"), v.Execution, v.CreatedAt.Local().Format(time.RFC3339))
	fmt.Fprintf(stdout, "  model:         %s\n  language:      %s\n  runtime:       %s\n  size:          %s\n",
		v.Model, v.Language, v.Runtime, byteSize(uint64(v.Size)))
	fmt.Fprintf(stdout, "  each hit saves %d model call(s), %d tokens, $%.6f\n", v.ModelCalls, v.Tokens, v.CostUSD)
	if em := v.Embedding; em != nil {
		fmt.Fprintf(stdout, "  embedding:     %s, %d dimensions: the semantic level finds it for similar tasks (group %s)\n",
			em.Model, em.Dimensions, em.Group[:min(len(em.Group), shortKey)])
	} else {
		fmt.Fprintln(stdout, "  embedding:     none: found by its exact key only")
	}
	if o := v.SemanticOrigin; o != nil {
		fmt.Fprintf(stdout, "  reused from:   entry %s (similarity %.4f, semantic hit in execution %s), task %q\n",
			o.Key[:min(len(o.Key), shortKey)], o.Similarity, o.Execution, oneLine(o.Task, 60))
	}
	fmt.Fprintf(stdout, "  context shape: %s\n", v.Shape)
	fmt.Fprintf(stdout, "  task (prompt):\n%s", indent(v.Task, "    "))
	for _, s := range v.Stages {
		fmt.Fprintf(stdout, "  %s code:\n%s", s.Stage, indent(s.Code, "    | "))
	}
	return exitOK
}

func (c *codeCacheCLI) purge(ctx context.Context, args []string, all bool, stdout, stderr io.Writer) int {
	keys, err := c.keys(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "nova cache purge: %v\n", err)
		return exitFailed
	}
	// Every KEY must name one entry before any is removed.
	remove := keys
	if !all {
		remove = nil
		var bad []string
		for _, arg := range args {
			key, err := resolveCacheKey(arg, keys)
			if err != nil {
				bad = append(bad, err.Error())
				continue
			}
			if !slices.Contains(remove, key) {
				remove = append(remove, key)
			}
		}
		if len(bad) > 0 {
			fmt.Fprintf(stderr, "nova cache purge: nothing removed: %s\n", strings.Join(bad, "; "))
			return exitInvalid
		}
	}
	entries := 0
	for _, key := range remove {
		if codecache.IsEntryKey(key) {
			entries++
		}
	}
	removed := 0
	for _, key := range remove {
		if !all {
			if err := c.unindex(ctx, key); err != nil {
				fmt.Fprintf(stderr, "nova cache purge: %s: %v (removed %d of %d)\n", key, err, removed, entries)
				return exitFailed
			}
		}
		if err := c.kv.Purge(ctx, key); err != nil {
			fmt.Fprintf(stderr, "nova cache purge: %s: %v (removed %d of %d)\n", key, err, removed, entries)
			return exitFailed
		}
		if codecache.IsEntryKey(key) {
			removed++
		}
	}
	fmt.Fprintf(stdout, "removed %d %s from the code cache\n", removed, plural(removed, "entry", "entries"))
	return exitOK
}

// unindex removes the entry of key from its semantic group's index, when it
// is in one, so that the semantic level no longer finds it.
func (c *codeCacheCLI) unindex(ctx context.Context, key string) error {
	entry, err := c.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	e, err := codecache.Decode(entry.Value())
	if err != nil || e.Embedding == nil {
		return nil
	}
	return codecache.UpdateIndex(ctx, c.kv, e.Embedding.Group, func(x *codecache.Index) bool { return x.Remove(key) })
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
