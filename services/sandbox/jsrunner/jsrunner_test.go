package jsrunner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/novaflow/nova/services/sandbox/isolation/isolationtest"
	"github.com/novaflow/nova/services/sandbox/runner"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const installHint = "npm ci --prefix services/sandbox/jsrunner/runtime --omit=dev --ignore-scripts"

// newTestRunner builds a Runner over a private work dir with the vendored node
// modules, and checks when the test ends that no per-execution dir was left.
func newTestRunner(t testing.TB, cfg Config) *Runner {
	t.Helper()
	for _, p := range []string{"/usr/bin/bwrap", "/usr/bin/node"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("%s is missing: install the bubblewrap and nodejs packages (make deps)", p)
		}
	}
	modules, err := filepath.Abs("runtime/node_modules")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(modules, "cheerio")); err != nil {
		t.Fatalf("node modules are not installed; run from the repository root: %s", installHint)
	}
	cfg.WorkDir = isolationtest.WorkDir(t)
	if cfg.NodeModules == "" {
		cfg.NodeModules = modules
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

func run(t *testing.T, r *Runner, req runner.Request) Result {
	t.Helper()
	res, err := r.Run(context.Background(), req)
	if err != nil {
		t.Fatalf("Run: %v (stderr: %s)", err, res.Stderr)
	}
	return res
}

// jsonOf renders a value the way a consumer of the JSON sees it.
func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %v: %v", v, err)
	}
	var g any
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(g) // map keys sorted
	return string(b)
}

func sameJSON(t *testing.T, got any, want string) bool {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	return jsonOf(t, got) == jsonOf(t, w)
}

