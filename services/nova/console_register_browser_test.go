package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

// brokenDemoYAML is a definition with four problems, each at a line the
// register form must mark: max_visits (line 8), node work (5), edges[1].to
// (15), node end (9).
const brokenDemoYAML = `name: broken-demo
nodes:
  - id: start
    type: start
  - id: work
    type: action
    code: "context['x'] = 1"
    max_visits: -2
  - id: end
    type: end
edges:
  - from: start
    to: work
  - from: work
    to: nowhere
`

// brokenDemoJSON is brokenDemoYAML in JSON, one member a line: its
// problems are at lines 8 (max_visits), 16 (edges[1].to), 6 (node work's
// id) and 10 (node end).
const brokenDemoJSON = `{
  "name": "broken-demo",
  "nodes": [
    {"id": "start", "type": "start"},
    {
      "id": "work", "type": "action",
      "code": "context['x'] = 1",
      "max_visits": -2
    },
    {"id": "end", "type": "end"}
  ],
  "edges": [
    {"from": "start", "to": "work"},
    {
      "from": "work",
      "to": "nowhere"
    }
  ]
}`

// graphNode is a node of the drawn graph: where it is on the page, and
// whether it lies within the graph's box.
type graphNode struct {
	ID    string  `json:"id"`
	Left  float64 `json:"left"`
	Top   float64 `json:"top"`
	Width float64 `json:"width"`
	In    bool    `json:"in"`
}

// graphNodes measures the drawn graph's nodes against its box.
const graphNodes = `(() => {
	const box = document.querySelector(".graph-wrap").getBoundingClientRect();
	return [...document.querySelectorAll(".graph-wrap svg.graph g.node")].map(n => {
		const r = n.getBoundingClientRect();
		return {id: n.dataset.node, left: r.left, top: r.top, width: r.width,
			in: r.left >= box.left - 1 && r.right <= box.right + 1 && r.top >= box.top - 1 && r.bottom <= box.bottom + 1};
	});
})()`

// everyNodeIn is true once the graph's 9 nodes are drawn, each within its box.
const everyNodeIn = `(() => { const n = ` + graphNodes + `; return n.length === 9 && n.every(x => x.in); })()`

