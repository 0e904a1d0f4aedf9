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
	"strings"
	"testing"
	"time"

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

// consoleShots is where the browser test writes its screenshots:
// $NOVA_CONSOLE_SCREENSHOTS, else nova-console-screenshots in the temporary
// directory.
func consoleShots() string {
	if d := os.Getenv("NOVA_CONSOLE_SCREENSHOTS"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "nova-console-screenshots")
}

// browser drives one headless Chromium tab.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string
	// dialogs are JavaScript dialogs the page opened (an alert an escaping
	// bug would run); there must be none.
	dialogs chan string
}

func newBrowser(t *testing.T, ctx context.Context, chromium string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 1000), chromedp.UserDataDir(t.TempDir()))
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
		b.shot("failed-" + regexp.MustCompile(`\W+`).ReplaceAllString(what, "-"))
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
			b.shot("failed-" + regexp.MustCompile(`\W+`).ReplaceAllString(what, "-"))
			b.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// poll waits up to d for a JavaScript condition to hold (every 50 ms).
func (b *browser) poll(d time.Duration, expr string) error {
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond)))
	return err
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
		b.shot("failed-" + regexp.MustCompile(`\W+`).ReplaceAllString(what, "-"))
		b.t.Fatalf("waiting for %s: %v\npage text:\n%s", what, err, eval[string](b, "page text", "document.body.innerText"))
	}
}

// shot writes a screenshot of the whole page as NAME.png.
func (b *browser) shot(name string) { b.screenshot(name, chromedp.FullScreenshot(100)) }

// view writes a screenshot of what the window shows (a modal dialog) as NAME.png.
func (b *browser) view(name string) { b.screenshot(name, chromedp.CaptureScreenshot()) }

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

// api calls the gateway with the admin key and decodes the answer.
func api(t *testing.T, base, key, method, path, contentType, body string, out any) {
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
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %s\n%s", method, path, resp.Status, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v\n%s", method, path, err, data)
		}
	}
}

