package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// chromiumPath is Debian's chromium package (make deps installs it), or
// $NOVA_CHROMIUM.
func chromiumPath() string {
	if p := os.Getenv("NOVA_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// consoleShots is where the browser tests write their screenshots:
// $NOVA_CONSOLE_SCREENSHOTS, else nova-console-screenshots-<pid> in the
// temporary directory, this test process's own: a browser test clears its
// folder first, and another run beside it (make test, another person's run)
// would clear or overwrite this one's screenshots, or own the folder.
func consoleShots() string {
	if d := os.Getenv("NOVA_CONSOLE_SCREENSHOTS"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "nova-console-screenshots-"+strconv.Itoa(os.Getpid()))
}

// browser drives one headless Chromium tab.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string
	// dialogs are JavaScript dialogs the page opened (an alert an escaping
	// bug would run); there must be none.
	dialogs chan string
	// failed are the answers of 400 and more the page got, "status URL".
	failedMu sync.Mutex
	failed   []string
}

// Widths of every screenshot: a wide window and a narrow one.
const (
	wideWidth   = 1400
	narrowWidth = 800
	shotHeight  = 1000
)

func newBrowser(t *testing.T, ctx context.Context, chromium string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(wideWidth, shotHeight), chromedp.UserDataDir(t.TempDir()))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: bctx, shots: consoleShots(), dialogs: make(chan string, 8)}
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	if err := os.MkdirAll(b.shots, 0o755); err != nil {
		t.Fatal(err)
	}
	// The folder shows one run: an earlier run's screenshots go.
	old, _ := filepath.Glob(filepath.Join(b.shots, "*.png"))
	for _, f := range old {
		_ = os.Remove(f)
	}
	if _, err := chromedp.Call(bctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev, err := range chromedp.Events(bctx, network.ResponseReceived) {
			if err != nil {
				return
			}
			if ev.Response != nil && ev.Response.Status >= 400 {
				b.failedMu.Lock()
				b.failed = append(b.failed, fmt.Sprintf("%d %s", ev.Response.Status, ev.Response.URL))
				b.failedMu.Unlock()
			}
		}
	}()
	go func() {
		for ev, err := range chromedp.Events(bctx, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			b.dialogs <- ev.Message
			_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	return b
}

// do runs actions, failing the test with what was being done.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.failure(what)
		b.t.Fatalf("%s: %v", what, err)
	}
}

// click clicks the element sel selects, again when the page redrew it
// between finding and clicking it (the execution page redraws on events).
func (b *browser) click(what, sel string) {
	b.t.Helper()
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
		err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel)))
		cancel()
		if err == nil {
			return
		}
		if try == 3 || !strings.Contains(err.Error(), "Could not find node") {
			b.failure(what)
			b.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// poll waits up to d for a JavaScript condition to hold (every 50 ms).
func (b *browser) poll(d time.Duration, expr string) error {
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	// The poll's own timeout (chromedp's default is 30 s) is d too: ctx
	// alone would leave every wait at 30 s.
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond),
		chromedp.WithPollingTimeout(d)))
	return err
}

// follow clicks a link until the page it leads to shows (expr holds): a
// list that is drawn again as it changes (a schedule's last tick every 2 s)
// can replace the link between a click's press and release.
func (b *browser) follow(what, sel, expr string) {
	b.t.Helper()
	for try := 1; try < 3; try++ {
		b.click(what, sel)
		if b.poll(5*time.Second, expr) == nil {
			return
		}
	}
	b.click(what, sel)
	b.until(what, expr)
}

// selectNode clicks a node of the execution's graph until its visits show.
// The page draws itself again when the execution changes (the audit's last
// writes come a little after the completion): a click whose press and
// release straddle that lands on no element, and then the panel still asks
// for a node, so clicking again cannot unselect one.
func (b *browser) selectNode(what, node string) {
	b.t.Helper()
	for try := 1; ; try++ {
		b.click(what, fmt.Sprintf(`svg.graph [data-node=%q]`, node))
		if b.poll(3*time.Second, `!document.querySelector(".panel")?.innerText.startsWith("Select a node")`) == nil || try == 3 {
			return
		}
	}
}

// eval evaluates a JavaScript expression (awaiting a promise) into v.
func eval[T any](b *browser, what, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAsValue, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// until waits for a JavaScript condition to hold.
func (b *browser) until(what, expr string) {
	b.t.Helper()
	if err := b.poll(90*time.Second, expr); err != nil {
		b.failure(what)
		b.t.Fatalf("waiting for %s: %v\npage text:\n%s", what, err, eval[string](b, "page text", "document.body.innerText"))
	}
}

// shot writes screenshots of the whole page as NAME-1400.png and
// NAME-800.png, the window that wide, and checks that at either width the
// page is no wider than the window (what does not fit scrolls in its own
// box).
func (b *browser) shot(name string) { b.screenshots(name, true) }

// view writes screenshots of what the window shows (a modal dialog), as shot does.
func (b *browser) view(name string) { b.screenshots(name, false) }

func (b *browser) screenshots(name string, full bool) {
	b.t.Helper()
	for _, width := range []int64{wideWidth, narrowWidth} {
		if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(width, shotHeight)); err != nil {
			b.t.Fatalf("window %d px wide: %v", width, err)
		}
		// The pages draw again on a resize, after 150 ms.
		time.Sleep(400 * time.Millisecond)
		if err := b.poll(5*time.Second, `new Promise(r => requestAnimationFrame(() => r(true)))`); err != nil {
			b.t.Errorf("screenshot %s: the page did not settle: %v", name, err)
		}
		if wide := eval[int](b, "page width", `document.documentElement.scrollWidth`); wide > int(width) {
			b.t.Errorf("%s: the page is %d px wide in a window of %d px", name, wide, width)
		}
		take := chromedp.CaptureScreenshot()
		if full {
			take = chromedp.FullScreenshot(100)
		}
		b.screenshot(fmt.Sprintf("%s-%d", name, width), take)
	}
	if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(wideWidth, shotHeight)); err != nil {
		b.t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
}

