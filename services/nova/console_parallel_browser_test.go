package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// fanOutYAML runs a, b and c at once, two seconds each, and joins them.
const fanOutYAML = `name: console-fanout
nodes:
  - {id: start, type: start}
  - {id: a, type: action, code: "import time\ntime.sleep(2)\ncontext['a'] = True"}
  - {id: b, type: action, code: "import time\ntime.sleep(2)\ncontext['b'] = True"}
  - {id: c, type: action, code: "import time\ntime.sleep(2)\ncontext['c'] = True"}
  - {id: both, type: join}
  - {id: end, type: end}
edges:
  - {from: start, to: a}
  - {from: start, to: b}
  - {from: start, to: c}
  - {from: a, to: both}
  - {from: b, to: both}
  - {from: c, to: both}
  - {from: both, to: end}
`

// mapYAML doubles each of the numbers in orders, four at a time: the first
// eight items take 0.2 s each, the others 4 s, so that the map is part-way
// for some 30 seconds, long enough for a screenshot at each width on a
// machine that runs another make test beside this one (with 0.8 s, 6
// seconds part-way, four tries missed it; with 2.5 s, once in four runs).
const mapYAML = `name: console-map
nodes:
  - {id: start, type: start}
  - id: each
    type: map
    items: orders
    concurrency: 4
    output: results
    code: |
      import time
      time.sleep(0.2 if context["index"] < 8 else 4)
      context["result"] = context["item"] * 2
  - {id: end, type: end}
edges:
  - {from: start, to: each}
  - {from: each, to: end}
`

// fiveYAML runs five sleeps of two seconds at once, one more than the
// sandbox's slots, and joins them.
const fiveYAML = `name: console-five
nodes:
  - {id: start, type: start}
  - {id: a, type: action, code: "import time\ntime.sleep(2)"}
  - {id: b, type: action, code: "import time\ntime.sleep(2)"}
  - {id: c, type: action, code: "import time\ntime.sleep(2)"}
  - {id: d, type: action, code: "import time\ntime.sleep(2)"}
  - {id: e, type: action, code: "import time\ntime.sleep(2)"}
  - {id: all, type: join}
  - {id: end, type: end}
edges:
  - {from: start, to: a}
  - {from: start, to: b}
  - {from: start, to: c}
  - {from: start, to: d}
  - {from: start, to: e}
  - {from: a, to: all}
  - {from: b, to: all}
  - {from: c, to: all}
  - {from: d, to: all}
  - {from: e, to: all}
  - {from: all, to: end}
`

// bigMapYAML doubles each of the numbers in orders, as fast as the
// sandbox runs them.
const bigMapYAML = `name: console-big-map
nodes:
  - {id: start, type: start}
  - {id: each, type: map, items: orders, concurrency: 8, output: results, code: "context['result'] = context['item'] * 2"}
  - {id: end, type: end}
edges:
  - {from: start, to: each}
  - {from: each, to: end}
`

// childYAML scores a customer; parentYAML runs it as a sub-workflow.
const childYAML = `name: console-child
nodes:
  - {id: start, type: start}
  - {id: score, type: action, code: "context['risk'] = len(context['customer'])"}
  - {id: end, type: end}
edges:
  - {from: start, to: score}
  - {from: score, to: end}
`

const parentYAML = `name: console-parent
nodes:
  - {id: start, type: start}
  - {id: check, type: workflow, workflow: console-child, input: {customer: buyer}, output: {risk: risk}}
  - {id: end, type: end}
edges:
  - {from: start, to: check}
  - {from: check, to: end}
`