func TestRunForms(t *testing.T) {
	r := newTestRunner(t, Config{})
	tests := []struct {
		name    string
		code    string
		context map[string]any
		// value is the JSON of Result.Value; "" means no value.
		value   string
		updates string
	}{
		{
			name:    "exported async function gets the context as args",
			code:    `module.exports = async (args) => ({ total: args.price * args.qty })`,
			context: map[string]any{"price": 2.5, "qty": 4},
			value:   `{"total": 10}`,
			updates: `{"total": 10}`,
		},
		{
			name:    "exported function with exports.default",
			code:    `exports.default = function (args) { return [args.a, args.a] }`,
			context: map[string]any{"a": "x"},
			value:   `["x", "x"]`,
			updates: `{}`,
		},
		{
			name:    "top-level return",
			code:    "const n = context.items.length\nreturn n * 2",
			context: map[string]any{"items": []any{1, 2, 3}},
			value:   `6`,
			updates: `{}`,
		},
		{
			name:    "top-level await",
			code:    "const v = await new Promise((resolve) => setTimeout(() => resolve(7), 5))\nreturn { v }",
			value:   `{"v": 7}`,
			updates: `{"v": 7}`,
		},
		{
			name:    "async IIFE",
			code:    "(async () => {\n  await null\n  return ['a', 'b']\n})();\n",
			value:   `["a", "b"]`,
			updates: `{}`,
		},
		{
			name:    "sync IIFE with a trailing comment",
			code:    "(function () { return { ok: true } }()); // run",
			value:   `{"ok": true}`,
			updates: `{"ok": true}`,
		},
		{
			name:    "main() whose promise is the script's last value",
			code:    "async function main() { context.done = true; return 'finished' }\nmain()",
			value:   `"finished"`,
			updates: `{"done": true}`,
		},
		{
			name:    "ES module with export default",
			code:    "import * as cheerio from 'cheerio'\nexport default async function (args) {\n  return cheerio.load(args.html)('h1').text()\n}",
			context: map[string]any{"html": "<h1>Title</h1>"},
			value:   `"Title"`,
			updates: `{}`,
		},
		{
			name:    "exported data",
			code:    `module.exports = [{ id: 1 }]`,
			value:   `[{"id": 1}]`,
			updates: `{}`,
		},
		{
			name:    "an assignment is no value",
			code:    `context['x'] = 1`,
			updates: `{"x": 1}`,
		},
		{
			name:    "callbacks run before the end, as with node code.js",
			code:    `setTimeout(() => { context.late = 'yes' }, 20)`,
			updates: `{"late": "yes"}`,
		},
		{
			name:    "dynamic import in a script",
			code:    `import('cheerio').then((m) => typeof m.load)`,
			value:   `"function"`,
			updates: `{}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, r, runner.Request{Code: tt.code, Context: obj(t, tt.context)})
			if res.Status != runner.StatusSuccess {
				t.Fatalf("status %s: %s %s\n%s\nstderr: %s", res.Status, res.ErrorKind, res.Error, res.Stack, res.Stderr)
			}
			if tt.value == "" {
				if res.HasValue || res.Items != nil {
					t.Errorf("value %s, items %s; want none", res.Value, res.Items)
				}
			} else if !res.HasValue || !sameJSON(t, res.Value, tt.value) {
				t.Errorf("value %s (has %v), want %s", jsonOf(t, res.Value), res.HasValue, tt.value)
			}
			if !sameJSON(t, res.Updates, tt.updates) {
				t.Errorf("updates %s, want %s", jsonOf(t, res.Updates), tt.updates)
			}
		})
	}
}

func TestRunContextUpdates(t *testing.T) {
	r := newTestRunner(t, Config{})
	ctx := obj(t, map[string]any{
		"keep":   map[string]any{"a": []any{1, 2}},
		"change": 1,
		"gone":   "x",
		"undef":  "y",
		// JavaScript reads them as 150 and 0: never rewritten when untouched.
		// (An integer beyond 2^53 no longer reaches the code: TestRunExactContext.)
		"float":   json.RawMessage(`150.0`),
		"negZero": json.RawMessage(`-0.0`),
	})
	tests := []struct {
		name, code, updates string
		deleted             []string
	}{
		{
			name:    "changed, added, deleted and unchanged keys",
			code:    "context.change = 2\ncontext.added = { n: [1, { b: null }] }\ncontext.keep = { a: [1, 2] }\ndelete context.gone\ncontext.undef = undefined",
			updates: `{"change": 2, "added": {"n": [1, {"b": null}]}}`,
			deleted: []string{"gone", "undef"},
		},
		{
			name:    "nested mutation",
			code:    `context.keep.a.push(3)`,
			updates: `{"keep": {"a": [1, 2, 3]}}`,
		},
		{
			name:    "exported function mutating its args",
			code:    `module.exports = (args) => { args.change = 5; return 'ok' }`,
			updates: `{"change": 5}`,
		},
		{
			name:    "a returned object is the updates when the context is untouched",
			code:    `return { summary: 'two', count: 2 }`,
			updates: `{"summary": "two", "count": 2}`,
		},
		{
			name:    "a returned object is only the value when the context changed",
			code:    "context.change = 3\nreturn { summary: 'two' }",
			updates: `{"change": 3}`,
		},
		{
			name:    "reassigning the whole context",
			code:    `context = { ...context, change: 9 }`,
			updates: `{"change": 9}`,
		},
		{
			name:    "dates become ISO strings and undefined properties are left out",
			code:    `context.when = { at: new Date(0), none: undefined }`,
			updates: `{"when": {"at": "1970-01-01T00:00:00.000Z"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, r, runner.Request{Code: tt.code, Context: ctx})
			if res.Status != runner.StatusSuccess {
				t.Fatalf("status %s: %s\n%s", res.Status, res.Error, res.Stack)
			}
			if !sameJSON(t, res.Updates, tt.updates) {
				t.Errorf("updates %s, want %s", jsonOf(t, res.Updates), tt.updates)
			}
			sort.Strings(res.Deleted)
			if !slices.Equal(res.Deleted, tt.deleted) {
				t.Errorf("deleted %v, want %v", res.Deleted, tt.deleted)
			}
		})
	}
}

func TestRunItems(t *testing.T) {
	r := newTestRunner(t, Config{})
	tests := []struct{ code, items string }{
		{`return [{ a: 1 }, { a: 2 }]`, `[{"a": 1}, {"a": 2}]`},
		{`return { a: 1 }`, `[{"a": 1}]`},
		{`return 'text'`, `["text"]`},
		{`return null`, `[null]`},
		{`context.a = 1`, `null`},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			res := run(t, r, runner.Request{Code: tt.code})
			if res.Status != runner.StatusSuccess {
				t.Fatalf("status %s: %s", res.Status, res.Error)
			}
			if !sameJSON(t, res.Items, tt.items) {
				t.Errorf("items %s, want %s", jsonOf(t, res.Items), tt.items)
			}
		})
	}
}

