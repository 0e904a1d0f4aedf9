package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// approvalYAML waits for a person's decision: the form of its wait node is
// built from the schema (approved decides; amount at least 0.50, a note).
const approvalYAML = `name: console-approval
nodes:
  - {id: start, type: start}
  - id: approve
    type: wait
    signal: approve
    timeout: 72h
    description: Approve the refund of this order? Refunds over 500 need a second look.
    decide_on: approved
    schema:
      type: object
      required: [approved, amount]
      properties:
        approved: {type: boolean, description: Whether the refund goes ahead}
        amount: {type: number, minimum: 0.50, description: The amount to refund}
        note: {type: string, description: "Why, for the audit"}
        channel: {type: string, enum: [email, phone, chat]}
  - {id: cool_off, type: sleep, duration: 1s}
  - {id: refund, type: action, code: "context['refunded'] = context['amount']"}
  - {id: declined, type: action, code: "context['refunded'] = 0"}
  - {id: done, type: end}
edges:
  - {from: start, to: approve}
  - {from: approve, to: cool_off, condition: true}
  - {from: approve, to: declined, condition: false}
  - {from: approve, to: declined, condition: timeout}
  - {from: cool_off, to: refund}
  - {from: refund, to: done}
  - {from: declined, to: done}
`

// limitYAML fails at check while total is over the limit, after two
// attempts of its retry policy; a rerun from check with a higher limit
// succeeds, carrying start and total over.
const limitYAML = `name: console-limit
nodes:
  - {id: start, type: start}
  - {id: total, type: action, code: "context['total'] = context['amount'] * 2"}
  - id: check
    type: action
    retry: {max_attempts: 2, initial_interval: 1s, on: [error]}
    code: |
      if context["total"] > context["limit"]:
          raise ValueError(f"total {context['total']} is over the limit {context['limit']}")
      context["approved"] = True
  - {id: done, type: end}
edges:
  - {from: start, to: total}
  - {from: total, to: check}
  - {from: check, to: done}
`

// timeoutYAML waits 2 s for a signal that does not come.
const timeoutYAML = `name: console-timeout
nodes:
  - {id: start, type: start}
  - {id: ask, type: wait, signal: go, timeout: 2s, description: Nobody answers this one}
  - {id: late, type: action, code: "context['late'] = True"}
  - {id: done, type: end}
edges:
  - {from: start, to: ask}
  - {from: ask, to: done}
  - {from: ask, to: late, condition: timeout}
  - {from: late, to: done}
`