// TestConsoleInBrowser drives the console in headless Chromium against
// `nova dev` with the scripted model: a wrong key shows the sign-in, a
// workflow started from the console turns green live, an AI node shows its
// agent steps, the field table of its 10 products shows sku at 30% with a
// Fix button, the Fix modal refines the node through POST /v1/refine and
// saves the code, and a second run shows sku at 100% without a model
// call. A context value that is markup shows as text. It also checks the
// console's own modules (exact numbers, the SSE parser, the diff) in the
// browser that runs them.
func TestConsoleInBrowser(t *testing.T) {
	chromium := chromiumPath()
	if chromium == "" {
		t.Skip("SKIPPED: no chromium (Debian package chromium, installed by make deps): the console's browser test did not run")
	}
	if testing.Short() {
		t.Skip("a browser and nova dev")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	t.Setenv("NOVA_JAEGER_URL", "http://jaeger.test:16686")
	m, _ := startDev(t, ctx, regexp.MustCompile(`HTTP API (http://\S+)\n\s+NOVA_API_KEY=(\S+)`), "--gateway-addr", "127.0.0.1:0")
	base, key := m[1], m[2]
	catalog, err := os.ReadFile(filepath.Join("..", "..", "examples", "catalog.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	api(t, base, key, "POST", "/v1/workflows", "application/yaml", string(catalog), nil)

	b := newBrowser(t, ctx, chromium)
	t.Logf("screenshots: %s", b.shots)

	// A wrong key: the sign-in form, saying why.
	b.do("open the console with a wrong key", chromedp.Navigate(base+"/#key=nova_gk_wrong&to=/executions"))
	b.until("the sign-in form", `document.querySelector("form.login [role=alert]")?.textContent.length > 0`)
	b.shot("01-sign-in-wrong-key")

	// The right key: the list, and the start form.
	b.do("open the console", chromedp.Navigate(base+"/#key="+key))
	b.until("the start form lists catalog", `[...document.querySelectorAll("#start-workflow option")].some(o => o.value === "catalog")`)
	// A marker that a reload would lose, and a record of the products
	// node's status as the page draws it.
	eval[bool](b, "watch the page", `(() => {
		window.__noReload = true; window.__seen = [];
		new MutationObserver(() => {
			const n = document.querySelector('svg.graph [data-node="products"]');
			const s = n && [...n.classList].find(c => c.startsWith("status-"));
			if (s && window.__seen[window.__seen.length - 1] !== s) window.__seen.push(s);
		}).observe(document.body, {subtree: true, childList: true, attributes: true});
		return true;
	})()`)
	b.do("start catalog from the console",
		chromedp.SetValue(chromedp.CSS("#start-workflow"), "catalog"),
		chromedp.SetValue(chromedp.CSS("#start-context"), `{"category": "office"}`),
		chromedp.Click(chromedp.CSS(`form.start button[type=submit]`)))
	b.until("the execution page", `location.hash.startsWith("#/executions/") && !!document.querySelector("svg.graph")`)
	b.until("every node green", `["start", "products", "done"].every(id => document.querySelector('svg.graph [data-node="' + id + '"]')?.classList.contains("status-success"))`)
	seen := eval[[]string](b, "the statuses seen", `window.__seen`)
	if !eval[bool](b, "no reload", `window.__noReload === true`) || len(seen) < 2 || seen[len(seen)-1] != "status-success" {
		t.Errorf("products' status as drawn: %v; want it to change to success on the open page", seen)
	}
	first := eval[string](b, "execution id", `decodeURIComponent(location.hash.split("/")[2])`)
	wantTrace := "http://jaeger.test:16686/search?service=sandbox&tags=" + url.QueryEscape(`{"execution.id":"`+first+`"}`)
	if got := eval[string](b, "trace link", `[...document.querySelectorAll("a")].find(a => a.textContent === "Trace in Jaeger")?.href ?? ""`); got != strings.ReplaceAll(wantTrace, "+", "%20") {
		t.Errorf("trace link %q, want %q", got, wantTrace)
	}
	b.until("the timeline of the three visits", `document.querySelectorAll("svg.timeline .visit-bar").length === 3`)
	b.shot("02-execution-graph")

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
	b.do("scroll to the field table", chromedp.ScrollIntoView(chromedp.CSS("table.fields")))
	eval[bool](b, "scroll", `(window.scrollBy(0, -260), true)`)
	b.view("03-ai-node-field-table")

	// Fix sku: the modal, the refinement's stream, the diff, Save.
	b.click("open Fix on sku", `table.fields th[data-field="sku"] button.fix`)
	b.until("the Fix modal", `document.querySelector("dialog.fix-modal")?.open === true`)
	info := eval[string](b, "the modal's field info", `document.querySelector("dialog.fix-modal dl.field-info").innerText`)
	for _, want := range []string{"30% (3/10)", "string", `item["sku"] = "SKU-%04d" % (i + 1)`} {
		if !strings.Contains(info, want) {
			t.Errorf("the modal shows %q; want %q in it", info, want)
		}
	}
	b.do("fill the modal",
		chromedp.SetValue(chromedp.CSS(`dialog.fix-modal textarea[name=notes]`), "Every product has a sku: SKU- and its position in four digits"),
		chromedp.Click(chromedp.CSS(`dialog.fix-modal button.secondary`)), // + Add example
	)
	b.do("fill an example", chromedp.SetValue(chromedp.CSS(`dialog.fix-modal .example textarea:nth-of-type(2)`), `"SKU-0002"`))
	b.view("04-fix-modal")
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
	b.view("05-fix-modal-complete")
	if eval[bool](b, "the form folded", `getComputedStyle(document.querySelector("dialog.fix-modal form")).display === "none"`) != true {
		t.Error("the modal's form is still open after it was sent")
	}
	b.click("save to workflow", `dialog.fix-modal .refine-outcome .buttons button:not(.secondary)`)
	b.until("saved", `document.querySelector("dialog.fix-modal .refine-outcome p.note")?.textContent.startsWith("Saved:")`)
	b.view("06-fix-saved")
	b.click("close the modal", `dialog.fix-modal .refine-outcome button.secondary`)

	// Run again from the console: sku at 100%, no model call.
	b.do("back to the list", chromedp.Navigate(base+"/#/executions"))
	b.until("the start form lists catalog at revision 2", `[...document.querySelectorAll("#start-workflow option")].some(o => o.value === "catalog" && o.textContent.includes("revision 2"))`)
	b.do("start catalog again",
		chromedp.SetValue(chromedp.CSS("#start-workflow"), "catalog"),
		chromedp.SetValue(chromedp.CSS("#start-context"), `{"category": "office"}`),
		chromedp.Click(chromedp.CSS(`form.start button[type=submit]`)))
	b.until("the second execution's page", fmt.Sprintf(`location.hash.startsWith("#/executions/") && !location.hash.includes(%q)`, first))
	b.until("the second run green", `document.querySelector('svg.graph [data-node="done"]')?.classList.contains("status-success")`)
	b.selectNode("open the products node again", "products")
	b.until("the new field table", `document.querySelector('table.fields th[data-field="sku"] .coverage')?.textContent === "100%"`)
	second := eval[string](b, "execution id", `decodeURIComponent(location.hash.split("/")[2].split("?")[0])`)
	b.shot("07-rerun-full-coverage")
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

	// Markup in a context value is text everywhere.
	const xss = `<img src=x onerror=alert(1)>`
	var started struct {
		ExecutionID string `json:"execution_id"`
	}
	body, _ := json.Marshal(map[string]any{"workflow": "catalog", "context": map[string]any{"category": xss}})
	api(t, base, key, "POST", "/v1/executions?wait=60s", "application/json", string(body), &started)
	b.do("open the execution with markup", chromedp.Navigate(base+"/#/executions/"+started.ExecutionID+"?node=products"))
	b.until("its context", `document.body.innerText.includes(`+jsString(xss)+`)`)
	b.shot("08-markup-as-text")
	b.do("open the list", chromedp.Navigate(base+"/#/executions"))
	b.until("the list", `document.querySelectorAll("table tbody tr").length >= 3`)
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
	b.shot("11-executions-live")
	if n := eval[int](b, "images", `document.querySelectorAll("img").length`); n != 0 {
		t.Errorf("%d img elements: a context value became markup", n)
	}
	select {
	case msg := <-b.dialogs:
		t.Errorf("the page opened a dialog %q", msg)
	default:
	}

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
	b.shot("10-graph-50-nodes")

	// The playground: the sample runs in the sandbox and shows its fields;
	// code that raises shows its traceback.
	b.do("open the playground", chromedp.Navigate(base+"/#/playground"))
	b.click("run the sample", `form.playground button[type=submit]`)
	b.until("the sample's field table", `document.querySelectorAll(".play-out table.fields tbody tr").length === 3`)
	if got := eval[string](b, "first row", `[...document.querySelectorAll(".play-out table.fields tbody tr:first-child td")].map(td => td.textContent).join("|")`); got != "1|4|Lamp" {
		t.Errorf("the playground's first row %q, want 1|4|Lamp (len, name)", got)
	}
	b.shot("09-playground")
	// Refined the same way: JavaScript whose names should be capitalised
	// (the README's refinement example), fixed through the modal, and the
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

	// The console's modules, in the browser that runs them.
	checks := eval[map[string]string](b, "the console's modules", `(async () => {
		const exact = await import("/console/dist/exact.js");
		const api = await import("/console/dist/api.js");
		const fields = await import("/console/dist/fields.js");
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
	} {
		if checks[name] != want {
			t.Errorf("console module check %s: got %q, want %q", name, checks[name], want)
		}
	}
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
