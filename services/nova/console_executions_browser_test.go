package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
)

// Workflows of the executions list's browser test: one that fails, one
// whose map collects the errors of its odd items and starts a child, the
// child, and one that waits for a signal.
const (
	listFailsYAML = `name: list-fails
nodes:
  - {id: start, type: start}
  - {id: total, type: action, code: "raise ValueError('no invoice total')"}
  - {id: done, type: end}
edges:
  - {from: start, to: total}
  - {from: total, to: done}
`
	listChildYAML = `name: list-notify
nodes:
  - {id: start, type: start}
  - {id: send, type: action, code: "context['sent'] = True"}
  - {id: done, type: end}
edges:
  - {from: start, to: send}
  - {from: send, to: done}
`
	listOrdersYAML = `name: list-orders
nodes:
  - {id: start, type: start}
  - {id: load, type: action, code: "context['orders'] = [1, 2, 3, 4, 5, 6]"}
  - {id: each, type: map, items: orders, on_item_failure: collect, code: "if context['item'] % 2:\n    raise ValueError('odd order')\ncontext['result'] = context['item']"}
  - {id: notify, type: workflow, workflow: list-notify}
  - {id: done, type: end}
edges:
  - {from: start, to: load}
  - {from: load, to: each}
  - {from: each, to: notify}
  - {from: notify, to: done}
`
	listHoldYAML = `name: list-hold
nodes:
  - {id: start, type: start}
  - {id: approve, type: wait, signal: approve, timeout: 1h}
  - {id: done, type: end}
edges:
  - {from: start, to: approve}
  - {from: approve, to: done}
`
)