// failure writes a screenshot of the page as it is, for a step that failed.
func (b *browser) failure(what string) {
	b.screenshot("failed-"+regexp.MustCompile(`\W+`).ReplaceAllString(what, "-"), chromedp.FullScreenshot(100))
}

func (b *browser) screenshot(name string, take chromedp.Action[[]byte]) {
	buf, err := chromedp.Run(b.ctx, take)
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		b.t.Error(err)
	}
}

// failedAnswers are the answers of 400 and more the page has had.
func (b *browser) failedAnswers() []string {
	b.failedMu.Lock()
	defer b.failedMu.Unlock()
	return slices.Clone(b.failed)
}

// api calls the gateway with the admin key and decodes the answer.
func api(t *testing.T, base, key, method, path, contentType, body string, out any) {
	t.Helper()
	status, data := call(t, base, key, method, path, contentType, body)
	if status >= 300 {
		t.Fatalf("%s %s: %d\n%s", method, path, status, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v\n%s", method, path, err, data)
		}
	}
}

// apiStatus is api that tells the status of an answer of 300 and more
// rather than failing the test; out is decoded from an answer under 300.
func apiStatus(t *testing.T, base, key, method, path string, out any) (int, []byte) {
	t.Helper()
	status, data := call(t, base, key, method, path, "", "")
	if status < 300 && out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v\n%s", method, path, err, data)
		}
	}
	return status, data
}

// waitStored waits until the gateway answers for execution id: the engine
// stores an execution a moment after its start is accepted, longer on a
// busy machine, and a page opened before answers 404 first.
func waitStored(t *testing.T, base, key, id string) {
	t.Helper()
	if !eventually(60*time.Second, func() bool {
		status, _ := apiStatus(t, base, key, "GET", "/v1/executions/"+id, nil)
		return status == http.StatusOK
	}) {
		t.Fatalf("execution %s is not there 60 s after it started", id)
	}
}

