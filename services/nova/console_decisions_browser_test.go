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

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// refundApprovalYAML waits 72 h for a decision on a refund: an amount, the
// customer's e-mail and a note checked by the form, an address whose
// members only the gateway checks; approved decides.
const refundApprovalYAML = `name: refund-approval
nodes:
  - {id: start, type: start}
  - id: approve
    type: wait
    signal: approve
    timeout: 72h
    description: Refund this order?
    decide_on: approved
    schema:
      type: object
      required: [approved, amount, email]
      properties:
        approved: {type: boolean}
        amount: {type: number, minimum: 0.50, description: The amount to refund}
        email: {type: string, format: email, description: Where the receipt goes}
        note: {type: string, maxLength: 20}
        address:
          type: object
          required: [city, postcode]
          properties: {city: {type: string}, postcode: {type: string}}
  - {id: refund, type: action, code: "context['refunded'] = context['amount']"}
  - {id: declined, type: action, code: "context['refunded'] = 0"}
  - {id: done, type: end}
edges:
  - {from: start, to: approve}
  - {from: approve, to: refund, condition: true}
  - {from: approve, to: declined, condition: false}
  - {from: approve, to: declined, condition: timeout}
  - {from: refund, to: done}
  - {from: declined, to: done}
`

// TestConsoleDecisionsInBrowser drives the execution page as a person who
// decides on a refund, in headless Chromium against nova dev with the
// scripted model, a screenshot per step at 1400 and 800 px (the decisions
// folder of the console's screenshots): Tab first reaches "Skip to content",
// which moves the focus to the page; the wait reads "waits up to 72 h";
// Enter in a field sends nothing (the execution still waits); Approve
// checks every field in the browser and marks each at fault at once; with
// the fields right it shows the payload before anything is sent, and the
// gateway's 422 marks every member of the address it refuses; "Approve and
// send" moves the execution on; the Nodes table says when it lists one
// node's visits only, with a way back; a running AI node's row shows what its
// model calls cost so far; arrow keys on the list's Status filter apply it
// and leave the focus there. It checks the console's duration formatter in
// that browser.
func TestConsoleDecisionsInBrowser(t *testing.T) {
	chromium := chromiumPath()
	if chromium == "" {
		t.Skip("SKIPPED: no chromium (Debian package chromium, installed by make deps): the console's decisions browser test did not run")
	}
	if testing.Short() {
		t.Skip("a browser and nova dev")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	t.Setenv("NOVA_CONSOLE_SCREENSHOTS", filepath.Join(consoleShots(), "decisions"))
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
	for _, wf := range []string{refundApprovalYAML, countYAML} {
		api(t, base, key, "POST", "/v1/workflows", "application/yaml", wf, nil)
	}
	var started struct {
		ExecutionID string `json:"execution_id"`
	}
	api(t, base, key, "POST", "/v1/executions", "application/json", `{"workflow": "refund-approval", "context": {"order": "A-2001"}}`, &started)
	refund := started.ExecutionID
	// stillWaiting: the API says the execution waits at approve, no signal taken.
	stillWaiting := func(what string) {
		t.Helper()
		var v struct {
			Execution struct {
				Status  string `json:"status"`
				Waiting *struct {
					Node string `json:"node"`
				} `json:"waiting"`
			} `json:"execution"`
		}
		api(t, base, key, "GET", "/v1/executions/"+refund, "", "", &v)
		if v.Execution.Status != "running" || v.Execution.Waiting == nil || v.Execution.Waiting.Node != "approve" {
			t.Errorf("%s: the execution is %s, waiting %+v; want it still waiting at approve", what, v.Execution.Status, v.Execution.Waiting)
		}
	}

	// The engine stores the execution a moment after the start is
	// accepted (longer on a busy machine): the page opens it once it waits.
	if !eventually(60*time.Second, func() bool {
		var v struct {
			Execution struct {
				Waiting *struct{} `json:"waiting"`
			} `json:"execution"`
		}
		status, _ := apiStatus(t, base, key, "GET", "/v1/executions/"+refund, &v)
		return status == 200 && v.Execution.Waiting != nil
	}) {
		t.Fatalf("execution %s does not wait at approve 60 s after it started", refund)
	}

	b := newBrowser(t, ctx, chromium)
	t.Logf("screenshots: %s", b.shots)
	b.do("sign in", chromedp.Navigate(base+"/#key="+key+"&to=/executions/"+refund))
	b.until("the wait node's form", `!!document.querySelector(".waiting-panel form.signal-form button.decision.approve")`)

	// The console's one duration formatter, as each page writes durations.
	units := eval[string](b, "durations", `(async () => {
		const d = await import("/console/dist/duration.js");
		return [d.durationText(850), d.durationText(2345), d.durationText(179600), d.durationText(150000), d.durationText(3600000),
			d.durationText(93600000), d.secondsText(259200), d.secondsText(90), d.elapsedText(500), d.elapsedText(125999),
			d.elapsedText((71 * 60 + 59) * 60000), d.agoText(185000)].join(" | ");
	})()`)
	if want := "850 ms | 2.35 s | 3 min | 2 min 30 s | 1 h | 1 d 2 h | 72 h | 1 min 30 s | <1 s | 2 min 5 s | 2 d 23 h | 3 min"; units != want {
		t.Errorf("durations:\n%s\nwant\n%s", units, want)
	}

	// Tab's first stop is the skip link; it moves the focus to the page.
	b.do("reload the page", chromedp.Reload())
	b.until("the wait node's form", `!!document.querySelector(".waiting-panel form.signal-form button.decision.approve")`)
	b.do("press Tab", chromedp.KeyEvent(kb.Tab))
	b.until("the skip link focused and shown", `document.activeElement?.textContent === "Skip to content" &&
		document.activeElement.getBoundingClientRect().top >= 0`)
	b.view("41-skip-link")
	b.do("press Enter on it", chromedp.KeyEvent(kb.Enter))
	b.until("the focus on the page's content, the route kept", fmt.Sprintf(`document.activeElement?.id === "main" && location.hash === "#/executions/%s"`, refund))

	text := eval[string](b, "the waiting panel", `document.querySelector(".waiting-panel .wait-meta").innerText`)
	for _, want := range []string{"times out in 2 d 23 h", "waits up to 72 h"} {
		if !strings.Contains(text, want) {
			t.Errorf("the waiting panel says %q; want %q", text, want)
		}
	}

	// Enter in a field sends nothing.
	field := func(name string) string {
		return fmt.Sprintf(`.signal-field[data-field=%q] input, .signal-field[data-field=%q] textarea`, name, name)
	}
	b.do("type the amount and press Enter",
		chromedp.Focus(field("amount")), chromedp.SendKeys(field("amount"), "120"), chromedp.KeyEvent(kb.Enter))
	b.until("Enter says it sends nothing", `document.querySelector(".waiting-panel [role=status]")?.textContent.startsWith("Enter does not send the signal: press Approve or Reject")`)
	b.do("type the e-mail and press Enter",
		chromedp.Focus(field("email")), chromedp.SendKeys(field("email"), "ana@example.com"), chromedp.KeyEvent(kb.Enter))
	if open := eval[bool](b, "the check before sending", `!document.querySelector(".signal-review").hidden`); open {
		t.Error("Enter opened the check before sending")
	}
	stillWaiting("after Enter in two fields")
	b.shot("42-enter-sends-nothing")

	// Every field at fault, marked at once, before anything is sent.
	b.do("fill three fields wrong",
		chromedp.SetValue(field("amount"), "0.10"),
		chromedp.SetValue(field("email"), "ana at example"),
		chromedp.SetValue(field("note"), "customer called twice, then wrote"))
	b.click("approve", `.waiting-panel button.decision.approve`)
	b.until("three fields marked", `document.querySelectorAll('.waiting-panel [aria-invalid="true"]').length === 3`)
	marked := eval[string](b, "the fields' errors", `[...document.querySelectorAll(".waiting-panel .signal-field")].map(f => f.dataset.field + ": " + f.querySelector(".field-error").textContent).join(" | ")`)
	if want := "address:  | amount: must be at least 0.5 | email: must be a valid email | note: must be at most 20 characters long"; marked != want {
		t.Errorf("the fields say\n%s\nwant\n%s", marked, want)
	}
	if msg := eval[string](b, "the form's message", `document.querySelector(".waiting-panel .form-message").textContent`); msg != "3 fields do not meet the node's schema: see each field marked." {
		t.Errorf("the form says %q", msg)
	}
	if f := b.failedAnswers(); len(f) != 0 {
		t.Errorf("the form sent a request for a payload it should have refused: %v", f)
	}
	b.shot("43-every-field-at-fault")

	// Right fields: Approve shows what will be sent; the gateway refuses
	// the address, and both its members are marked.
	b.do("fix the fields, an address without its members",
		chromedp.SetValue(field("amount"), "120.50"),
		chromedp.SetValue(field("email"), "ana@example.com"),
		chromedp.SetValue(field("note"), "called twice"),
		chromedp.SetValue(field("address"), "{}"))
	b.click("approve", `.waiting-panel button.decision.approve`)
	b.until("the payload to be sent", `!document.querySelector(".signal-review").hidden &&
		document.activeElement === document.querySelector(".signal-review")`)
	payload := eval[string](b, "the payload shown", `document.querySelector(".signal-review pre.signal-payload").textContent`)
	for _, want := range []string{`"approved": true`, `"amount": 120.50`, `"email": "ana@example.com"`, `"address": {}`} {
		if !strings.Contains(payload, want) {
			t.Errorf("the payload shown before sending:\n%s\nwant %s in it", payload, want)
		}
	}
	stillWaiting("with the payload shown")
	b.shot("44-check-before-sending")
	b.click("approve and send", `.signal-review button.confirm-signal`)
	b.until("the address's members marked", `document.querySelector('.signal-field[data-field="address"] .field-error')?.textContent ===
		"address.city: is required; address.postcode: is required"`)
	b.shot("45-gateway-names-every-member")

	// Change goes back to the form; Approve and send moves the execution on.
	b.do("give the address", chromedp.SetValue(field("address"), `{"city": "Lyon", "postcode": "69001"}`))
	b.click("approve", `.waiting-panel button.decision.approve`)
	b.until("the check before sending", `!document.querySelector(".signal-review").hidden`)
	b.click("change", `.signal-review button.change-signal`)
	b.until("the form editable again, Approve focused", `document.querySelector(".signal-review").hidden &&
		!document.querySelector("fieldset.signal-fields").disabled && document.activeElement?.classList.contains("approve")`)
	b.click("approve", `.waiting-panel button.decision.approve`)
	b.click("approve and send", `.signal-review button.confirm-signal`)
	b.until("the execution succeeded, refunded", `!document.querySelector(".waiting-panel") &&
		document.querySelector(".execution-head h1 .badge")?.textContent.includes("succeeded") &&
		document.querySelector('table.nodes tr[data-node="approve"] .signal-received')?.textContent.includes('"amount": 120.50')`)

	// One node's visits: said, with the way back to all.
	b.selectNode("open the approve node", "approve")
	b.until("the table says it lists approve only", `document.querySelector(".nodes-scope")?.textContent.startsWith("Only the visits of node approve") &&
		[...document.querySelectorAll("table.nodes tbody tr")].every(r => r.dataset.node === "approve")`)
	b.shot("46-nodes-of-one-node")
	b.click("show all nodes", `.nodes-scope button.show-all-nodes`)
	b.until("every node listed again", `document.querySelectorAll("table.nodes tbody tr").length === 4 &&
		document.querySelector(".nodes-scope")?.textContent.startsWith("All 4 visits")`)

	// A running AI node: its row counts what its model calls cost so far,
	// as the page's head does.
	api(t, base, key, "POST", "/v1/executions", "application/json", `{"workflow": "count", "context": {}}`, &started)
	waitStored(t, base, key, started.ExecutionID)
	b.do("open the running AI node", chromedp.Navigate(base+"/#/executions/"+started.ExecutionID))
	b.until("the count node running after its model calls", `document.querySelector('table.nodes tr[data-node="count"]')?.dataset.status === "running" &&
		/ · \d+ model calls?$/.test(document.querySelector(".execution-head .spend")?.textContent ?? "")`)
	costs := eval[[]string](b, "the head's and the row's cost", `[document.querySelector(".execution-head .spend").textContent,
		document.querySelector('table.nodes tr[data-node="count"] td:nth-child(6)').textContent]`)
	head, row := costs[0], costs[1]
	if calls := regexp.MustCompile(`^(\S+) · (\d+) model calls?$`).FindStringSubmatch(head); calls == nil || row != calls[1]+" · "+calls[2] {
		t.Errorf("the running AI node's row costs %q; the page's head says %q", row, head)
	}
	b.shot("47-running-ai-node-cost")

	// Arrow keys on the list's Status filter apply it and keep the focus.
	b.do("open the executions list", chromedp.Navigate(base+"/#/executions"))
	b.until("the list", `!!document.querySelector("table.executions tbody tr")`)
	b.do("focus the Status filter", chromedp.Focus(`#filter-status`))
	b.do("press the down arrow", chromedp.KeyEvent(kb.ArrowDown))
	b.until("running applied, the focus kept", `location.hash === "#/executions?status=running" && document.activeElement?.id === "filter-status"`)
	b.do("press the down arrow again", chromedp.KeyEvent(kb.ArrowDown))
	b.until("succeeded applied, the focus kept", `location.hash === "#/executions?status=succeeded" && document.activeElement?.id === "filter-status" &&
		document.querySelector("#filter-status").value === "succeeded"`)
	b.shot("48-status-filter-by-keyboard")
	b.do("press Tab", chromedp.KeyEvent(kb.Tab))
	if next := eval[string](b, "the next stop", `document.activeElement?.id ?? ""`); next != "filter-since" {
		t.Errorf("Tab from the Status filter went to %q, want the next filter (filter-since)", next)
	}

	for _, f := range b.failedAnswers() {
		if !strings.HasPrefix(f, "422 ") || !strings.Contains(f, "/signals/approve") {
			t.Errorf("the page had an answer %s", f)
		}
	}
	select {
	case msg := <-b.dialogs:
		t.Errorf("the page opened a JavaScript dialog: %q", msg)
	default:
	}
}