// TestConsoleRegisterInBrowser drives the workflows page and a workflow's
// graph in headless Chromium against nova dev, as a person would, with
// screenshots at 1400 and 800 px (in the register folder of the console's
// screenshots): the workflows page lists 14 workflows with their last runs
// from one read; Register workflow… takes a pasted definition, in YAML or
// JSON, and marks each of its problems at the line the gateway names; a
// file read into the form registers invoice-routing and opens its page,
// whose 9-node graph fits its box at either width, zooms with the buttons
// and the wheel, pans by a drag and fits again; the same file again is
// answered unchanged at once.
func TestConsoleRegisterInBrowser(t *testing.T) {
	chromium := chromiumPath()
	if chromium == "" {
		t.Skip("SKIPPED: no chromium (Debian package chromium, installed by make deps): the console's register browser test did not run")
	}
	if testing.Short() {
		t.Skip("a browser and nova dev")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	t.Setenv("NOVA_CONSOLE_SCREENSHOTS", filepath.Join(consoleShots(), "register"))
	m, _ := startDev(t, ctx, regexp.MustCompile(`HTTP API (http://\S+)\n\s+NOVA_API_KEY=(\S+)`), "--gateway-addr", "127.0.0.1:0")
	base, key := m[1], m[2]
	for i := range 14 {
		name := fmt.Sprintf("team-%02d", i)
		api(t, base, key, "POST", "/v1/workflows", "application/json",
			fmt.Sprintf(`{"name": %q, "nodes": [{"id": "start", "type": "start"}, {"id": "work", "type": "action", "code": "context['y'] = 1 / context['x']"},
				{"id": "end", "type": "end"}], "edges": [{"from": "start", "to": "work"}, {"from": "work", "to": "end"}]}`, name), nil)
		// The first runs twice, once failing; the others once, the odd ones failing.
		for _, x := range map[bool][]int{true: {0, 1}, false: {i % 2}}[i == 0] {
			api(t, base, key, "POST", "/v1/executions?wait=30s", "", fmt.Sprintf(`{"workflow": %q, "context": {"x": %d}}`, name, x), nil)
		}
	}
	invoice, err := filepath.Abs(filepath.Join("..", "..", "examples", "invoice-routing.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t, ctx, chromium)
	t.Logf("screenshots: %s", b.shots)

	// The workflows, each with its last run and success rate, from one read.
	b.do("open the workflows", chromedp.Navigate(base+"/#key="+key+"&to=/workflows"))
	started := time.Now()
	b.until("14 workflows with their runs", `document.querySelectorAll("table.workflows tbody tr").length === 14 &&
		[...document.querySelectorAll("table.workflows tbody tr")].every(r => r.querySelector("td.last-run .badge"))`)
	t.Logf("the workflows page listed 14 workflows with their last runs %v after the navigation", time.Since(started).Round(time.Millisecond))
	if rate := eval[string](b, "team-00's rate", `document.querySelector('tr[data-workflow="team-00"] td.rate')?.textContent ?? ""`); rate != "50% (1/2)" {
		t.Errorf("team-00, one run of two failed, shows %q; want 50%% (1/2)", rate)
	}
	reads := eval[[]string](b, "the reads", `performance.getEntriesByType("resource").map(e => e.name).filter(n => n.includes("/v1/"))`)
	var workflowsReads, executionsReads int
	for _, r := range reads {
		switch {
		case strings.Contains(r, "/v1/workflows"):
			workflowsReads++
		case strings.Contains(r, "/v1/executions"):
			executionsReads++
		}
	}
	// The sign-in reads /v1/workflows once too.
	if executionsReads != 0 || workflowsReads > 2 {
		t.Errorf("the workflows page made %d reads of /v1/workflows and %d of /v1/executions: %q; want one read for the page", workflowsReads, executionsReads, reads)
	}
	b.shot("51-workflows-one-read")

	// A pasted definition with four problems: each is marked at its line.
	b.click("Register workflow…", `button.register-open`)
	b.until("the register form", `!!document.querySelector("form.register-form textarea")`)
	b.do("paste a broken definition", chromedp.SetValue(chromedp.CSS(`#register-definition`), brokenDemoYAML))
	b.click("register it", `form.register-form button[type=submit]`)
	b.until("its problems", `document.querySelectorAll("ul.register-problems li").length === 4`)
	lines := eval[[]string](b, "the problems' lines", `[...document.querySelectorAll("ul.register-problems li")].map(li => li.dataset.line ?? "")`)
	marked := eval[[]string](b, "the lines marked", `[...document.querySelectorAll(".yaml-editor .gutter span.bad")].map(s => s.dataset.line)`)
	if strings.Join(lines, ",") != "8,15,5,9" || strings.Join(marked, ",") != "5,8,9,15" {
		t.Errorf("the problems are at lines %v, the gutter marks %v; want 8, 15, 5, 9 marked in order", lines, marked)
	}
	if got := eval[string](b, "the first problem", `document.querySelector("ul.register-problems li").textContent`); !strings.Contains(got, "line 8 · node work · max_visits: must not be negative") {
		t.Errorf("the first problem reads %q", got)
	}
	b.shot("52-register-problems-at-their-lines")
	// The same in JSON: the gateway names the lines, whatever the format.
	b.do("paste it in JSON", chromedp.SetValue(chromedp.CSS(`#register-definition`), brokenDemoJSON))
	b.click("register it", `form.register-form button[type=submit]`)
	b.until("its problems at their lines in JSON", `[...document.querySelectorAll("ul.register-problems li")].map(li => li.dataset.line ?? "").join() === "8,16,6,10" &&
		[...document.querySelectorAll(".yaml-editor .gutter span.bad")].map(s => s.dataset.line).join() === "6,8,10,16"`)
	b.shot("52-register-problems-in-json")

	// A file: invoice-routing, registered, and its page opens.
	b.do("read invoice-routing.yaml into the form", chromedp.SetUploadFiles(chromedp.CSS(`#register-file`), []string{invoice}))
	b.until("the file in the form", `document.querySelector("#register-definition").value.startsWith("# Invoice routing") &&
		!document.querySelector(".yaml-editor .gutter span.bad")`)
	b.click("register it", `form.register-form button[type=submit]`)
	b.until("invoice-routing's page, registered, its graph fitted", `location.hash === "#/workflows/invoice-routing?registered=1" &&
		document.querySelector(".notice.registered")?.textContent.startsWith("Registered: revision") && `+everyNodeIn)
	b.shot("53-registered-graph-fits")
	if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(narrowWidth, shotHeight)); err != nil {
		t.Fatal(err)
	}
	b.until("the graph fitted at 800 px", everyNodeIn+` && document.querySelector(".graph-wrap svg.graph").getBoundingClientRect().width < 800`)
	if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(wideWidth, shotHeight)); err != nil {
		t.Fatal(err)
	}
	b.until("the graph fitted at 1400 px again", everyNodeIn)

	// Zoom in with the button, then with the wheel at the end node.
	node := func(id string) graphNode {
		t.Helper()
		for _, n := range eval[[]graphNode](b, "the graph's nodes", graphNodes) {
			if n.ID == id {
				return n
			}
		}
		t.Fatalf("no node %s drawn", id)
		return graphNode{}
	}
	eval[bool](b, "scroll to the graph", `(document.querySelector(".graph-wrap").scrollIntoView({block: "start"}), true)`)
	fitted := node("done")
	// A click that lands while the page is still drawing the graph (seen
	// on a busy machine) zooms nothing: it is clicked again.
	zoomed := fmt.Sprintf(`(() => { const n = %s.find(x => x.id === "done"); return n && n.width > %f; })()`, graphNodes, fitted.Width*1.2)
	for try := 1; ; try++ {
		b.click("zoom in", `svg.graph .zoom-in`)
		if try == 3 || b.poll(10*time.Second, zoomed) == nil {
			break
		}
	}
	b.until("the graph zoomed in", zoomed)
	b.shot("54-graph-zoomed-in")
	before := node("check_amount")
	// The protocol wants deltaX as well, which the encoder leaves out when 0.
	b.do("the wheel, up, at check_amount", chromedp.MouseEvent(chromedp.MouseWheel, before.Left+10, before.Top+10,
		func(p *input.DispatchMouseEventParams) { p.DeltaX, p.DeltaY = 0.01, -200 }))
	b.until("zoomed in at the pointer", fmt.Sprintf(`(() => { const n = %s.find(x => x.id === "check_amount"); return n && n.width > %f; })()`, graphNodes, before.Width*1.2))
	at := node("check_amount")
	if d := at.Left - before.Left; d > 12 || d < -12 {
		t.Errorf("the wheel zoomed in away from the pointer: check_amount's corner moved %.0f px", d)
	}

	// Drag the graph 200 px to the left.
	x, y := at.Left+at.Width+20, at.Top+5
	b.do("drag the graph left",
		chromedp.MouseEvent(chromedp.MousePressed, x, y, chromedp.ButtonLeft, chromedp.ClickCount(1)),
		chromedp.MouseEvent(chromedp.MouseMoved, x-100, y, chromedp.ButtonLeft, func(p *input.DispatchMouseEventParams) { p.Buttons = 1 }),
		chromedp.MouseEvent(chromedp.MouseMoved, x-200, y, chromedp.ButtonLeft, func(p *input.DispatchMouseEventParams) { p.Buttons = 1 }),
		chromedp.MouseEvent(chromedp.MouseReleased, x-200, y, chromedp.ButtonLeft, chromedp.ClickCount(1)))
	if moved := node("check_amount").Left - at.Left; moved > -190 || moved < -210 {
		t.Errorf("a drag of 200 px to the left moved check_amount %.0f px", moved)
	}
	if got := eval[string](b, "the panel", `document.querySelector(".panel").innerText`); !strings.HasPrefix(got, "Select a node") {
		t.Errorf("the drag selected a node: %q", got)
	}
	b.shot("55-graph-zoomed-and-panned")
	b.click("fit", `svg.graph .zoom-fit`)
	b.until("the graph fitted again", everyNodeIn+` && document.querySelector(".graph-wrap svg.graph").dataset.zoomed === "fit"`)

	// The same file again: unchanged, at once.
	b.do("back to the workflows", chromedp.Navigate(base+"/#/workflows?register=1"))
	b.until("the register form", `!!document.querySelector("form.register-form textarea")`)
	text, err := os.ReadFile(invoice)
	if err != nil {
		t.Fatal(err)
	}
	b.do("paste invoice-routing", chromedp.SetValue(chromedp.CSS(`#register-definition`), string(text)))
	registered := time.Now()
	b.click("register it again", `form.register-form button[type=submit]`)
	b.until("unchanged", `location.hash === "#/workflows/invoice-routing?unchanged=1" &&
		document.querySelector(".notice.registered")?.textContent.startsWith("Unchanged: revision")`)
	t.Logf("the same definition registered again, answered unchanged %v after the click", time.Since(registered).Round(time.Millisecond))
	b.shot("56-registered-unchanged")

	if failed := b.failedAnswers(); len(failed) != 2 || !strings.Contains(failed[0], "422") || !strings.Contains(failed[1], "422") {
		t.Errorf("answers of 400 and more: %v; want only the broken definitions' two 422s", failed)
	}
	select {
	case d := <-b.dialogs:
		t.Errorf("the page opened a dialog: %q", d)
	default:
	}
}