// eventually polls cond every 100 ms for up to d and tells whether it
// held: the store and the engine write a moment after what a test did.
func eventually(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

func call(t *testing.T, base, key, method, path, contentType, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// slowRule is a scripted answer for an AI node that runs a while: its code
// sleeps, so the test sees the node running, in its code execution step.
const slowRule = `  - name: console-test-count-slowly
    match:
      agent: code-generator
      user_contains: Count slowly to three
    respond:
      content: |
        # STAGE: TASK
        import time
        time.sleep(12)
        context["count"] = 3
`

// countYAML is a workflow whose one AI node takes 12 seconds.
const countYAML = `name: count
nodes:
  - {id: start, type: start}
  - {id: count, type: action, prompt: "Count slowly to three"}
  - {id: done, type: end}
edges:
  - {from: start, to: count}
  - {from: count, to: done}
`

// tinyWorkflow is a one-node code workflow, as a start request's definition.
const tinyWorkflow = `{"name": "tiny", "nodes": [{"id": "start", "type": "start"}, {"id": "add", "type": "action", "code": "context['y'] = context['x'] + 1"},
	{"id": "end", "type": "end"}], "edges": [{"from": "start", "to": "add"}, {"from": "add", "to": "end"}]}`

// recordContexts, run in every page the tab loads, records each text the
// execution page's context shows, for the test to read as window.__contexts.
const recordContexts = `window.__contexts = [];
document.addEventListener("DOMContentLoaded", () => new MutationObserver(() => {
	const t = document.querySelector("pre.context")?.textContent;
	if (t && window.__contexts[window.__contexts.length - 1] !== t) window.__contexts.push(t);
}).observe(document.body, {subtree: true, childList: true, characterData: true}));`

// TestConsoleInBrowser drives the console in headless Chromium against
// `nova dev` with the scripted model, as a person would, with a screenshot
// per step at 1400 and at 800 px (each page no wider than the window):
// a wrong key shows the sign-in; the workflows pages list what is
// registered and draw a definition's graph; a workflow started from its page
// turns green live with its cost; an AI node shows its agent steps and the
// field table of its 10 products with sku at 30% and a Fix button; the Fix
// modal refines the node through POST /v1/refine and saves the code, and
// closes when the browser goes back; a second run shows sku at 100% without
// a model call, and the workflow's two revisions differ by that code; a
// running AI node shows its agent step, attempt and time, and the context it
// started with from the first paint; executions are found by id prefix
// beyond the first page and paged through; an unknown id says so at once; a
// refinement's execution shows its node and messages. A context value that
// is markup shows as text. It also checks the console's own modules (exact
// numbers, the SSE parser, the diff, the live model) in the browser that
// runs them.
func TestConsoleInBrowser(t *testing.T) {
	chromium := chromiumPath()
	if chromium == "" {
		t.Skip("SKIPPED: no chromium (Debian package chromium, installed by make deps): the console's browser test did not run")
	}
	if testing.Short() {
		t.Skip("a browser and nova dev")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	t.Setenv("NOVA_JAEGER_URL", "http://jaeger.test:16686")
	// The walk opens the refinement's page minutes after it ended, on a
	// busy machine; its messages must still be kept then (30 s by default).
	t.Setenv("NOVA_KEEP_ENDED_EVENTS", "15m")
	rules, err := os.ReadFile(filepath.Join("..", "..", "examples", "scripted-llm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(strings.Replace(string(rules), "\nrules:\n", "\nrules:\n"+slowRule, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	m, _ := startDev(t, ctx, regexp.MustCompile(`HTTP API (http://\S+)\n\s+NOVA_API_KEY=(\S+)`), "--gateway-addr", "127.0.0.1:0", "--llm-rules", rulesFile)
	base, key := m[1], m[2]
	catalog, err := os.ReadFile(filepath.Join("..", "..", "examples", "catalog.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	api(t, base, key, "POST", "/v1/workflows", "application/yaml", string(catalog), nil)
	api(t, base, key, "POST", "/v1/workflows", "application/yaml", countYAML, nil)

	b := newBrowser(t, ctx, chromium)
	t.Logf("screenshots: %s", b.shots)
	if _, err := chromedp.Call(b.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: recordContexts}); err != nil {
		t.Fatal(err)
	}

	// A wrong key: the sign-in form, saying why.
	b.do("open the console with a wrong key", chromedp.Navigate(base+"/#key=nova_gk_wrong&to=/executions"))
	b.until("the sign-in form", `document.querySelector("form.login [role=alert]")?.textContent.length > 0`)
	b.shot("01-sign-in-wrong-key")

	// The right key; the workflows, and catalog's graph from its
	// definition, before it ever ran.
	b.do("open the console", chromedp.Navigate(base+"/#key="+key+"&to=/workflows"))
	b.until("the workflows", `!!document.querySelector('table.workflows tr[data-workflow="catalog"] a')`)
	b.click("open catalog", `table.workflows tr[data-workflow="catalog"] td:first-child a`)
	b.until("catalog's graph", `location.hash === "#/workflows/catalog" && document.querySelectorAll("svg.graph g.node").length === 3`)
	if n := eval[int](b, "statuses drawn", `document.querySelectorAll("svg.graph g.node[data-status]").length`); n != 0 {
		t.Errorf("a definition's graph shows %d node statuses; it has no execution", n)
	}
	b.selectNode("open the products node's definition", "products")
	b.until("the node's prompt", `document.querySelector(".node-definition pre.prompt")?.textContent.includes("List the products of the catalog")`)
	b.shot("02-workflow-definition-graph")

	// Start catalog from its page: the execution turns green live.
	eval[bool](b, "watch the page", `(() => {
		window.__noReload = true; window.__seen = [];
		new MutationObserver(() => {
			const n = document.querySelector('svg.graph [data-node="products"]');
			const s = n && n.dataset.status && "status-" + n.dataset.status;
			if (s && window.__seen[window.__seen.length - 1] !== s) window.__seen.push(s);
		}).observe(document.body, {subtree: true, childList: true, attributes: true});
		return true;
	})()`)
	b.do("start catalog from its page",
		chromedp.SetValue(chromedp.CSS("form.start #start-context"), `{"category": "office"}`),
		chromedp.Click(chromedp.CSS(`form.start button[type=submit]`)))
	b.until("the execution page", `location.hash.startsWith("#/executions/") && !!document.querySelector("svg.graph")`)
	b.until("every node green", `["start", "products", "done"].every(id => document.querySelector('svg.graph [data-node="' + id + '"]')?.classList.contains("status-success"))`)
	seen := eval[[]string](b, "the statuses seen", `window.__seen`)
	if !eval[bool](b, "no reload", `window.__noReload === true`) || len(seen) < 2 || seen[len(seen)-1] != "status-success" {
		t.Errorf("products' status as drawn: %v; want it to change to success on the open page", seen)
	}
	first := eval[string](b, "execution id", `decodeURIComponent(location.hash.split("/")[2].split("?")[0])`)
	wantTrace := "http://jaeger.test:16686/search?service=sandbox&tags=" + url.QueryEscape(`{"execution.id":"`+first+`"}`)
	if got := eval[string](b, "trace link", `[...document.querySelectorAll("a")].find(a => a.textContent === "Trace in Jaeger")?.href ?? ""`); got != strings.ReplaceAll(wantTrace, "+", "%20") {
		t.Errorf("trace link %q, want %q", got, wantTrace)
	}
	b.until("the timeline of the three visits", `document.querySelectorAll("svg.timeline .visit-bar").length === 3`)
	// What its model calls cost, as the API says.
	var firstView struct {
		Execution struct {
			CostUSD    float64 `json:"cost_usd"`
			ModelCalls int     `json:"model_calls"`
		} `json:"execution"`
	}
	api(t, base, key, "GET", "/v1/executions/"+first, "", "", &firstView)
	if firstView.Execution.ModelCalls == 0 || firstView.Execution.CostUSD == 0 {
		t.Errorf("the AI run's cost %v and model calls %d; want both above 0", firstView.Execution.CostUSD, firstView.Execution.ModelCalls)
	}
	b.until("the execution's cost", fmt.Sprintf(`document.querySelector(".execution-head .spend")?.textContent.endsWith("· %d model calls")`, firstView.Execution.ModelCalls))
	if got := eval[string](b, "timeline labels", `[...document.querySelectorAll("svg.timeline text")].map(t => t.textContent).join(" | ")`); regexp.MustCompile(`\d{4,} ms`).MatchString(got) {
		t.Errorf("the timeline says %q; want long times in seconds", got)
	}
	b.shot("03-execution-graph-and-cost")

	// The AI node: its prompt and agent steps, and the field table.
	b.selectNode("open the products node", "products")
	b.until("the agent steps", `document.querySelectorAll("table.steps tbody tr[data-step]").length >= 3`)
	agents := eval[string](b, "agents", `[...document.querySelectorAll("table.steps tbody tr[data-step] td:nth-child(2)")].map(td => td.textContent).join(",")`)
	for _, want := range []string{"input-analyzer", "code-generator", "sandbox", "output-validator"} {
		if !strings.Contains(agents, want) {
			t.Errorf("agent steps %s; want %s among them", agents, want)
		}
	}
	b.until("the field table", `document.querySelectorAll("table.fields tbody tr").length === 10`)
	if cov := eval[string](b, "sku coverage", `document.querySelector('table.fields th[data-field="sku"] .coverage').textContent`); cov != "30%" {
		t.Errorf("sku coverage %q, want 30%%", cov)
	}
	if n := eval[int](b, "empty cells", `document.querySelectorAll("table.fields td.empty").length`); n != 7 {
		t.Errorf("%d empty cells, want the 7 products without a sku", n)
	}
	if eval[bool](b, "fix on name", `!!document.querySelector('table.fields th[data-field="name"] button.fix')`) {
		t.Error("a Fix button on name, which every product has")
	}
	if eval[string](b, "the url", `location.hash`) != "#/executions/"+first+"?node=products" {
		t.Errorf("the open node is not in the URL: %s", eval[string](b, "the url", `location.hash`))
	}
	b.do("scroll to the field table", chromedp.ScrollIntoView(chromedp.CSS("table.fields")))
	eval[bool](b, "scroll", `(window.scrollBy(0, -260), true)`)
	b.view("04-ai-node-field-table")

	// Fix sku: the modal, the refinement's stream, the diff, Save.
	b.click("open Fix on sku", `table.fields th[data-field="sku"] button.fix`)
	b.until("the Fix modal", `document.querySelector("dialog.fix-modal")?.open === true`)
	info := eval[string](b, "the modal's field info", `document.querySelector("dialog.fix-modal dl.field-info").innerText`)
	for _, want := range []string{"30% (3/10)", "string", `item["sku"] = "SKU-%04d" % (i + 1)`} {
		if !strings.Contains(info, want) {
			t.Errorf("the modal shows %q; want %q in it", info, want)
		}
	}
	if ph := eval[string](b, "the expression's placeholder", `document.querySelector("dialog.fix-modal textarea[name=correctExpression]")?.placeholder ?? ""`); ph == "" || strings.Contains(ph, "=>") {
		t.Errorf("the Python node's expression placeholder %q; want Python, not JavaScript", ph)
	}
	b.do("fill the modal",
		chromedp.SetValue(chromedp.CSS(`dialog.fix-modal textarea[name=notes]`), "Every product has a sku: SKU- and its position in four digits"),
		chromedp.Click(chromedp.CSS(`dialog.fix-modal button.secondary`)), // + Add example
	)
	b.do("fill an example", chromedp.SetValue(chromedp.CSS(`dialog.fix-modal .example textarea:nth-of-type(2)`), `"SKU-0002"`))
	b.view("05-fix-modal")
	b.click("refine", `dialog.fix-modal form button[type=submit]`)
	b.until("the refinement's progress", `document.querySelectorAll("dialog.fix-modal ol.refine-log li").length > 0`)
	b.until("the refinement complete", `!!document.querySelector("dialog.fix-modal ol.refine-log li.complete")`)
	if cov := eval[string](b, "new sku coverage", `document.querySelector('dialog.fix-modal table.fields th[data-field="sku"] .coverage')?.textContent ?? ""`); cov != "100%" {
		t.Errorf("the refined output's sku coverage %q, want 100%%", cov)
	}
	if eval[int](b, "diff lines", `document.querySelectorAll("dialog.fix-modal pre.code-diff .add").length`) == 0 {
		t.Error("no added line in the code's diff")
	}
	log := eval[string](b, "refine log", `document.querySelector("dialog.fix-modal ol.refine-log").innerText`)
	if !strings.Contains(log, "attempt 1/") || !strings.Contains(log, "SCRIPTED") {
		t.Errorf("the refinement's log %q; want its attempts and that the model is scripted", log)
	}
	b.view("06-fix-modal-complete")
	if eval[bool](b, "the form folded", `getComputedStyle(document.querySelector("dialog.fix-modal form")).display === "none"`) != true {
		t.Error("the modal's form is still open after it was sent")
	}
	b.click("save to workflow", `dialog.fix-modal .refine-outcome .buttons button:not(.secondary)`)
	b.until("saved", `document.querySelector("dialog.fix-modal .refine-outcome p.note")?.textContent.startsWith("Saved:")`)
	b.view("07-fix-saved")
	b.click("close the modal", `dialog.fix-modal .refine-outcome button.secondary`)

	// The browser's Back leaves the page and its Fix dialog, which would
	// refine the execution left behind.
	b.click("open Fix on sku again", `table.fields th[data-field="sku"] button.fix`)
	b.until("the Fix modal again", `document.querySelector("dialog.fix-modal")?.open === true`)
	eval[bool](b, "go back", `(history.back(), true)`)
	b.until("catalog's page again", `location.hash === "#/workflows/catalog" && !!document.querySelector("svg.graph")`)
	if n := eval[int](b, "dialogs", `document.querySelectorAll("dialog.fix-modal").length`); n != 0 {
		t.Errorf("%d Fix dialogs left open over another page after Back", n)
	}
	b.shot("08-back-closes-fix-dialog")

	// Run again from the workflow's page: sku at 100%, no model call.
	b.do("open catalog's start form", chromedp.Navigate(base+"/#/workflows/catalog?start=1"))
	b.until("the start form of the latest revision", `document.querySelectorAll("table.revisions tbody tr").length === 2 && !!document.querySelector("form.start")`)
	b.do("start catalog again",
		chromedp.SetValue(chromedp.CSS("form.start #start-context"), `{"category": "office"}`),
		chromedp.Click(chromedp.CSS(`form.start button[type=submit]`)))
	b.until("the second execution's page", fmt.Sprintf(`location.hash.startsWith("#/executions/") && !location.hash.includes(%q)`, first))
	b.until("the second run green", `document.querySelector('svg.graph [data-node="done"]')?.classList.contains("status-success")`)
	b.selectNode("open the products node again", "products")
	b.until("the new field table", `document.querySelector('table.fields th[data-field="sku"] .coverage')?.textContent === "100%"`)
	second := eval[string](b, "execution id", `decodeURIComponent(location.hash.split("/")[2].split("?")[0])`)
	b.shot("09-rerun-full-coverage")
	var chain struct {
		Nodes []struct {
			NodeID     string         `json:"node_id"`
			ModelCalls int            `json:"model_calls"`
			AIMetadata map[string]any `json:"ai_metadata"`
		} `json:"nodes"`
	}
	api(t, base, key, "GET", "/v1/executions/"+second, "", "", &chain)
	for _, n := range chain.Nodes {
		if n.NodeID == "products" && (n.ModelCalls != 0 || n.AIMetadata != nil) {
			t.Errorf("the re-run's products node: %d model calls, ai_metadata %v; want a code node", n.ModelCalls, n.AIMetadata)
		}
	}

	// The workflow's two revisions, and what Save changed between them.
	b.do("open catalog's revisions", chromedp.Navigate(base+"/#/workflows/catalog"))
	b.click("diff the revisions", `table.revisions a.diff-link`)
	b.until("the diff", `[...document.querySelectorAll(".revision-diff pre.code-diff .add")].some(l => l.textContent.includes("SKU-%04d"))`)
	b.do("scroll to the diff", chromedp.ScrollIntoView(chromedp.CSS(".revision-diff")))
	b.shot("10-workflow-revisions-diff")

	// A running AI node: the agent step it is in, its attempt and time, the
	// context it started with, from the first paint.
	var counting struct {
		ExecutionID string `json:"execution_id"`
	}
	api(t, base, key, "POST", "/v1/executions", "application/json", `{"workflow": "count", "context": {"note": "long"}}`, &counting)
	b.do("leave the console", chromedp.Navigate("about:blank"))
	b.do("open the running execution", chromedp.Navigate(base+"/#/executions/"+counting.ExecutionID+"?node=count"))
	b.until("the node running in its code execution", `document.querySelector('svg.graph [data-node="count"]')?.dataset.status === "running" &&
		document.querySelector(".visit.running .current-step")?.textContent.includes("code execution (sandbox), attempt 1")`)
	b.until("two seconds of it", `/^([2-9]|\d\d) s$/.test(document.querySelector(".visit.running .elapsed")?.textContent ?? "")`)
	for what, expr := range map[string]string{
		"its row in the nodes table":   `document.querySelector('table.nodes tr[data-node="count"]')?.dataset.status === "running"`,
		"its time in the graph":        `/\d+ s/.test(document.querySelector('svg.graph [data-node="count"] [data-since]')?.textContent ?? "")`,
		"its bar in the timeline":      `!!document.querySelector('svg.timeline .visit-bar.status-running[data-node="count"]')`,
		"the context it started with":  `document.querySelector("pre.context")?.textContent.includes('"note": "long"')`,
		"the running time of the page": `/running for \d+ s/.test(document.querySelector(".execution-head .meta")?.textContent ?? "")`,
	} {
		if !eval[bool](b, what, expr) {
			t.Errorf("the running execution does not show %s", what)
		}
	}
	b.shot("11-running-ai-node")
	b.until("its output", `document.querySelector('svg.graph [data-node="done"]')?.dataset.status === "success" && document.querySelector("pre.context")?.textContent.includes('"count": 3')`)
	contexts := eval[[]string](b, "the contexts shown", `window.__contexts`)
	for _, c := range contexts {
		if strings.TrimSpace(c) == "{}" {
			t.Errorf("the page showed the context as {} while it ran: %q", contexts)
		}
	}
	if len(contexts) == 0 || !strings.Contains(contexts[0], "Reading") && !strings.Contains(contexts[0], `"note": "long"`) {
		t.Errorf("the first context shown %q; want the one the execution started with", contexts)
	}

	// Markup in a context value is text everywhere.
	const xss = `<img src=x onerror=alert(1)>`
	var started struct {
		ExecutionID string `json:"execution_id"`
	}
	body, _ := json.Marshal(map[string]any{"workflow": "catalog", "context": map[string]any{"category": xss}})
	api(t, base, key, "POST", "/v1/executions?wait=60s", "application/json", string(body), &started)
	b.do("open the execution with markup", chromedp.Navigate(base+"/#/executions/"+started.ExecutionID+"?node=products"))
	b.until("its context", `document.body.innerText.includes(`+jsString(xss)+`)`)
	b.shot("12-markup-as-text")
	b.do("open the list", chromedp.Navigate(base+"/#/executions"))
	b.until("the list", `document.querySelectorAll("table.executions tbody tr").length >= 4`)
	// The list is live: a run started elsewhere appears and ends on the
	// open page, with no new read of the list.
	reads := `performance.getEntriesByType("resource").filter(e => e.name.includes("/v1/executions?")).length`
	before := eval[int](b, "list reads", reads)
	api(t, base, key, "POST", "/v1/executions?wait=60s", "application/json", `{"workflow": "catalog", "context": {"category": "live"}}`, &started)
	b.until("the new run in the list, succeeded", fmt.Sprintf(`document.querySelector('tr[data-execution=%q]')?.dataset.status === "succeeded"`, started.ExecutionID))
	time.Sleep(2500 * time.Millisecond) // longer than the interval the list was once read again at
	if after := eval[int](b, "list reads", reads); after != before {
		t.Errorf("the list was read %d times while it waited for the run; want it kept up to date from its stream", after-before)
	}
	if cost := eval[string](b, "the first run's cost", fmt.Sprintf(`document.querySelector('tr[data-execution=%q] td:nth-child(6)')?.textContent ?? ""`, first)); !strings.HasPrefix(cost, "$") || !strings.Contains(cost, "call") {
		t.Errorf("the AI run's cost in the list %q; want dollars and model calls", cost)
	}
	b.shot("13-executions-live-with-cost")
	if n := eval[int](b, "images", `document.querySelectorAll("img").length`); n != 0 {
		t.Errorf("%d img elements: a context value became markup", n)
	}
	select {
	case msg := <-b.dialogs:
		t.Errorf("the page opened a dialog %q", msg)
	default:
	}

	// The workflows with their last run and how many of their runs succeeded.
	b.do("open the workflows", chromedp.Navigate(base+"/#/workflows"))
	b.until("catalog's success rate", `document.querySelector('table.workflows tr[data-workflow="catalog"]')?.dataset.successRate === "1"`)
	b.until("count's last run", `document.querySelector('table.workflows tr[data-workflow="count"] .last-run')?.textContent.includes("succeeded")`)
	b.shot("14-workflows-list")

	// Finding an execution: 55 runs after one, it is not on the first
	// page; its id's first characters find it, and so does paging.
	var target struct {
		ExecutionID string `json:"execution_id"`
	}
	api(t, base, key, "POST", "/v1/executions?wait=60s", "application/json", `{"definition": `+tinyWorkflow+`, "context": {"x": 1}}`, &target)
	startMany(t, base, key, 55, `{"definition": `+tinyWorkflow+`, "context": {"x": 2}}`)
	b.do("open the list again", chromedp.Navigate(base+"/#/executions"))
	b.until("a full first page", `document.querySelectorAll("table.executions tbody tr").length === 50`)
	if eval[bool](b, "the target on the first page", fmt.Sprintf(`!!document.querySelector('tr[data-execution=%q]')`, target.ExecutionID)) {
		t.Fatalf("execution %s is on the first page; want it beyond", target.ExecutionID)
	}
	prefix := target.ExecutionID[:8]
	b.do("search its id's first characters",
		chromedp.SetValue(chromedp.CSS("#filter-id"), prefix),
		chromedp.Click(chromedp.CSS(`form.filters button[type=submit]`)))
	b.until("the execution found", fmt.Sprintf(`location.hash.includes("id=%s") && !!document.querySelector('tr[data-execution=%q]')`, prefix, target.ExecutionID))
	if got := eval[[]string](b, "rows found", `[...document.querySelectorAll("table.executions tbody tr")].map(r => r.dataset.execution)`); len(got) == 0 || slices.ContainsFunc(got, func(id string) bool { return !strings.HasPrefix(id, prefix) }) {
		t.Errorf("searching %s lists %v", prefix, got)
	}
	b.shot("15-search-by-id-prefix")
	b.do("clear the search", chromedp.Navigate(base+"/#/executions?workflow=tiny"))
	b.until("a full first page of tiny", `document.querySelectorAll("table.executions tbody tr").length === 50`)
	b.click("older", `nav.pager button.older`)
	b.until("the older page with the execution", fmt.Sprintf(`location.hash.includes("cursor=") && !!document.querySelector('tr[data-execution=%q]')`, target.ExecutionID))
	b.shot("16-executions-older-page")

	// An unknown id says so at once, and offers a search.
	b.do("open an unknown execution", chromedp.Navigate(base+"/#/executions/no-such-execution"))
	if err := b.poll(2*time.Second, `!!document.querySelector(".not-found") && document.querySelector(".not-found").innerText.includes("no-such-execution")`); err != nil {
		t.Errorf("an unknown execution is not said to be unknown within 2 s: %v\n%s", err, eval[string](b, "page", "document.body.innerText"))
	}
	if eval[bool](b, "waiting", `document.body.innerText.includes("Waiting")`) {
		t.Error("the page of an unknown execution waits for it")
	}
	b.shot("17-unknown-execution")

	// A refinement's execution: its one node, its steps and its messages.
	b.do("list the refinements", chromedp.Navigate(base+"/#/executions?workflow=refine"))
	b.until("a refinement", `document.querySelector("table.executions tbody tr td:nth-child(2) .tag")?.textContent === "refinement"`)
	b.click("open the refinement", `table.executions tbody tr td:first-child a`)
	b.until("its node and steps", `document.querySelector('svg.graph [data-node="refine"]')?.dataset.status === "success" && document.querySelectorAll("table.steps tbody tr[data-step]").length >= 2`)
	b.until("its messages", `!!document.querySelector(".refine-messages li.complete")`)
	b.shot("18-refinement-execution")

	// 40 nodes and more: every node drawn apart from the others, at a size
	// that reads (the graph scrolls instead of shrinking).
	body, _ = json.Marshal(map[string]any{"definition": wideWorkflow(12), "context": map[string]any{"n": 6}})
	api(t, base, key, "POST", "/v1/executions?wait=60s", "application/json", string(body), &started)
	b.do("open the 50-node execution", chromedp.Navigate(base+"/#/executions/"+started.ExecutionID))
	b.until("its graph", `document.querySelectorAll("svg.graph g.node").length === 50`)
	layout := eval[map[string]float64](b, "the graph's layout", `(() => {
		const boxes = [...document.querySelectorAll("svg.graph g.node rect")].map(r => r.getBoundingClientRect());
		let overlaps = 0;
		for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
			const a = boxes[i], b = boxes[j];
			if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) overlaps++;
		}
		const text = document.querySelector("svg.graph .node-id").getBoundingClientRect();
		return {overlaps, textHeight: text.height, nodeWidth: boxes[0].width};
	})()`)
	if layout["overlaps"] != 0 || layout["textHeight"] < 11 || layout["nodeWidth"] < 150 {
		t.Errorf("50-node graph: %v overlapping node pairs, node id text %.1f px high, nodes %.0f px wide; want none overlapping, text at least 11 px, nodes drawn full size",
			layout["overlaps"], layout["textHeight"], layout["nodeWidth"])
	}
	// A code node's visit: its run, no table of agent steps.
	b.selectNode("open a code node", "check_1")
	b.until("its visit", `!!document.querySelector(".visits .visit")`)
	if eval[bool](b, "steps of a code node", `!!document.querySelector(".visits table.steps")`) {
		t.Error("a code node's visit shows a table of agent steps")
	}
	b.shot("19-graph-50-nodes")

	// The playground: the sample runs in the sandbox and shows its fields;
	// code that raises shows its traceback.
	b.do("open the playground", chromedp.Navigate(base+"/#/playground"))
	b.click("run the sample", `form.playground button[type=submit]`)
	b.until("the sample's field table", `document.querySelectorAll(".play-out table.fields tbody tr").length === 3`)
	if got := eval[string](b, "first row", `[...document.querySelectorAll(".play-out table.fields tbody tr:first-child td")].map(td => td.textContent).join("|")`); got != "1|4|Lamp" {
		t.Errorf("the playground's first row %q, want 1|4|Lamp (len, name)", got)
	}
	b.shot("20-playground")
	// Refined the same way: JavaScript whose names should be capitalised
	// (the refinement guide's example), fixed through the modal, and the
	// accepted code back in the editor.
	b.do("write JavaScript",
		chromedp.SetValue(chromedp.CSS("#play-language"), "javascript"),
		chromedp.SetValue(chromedp.CSS("#play-code"), "module.exports = async (ctx) => ctx.rows.map(r => ({name: r.n}))\n"),
		chromedp.SetValue(chromedp.CSS("#play-context"), `{"rows": [{"n": "lamp"}, {"n": "desk"}, {"n": "rug"}]}`))
	b.click("run it", `form.playground button[type=submit]`)
	b.until("its field table", `document.querySelector(".play-out table.fields tbody tr td:nth-child(2)")?.textContent === "lamp"`)
	b.click("fix name from the menu", `.play-out .fix-menu button`)
	b.do("say names are capitalised",
		chromedp.SetValue(chromedp.CSS(`dialog.fix-modal select[name=issue]`), "format"),
		chromedp.SetValue(chromedp.CSS(`dialog.fix-modal input[name=correctValue]`), "Lamp"))
	b.click("refine", `dialog.fix-modal form button[type=submit]`)
	b.until("the refinement complete", `!!document.querySelector("dialog.fix-modal ol.refine-log li.complete")`)
	b.click("use the code", `dialog.fix-modal .refine-outcome .buttons button:not(.secondary)`)
	b.until("the refined code run", `document.querySelector(".play-out table.fields tbody tr td:nth-child(2)")?.textContent === "Lamp"`)
	if code := eval[string](b, "the editor", `document.querySelector("#play-code").value`); !strings.Contains(code, "toUpperCase") {
		t.Errorf("the editor holds %q, want the refined code", code)
	}
	b.do("run code that raises",
		chromedp.SetValue(chromedp.CSS("#play-language"), "python"),
		chromedp.SetValue(chromedp.CSS("#play-context"), `{"names": ["lamp"]}`),
		chromedp.SetValue(chromedp.CSS("#play-code"), "raise ValueError('no rows for ' + context['names'][0])\n"),
		chromedp.Click(chromedp.CSS(`form.playground button[type=submit]`)))
	b.until("the error", `document.querySelector(".play-out .error")?.textContent.includes("no rows for lamp")`)

	// The page's icon is served; the only failed answers were the wrong key's
	// and the unknown execution's.
	if got := eval[string](b, "the icon", `fetch(document.querySelector("link[rel=icon]").href).then(r => r.status + " " + r.headers.get("Content-Type"))`); got != "200 image/svg+xml" {
		t.Errorf("the page's icon: %s", got)
	}
	for _, f := range b.failedAnswers() {
		if !strings.HasPrefix(f, "401 ") && !strings.Contains(f, "/no-such-execution") {
			t.Errorf("the page had an answer %s", f)
		}
	}

	// The console's modules, in the browser that runs them.
	checks := eval[map[string]string](b, "the console's modules", `(async () => {
		const exact = await import("/console/dist/exact.js");
		const api = await import("/console/dist/api.js");
		const fields = await import("/console/dist/fields.js");
		const live = await import("/console/dist/live.js");
		const dom = await import("/console/dist/dom.js");
		const out = {};
		out.exact = exact.pretty(exact.parseExact('{"a": 1500.0, "b": 18446744073709551616, "c": [1e3, -0.0]}'));
		out.stringify = JSON.stringify(exact.parseExact('{"a": 1500.0, "b": [18446744073709551616]}'));
		const events = [];
		const p = new api.EventParser(e => events.push(e.event + "|" + e.id + "|" + e.data));
		for (const chunk of ["id: 7\r", "\nevent: node\ndata: {\"a\":\n", "data: 1}\n\n: comment\n\ndata: x\r\n\r\n", "data: last"]) p.push(chunk);
		p.end();
		out.sse = events.join(" ; ");
		out.diff = fields.lineDiff("a\nb\nc\n", "a\nc\nd\n").map(d => d.op + d.line).join(",");
		out.logic = fields.fieldLogic("x = 1\nitem['sku'] = s\nr.sku = 2\nskus = []", "sku").join(" | ");
		out.populated = [null, "  ", [], {}, 0, false, "a", new exact.ExactNumber("0.0")].map(fields.populated).join(",");
		out.analysed = JSON.stringify(fields.analysedValue({products: [1]}, "python")) + " " + JSON.stringify(fields.analysedValue({products: [1]}, "javascript"));
		// The live model: events on a read from the engine's state (no
		// context), a completed visit never running again, and the step a
		// running AI visit is in.
		const view = {execution: {execution_id: "e", workflow_name: "w", status: "running", initial_context: null}, nodes: []};
		const ev = (event, data) => live.applyEvent(view, {id: "", event, data: JSON.stringify(data)});
		ev("workflow.started", {context: {note: "long"}});
		ev("node.started", {node_id: "a", visit: 1, ai: true, sequence: 2, started_at: "2025-03-01T12:00:00Z"});
		ev("step.completed", {node_id: "a", visit: 1, step_number: 1, step_name: "input_analysis", agent_name: "input-analyzer", attempt_number: 0, status: "success"});
		ev("step.completed", {node_id: "a", visit: 1, step_number: 2, step_name: "code_generation", agent_name: "code-generator", attempt_number: 1, status: "success"});
		ev("step.completed", {node_id: "a", visit: 1, step_number: 3, step_name: "code_validation", agent_name: "code-validator", attempt_number: 1, status: "failed"});
		const step = live.currentStep(view.nodes[0]);
		out.live = [JSON.stringify(live.liveContext(view)), view.nodes[0].status, step.step + "/" + step.agent + "/" + step.attempt].join(" ");
		ev("node.completed", {node_id: "a", visit: 1, status: "success", output_result: {note: "long", n: 1}});
		ev("node.started", {node_id: "a", visit: 1});
		out.completed = view.nodes[0].status + " " + view.nodes[0].steps.length + " " + JSON.stringify(live.liveContext(view).context);
		out.units = [dom.duration(20028), dom.elapsed(61000), dom.money(0.000045), dom.money(0.0123), dom.spend(0, 0), dom.shortID("refine-0b9f1c2d-aaaa")].join(" | ");
		return out;
	})()`)
	for name, want := range map[string]string{
		"exact":     "{\n  \"a\": 1500.0,\n  \"b\": 18446744073709551616,\n  \"c\": [\n    1e3,\n    -0.0\n  ]\n}",
		"stringify": `{"a":1500.0,"b":[18446744073709551616]}`,
		"sse":       "node|7|{\"a\":\n1} ; message|7|x ; message|7|last",
		"diff":      " a,-b, c,+d",
		"logic":     "item['sku'] = s | r.sku = 2",
		"populated": "false,false,false,false,true,true,true,true",
		"analysed":  "[1] {\"products\":[1]}",
		"live":      `{"context":{"note":"long"},"after":"start"} running code_generation/code-generator/2`,
		"completed": `success 3 {"note":"long","n":1}`,
		"units":     "20.0 s | 1 min 1 s | $0.000045 | $0.012 | no model calls | 0b9f1c2d",
	} {
		if checks[name] != want {
			t.Errorf("console module check %s: got %q, want %q", name, checks[name], want)
		}
	}
}

// startMany starts n executions with body through the API, 8 at a time,
// and waits for each to end.
func startMany(t *testing.T, base, key string, n int, body string) {
	t.Helper()
	var wg sync.WaitGroup
	slots := make(chan struct{}, 8)
	for range n {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			req, err := http.NewRequestWithContext(t.Context(), "POST", base+"/v1/executions?wait=60s", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("start: %s", resp.Status)
			}
		}()
	}
	wg.Wait()
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// wideWorkflow is a definition of 2+4n nodes: n decisions, each choosing one
// of two actions that join again.
func wideWorkflow(n int) map[string]any {
	nodes := []map[string]any{{"id": "start", "type": "start"}}
	var edges []map[string]any
	prev := "start"
	for i := 1; i <= n; i++ {
		d, a, b, j := fmt.Sprintf("check_%d", i), fmt.Sprintf("step_%da", i), fmt.Sprintf("step_%db", i), fmt.Sprintf("join_%d", i)
		nodes = append(nodes,
			map[string]any{"id": d, "type": "decision", "code": fmt.Sprintf("context['branch_decision'] = 'high' if context['n'] %% %d == 0 else 'low'", i+1)},
			map[string]any{"id": a, "type": "action", "code": fmt.Sprintf("context['s%d'] = 'a'", i)},
			map[string]any{"id": b, "type": "action", "code": fmt.Sprintf("context['s%d'] = 'b'", i)},
			map[string]any{"id": j, "type": "action", "code": fmt.Sprintf("context['j%d'] = True", i)})
		edges = append(edges, map[string]any{"from": prev, "to": d}, map[string]any{"from": d, "to": a, "condition": "high"},
			map[string]any{"from": d, "to": b, "condition": "low"}, map[string]any{"from": a, "to": j}, map[string]any{"from": b, "to": j})
		prev = j
	}
	nodes = append(nodes, map[string]any{"id": "done", "type": "end"})
	edges = append(edges, map[string]any{"from": prev, "to": "done"})
	return map[string]any{"name": fmt.Sprintf("wide-%d", len(nodes)), "nodes": nodes, "edges": edges}
}