func TestRunConsoleLogs(t *testing.T) {
	r := newTestRunner(t, Config{})
	code := `
console.log('count', 3, { a: [1, 2] })
console.info('multi\nline')
console.warn('careful')
console.error(new Error('shown').message)
process.stdout.write('raw stdout\n')
context.done = true`
	res := run(t, r, runner.Request{Code: code})
	if res.Status != runner.StatusSuccess {
		t.Fatalf("status %s: %s", res.Status, res.Error)
	}
	want := []string{"count 3 { a: [ 1, 2 ] }", "multi\nline", "[warn] careful", "[error] shown"}
	if !slices.Equal(res.Logs, want) {
		t.Errorf("logs %q, want %q", res.Logs, want)
	}
	if res.Stdout != "raw stdout\n" {
		t.Errorf("stdout %q: console output belongs to the logs only", res.Stdout)
	}
}

func TestRunErrors(t *testing.T) {
	r := newTestRunner(t, Config{})
	tests := []struct {
		name, code string
		error      string // substring
		stack      string // substring; "" skips
		logs       []string
	}{
		{
			name:  "thrown error keeps its stack with the code's line numbers",
			code:  "console.log('before')\nfunction parse(x) {\n  throw new TypeError('bad input ' + x)\n}\nparse(42)",
			error: "TypeError: bad input 42",
			stack: "at parse (/nova/code.js:3:9)",
			logs:  []string{"before"},
		},
		{
			name:  "rejection in an exported function",
			code:  "module.exports = async () => {\n  await null\n  throw new RangeError('too far')\n}",
			error: "RangeError: too far",
			stack: "/nova/code.js:3",
		},
		{name: "syntax error names the line", code: "const a = 1\nconst b = (\nreturn a", error: "SyntaxError"},
		{name: "syntax error in a body with return", code: "return 1\nx x", error: "(line 2)"},
		{name: "thrown string", code: `throw 'plain'`, error: "Uncaught 'plain'"},
		{name: "error in a callback", code: `setTimeout(() => { null.x }, 1)`, error: "TypeError: Cannot read properties of null"},
		{name: "unhandled rejection", code: `Promise.reject(new Error('nobody waits')); setTimeout(() => {}, 50)`, error: "Error: nobody waits"},
		{name: "a promise that never settles", code: `await new Promise(() => {})`, error: "never settles"},
		{
			name:  "non-JSON values in the context are named",
			code:  "context.f = () => 1\ncontext.n = 10n\nconst o = { list: [] }\no.list.push(o)\ncontext.o = o\ncontext.m = new Map()",
			error: "context.f (function), context.n (BigInt), context.o.list[0] (circular reference), context.m (Map)",
		},
		{
			name:  "non-JSON values in the result are named",
			code:  `return [{ ok: 1, bad: NaN, s: Symbol('x') }]`,
			error: "result[0].bad (NaN), result[0].s (Symbol)",
		},
		{name: "context replaced by a non-object", code: `context = [1]`, error: "context must be a plain object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, r, runner.Request{Code: tt.code})
			if res.Status != runner.StatusError || res.ErrorKind != runner.KindCodeError {
				t.Fatalf("status %s kind %s error %q; want a code_error", res.Status, res.ErrorKind, res.Error)
			}
			if !strings.Contains(res.Error, tt.error) {
				t.Errorf("error %q, want it to contain %q", res.Error, tt.error)
			}
			if !strings.Contains(res.Stack, tt.stack) || res.Traceback != res.Stack {
				t.Errorf("stack %q (traceback %q), want it to contain %q", res.Stack, res.Traceback, tt.stack)
			}
			if strings.Contains(res.Stack, "runner.js") {
				t.Errorf("stack shows the runner's frames: %s", res.Stack)
			}
			if tt.logs != nil && !slices.Equal(res.Logs, tt.logs) {
				t.Errorf("logs %q, want %q", res.Logs, tt.logs)
			}
			if len(res.Updates) != 0 {
				t.Errorf("updates %s on error", res.Updates)
			}
		})
	}
}