// TestConsoleExecutionsListInBrowser drives the executions list in headless
// Chromium against nova dev, with screenshots at 1400 and 800 px (in the
// executions folder of the console's screenshots): the list says how many
// executions its filters select, what they cost, and the page; three runs
// that arrive while it is open push rows off the first page, and Older →
// shows those rows (none skipped); each row shows its whole id with a copy
// button, a child links its parent and the parent its child on the page, and
// a map that collected failed items says how many; the execution pages link
// child and parent both ways, and the parent's page lists its children
// wherever the list has them; a short id in the URL opens the one execution
// it begins, or lists those it begins when several; two ticked running
// executions are cancelled after a confirmation naming two; every failed
// execution the filters select, beyond the page, is rerun at once.
func TestConsoleExecutionsListInBrowser(t *testing.T) {
	chromium := chromiumPath()
	if chromium == "" {
		t.Skip("SKIPPED: no chromium (Debian package chromium, installed by make deps): the executions list's browser test did not run")
	}
	if testing.Short() {
		t.Skip("a browser and nova dev")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	t.Setenv("NOVA_CONSOLE_SCREENSHOTS", filepath.Join(consoleShots(), "executions"))
	m, _ := startDev(t, ctx, regexp.MustCompile(`HTTP API (http://\S+)\n\s+NOVA_API_KEY=(\S+)`), "--gateway-addr", "127.0.0.1:0")
	base, key := m[1], m[2]
	for _, y := range []string{listFailsYAML, listChildYAML, listOrdersYAML, listHoldYAML} {
		api(t, base, key, "POST", "/v1/workflows", "application/yaml", y, nil)
	}
	var parent struct {
		ExecutionID string `json:"execution_id"`
		Status      string `json:"status"`
	}
	api(t, base, key, "POST", "/v1/executions?wait=60s", "application/json", `{"workflow": "list-orders"}`, &parent)
	if parent.Status != "succeeded" {
		t.Fatalf("list-orders ended %s; want succeeded with its odd items' errors collected", parent.Status)
	}
	startMany(t, base, key, 57, `{"workflow": "list-fails"}`)
	type listed struct {
		Executions []struct {
			ExecutionID       string `json:"execution_id"`
			ParentExecutionID string `json:"parent_execution_id"`
			Status            string `json:"status"`
		} `json:"executions"`
	}
	newestFirst := func(q string) []string {
		t.Helper()
		var l listed
		api(t, base, key, "GET", "/v1/executions?limit=500"+q, "", "", &l)
		var ids []string
		for _, e := range l.Executions {
			ids = append(ids, e.ExecutionID)
		}
		return ids
	}
	// The audit store records the runs' ends a moment after they ended.
	var child string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var l listed
		api(t, base, key, "GET", "/v1/executions?workflow=list-notify", "", "", &l)
		all := newestFirst("&status=failed")
		if len(l.Executions) == 1 && len(all) == 57 {
			child = l.Executions[0].ExecutionID
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store lists %d failed runs and %d children 30 s after they ended", len(all), len(l.Executions))
		}
	}

	b := newBrowser(t, ctx, chromium)
	t.Logf("screenshots: %s", b.shots)
	// The copy button writes the clipboard, which the test reads back.
	for _, name := range []string{"clipboard-read", "clipboard-write"} {
		if _, err := chromedp.Call(b.ctx, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
			Permission: &cdpbrowser.PermissionDescriptor{Name: name}, Setting: cdpbrowser.PermissionSettingGranted, Origin: base,
		}); err != nil {
			t.Fatal(err)
		}
	}

	// The list: how many, their cost, the page.
	b.do("open the executions", chromedp.Navigate(base+"/#key="+key+"&to=/executions"))
	b.until("a full first page and the totals", `document.querySelectorAll("table.executions tbody tr").length === 50 &&
		document.querySelector("p.summary .total")?.textContent === "59 executions" &&
		document.querySelector("p.summary .page-no")?.textContent === "page 1 of 2" &&
		document.querySelector("p.summary .total-cost")?.textContent === "model cost $0 · 0 model calls"`)
	b.shot("41-executions-totals")

	// Three runs arrive while the list is open: they push three rows off
	// the first page, and Older → shows those rows.
	before := newestFirst("")
	startMany(t, base, key, 3, `{"workflow": "list-fails"}`)
	// The store lists them a moment after they start.
	var now []string
	if !eventually(30*time.Second, func() bool { now = newestFirst(""); return len(now) == len(before)+3 }) {
		t.Fatalf("the store does not list the three new runs 30 s after they started")
	}
	arrived := now[:3]
	b.until("the three new runs on the open page", fmt.Sprintf(`%s.every(id => !!document.querySelector('tr[data-execution="' + id + '"]')) &&
		document.querySelectorAll("table.executions tbody tr").length === 50`, jsStrings(arrived)))
	first := eval[[]string](b, "the first page", `[...document.querySelectorAll("table.executions tbody tr")].map(r => r.dataset.execution)`)
	b.click("older", `nav.pager button.older`)
	b.until("the second page", `location.hash.includes("cursor=") && location.hash.includes("page=2") &&
		document.querySelector("nav.pager .page-no")?.textContent === "Page 2" && document.querySelectorAll("table.executions tbody tr").length > 0`)
	second := eval[[]string](b, "the second page", `[...document.querySelectorAll("table.executions tbody tr")].map(r => r.dataset.execution)`)
	if want := append(slices.Clone(arrived), before...); !slices.Equal(append(first, second...), want) {
		t.Errorf("the two pages list\n%v\nwant every execution, newest first, none skipped:\n%v", append(first, second...), want)
	}
	// The totals may be those counted a moment before the three came.
	b.until("the second page's totals", `/^(59|60|61|62) executions$/.test(document.querySelector("p.summary .total")?.textContent ?? "") &&
		document.querySelector("p.summary .page-no")?.textContent === "page 2 of 2"`)
	b.shot("42-older-after-live-rows")

	// Whole ids, a copy button, parent and child, the failed items.
	b.do("open the list-orders run and its child", chromedp.Navigate(base+"/#/executions?id="+parent.ExecutionID))
	parentRow, childRow := fmt.Sprintf(`tr[data-execution=%q]`, parent.ExecutionID), fmt.Sprintf(`tr[data-execution=%q]`, child)
	b.until("both rows, linked", fmt.Sprintf(`document.querySelectorAll("table.executions tbody tr").length === 2 &&
		document.querySelector(%[1]q)?.querySelector("a.execution-id")?.textContent === %[3]q &&
		document.querySelector(%[2]q)?.querySelector("a.execution-id")?.textContent === %[4]q &&
		document.querySelector(%[2]q)?.querySelector(".parent-link a")?.dataset.parent === %[3]q &&
		document.querySelector(%[2]q)?.querySelector(".parent-link")?.textContent.endsWith("· node notify") &&
		document.querySelector(%[1]q)?.querySelector(".children-link")?.textContent.startsWith("↳ 1 child execution") &&
		document.querySelector(%[1]q)?.querySelector("td.status")?.textContent === "✓ succeeded, 3 items failed" &&
		!document.querySelector(%[2]q)?.querySelector(".items-failed")`, parentRow, childRow, parent.ExecutionID, child))
	b.click("copy the parent's id", parentRow+` button.copy`)
	b.until("the id copied", fmt.Sprintf(`document.querySelector(%q)?.dataset.copied === "true"`, parentRow+` button.copy`))
	if got := eval[string](b, "the clipboard", `navigator.clipboard.readText()`); got != parent.ExecutionID {
		t.Errorf("the clipboard holds %q, want the parent's id %q", got, parent.ExecutionID)
	}
	b.shot("43-ids-parent-child-items-failed")

	// The execution pages link child and parent both ways.
	b.click("open the child", childRow+` a.execution-id`)
	b.until("the child's page, linking its parent", fmt.Sprintf(`location.hash === "#/executions/" + encodeURIComponent(%[1]q) &&
		document.querySelector(".execution-head p.lineage .parent-link a")?.dataset.parent === %[2]q &&
		document.querySelector(".execution-head p.lineage")?.textContent.includes("started by its node notify")`, child, parent.ExecutionID))
	b.shot("44-child-links-parent")
	b.click("open the parent", `.execution-head p.lineage .parent-link a`)
	b.until("the parent's page, linking its child", fmt.Sprintf(`location.hash === "#/executions/" + encodeURIComponent(%[1]q) &&
		document.querySelector(".execution-head p.lineage a.child-link")?.getAttribute("href") === "#/executions/" + encodeURIComponent(%[2]q)`, parent.ExecutionID, child))
	b.shot("45-parent-links-children")
	// Its children listed by parent: the child, which the list without a
	// filter has on its second page, alone.
	b.click("list its children", `.execution-head p.lineage .children-links a:not(.child-link)`)
	b.until("the list of its children", fmt.Sprintf(`location.hash === "#/executions?parent=" + encodeURIComponent(%[1]q) &&
		document.querySelector("p.children-of a code")?.textContent === %[1]q &&
		[...document.querySelectorAll("table.executions tbody tr")].map(r => r.dataset.execution).join() === %[2]q &&
		document.querySelector("p.summary .total")?.textContent === "1 execution"`, parent.ExecutionID, child))
	b.shot("45-parent-links-children-listed")

	// A short id in the URL: the one execution it begins opens; one that
	// begins two lists them.
	b.do("paste the parent's first characters", chromedp.Navigate(base+"/#/executions/"+parent.ExecutionID[:13]))
	b.until("the two it begins", fmt.Sprintf(`document.querySelector(".not-found.ambiguous h1")?.textContent === "2 executions start with " + %[1]q &&
		[...document.querySelectorAll(".ambiguous ul.candidates a")].map(a => a.textContent).sort().join() === [%[2]q, %[3]q].sort().join()`,
		parent.ExecutionID[:13], parent.ExecutionID, child))
	b.shot("46-short-id-ambiguous")
	target := before[len(before)/2]
	b.do("paste a run's first characters", chromedp.Navigate(base+"/#/executions/"+target[:13]))
	b.until("the run's page", fmt.Sprintf(`location.hash === "#/executions/" + encodeURIComponent(%q) && !!document.querySelector(".execution-head h1 .badge")`, target))
	b.shot("47-short-id-resolved")

	// Batch cancel: two ticked running executions, confirmed by number.
	var held []string
	for range 3 {
		var a struct {
			ExecutionID string `json:"execution_id"`
		}
		api(t, base, key, "POST", "/v1/executions", "application/json", `{"workflow": "list-hold"}`, &a)
		held = append(held, a.ExecutionID)
	}
	for deadline := time.Now().Add(30 * time.Second); len(newestFirst("&workflow=list-hold&status=running")) < 3; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the store does not list the three list-hold runs as running 30 s after their start")
		}
	}
	b.do("list the waiting runs", chromedp.Navigate(base+"/#/executions?workflow=list-hold"))
	b.until("the three running", fmt.Sprintf(`%s.every(id => document.querySelector('tr[data-execution="' + id + '"]')?.dataset.status === "running")`, jsStrings(held)))
	// The Workflow filter offers the workflows by name, the one chosen in
	// its place among them.
	b.until("the workflows in order", `[...document.querySelectorAll("#filter-workflow option")].map(o => o.textContent).join() ===
		"all workflows,list-fails,list-hold,list-notify,list-orders,refinements" && document.querySelector("#filter-workflow").value === "list-hold"`)
	for _, id := range held[:2] {
		b.click("tick "+id, fmt.Sprintf(`tr[data-execution=%q] input.select`, id))
	}
	b.until("two selected", `!document.querySelector(".batch-bar").hidden && document.querySelector(".batch-bar .selected-count")?.textContent === "2 executions selected" &&
		document.querySelectorAll("table.executions tr.selected").length === 2`)
	b.click("cancel them", `.batch-bar button.batch-cancel`)
	b.until("the confirmation naming two", `document.querySelector("dialog.batch-modal[open] h2")?.textContent === "Cancel 2 executions?"`)
	b.do("give a reason", chromedp.SetValue(chromedp.CSS(`#batch-reason`), "wrong input file"))
	b.view("48-batch-cancel-confirm")
	b.click("confirm", `dialog.batch-modal form.batch-form button[type=submit]`)
	b.until("two cancelled, the third running", fmt.Sprintf(`document.querySelector(".batch-result .batch-summary")?.textContent === "Cancel of 2 executions: 2 cancelled or cancelling." &&
		document.querySelector(".batch-bar").hidden &&
		document.querySelector('tr[data-execution=%q]')?.dataset.status === "cancelled" && document.querySelector('tr[data-execution=%q]')?.dataset.status === "cancelled" &&
		document.querySelector('tr[data-execution=%q]')?.dataset.status === "running"`, held[0], held[1], held[2]))
	var cancelled struct {
		Execution struct {
			CancelledBy  string `json:"cancelled_by"`
			CancelReason string `json:"cancel_reason"`
		} `json:"execution"`
	}
	// The list row can show the cancel a moment before the read has its
	// reason (the store records the end in two writes).
	if !eventually(30*time.Second, func() bool {
		api(t, base, key, "GET", "/v1/executions/"+held[0], "", "", &cancelled)
		return cancelled.Execution.CancelReason == "wrong input file"
	}) {
		t.Errorf("the cancelled execution: %+v; want the reason given", cancelled.Execution)
	}
	b.shot("49-batch-cancelled")

	// Batch rerun: every failed run the filters select, beyond the page.
	b.do("list the failed runs", chromedp.Navigate(base+"/#/executions?workflow=list-fails&status=failed"))
	b.until("a full page of 60", `document.querySelectorAll("table.executions tbody tr").length === 50 &&
		document.querySelector("p.summary .total")?.textContent === "60 executions"`)
	b.click("tick the page", `table.executions th input.select-page`)
	b.until("the page selected, and the offer of all 60", `document.querySelectorAll("table.executions tr.selected").length === 50 &&
		document.querySelector(".batch-bar .selected-count")?.textContent === "50 executions selected" &&
		!document.querySelector(".batch-bar button.select-all").hidden &&
		document.querySelector(".batch-bar button.select-all").textContent === "Select all 60 executions that match these filters"`)
	b.click("select all 60", `.batch-bar button.select-all`)
	b.until("all 60 selected", `document.querySelector(".batch-bar .selected-count")?.textContent === "All 60 executions that match these filters selected" &&
		document.querySelector(".batch-bar button.batch-rerun")?.textContent === "Rerun 60…"`)
	b.shot("50-batch-all-matching")
	b.click("rerun them", `.batch-bar button.batch-rerun`)
	b.until("the confirmation naming 60", `document.querySelector("dialog.batch-modal[open] h2")?.textContent === "Rerun all 60 executions that match these filters?"`)
	b.view("51-batch-rerun-confirm")
	b.click("confirm", `dialog.batch-modal form.batch-form button[type=submit]`)
	b.until("60 reruns started", `document.querySelector(".batch-result .batch-summary")?.textContent === "Rerun of 60 executions: 60 reruns started." &&
		document.querySelectorAll(".batch-result ul.batch-reruns li").length === 10`)
	b.shot("52-batch-reruns-started")
	for deadline := time.Now().Add(2 * time.Minute); len(newestFirst("&workflow=list-fails&status=failed")) < 120; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d failed list-fails runs 2 min after the batch rerun; want 120", len(newestFirst("&workflow=list-fails&status=failed")))
		}
	}
	// The short ids were unknown as whole ids (404) before they resolved.
	if failed := slices.DeleteFunc(b.failedAnswers(), func(a string) bool {
		return strings.HasPrefix(a, "404 ") && strings.Contains(a, "/v1/executions/"+parent.ExecutionID[:13]) || strings.Contains(a, "/v1/executions/"+target[:13])
	}); len(failed) > 0 {
		t.Errorf("answers of 400 and more: %v", failed)
	}
	select {
	case msg := <-b.dialogs:
		t.Errorf("the page opened a dialog %q", msg)
	default:
	}
}

// jsStrings is a JavaScript array of strings.
func jsStrings(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = jsString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