// TestConsoleControlInBrowser drives the console's steering of executions
// in headless Chromium against nova dev, with screenshots at 1400 and 800 px
// (in the control folder of the console's screenshots, so that neither
// browser test removes the other's): a waiting execution shows its wait
// node's form, built from the schema; an amount under the schema's minimum
// is refused next to its field before anything is sent; Approve shows the
// payload, and Approve and send moves it on through its sleep to refund, and
// the node list shows the signal, its payload and sender; a
// waiting execution cancelled from its page shows who cancelled it, why,
// and its wait node cancelled; a wait that timed out says so; a code node
// that fails both attempts of its retry policy shows them (and, ended, no
// next attempt), and "Rerun from"
// it with a context change lands on the new execution, which succeeds with
// the nodes before it carried over and links to its original (and the
// original to it).
func TestConsoleControlInBrowser(t *testing.T) {
	chromium := chromiumPath()
	if chromium == "" {
		t.Skip("SKIPPED: no chromium (Debian package chromium, installed by make deps): the console's control browser test did not run")
	}
	if testing.Short() {
		t.Skip("a browser and nova dev")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	t.Setenv("NOVA_CONSOLE_SCREENSHOTS", filepath.Join(consoleShots(), "control"))
	m, _ := startDev(t, ctx, regexp.MustCompile(`HTTP API (http://\S+)\n\s+NOVA_API_KEY=(\S+)`), "--gateway-addr", "127.0.0.1:0")
	base, key := m[1], m[2]
	for _, wf := range []string{approvalYAML, limitYAML, timeoutYAML} {
		api(t, base, key, "POST", "/v1/workflows", "application/yaml", wf, nil)
	}
	type started struct {
		ExecutionID string `json:"execution_id"`
	}
	start := func(workflow, context string) string {
		t.Helper()
		var s started
		api(t, base, key, "POST", "/v1/executions", "application/json", fmt.Sprintf(`{"workflow": %q, "context": %s}`, workflow, context), &s)
		// The engine knows it a moment after the start was accepted; a
		// page opened before would be answered 404 first.
		for deadline := time.Now().Add(10 * time.Second); ; {
			req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/executions/"+s.ExecutionID, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s.ExecutionID
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET /v1/executions/%s: %s 10 s after its start", s.ExecutionID, resp.Status)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	b := newBrowser(t, ctx, chromium)
	t.Logf("screenshots: %s", b.shots)
	b.do("sign in", chromedp.Navigate(base+"/#key="+key+"&to=/executions"))
	b.until("the executions page", `!!document.querySelector("table.executions")`)

	// A waiting execution: its wait node's form, from the schema.
	waiting := start("console-approval", `{"order": "A-1042", "amount": 1500.0}`)
	b.do("open the waiting execution", chromedp.Navigate(base+"/#/executions/"+waiting))
	b.until("the wait node's form", `!!document.querySelector(".waiting-panel form.signal-form button.decision.approve")`)
	form := eval[map[string]any](b, "the form", `(() => {
		const p = document.querySelector(".waiting-panel");
		const f = n => p.querySelector('.signal-field[data-field="' + n + '"]');
		return {
			text: p.innerText,
			decisions: [...p.querySelectorAll("button.decision")].map(b => b.textContent).join(","),
			amount: f("amount")?.querySelector("input")?.type ?? "",
			amountRequired: !!f("amount")?.querySelector(".required"),
			note: f("note")?.querySelector("input")?.type ?? "",
			noteRequired: !!f("note")?.querySelector(".required"),
			channel: [...(f("channel")?.querySelectorAll("option") ?? [])].map(o => o.textContent).join(","),
			approvedField: !!f("approved"),
			graph: document.querySelector('svg.graph [data-node="approve"]')?.dataset.status ?? "",
		};
	})()`)
	for name, want := range map[string]any{
		"decisions": "Approve,Reject", "amount": "number", "amountRequired": true, "note": "text", "noteRequired": false,
		"channel": "— none —,email,phone,chat", "approvedField": false, "graph": "waiting",
	} {
		if form[name] != want {
			t.Errorf("the wait node's form: %s = %v, want %v", name, form[name], want)
		}
	}
	text, _ := form["text"].(string)
	for _, want := range []string{"Approve the refund of this order?", "approve", "times out in 2 d 23 h", "waits up to 72 h"} {
		if !strings.Contains(text, want) {
			t.Errorf("the waiting panel does not say %q:\n%s", want, text)
		}
	}
	b.do("fill the form",
		chromedp.SetValue(chromedp.CSS(`.signal-field[data-field="amount"] input`), "1500.0"),
		chromedp.SetValue(chromedp.CSS(`.signal-field[data-field="note"] input`), "customer called twice"),
		chromedp.SetValue(chromedp.CSS(`.signal-field[data-field="channel"] select`), "0"))
	b.shot("21-waiting-signal-form")

	// An amount under the schema's minimum: said next to the field, by the
	// browser, before anything is sent.
	b.do("an amount too small", chromedp.SetValue(chromedp.CSS(`.signal-field[data-field="amount"] input`), "0.10"))
	b.click("approve", `.waiting-panel button.decision.approve`)
	b.until("the amount's error", `document.querySelector('.signal-field[data-field="amount"] .field-error')?.textContent.length > 0 &&
		document.querySelector('.signal-field[data-field="amount"] input').getAttribute("aria-invalid") === "true"`)
	b.shot("22-signal-field-error")

	// Approve, then Approve and send once the payload is shown: the
	// execution goes on, through its sleep, to refund.
	b.do("a right amount", chromedp.SetValue(chromedp.CSS(`.signal-field[data-field="amount"] input`), "1500.0"))
	b.click("approve", `.waiting-panel button.decision.approve`)
	b.until("the payload to be sent", `document.querySelector(".signal-review pre.signal-payload")?.textContent.includes('"approved": true')`)
	b.click("approve and send", `.signal-review button.confirm-signal`)
	b.until("the form gone and the execution succeeded", `!document.querySelector(".waiting-panel") &&
		document.querySelector(".execution-head h1 .badge")?.textContent.includes("succeeded") &&
		document.querySelector('svg.graph [data-node="refund"]')?.dataset.status === "success"`)
	b.until("the signal in the node list", `document.querySelector('table.nodes tr[data-node="approve"] .signal-received')?.textContent.includes('"approved": true')`)
	signalText := eval[string](b, "the signal", `document.querySelector('table.nodes tr[data-node="approve"] .signal-received').textContent`)
	for _, want := range []string{"signal approve", `"amount": 1500.0`, `"channel": "email"`, `"note": "customer called twice"`} {
		if !strings.Contains(signalText, want) {
			t.Errorf("the approve node's row says %q; want %q in it", signalText, want)
		}
	}
	if got := eval[string](b, "cool_off's type", `document.querySelector('table.nodes tr[data-node="cool_off"] td:nth-child(2)')?.textContent ?? ""`); got != "sleep" {
		t.Errorf("cool_off's type in the node list: %q, want sleep", got)
	}
	var chain struct {
		Execution struct {
			Status string `json:"status"`
		} `json:"execution"`
		Nodes []struct {
			NodeID string `json:"node_id"`
			Signal *struct {
				SentBy  string         `json:"sent_by"`
				Payload map[string]any `json:"payload"`
			} `json:"signal"`
		} `json:"nodes"`
	}
	api(t, base, key, "GET", "/v1/executions/"+waiting, "", "", &chain)
	for _, n := range chain.Nodes {
		if n.NodeID == "approve" && (n.Signal == nil || n.Signal.Payload["approved"] != true || n.Signal.SentBy == "" ||
			!strings.Contains(signalText, "from "+n.Signal.SentBy)) {
			t.Errorf("approve's signal %+v; want approved true and its sender on the page (%q)", n.Signal, signalText)
		}
	}
	b.selectNode("open the approve node", "approve")
	b.until("its signal in full", `document.querySelector(".visits .signal-received pre.payload")?.textContent.includes("customer called twice")`)
	b.shot("23-signal-approved")

	// Cancel a waiting execution from its page: who, why, and the node
	// that was waiting cancelled.
	doomed := start("console-approval", `{"order": "A-1043", "amount": 80}`)
	b.do("open the execution to cancel", chromedp.Navigate(base+"/#/executions/"+doomed))
	b.until("its form and Cancel", `!!document.querySelector(".waiting-panel") && !!document.querySelector(".execution-head button.cancel-execution")`)
	b.click("cancel…", `.execution-head button.cancel-execution`)
	b.until("the cancel dialog", `!!document.querySelector("dialog.cancel-modal[open] textarea")`)
	b.do("give a reason", chromedp.SetValue(chromedp.CSS(`dialog.cancel-modal textarea`), "duplicate order, refunded by phone"))
	b.view("24-cancel-dialog")
	b.click("confirm", `dialog.cancel-modal button[type=submit]`)
	b.until("the execution cancelled", `document.querySelector(".execution-head h1 .badge")?.textContent.includes("cancelled") &&
		document.querySelector(".execution-head .cancelled-by")?.textContent.includes("duplicate order, refunded by phone") &&
		document.querySelector('table.nodes tr[data-node="approve"]')?.dataset.status === "cancelled" &&
		document.querySelector('svg.graph [data-node="approve"]')?.dataset.status === "cancelled" &&
		!document.querySelector(".waiting-panel") && !document.querySelector("dialog[open]")`)
	if by := eval[string](b, "who cancelled", `document.querySelector(".execution-head .cancelled-by").textContent`); !regexp.MustCompile(`^Cancelled by \S+: `).MatchString(by) {
		t.Errorf("the cancelled execution says %q; want who cancelled it and why", by)
	}
	b.shot("25-cancelled-execution")

	// A wait that timed out says so.
	var timedOut started
	api(t, base, key, "POST", "/v1/executions?wait=60s", "application/json", `{"workflow": "console-timeout", "context": {}}`, &timedOut)
	b.do("open the timed-out execution", chromedp.Navigate(base+"/#/executions/"+timedOut.ExecutionID))
	b.until("timed out", `document.querySelector('table.nodes tr[data-node="ask"] .timed-out')?.textContent.includes("timed out")`)

	// A code node that fails both attempts of its retry policy; Rerun from
	// it with a higher limit.
	var failed started
	api(t, base, key, "POST", "/v1/executions?wait=60s", "application/json", `{"workflow": "console-limit", "context": {"amount": 600, "limit": 1000}}`, &failed)
	b.do("open the failed execution", chromedp.Navigate(base+"/#/executions/"+failed.ExecutionID))
	b.until("its attempts and the rerun button", `document.querySelectorAll('table.nodes tr[data-node="check"]').length === 2 &&
		document.querySelector('table.nodes tr[data-node="check"] .attempt')?.textContent === "attempt 1 of 2" &&
		!!document.querySelector('.execution-head button.rerun[data-rerun="check"]')`)
	// The page draws itself again as the audit's last writes come.
	b.until("the failed node highlighted: check's second attempt", `[...document.querySelectorAll('table.nodes tr.failed-node')].map(r => r.dataset.node + " " + r.querySelector(".attempt")?.textContent).join(",") === "check attempt 2 of 2"`)
	// The execution ended: no attempt is to come, and none is announced.
	if n := eval[int](b, "next attempts", `document.querySelectorAll(".next-attempt").length`); n != 0 {
		t.Errorf("the ended execution announces %d next attempts", n)
	}
	b.shot("26-failed-with-attempts")
	if n := eval[int](b, "check's rerun buttons", `document.querySelectorAll('table.nodes tr[data-node="check"] button.rerun').length`); n != 1 {
		t.Errorf("check's rows have %d rerun buttons; want one, on its last visit", n)
	}
	b.click("rerun from check", `table.nodes tr.failed-node button.rerun[data-rerun="check"]`)
	b.until("the rerun dialog", `!!document.querySelector("dialog.rerun-modal[open] .change-key")`)
	b.do("raise the limit",
		chromedp.SetValue(chromedp.CSS(`dialog.rerun-modal .change-key`), "limit"),
		chromedp.SetValue(chromedp.CSS(`dialog.rerun-modal .change-value`), "5000"))
	b.view("27-rerun-dialog")
	b.click("rerun", `dialog.rerun-modal button[type=submit]`)
	b.until("the rerun's page, succeeded", fmt.Sprintf(`location.hash.startsWith("#/executions/") && !location.hash.includes(%q) &&
		document.querySelector(".execution-head h1 .badge")?.textContent.includes("succeeded") &&
		document.querySelector('table.nodes tr[data-node="check"]')?.dataset.status === "success"`, failed.ExecutionID))
	rerun := eval[string](b, "the rerun's id", `decodeURIComponent(location.hash.split("/")[2].split("?")[0])`)
	t.Logf("waiting %s, cancelled %s, timed out %s, failed %s, rerun %s", waiting, doomed, timedOut.ExecutionID, failed.ExecutionID, rerun)
	b.until("carried over and linked", fmt.Sprintf(`["start", "total"].every(n => document.querySelector('table.nodes tr[data-node="' + n + '"]')?.dataset.status === "carried_over" &&
			document.querySelector('table.nodes tr[data-node="' + n + '"] .carried a')?.getAttribute("href") === "#/executions/%[1]s") &&
		document.querySelector(".execution-head .rerun-of a")?.getAttribute("href") === "#/executions/%[1]s" &&
		document.querySelector(".execution-head .rerun-of")?.textContent.includes("from node check")`, failed.ExecutionID))
	var rerunView struct {
		Execution struct {
			FinalContext map[string]any `json:"final_context"`
		} `json:"execution"`
	}
	// The read may come a moment before the store has the final context.
	eventually(30*time.Second, func() bool {
		api(t, base, key, "GET", "/v1/executions/"+rerun, "", "", &rerunView)
		return len(rerunView.Execution.FinalContext) > 0
	})
	if c := rerunView.Execution.FinalContext; c["limit"] != 5000.0 || c["approved"] != true {
		t.Errorf("the rerun's final context %v; want limit 5000 (the change, as a number) and approved", c)
	}
	b.shot("28-rerun-execution")
	b.do("back to the original", chromedp.Navigate(base+"/#/executions/"+failed.ExecutionID))
	b.until("its rerun linked", fmt.Sprintf(`document.querySelector(".execution-head .reruns a")?.getAttribute("href") === "#/executions/%s"`, rerun))

	// No answer failed: the form refused the small amount itself.
	for _, f := range b.failedAnswers() {
		t.Errorf("the page had an answer %s", f)
	}
	select {
	case msg := <-b.dialogs:
		t.Errorf("the page opened a JavaScript dialog: %q", msg)
	default:
	}
}
