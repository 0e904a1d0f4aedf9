package main

import (
	"context"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// constructsYAML has a boundary timer that takes the line off a slow node,
// a node under a lock and a second boundary (a signal) on a sleep.
const constructsYAML = `name: console-constructs
nodes:
  - {id: start, type: start}
  - id: fetch
    type: action
    lock: supplier-api
    code: "import time\ntime.sleep(10)\ncontext['fresh'] = True"
    on: [{after: 1s, goto: use_cached}]
  - {id: use_cached, type: action, code: "context['cached'] = True"}
  - id: cool_down
    type: sleep
    duration: 500ms
    on: [{signal: stop, goto: stopped}, {after: 5m, goto: stopped, interrupt: false}]
  - {id: stopped, type: action, code: "context['stopped'] = True"}
  - {id: end, type: end, terminate: true}
edges:
  - {from: start, to: fetch}
  - {from: fetch, to: cool_down}
  - {from: use_cached, to: cool_down}
  - {from: cool_down, to: end}
  - {from: stopped, to: end}
`

// keptYAML prepares for 20 s before it waits for its signal.
const keptYAML = `name: console-kept
nodes:
  - {id: start, type: start}
  - {id: prepare, type: sleep, duration: 20s}
  - {id: approve, type: wait, signal: approve}
  - {id: end, type: end}
edges: [{from: start, to: prepare}, {from: prepare, to: approve}, {from: approve, to: end}]
`

// TestConsoleConstructsInBrowser draws a workflow's boundary events and
// locks, and an execution whose slow node a boundary timer cancelled, in
// headless Chromium against nova dev, with screenshots at 1400 and 800 px
// in the constructs folder of the console's screenshots: each boundary is a
// dashed edge to its goto labelled with what it waits for, its node carries
// a circle, a node under a lock names it, and the cancelled visit shows as
// cancelled with why.
func TestConsoleConstructsInBrowser(t *testing.T) {
	chromium := chromiumPath()
	if chromium == "" {
		t.Skip("SKIPPED: no chromium (Debian package chromium, installed by make deps): the console's constructs browser test did not run")
	}
	if testing.Short() {
		t.Skip("a browser and nova dev")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	t.Setenv("NOVA_CONSOLE_SCREENSHOTS", filepath.Join(consoleShots(), "constructs"))
	m, _ := startDev(t, ctx, regexp.MustCompile(`HTTP API (http://\S+)\n\s+NOVA_API_KEY=(\S+)`), "--gateway-addr", "127.0.0.1:0")
	base, key := m[1], m[2]
	api(t, base, key, "POST", "/v1/workflows", "application/yaml", constructsYAML, nil)
	api(t, base, key, "POST", "/v1/workflows", "application/yaml", keptYAML, nil)

	b := newBrowser(t, ctx, chromium)
	t.Logf("screenshots: %s", b.shots)
	b.do("sign in", chromedp.Navigate(base+"/#key="+key+"&to=/workflows/console-constructs"))
	b.until("the workflow's graph", `!!document.querySelector("svg.graph g.node[data-node=fetch]")`)
	b.until("the boundary edges", `document.querySelectorAll("svg.graph path.edge.boundary").length === 3`)
	b.until("the boundary labels", `[...document.querySelectorAll("svg.graph text.edge-label.boundary")].map(t => t.textContent).join("|") === "after 1s|signal stop|after 5m (beside)"`)
	b.until("the boundary marks", `document.querySelectorAll("svg.graph .boundary-mark").length === 2`)
	b.until("the lock", `document.querySelector("svg.graph g.node[data-node=fetch] .node-lock")?.textContent === "lock supplier-api"`)
	b.shot("workflow")

	b.do("open the start form", chromedp.Navigate(base+"/#/workflows/console-constructs?start=1"))
	b.until("the start form", `!!document.querySelector("form.start #start-context")`)
	b.do("start it", chromedp.SetValue(chromedp.CSS("form.start #start-context"), "{}"),
		chromedp.Click(chromedp.CSS(`form.start button[type=submit]`)))
	b.until("the execution page", `location.hash.startsWith("#/executions/") && !!document.querySelector("svg.graph")`)
	b.until("the execution ended", `document.querySelector("svg.graph g.node[data-node=end]")?.dataset.status === "success"`)
	b.until("fetch cancelled", `document.querySelector("svg.graph g.node[data-node=fetch]")?.dataset.status === "cancelled"`)
	b.until("the boundary taken", `!!document.querySelector("svg.graph path.edge.boundary.taken[data-from=fetch][data-to=use_cached]")`)
	b.until("why it was cancelled", `document.body.innerText.includes('boundary of node "fetch"')`)
	b.shot("execution")

	// A signal sent while the execution prepares is kept, and its page
	// says so.
	var started struct {
		ExecutionID string `json:"execution_id"`
	}
	api(t, base, key, "POST", "/v1/executions", "application/json", `{"workflow": "console-kept", "context": {}}`, &started)
	// The start is answered before the engine stores the execution.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if status, _ := call(t, base, key, "GET", "/v1/executions/"+started.ExecutionID, "", ""); status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution %s was not stored", started.ExecutionID)
		}
	}
	var answer struct{ Status string }
	api(t, base, key, "POST", "/v1/executions/"+started.ExecutionID+"/signals/approve", "application/json", `{"ok": true}`, &answer)
	if answer.Status != "kept" {
		t.Errorf("the signal's answer says %q, want kept", answer.Status)
	}
	b.do("open the execution", chromedp.Navigate(base+"/#/executions/"+started.ExecutionID))
	b.until("the kept signal", `document.querySelector(".kept-signals")?.textContent.includes("approve")`)
	b.shot("kept-signal")
}