// TestConsoleParallelInBrowser drives the execution page of executions
// that run several branches at once, in headless Chromium against nova dev,
// with screenshots at 1400 and 800 px in the parallel folder of the
// console's screenshots: while a fan-out runs, its graph shows a, b and c
// running at the same time, each in a branch of its own, and its timeline
// their bars side by side; once it ended, the bars overlap in time. Of five
// branches at once, the one that waited for one of the sandbox's four slots
// shows that wait apart from its run. A map over 40 items shows its items' progress on its
// node while its own status stays running, its items in the timeline as
// each[N]; ended, 40/40 items done, at most 30 item rows and the others
// told by their number. A map over 200 items is paged through, in its
// panel, its Nodes table and its timeline together, to every one of them.
// The console's live model keeps a map's items apart, a timeline of 1,000
// items draws 30 of them and pages, and a code visit's bar tells its wait
// from its run. A workflow node's visit links its child execution.
func TestConsoleParallelInBrowser(t *testing.T) {
	chromium := chromiumPath()
	if chromium == "" {
		t.Skip("SKIPPED: no chromium (Debian package chromium, installed by make deps): the console's parallel browser test did not run")
	}
	if testing.Short() {
		t.Skip("a browser and nova dev")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	t.Setenv("NOVA_CONSOLE_SCREENSHOTS", filepath.Join(consoleShots(), "parallel"))
	// Three branches, and four items, at once: the sandbox runs that many.
	t.Setenv("NOVA_SANDBOX_WORKERS", "4")
	m, _ := startDev(t, ctx, regexp.MustCompile(`HTTP API (http://\S+)\n\s+NOVA_API_KEY=(\S+)`), "--gateway-addr", "127.0.0.1:0")
	base, key := m[1], m[2]
	for _, wf := range []string{fanOutYAML, fiveYAML, mapYAML, bigMapYAML, childYAML, parentYAML} {
		api(t, base, key, "POST", "/v1/workflows", "application/yaml", wf, nil)
	}

	b := newBrowser(t, ctx, chromium)
	t.Logf("screenshots: %s", b.shots)
	b.do("sign in", chromedp.Navigate(base+"/#key="+key+"&to=/workflows"))
	b.until("the workflows page", `!!document.querySelector("main table")`)

	// run starts workflow from its page, as a person does: the execution's
	// page follows it from its first event.
	var runs []string
	run := func(workflow, context string) {
		t.Helper()
		b.do("open "+workflow+"'s start form", chromedp.Navigate(base+"/#/workflows/"+workflow+"?start=1"))
		b.until("the start form", `!!document.querySelector("form.start #start-context")`)
		b.do("start "+workflow,
			chromedp.SetValue(chromedp.CSS("form.start #start-context"), context),
			chromedp.Click(chromedp.CSS(`form.start button[type=submit]`)))
		b.until("the execution page", `location.hash.startsWith("#/executions/") && !!document.querySelector("svg.graph")`)
		runs = append(runs, eval[string](b, "execution id", `decodeURIComponent(location.hash.split("/")[2].split("?")[0])`))
	}

	// The fan-out, running: a, b and c at once in the graph, each visit
	// naming its branch, and their bars running side by side.
	abcRunning := `["a", "b", "c"].every(n => document.querySelector('svg.graph [data-node="' + n + '"]')?.dataset.status === "running" &&
		document.querySelector('svg.timeline .visit-bar.status-running[data-node="' + n + '"]') &&
		/^branch b\d+$/.test(document.querySelector('table.nodes tr[data-node="' + n + '"] .visit-notes .branch')?.textContent ?? ""))`
	b.shotWhile("01-fanout-running", "a, b and c running at once", abcRunning, func() { run("console-fanout", `{"order": "A-7"}`) })
	fanOut := runs[len(runs)-1]
	b.until("the fan-out succeeded", `document.querySelector(".execution-head h1 .badge")?.textContent.includes("succeeded") &&
		["a", "b", "c", "both", "end"].every(n => document.querySelector('svg.graph [data-node="' + n + '"]')?.dataset.status === "success") &&
		!document.querySelector('svg.timeline .visit-bar.status-running')`)
	// Every edge the branches took is drawn taken: the path interleaves them.
	if got := eval[string](b, "the edges taken", `[...document.querySelectorAll("svg.graph path.edge.taken")].map(e => e.dataset.from + ">" + e.dataset.to).sort().join(" ")`); got != "a>both b>both both>end c>both start>a start>b start>c" {
		t.Errorf("the graph's taken edges: %q; want every edge", got)
	}
	type bar struct {
		X0, X1, Y float64
		Branch    string
	}
	bars := eval[map[string]bar](b, "the bars of a, b and c", `Object.fromEntries(["a", "b", "c"].map(n => {
		const g = document.querySelector('svg.timeline .visit-bar[data-node="' + n + '"]');
		const r = g.querySelector("rect");
		const x = Number(r.getAttribute("x"));
		return [n, {X0: x, X1: x + Number(r.getAttribute("width")), Y: Number(r.getAttribute("y")), Branch: g.dataset.branch ?? ""}];
	}))`)
	branches := map[string]bool{}
	for _, p := range [][2]string{{"a", "b"}, {"b", "c"}, {"a", "c"}} {
		x, y := bars[p[0]], bars[p[1]]
		// Each ran two seconds of the same ~2 s: they overlap for most of it.
		if over := min(x.X1, y.X1) - max(x.X0, y.X0); over <= 0.5*min(x.X1-x.X0, y.X1-y.X0) {
			t.Errorf("the timeline's bars of %s %+v and %s %+v do not overlap in time", p[0], x, p[1], y)
		}
		if x.Y == y.Y {
			t.Errorf("the bars of %s and %s are on one row (y %v)", p[0], p[1], x.Y)
		}
	}
	for n, x := range bars {
		if !regexp.MustCompile(`^b\d+$`).MatchString(x.Branch) || branches[x.Branch] {
			t.Errorf("the bar of %s names branch %q; want a branch of its own", n, x.Branch)
		}
		branches[x.Branch] = true
	}
	b.shot("02-fanout-ended")

	// Five branches at once on four slots: the fifth waited some 2 s for
	// one, and its bar tells that wait from its run; each ran its 2 s.
	var five struct {
		ExecutionID string `json:"execution_id"`
		Status      string `json:"status"`
	}
	api(t, base, key, "POST", "/v1/executions?wait=60s", "application/json", `{"workflow": "console-five"}`, &five)
	if five.Status != "succeeded" {
		t.Fatalf("console-five %s: %s", five.ExecutionID, five.Status)
	}
	b.do("open the five branches", chromedp.Navigate(base+"/#/executions/"+five.ExecutionID))
	fiveBars := `["a", "b", "c", "d", "e"].map(n => document.querySelector('svg.timeline .visit-bar[data-node="' + n + '"]'))`
	b.until("the five bars, each with its run", fiveBars+`.every(g => g && g.dataset.ranMs)`)
	type span struct {
		Node        string
		Waited, Ran float64
		Pale        bool
	}
	spans := eval[[]span](b, "the waits and runs of the five", fiveBars+`.map(g => ({Node: g.dataset.node,
		Waited: Number(g.dataset.waitedMs), Ran: Number(g.dataset.ranMs), Pale: g.classList.contains("waited") && !!g.querySelector("rect.ran")}))`)
	least, most := spans[0], spans[0]
	for _, sp := range spans {
		if sp.Ran < 1900 || sp.Ran > 4000 {
			t.Errorf("%s ran %.0f ms by its bar; want its sleep of 2 s", sp.Node, sp.Ran)
		}
		if sp.Waited < least.Waited {
			least = sp
		}
		if sp.Waited > most.Waited {
			most = sp
		}
	}
	// However long every message took on this machine, one waited a run more.
	if most.Waited-least.Waited < 1500 || !most.Pale {
		t.Errorf("the bars %+v: want one to wait some 2 s longer than the others for a slot, drawn pale where it waited", spans)
	}
	if got := eval[string](b, "the timeline's key", `document.querySelector(".timeline-key")?.textContent ?? ""`); !strings.Contains(got, "waited for a free sandbox") {
		t.Errorf("the timeline's key reads %q", got)
	}
	b.shot("02-fanout-waited-for-a-slot")

	// The map, part-way: its node counts the items done and stays running
	// (its own visit has not ended, though items have); its items are rows
	// of the timeline, each[N].
	orders := make([]string, 40)
	for i := range orders {
		orders[i] = fmt.Sprint(i)
	}
	mapPartWay := `(() => {
		const g = document.querySelector('svg.graph [data-node="each"]');
		const m = /^(\d+)\/40 items done$/.exec(g?.querySelector(".progress-text")?.textContent ?? "");
		const items = [...document.querySelectorAll('svg.timeline .visit-bar.item[data-node="each"]')];
		return g?.dataset.status === "running" && !!m && Number(m[1]) >= 4 && Number(m[1]) < 40 &&
			items.length >= 4 && items.every(i => /^each\[\d+\]$/.test(i.querySelector(".label").textContent)) &&
			document.querySelector('table.nodes tr[data-node="each"]:not([data-item])')?.dataset.status === "running";
	})()`
	b.shotWhile("03-map-running", "the map part-way", mapPartWay, func() { run("console-map", `{"orders": [`+strings.Join(orders, ", ")+`]}`) })
	mapped := runs[len(runs)-1]

	// The map ended: 40 of 40 items done; 30 item rows, 10 more told.
	b.until("the map succeeded", `document.querySelector(".execution-head h1 .badge")?.textContent.includes("succeeded") &&
		document.querySelector('svg.graph [data-node="each"]')?.dataset.status === "success" &&
		document.querySelector('svg.graph [data-node="each"] .progress-text')?.textContent === "40/40 items done"`)
	ended := eval[map[string]any](b, "the ended map", `(() => {
		const items = [...document.querySelectorAll('svg.timeline .visit-bar.item[data-node="each"]')];
		return {
			bars: items.length,
			allDone: items.every(i => i.classList.contains("status-success")),
			first: items[0]?.querySelector(".label").textContent ?? "",
			more: document.querySelector("svg.timeline .more-items")?.textContent ?? "",
			rows: document.querySelectorAll('table.nodes tr.item-row[data-node="each"]').length,
			firstRow: document.querySelector('table.nodes tr.item-row[data-node="each"] td')?.textContent ?? "",
			moreRow: document.querySelector("table.nodes tr.more-items .items-where")?.textContent ?? "",
			bar: Number(document.querySelector('svg.graph [data-node="each"] rect.progress-done')?.getAttribute("width") ?? 0) /
				Number(document.querySelector('svg.graph [data-node="each"] rect.progress-track')?.getAttribute("width") ?? 1),
		};
	})()`)
	for name, want := range map[string]any{
		"bars": 30.0, "allDone": true, "first": "each[0]", "more": "… and 10 more items: show the next ↓", "rows": 30.0, "firstRow": "each[0]",
		"moreRow": "The first 30 of 40 items", "bar": 1.0,
	} {
		if ended[name] != want {
			t.Errorf("the ended map: %s = %v, want %v", name, ended[name], want)
		}
	}
	b.shot("04-map-ended")
	b.selectNode("open the map node", "each")
	b.until("its items", `document.querySelector(".visits .map-items .map-progress")?.textContent === " · 40 of 40 done · 4 at once" &&
		document.querySelectorAll(".visits .item-list details.item-visit").length === 30 &&
		document.querySelector(".visits .item-list .more-items")?.textContent === "… and 10 more items" &&
		document.querySelector(".visits .items-pager .items-where")?.textContent === "The first 30 of 40 items"`)
	b.shot("05-map-items")
	var view struct {
		Execution struct {
			FinalContext map[string]any `json:"final_context"`
		} `json:"execution"`
	}
	api(t, base, key, "GET", "/v1/executions/"+mapped, "", "", &view)
	if results, _ := view.Execution.FinalContext["results"].([]any); len(results) != 40 || results[39] != 78.0 {
		t.Errorf("the map's results %v; want the 40 items doubled", view.Execution.FinalContext["results"])
	}
	t.Logf("fan-out %s, map %s (runs %v)", fanOut, mapped, runs)

	// A map of 200 items, paged through to every one of them.
	bigItems := make([]string, 200)
	for i := range bigItems {
		bigItems[i] = fmt.Sprint(i)
	}
	var big struct {
		ExecutionID string `json:"execution_id"`
		Status      string `json:"status"`
	}
	api(t, base, key, "POST", "/v1/executions?wait=120s", "application/json", `{"workflow": "console-big-map", "context": {"orders": [`+strings.Join(bigItems, ", ")+`]}}`, &big)
	if big.Status != "succeeded" {
		t.Fatalf("console-big-map %s: %s", big.ExecutionID, big.Status)
	}
	b.do("open the map of 200", chromedp.Navigate(base+"/#/executions/"+big.ExecutionID+"?node=each"))
	b.until("its first items", `document.querySelector('svg.graph [data-node="each"] .progress-text')?.textContent === "200/200 items done" &&
		document.querySelectorAll(".visits .item-list details.item-visit").length === 30 &&
		document.querySelector(".visits .items-pager .items-where")?.textContent === "The first 30 of 200 items"`)
	// shown lists the items each list shows: the panel's, the Nodes
	// table's and the timeline's.
	const shown = `(() => {
		const of = sel => [...document.querySelectorAll(sel)].map(e => Number(e.dataset.item)).join();
		return {panel: of(".visits .item-list details.item-visit"), table: of('table.nodes tr.item-row[data-node="each"]'),
			timeline: of('svg.timeline .visit-bar.item[data-node="each"]'), from: document.querySelector(".visits .items-pager")?.dataset.from ?? ""};
	})()`
	type lists struct{ Panel, Table, Timeline, From string }
	seen := map[int]bool{}
	for page := 0; ; page++ {
		if page > 10 {
			t.Fatal("Later → still enabled after 10 pages of 30 of 200 items")
		}
		l := eval[lists](b, "the items shown", shown)
		if l.Panel == "" || l.Table != l.Panel || l.Timeline == "" {
			t.Fatalf("page %d: the panel shows items %s, the Nodes table %s, the timeline %s; want the same page in each", page, l.Panel, l.Table, l.Timeline)
		}
		for _, f := range strings.Split(l.Panel, ",") {
			var n int
			fmt.Sscan(f, &n)
			seen[n] = true
		}
		if eval[bool](b, "Later disabled", `document.querySelector(".visits .items-pager button.items-later").disabled`) {
			break
		}
		b.click("later", ".visits .items-pager button.items-later")
		b.until("the next page, Later keeping the focus", fmt.Sprintf(`document.querySelector(".visits .items-pager")?.dataset.from !== %q &&
			(document.activeElement?.classList.contains("items-later") || document.querySelector(".visits .items-pager button.items-later")?.disabled)`, l.From))
	}
	if len(seen) != 200 {
		t.Errorf("paging Later → reached %d of the 200 items", len(seen))
	}
	// An item by its number: its page in the three lists at once.
	b.do("go to item 150", chromedp.SetValue(chromedp.CSS(".visits .items-pager input.items-goto"), "150"))
	b.click("go", ".visits .items-pager button.items-go")
	b.until("items 150 to 179 in each list", `(() => {
		const want = Array.from({length: 30}, (_, i) => 150 + i).join();
		const l = `+shown+`;
		return l.panel === want && l.table === want && l.timeline.split(",").map(Number).sort((a, b) => a - b).join() === want &&
			document.querySelector(".visits .items-pager .items-where")?.textContent === "each[150] to each[179] of 200 items" &&
			document.querySelector("svg.timeline .more-items.earlier")?.textContent === "… 150 earlier items: show them ↑";
	})()`)
	b.shot("06-map-items-paged")
	b.click("the first and open ones again", ".visits .items-pager button.items-reset")
	b.until("the first page again", `document.querySelector(".visits .items-pager .items-where")?.textContent === "The first 30 of 200 items"`)

	// A sub-workflow: the workflow node's visit links its child execution,
	// in the Nodes table and in its visits.
	var parent struct {
		ExecutionID string `json:"execution_id"`
		Status      string `json:"status"`
	}
	api(t, base, key, "POST", "/v1/executions?wait=60s", "application/json", `{"workflow": "console-parent", "context": {"buyer": "ada"}}`, &parent)
	if parent.Status != "succeeded" {
		t.Fatalf("console-parent %s: %s", parent.ExecutionID, parent.Status)
	}
	child := parent.ExecutionID + "_check_1"
	b.do("open the parent execution", chromedp.Navigate(base+"/#/executions/"+parent.ExecutionID+"?node=check"))
	b.until("its child linked", fmt.Sprintf(`document.querySelector('table.nodes tr[data-node="check"] .visit-notes .children a')?.getAttribute("href") === "#/executions/%[1]s" &&
		document.querySelector('.visits .visit-place .children a')?.getAttribute("href") === "#/executions/%[1]s"`, child))
	b.follow("follow the link to the child's page", `.visits .visit-place .children a`, fmt.Sprintf(`location.hash === "#/executions/%s" && document.querySelector(".execution-head h1 .badge")?.textContent.includes("succeeded") &&
		document.querySelector('svg.graph [data-node="score"]')?.dataset.status === "success"`, child))

	// The live model and the timeline, in the browser that runs them: a
	// map's items are visits of their own, apart from the map's; the map's
	// status is its own visit's; 1,000 items draw 30 rows.
	checks := eval[map[string]string](b, "the console's modules", `(async () => {
		const live = await import("/console/dist/live.js");
		const graph = await import("/console/dist/graph.js");
		const out = {};
		const view = {execution: {execution_id: "e", workflow_name: "w", status: "running", initial_context: {orders: [1, 2, 3, 4, 5]}}, nodes: []};
		const ev = (event, data) => live.applyEvent(view, {id: "", event, data: JSON.stringify(data)});
		const node = {id: "each", type: "NODE_TYPE_MAP", items: "orders"};
		ev("node.started", {node_id: "each", visit: 1, sequence: 2, branch: "", started_at: "2025-03-01T12:00:00Z"});
		ev("node.started", {node_id: "each", visit: 1, item: 0, sequence: 3, branch: "b1", started_at: "2025-03-01T12:00:01Z"});
		ev("node.started", {node_id: "each", visit: 1, item: 1, sequence: 4, branch: "b2", started_at: "2025-03-01T12:00:01Z"});
		ev("node.completed", {node_id: "each", visit: 1, item: 0, branch: "b1", status: "success", output_result: {result: 2}});
		ev("node.completed", {node_id: "each", visit: 1, item: 1, branch: "b2", status: "failed", error_message: "boom"});
		ev("step.completed", {node_id: "each", visit: 1, item: 1, step_number: 1, step_name: "code_execution", agent_name: "sandbox", status: "failed"});
		const key = n => n.node_id + "/" + n.visit + "/" + (n.item ?? "-") + ":" + n.status + (n.branch ? "@" + n.branch : "") + (n.steps ? "+" + n.steps.length : "");
		out.visits = view.nodes.map(key).join(" ");
		out.progress = live.progressText(live.mapProgress(view, view.nodes[0], node));
		out.context = JSON.stringify(live.liveContext(view));
		ev("node.completed", {node_id: "each", visit: 1, status: "success", output_result: {results: [2, 4, 6, 8, 10]}});
		out.ended = view.nodes.map(key).join(" ");
		const many = [];
		for (let i = 0; i < 1000; i++) many.push({node_id: "big", visit: 1, item: i, status: i === 999 ? "running" : "success",
			started_at: new Date(Date.UTC(2025, 2, 1, 12, 0, 0, i * 10)).toISOString(), execution_time: 5});
		many.unshift({node_id: "big", visit: 1, status: "running", started_at: "2025-03-01T12:00:00Z", execution_time: 0});
		const svg = graph.drawTimeline(many, () => {}, 1000, Date.UTC(2025, 2, 1, 12, 0, 11));
		const items = [...svg.querySelectorAll(".visit-bar.item")];
		out.timeline = [svg.querySelectorAll(".visit-bar").length, items.length, items[0].querySelector(".label").textContent,
			items[items.length - 1].querySelector(".label").textContent, svg.querySelector(".more-items").textContent].join(" | ");
		// Paged to item 500: 30 from there, the 500 before and 470 after told.
		const itemsMod = await import("/console/dist/items.js");
		const pages = new itemsMod.ItemPages(() => {});
		pages.page(itemsMod.itemsKey("big", 1), 500);
		const paged = graph.drawTimeline(many, () => {}, 1000, Date.UTC(2025, 2, 1, 12, 0, 11), pages);
		const pagedItems = [...paged.querySelectorAll(".visit-bar.item")];
		out.paged = [pagedItems.length, pagedItems[0].querySelector(".label").textContent, pagedItems[pagedItems.length - 1].querySelector(".label").textContent,
			[...paged.querySelectorAll(".more-items")].map(m => m.textContent).join(" / ")].join(" | ");
		// A code visit of 4 s whose sandbox run took its last 1.5 s: it
		// waited 2.5 s, drawn pale with a solid part; one without sandbox
		// steps (a wait node) is one bar.
		const code = {node_id: "c", visit: 1, status: "success", started_at: "2025-03-01T12:00:00Z", completed_at: "2025-03-01T12:00:04Z", execution_time: 4000,
			steps: [{agent_name: "sandbox", execution_time_ms: 1500, timestamp: "2025-03-01T12:00:04Z"}]};
		const hold = {node_id: "h", visit: 1, status: "success", started_at: "2025-03-01T12:00:00Z", completed_at: "2025-03-01T12:00:04Z", execution_time: 4000};
		const tl = graph.drawTimeline([code, hold], () => {}, 1000);
		const c = tl.querySelector('.visit-bar[data-node="c"]'), hb = tl.querySelector('.visit-bar[data-node="h"]');
		const whole = c.querySelector("rect.span"), ran = c.querySelector("rect.ran");
		const w = r => Number(r.getAttribute("width")), x = r => Number(r.getAttribute("x"));
		out.waited = [c.dataset.waitedMs, c.dataset.ranMs, c.classList.contains("waited"), (w(ran) / w(whole)).toFixed(3), (x(ran) + w(ran) - x(whole) - w(whole)).toFixed(1),
			c.querySelector(".duration").textContent, hb.classList.contains("waited"), hb.querySelectorAll("rect").length].join(" | ");
		return out;
	})()`)
	for name, want := range map[string]string{
		"visits":   "each/1/-:running each/1/0:success@b1 each/1/1:failed@b2+1",
		"progress": "1/5 items done · 1 failed",
		"context":  `{"context":{"orders":[1,2,3,4,5]},"after":"start"}`,
		"ended":    "each/1/-:success each/1/0:success@b1 each/1/1:failed@b2+1",
		"timeline": "31 | 30 | big[0] | big[999] | … and 970 more items: show the next ↓",
		"paged":    "30 | big[500] | big[529] | … 500 earlier items: show them ↑ / … and 470 more items: show the next ↓",
		"waited":   "2500 | 1500 | true | 0.375 | 0.0 | ✓ success · 4.00 s (ran 1.50 s) | false | 1",
	} {
		if checks[name] != want {
			t.Errorf("console module check %s: got %q, want %q", name, checks[name], want)
		}
	}

	// The only failed answers may be the 404s of an execution this page
	// started, read before the engine stored it (the page says "Starting
	// the execution…" and loads it on its first event).
	for _, f := range b.failedAnswers() {
		started := false
		for _, id := range runs {
			started = started || strings.HasPrefix(f, "404 ") && strings.HasSuffix(f, "/v1/executions/"+id)
		}
		if !started {
			t.Errorf("the page had an answer %s", f)
		}
	}
	select {
	case msg := <-b.dialogs:
		t.Errorf("the page opened a JavaScript dialog: %q", msg)
	default:
	}
}

// shotWhile writes screenshots NAME-1400.png and NAME-800.png of the page
// while cond holds (what is drawn of a running execution), the window that
// wide, checking that the page is no wider. run starts what the page shows
// again, when it is over before a screenshot shows it (a fan-out of a
// second is over in about one); it runs at least once.
func (b *browser) shotWhile(name, what, cond string, run func()) {
	b.t.Helper()
	started := false
	for _, width := range []int64{wideWidth, narrowWidth} {
		b.do(fmt.Sprintf("a window %d px wide", width), chromedp.EmulateViewport(width, shotHeight))
		for try := 1; ; try++ {
			if try > 4 {
				b.t.Errorf("%s at %d px: %s was over before each of %d screenshots", name, width, what, try-1)
				break
			}
			if !started || b.poll(200*time.Millisecond, cond) != nil {
				run()
				started = true
				b.until(what, cond)
			}
			// The page draws itself again for the window's width.
			if err := b.poll(5*time.Second, `(() => {
				const w = document.querySelector(".timeline-wrap"), s = w?.querySelector("svg.timeline");
				return !s || Math.abs(s.width.baseVal.value - Math.max(420, w.clientWidth)) < 2;
			})()`); err != nil {
				b.t.Errorf("%s: the page did not draw itself for %d px: %v", name, width, err)
			}
			if wide := eval[int](b, "page width", `document.documentElement.scrollWidth`); wide > int(width) {
				b.t.Errorf("%s: the page is %d px wide in a window of %d px", name, wide, width)
			}
			// The page draws itself again for a full-page screenshot's
			// size, 150 ms after it: cond may be false for a moment, so it
			// is given 2 s, which the runs it is used with outlast.
			if b.poll(2*time.Second, cond) != nil {
				continue
			}
			b.screenshot(fmt.Sprintf("%s-%d", name, width), chromedp.FullScreenshot(100))
			// Still so after the screenshot: it shows what cond says.
			if b.poll(2*time.Second, cond) == nil {
				break
			}
		}
	}
	b.do("a window as wide as before", chromedp.EmulateViewport(wideWidth, shotHeight))
}