func TestRunModules(t *testing.T) {
	r := newTestRunner(t, Config{})
	t.Run("cheerio parses HTML", func(t *testing.T) {
		code := `
const cheerio = require('cheerio')
const $ = cheerio.load(context.html)
return $('li.item').map((i, el) => ({ name: $(el).find('a').text(), url: $(el).find('a').attr('href') })).get()`
		html := `<ul><li class="item"><a href="https://a.example/1">One</a></li><li class="item"><a href="https://a.example/2">Two</a></li></ul>`
		res := run(t, r, runner.Request{Code: code, Context: obj(t, map[string]any{"html": html})})
		want := `[{"name": "One", "url": "https://a.example/1"}, {"name": "Two", "url": "https://a.example/2"}]`
		if res.Status != runner.StatusSuccess || !sameJSON(t, res.Value, want) {
			t.Fatalf("status %s %s, value %s; want %s", res.Status, res.Error, jsonOf(t, res.Value), want)
		}
	})
	t.Run("axios loads and the closed network refuses it", func(t *testing.T) {
		code := `
const axios = require('axios')
try {
  await axios.get('http://93.184.215.14/', { timeout: 2000 })
  return 'reached'
} catch (e) {
  return { type: typeof axios.get, code: e.code || e.message }
}`
		res := run(t, r, runner.Request{Code: code})
		if res.Status != runner.StatusSuccess {
			t.Fatalf("status %s: %s\n%s", res.Status, res.Error, res.Stack)
		}
		v, _ := decoded(t, res.Value).(map[string]any)
		if v["type"] != "function" || v["code"] == nil || v["code"] == "reached" {
			t.Errorf("value %s: want axios loaded and the request refused", res.Value)
		}
	})
	t.Run("axios and cheerio are globals too", func(t *testing.T) {
		res := run(t, r, runner.Request{Code: `return [typeof axios.get, typeof cheerio.load]`})
		if !sameJSON(t, res.Value, `["function", "function"]`) {
			t.Errorf("status %s %s, value %s", res.Status, res.Error, jsonOf(t, res.Value))
		}
	})
}

func TestRunLanguage(t *testing.T) {
	r := newTestRunner(t, Config{})
	res := run(t, r, runner.Request{Code: "x = 1", Language: "python"})
	if res.ErrorKind != runner.KindRuntimeUnavailable {
		t.Errorf("kind %q, want %q", res.ErrorKind, runner.KindRuntimeUnavailable)
	}
	res = run(t, r, runner.Request{Code: "return 1", Language: "JavaScript"})
	if res.Status != runner.StatusSuccess {
		t.Errorf("language JavaScript: %s %s", res.Status, res.Error)
	}
}

func TestRunCancelled(t *testing.T) {
	r := newTestRunner(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	res, err := r.Run(ctx, runner.Request{Code: `while (true) {}`, Timeout: 20 * time.Second})
	if err == nil || res.ErrorKind != runner.KindSandboxFault {
		t.Fatalf("err %v kind %q; want a cancelled run", err, res.ErrorKind)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %v", d)
	}
}

func TestNew(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"node outside /usr", Config{Node: "/opt/node/bin/node", WorkDir: dir}, "under /usr"},
		{"missing bubblewrap", Config{Bwrap: "/nonexistent/bwrap", WorkDir: dir}, "bubblewrap"},
		{"node modules without axios", Config{NodeModules: dir, WorkDir: dir, SandboxUID: -1}, "lack axios"},
		{"missing work dir", Config{WorkDir: filepath.Join(dir, "none")}, "work dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v; want an error about %q", err, tt.want)
			}
		})
	}
}

func TestEndsWithIIFE(t *testing.T) {
	// runner.js decides with the same patterns; these pin the cases the package
	// documentation promises, run through the real runner.
	r := newTestRunner(t, Config{})
	tests := []struct {
		code  string
		value bool
	}{
		{"(() => { return 1 })()", true},
		{"(function () { return 1 }).call(this);", true},
		{"(function () { return 1 }())\n// end\n/* done */", true},
		{"const f = () => 1\nf()", false},
		{"[1, 2].map((x) => x * 2)", false},
	}
	for _, tt := range tests {
		res := run(t, r, runner.Request{Code: tt.code})
		if res.HasValue != tt.value {
			t.Errorf("%q: has value %v, want %v (%s)", tt.code, res.HasValue, tt.value, res.Error)
		}
	}
}

