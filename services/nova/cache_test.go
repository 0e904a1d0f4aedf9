package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/codecache"
	"github.com/novaflow/nova/pkg/devstack/devstacktest"
)

// TestCache lists, shows and purges the entries of a real code cache bucket,
// written with pkg/codecache's key and encoding as the graph engine writes
// them, and one entry that is not readable.
func TestCache(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	b := devstacktest.Bus(ctx, t, "cache-test")
	t.Setenv("NATS_URL", b.Conn().ConnectedUrl())
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := cmdCache(ctx, args, &out, &errOut)
		return code, out.String(), errOut.String()
	}

	// No graph engine has declared the bucket yet: the cache is empty.
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"list"}, exitOK, "the code cache is empty\n"},
		{[]string{"list", "--json"}, exitOK, "[]\n"},
		{[]string{"purge", "--all"}, exitOK, "removed 0 entries from the code cache\n"},
		{[]string{"show", "abc"}, exitInvalid, `nova cache show: no entry of the code cache has a key starting with "abc" (nova cache list shows them)` + "\n"},
	} {
		if code, out, errOut := run(tt.args...); code != tt.code || out+errOut != tt.want {
			t.Errorf("nova cache %v without a bucket: exit %d, %q; want %d, %q", tt.args, code, out+errOut, tt.code, tt.want)
		}
	}

	kv, err := b.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: codecache.Bucket, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string, data []byte) {
		t.Helper()
		if _, err := kv.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	created := time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)
	discountIn := codecache.Input{Task: "Calculate discount (10% if total > 1000)", NodeType: "action",
		Shape: codecache.Shape([]byte(`{"total": 1500}`)), Model: "gpt-4o", Language: "python", Runtime: "python-3.11.2-0123456789abcdef"}
	discount := &codecache.Entry{Code: "# STAGE: TASK\ndiscount = context['total'] * 0.1\ncontext['discount'] = discount\n",
		Language: "python", Model: "gpt-4o", Task: discountIn.Task, NodeType: "action", Shape: discountIn.Shape, Runtime: discountIn.Runtime,
		Workflow: "orders", Execution: "exec-discount", Node: "discount", CreatedAt: created, Tokens: 1325, CostUSD: 0.0042, ModelCalls: 2}
	routeIn := codecache.Input{Task: "Route the order: 'review' when the final total is above 1000 and the customer is new, else 'auto'",
		NodeType: "decision", DecisionValues: []string{"review", "auto"}, Shape: codecache.Shape([]byte(`{"final_total": 1350.0, "customer": {"new": true}}`)),
		Model: "gpt-4o", Language: "python", Runtime: discountIn.Runtime}
	route := &codecache.Entry{Code: "# STAGE: TASK\ncontext['branch_decision'] = 'review'\n", AnalysisCode: "# STAGE: ANALYSIS\ncontext['_data_analysis'] = {}\n",
		Language: "python", Model: "gpt-4o", Task: routeIn.Task, NodeType: "decision", Shape: routeIn.Shape, Runtime: routeIn.Runtime,
		Workflow: "orders", Execution: "exec-route", Node: "route", CreatedAt: created.Add(time.Minute), Tokens: 2000, CostUSD: 0.01, ModelCalls: 3}
	// The discount entry is in its semantic group's index, as the engine
	// leaves an entry when the semantic level is on; beside it, the kept
	// embedding of its task. Neither is an entry.
	group := codecache.Group(discountIn, "text-embedding-3-small")
	discount.Embedding = &codecache.EntryEmbedding{Model: "text-embedding-3-small", Dimensions: 3, Group: group}
	if err := codecache.StoreEmbedding(ctx, kv, "text-embedding-3-small", discountIn.Task, []float32{1, 0, 0}); err != nil {
		t.Fatal(err)
	}
	err = codecache.UpdateIndex(ctx, kv, group, func(x *codecache.Index) bool {
		x.Put(codecache.IndexEntry{Key: codecache.Key(discountIn), Vector: codecache.Quantize([]float32{1, 0, 0})})
		x.Put(codecache.IndexEntry{Key: "another-member", Vector: codecache.Quantize([]float32{0, 1, 0})})
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	sizes := map[string]int{}
	for name, e := range map[string]struct {
		in    codecache.Input
		entry *codecache.Entry
	}{"discount": {discountIn, discount}, "route": {routeIn, route}} {
		data, err := e.entry.Encode()
		if err != nil {
			t.Fatal(err)
		}
		keys[name], sizes[name] = codecache.Key(e.in), len(data)
		put(keys[name], data)
	}
	// An entry that is not JSON, under a key sharing its first four
	// characters with the discount entry's.
	flip := "0"
	if keys["discount"][4] == '0' {
		flip = "1"
	}
	keys["broken"] = keys["discount"][:4] + flip + keys["discount"][5:]
	put(keys["broken"], []byte("not an entry"))

	code, out, errOut := run("list")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if code != exitOK || len(lines) != 4 {
		t.Fatalf("list: exit %d\n%s%s", code, out, errOut)
	}
	fields := strings.Fields(lines[0])
	if got := strings.Join(fields, " "); got != "KEY NODE TYPE MODEL LANGUAGE CREATED SIZE EXECUTION TASK" {
		t.Errorf("list header %q", got)
	}
	// Oldest first; the unreadable entry has no creation time.
	for i, want := range []struct {
		key  string
		rest []string
	}{
		{keys["broken"], []string{"(unreadable: decode code cache entry:", "12 B"}},
		{keys["discount"], []string{"action", "gpt-4o", "python", created.Local().Format(time.DateTime), fmt.Sprintf("%d B", sizes["discount"]),
			"exec-discount", "Calculate discount (10% if total > 1000)"}},
		{keys["route"], []string{"decision", "exec-route", "Route the order: 'review' when the final total is above 100…"}},
	} {
		line := lines[i+1]
		if !strings.HasPrefix(line, want.key[:12]+" ") {
			t.Errorf("list line %d does not start with the key's first 12 characters %s:\n%s", i+1, want.key[:12], out)
		}
		for _, r := range want.rest {
			if !strings.Contains(line, r) {
				t.Errorf("list line %d has no %q:\n%s", i+1, r, out)
			}
		}
	}

	code, out, _ = run("list", "--json")
	var views []cacheEntryView
	if code != exitOK || json.Unmarshal([]byte(out), &views) != nil || len(views) != 3 {
		t.Fatalf("list --json: exit %d\n%s", code, out)
	}
	if v := views[1]; v.Key != keys["discount"] || v.NodeType != "action" || v.Model != "gpt-4o" || v.Size != sizes["discount"] ||
		v.Execution != "exec-discount" || v.Node != "discount" || v.Workflow != "orders" || v.Task != discount.Task ||
		!v.CreatedAt.Equal(created) || v.Tokens != 1325 || v.Stages != nil || v.Shape != "" {
		t.Errorf("list --json, the discount entry: %+v", v)
	}
	if v := views[0]; v.Key != keys["broken"] || !strings.Contains(v.Unreadable, "decode code cache entry") {
		t.Errorf("list --json, the unreadable entry: %+v", v)
	}

	// A prefix in any case names an entry; show prints all of it.
	code, out, errOut = run("show", strings.ToUpper(keys["discount"][:8]))
	for _, want := range []string{"code cache entry " + keys["discount"] + "\n", "workflow:      orders\n", "node:          discount (action)\n",
		"produced by:   execution exec-discount\n", "runtime:       python-3.11.2-0123456789abcdef\n",
		"each hit saves 2 model call(s), 1325 tokens, $0.004200\n", `context shape: {"total":number}` + "\n",
		"task (prompt):\n    Calculate discount (10% if total > 1000)\n",
		"task code:\n    | # STAGE: TASK\n    | discount = context['total'] * 0.1\n    | context['discount'] = discount\n"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("show: exit %d, want %q in\n%s%s", code, want, out, errOut)
		}
	}
	if want := "embedding:     text-embedding-3-small, 3 dimensions: the semantic level finds it for similar tasks (group " + group[:12] + ")\n"; !strings.Contains(out, want) {
		t.Errorf("show of an indexed entry: want %q in\n%s", want, out)
	}
	if strings.Contains(out, "analysis code:") {
		t.Errorf("show of an entry without analysis code shows one:\n%s", out)
	}
	if _, out, _ = run("show", keys["route"][:10]); !strings.Contains(out, "embedding:     none: found by its exact key only\n") {
		t.Errorf("show of an entry without embedding:\n%s", out)
	}
	code, out, _ = run("show", keys["route"][:10], "--json")
	var shown cacheEntryView
	if code != exitOK || json.Unmarshal([]byte(out), &shown) != nil || shown.Key != keys["route"] || shown.Shape != route.Shape ||
		len(shown.Stages) != 2 || shown.Stages[0] != (cacheStage{"analysis", route.AnalysisCode}) || shown.Stages[1] != (cacheStage{"task", route.Code}) ||
		shown.Task != route.Task || shown.ModelCalls != 3 || shown.CostUSD != 0.01 {
		t.Errorf("show --json of the route entry: exit %d\n%s", code, out)
	}
	if code, out, _ = run("show", keys["broken"][:5]); code != exitFailed || !strings.Contains(out, "unreadable: decode code cache entry") ||
		!strings.Contains(out, "| not an entry") {
		t.Errorf("show of the unreadable entry: exit %d\n%s", code, out)
	}

	unknown := codecache.Key(codecache.Input{Task: "never cached"})
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"show an ambiguous prefix", []string{"show", keys["discount"][:4]}, exitInvalid,
			fmt.Sprintf("key prefix %q is ambiguous: 2 entries start with it (", keys["discount"][:4])},
		{"show an unknown key", []string{"show", unknown}, exitInvalid, fmt.Sprintf("no entry of the code cache has a key starting with %q", unknown)},
		{"show what is not a key", []string{"show", "discount"}, exitInvalid, `"discount" is not a code cache key: keys are hexadecimal`},
		{"show without KEY", []string{"show"}, exitInvalid, "want exactly one KEY"},
		{"show two", []string{"show", keys["discount"], keys["route"]}, exitInvalid, "want exactly one KEY"},
		{"list with an argument", []string{"list", "x"}, exitInvalid, `unexpected argument "x"`},
		{"purge without KEY or --all", []string{"purge"}, exitInvalid, "name the entries to remove (KEY..., see nova cache list), or give --all"},
		{"purge KEY and --all", []string{"purge", "--all", keys["route"]}, exitInvalid, "give KEYs or --all, not both"},
		{"purge a known and an unknown key", []string{"purge", keys["route"], unknown[:12]}, exitInvalid,
			fmt.Sprintf("nothing removed: no entry of the code cache has a key starting with %q", unknown[:12])},
		{"purge an ambiguous prefix", []string{"purge", keys["discount"][:4]}, exitInvalid, "nothing removed: key prefix"},
		{"unknown command", []string{"rm"}, exitInvalid, `unknown command "rm"`},
		{"no command", nil, exitInvalid, "Usage:"},
		{"unknown flag", []string{"list", "--all"}, exitInvalid, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := run(tt.args...)
			if code != tt.wantCode || !strings.Contains(out+errOut, tt.want) {
				t.Errorf("nova cache %v: exit %d, want %d with %q\n%s%s", tt.args, code, tt.wantCode, tt.want, out, errOut)
			}
		})
	}
	// The refused purges removed nothing.
	if code, out, _ := run("list", "--json"); code != exitOK || strings.Count(out, `"key"`) != 3 {
		t.Errorf("after refused purges: exit %d\n%s", code, out)
	}

	// A prefix and a whole key, the same entry named twice: two removed.
	if code, out, errOut := run("purge", keys["discount"][:10], keys["route"], keys["discount"]); code != exitOK ||
		out != "removed 2 entries from the code cache\n" {
		t.Errorf("purge two: exit %d\n%s%s", code, out, errOut)
	}
	for _, name := range []string{"discount", "route"} {
		if _, err := kv.Get(ctx, keys[name]); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("the %s entry after purge: %v, want it gone", name, err)
		}
	}
	if x, err := codecache.LoadIndex(ctx, kv, group); err != nil || x == nil || len(x.Entries) != 1 || x.Entries[0].Key != "another-member" {
		t.Errorf("semantic index after purging the discount entry: %+v, %v; want only the other member", x, err)
	}
	if code, _, errOut := run("show", keys["route"]); code != exitInvalid || !strings.Contains(errOut, "no entry of the code cache has a key starting with") {
		t.Errorf("show of a purged entry: exit %d\n%s", code, errOut)
	}
	if code, out, _ := run("list"); code != exitOK || strings.Count(out, "\n") != 2 || !strings.Contains(out, keys["broken"][:12]) {
		t.Errorf("list after purging two: exit %d\n%s", code, out)
	}
	if code, out, errOut := run("purge", "--all"); code != exitOK || out != "removed 1 entry from the code cache\n" {
		t.Errorf("purge --all: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := run("list"); code != exitOK || out != "the code cache is empty\n" {
		t.Errorf("list after purge --all: exit %d\n%s", code, out)
	}
	if left, err := kv.Keys(ctx); !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Errorf("keys after purge --all: %v, %v; want none (the semantic index and the kept embedding too)", left, err)
	}
}