func TestRunNetwork(t *testing.T) {
	r := newTestRunner(t, Config{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		fmt.Fprintf(w, `{"path": %q}`, req.URL.Path)
	})
	plain := httptest.NewServer(handler)
	defer plain.Close()
	secure := httptest.NewTLSServer(handler)
	defer secure.Close()
	other := httptest.NewServer(handler)
	defer other.Close()
	plainHost, secureHost, otherHost := plain.Listener.Addr().String(), secure.Listener.Addr().String(), other.Listener.Addr().String()

	code := fmt.Sprintf(`
process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0' // the test server's certificate is self-signed
const axios = require('axios')
const https = require('https')
const get = (url) => axios.get(url, { timeout: 5000 }).then((r) => r.data.path, (e) => 'refused: ' + e.code + ' ' + e.message)
const viaHttps = () => new Promise((resolve) => {
  https.get(%[2]q + '/https', (res) => { let b = ''; res.on('data', (c) => { b += c }); res.on('end', () => resolve(JSON.parse(b).path)) })
    .on('error', (e) => resolve('refused: ' + e.message))
})
const dial = () => new Promise((resolve) => {
  const s = require('net').connect(%[4]q.split(':')[1], '127.0.0.1')
  s.on('connect', () => { s.destroy(); resolve('connected') })
  s.on('error', (e) => resolve(e.code))
})
return {
  axios: await get(%[1]q + '/axios'),
  axiosTLS: await get(%[2]q + '/axios-tls'),
  https: await viaHttps(),
  fetch: await fetch(%[1]q + '/fetch').then((r) => r.json()).then((j) => j.path, (e) => 'refused: ' + e.message + ' ' + (e.cause && e.cause.stack)),
  notAllowed: await get(%[3]q + '/other'),
  direct: await dial(),
}`, plain.URL, secure.URL, other.URL, plainHost)

	res := run(t, r, runner.Request{Code: code, Network: true, AllowHosts: []string{plainHost, secureHost}})
	if res.Status != runner.StatusSuccess {
		t.Fatalf("status %s: %s\n%s\n%s", res.Status, res.Error, res.Stack, res.Stderr)
	}
	v, _ := decoded(t, res.Value).(map[string]any)
	for k, want := range map[string]string{"axios": "/axios", "axiosTLS": "/axios-tls", "https": "/https", "fetch": "/fetch"} {
		if v[k] != want {
			t.Errorf("%s through the egress proxy: %v, want %v", k, v[k], want)
		}
	}
	if s, _ := v["notAllowed"].(string); !strings.HasPrefix(s, "refused:") || !strings.Contains(s, otherHost) {
		t.Errorf("a host outside allow_hosts: %v, want a refusal naming it", v["notAllowed"])
	}
	if v["direct"] != "ECONNREFUSED" {
		t.Errorf("a direct connection to the host's port: %v, want only the sandbox's own loopback", v["direct"])
	}

	t.Run("a callback script ends once its connections are idle", func(t *testing.T) {
		code := fmt.Sprintf(`require('http').get(%q, (res) => { let b = ''; res.on('data', (c) => { b += c }); res.on('end', () => { context.got = JSON.parse(b).path }) })`, plain.URL+"/cb")
		start := time.Now()
		res := run(t, r, runner.Request{Code: code, Network: true, AllowHosts: []string{plainHost}, Timeout: 10 * time.Second})
		if res.Status != runner.StatusSuccess || !sameJSON(t, res.Updates, `{"got": "/cb"}`) {
			t.Fatalf("status %s %s %s, updates %s", res.Status, res.ErrorKind, res.Error, jsonOf(t, res.Updates))
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("took %v: a kept-alive connection held the run", d)
		}
	})
	t.Run("invalid allow_hosts", func(t *testing.T) {
		res := run(t, r, runner.Request{Code: `return 1`, Network: true, AllowHosts: []string{"http://bad/"}})
		if res.ErrorKind != runner.KindCodeError {
			t.Errorf("kind %q error %q, want a code_error", res.ErrorKind, res.Error)
		}
	})
}

func TestRunLargeContext(t *testing.T) {
	r := newTestRunner(t, Config{})
	blob := make([]byte, 20<<20)
	for i := range blob {
		blob[i] = "abcdefghijklmnopqrstuvwxyz0123456789"[i%36]
	}
	sum := sha256.Sum256(blob)
	code := `return require('crypto').createHash('sha256').update(context.blob).digest('hex')`
	res := run(t, r, runner.Request{Code: code, Context: obj(t, map[string]any{"blob": string(blob)})})
	if res.Status != runner.StatusSuccess || decoded(t, res.Value) != hex.EncodeToString(sum[:]) {
		t.Errorf("status %s %s: sha256 %s, want %x", res.Status, res.Error, res.Value, sum)
	}
	if len(res.Updates) != 0 {
		t.Errorf("an untouched 20 MiB value came back as an update")
	}
}
