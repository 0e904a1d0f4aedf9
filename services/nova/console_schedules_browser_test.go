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

// tickingYAML is a workflow the schedules page schedules: one code node;
// its definition declares a schedule of its own (from_definition).
const tickingYAML = `name: console-ticks
nodes:
  - {id: start, type: start}
  - {id: stamp, type: action, code: "context['ticked'] = context['region']"}
  - {id: done, type: end}
edges:
  - {from: start, to: stamp}
  - {from: stamp, to: done}
schedules:
  - {id: nightly, cron: '0 2 * * *', timezone: Europe/Madrid, context: {region: all}}
`

// TestConsoleSchedulesInBrowser drives the console's schedules page in
// headless Chromium against nova dev, with screenshots at 1400 and 800 px
// (in the schedules folder of the console's screenshots): the definition's
// schedule is listed, marked as declared there; a schedule every 2 s made
// from the New schedule form is listed with its next tick, counting down,
// and the execution a tick started appears with a link; that execution's
// page says which schedule started it and at which tick, linking back;
// Pause shows it paused with no next tick; a cron of 4 fields is refused
// (422) under the cron field; Delete asks first (a definition's schedule
// says it is declared there) and the schedule goes.
func TestConsoleSchedulesInBrowser(t *testing.T) {
	chromium := chromiumPath()
	if chromium == "" {
		t.Skip("SKIPPED: no chromium (Debian package chromium, installed by make deps): the console's schedules browser test did not run")
	}
	if testing.Short() {
		t.Skip("a browser and nova dev")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	t.Setenv("NOVA_CONSOLE_SCREENSHOTS", filepath.Join(consoleShots(), "schedules"))
	m, _ := startDev(t, ctx, regexp.MustCompile(`HTTP API (http://\S+)\n\s+NOVA_API_KEY=(\S+)`), "--gateway-addr", "127.0.0.1:0")
	base, key := m[1], m[2]
	api(t, base, key, "POST", "/v1/workflows", "application/yaml", tickingYAML, nil)
	type listed struct {
		Schedules []struct {
			Workflow       string   `json:"workflow"`
			ID             string   `json:"id"`
			Every          string   `json:"every"`
			Catchup        string   `json:"catchup"`
			Paused         bool     `json:"paused"`
			FromDefinition bool     `json:"from_definition"`
			NextTicks      []string `json:"next_ticks"`
		} `json:"schedules"`
	}
	schedules := func() listed {
		t.Helper()
		var l listed
		api(t, base, key, "GET", "/v1/schedules?workflow=console-ticks", "", "", &l)
		return l
	}
	// The engine stores a definition's schedules as it registers it.
	for deadline := time.Now().Add(10 * time.Second); len(schedules().Schedules) == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the definition's schedule nightly is not listed 10 s after the workflow was registered")
		}
	}

	b := newBrowser(t, ctx, chromium)
	t.Logf("screenshots: %s", b.shots)
	b.do("sign in", chromedp.Navigate(base+"/#key="+key+"&to=/schedules"))
	b.until("the schedules page and the definition's schedule", `document.querySelector('nav a[aria-current="page"]')?.dataset.section === "schedules" &&
		document.querySelector('table.schedules tr[data-schedule="nightly"] .from-definition')?.textContent === "from definition" &&
		document.querySelector('table.schedules tr[data-schedule="nightly"] td.when')?.textContent.includes("Europe/Madrid") &&
		document.querySelector('table.schedules tr[data-schedule="nightly"] td.next-tick time')`)

	// A schedule every 2 s, from the form.
	b.click("new schedule", `button.new-schedule`)
	b.until("the form, its workflows read", `!document.querySelector("form.schedule-form").hidden &&
		[...document.querySelectorAll("#schedule-workflow option")].some(o => o.value === "console-ticks")`)
	b.click("at an interval", `#schedule-kind-every`)
	b.until("the interval field", `!document.querySelector('.schedule-field[data-field="every"]').hidden &&
		document.querySelector('.schedule-field[data-field="cron"]').hidden`)
	b.do("fill the form",
		chromedp.SetValue(chromedp.CSS(`#schedule-workflow`), "console-ticks"),
		chromedp.SetValue(chromedp.CSS(`#schedule-every`), "2s"),
		chromedp.SetValue(chromedp.CSS(`#schedule-catchup`), "latest"),
		chromedp.SetValue(chromedp.CSS(`#schedule-context`), `{"region": "eu", "limit": 1500.0}`),
		chromedp.SetValue(chromedp.CSS(`#schedule-id`), "every-2s"))
	b.shot("31-new-schedule-form")
	b.click("create", `form.schedule-form button[type=submit]`)
	row := `table.schedules tr[data-workflow="console-ticks"][data-schedule="every-2s"]`
	b.until("the schedule listed with its next tick", fmt.Sprintf(`(() => {
		const r = document.querySelector(%[1]q);
		return r && document.querySelector("form.schedule-form").hidden &&
			r.querySelector("td.when .rule")?.textContent === "every 2s" && r.querySelector("td.when .catchup")?.textContent === "catch-up: latest" &&
			/^in (<1|\d) s$/.test(r.querySelector("td.next-tick .next-in")?.textContent ?? "") &&
			!!r.querySelector("td.next-tick time")?.textContent && r.querySelector("td.state")?.textContent.includes("active");
	})()`, row))
	if l := schedules(); len(l.Schedules) != 2 || l.Schedules[0].ID != "every-2s" || l.Schedules[0].Every != "2s" || l.Schedules[0].Catchup != "latest" ||
		l.Schedules[0].FromDefinition || !l.Schedules[1].FromDefinition {
		t.Errorf("the schedules after the form: %+v", l.Schedules)
	}
	// A tick's execution appears, linked.
	b.until("a tick's execution", fmt.Sprintf(`document.querySelector(%q)?.getAttribute("href")?.startsWith("#/executions/console-ticks-every-2s-")`,
		row+` td.last-tick a.last-execution`))
	b.until("the execution succeeded", fmt.Sprintf(`document.querySelector(%q)?.textContent.includes("succeeded")`, row+` td.last-tick .last-run .badge`))
	b.shot("32-schedule-ticking")

	// Executions →: the executions it started.
	// The list is drawn again every few seconds: a click whose press and
	// release straddle that is lost, and follow clicks again.
	b.follow("its executions", row+` a.executions-link`, `location.hash.startsWith("#/executions?")`)
	b.until("the executions it started", `location.hash === "#/executions?workflow=console-ticks&id=console-ticks-every-2s-" &&
		document.querySelectorAll("table.executions tbody tr[data-execution]").length > 0 &&
		[...document.querySelectorAll("table.executions tbody tr[data-execution]")].every(r => r.dataset.execution.startsWith("console-ticks-every-2s-"))`)
	b.do("back to the schedules", chromedp.NavigateBack())
	b.until("the schedules again", fmt.Sprintf(`!!document.querySelector(%q)`, row+` td.last-tick a.last-execution`))

	// The execution a tick started says so, and links back.
	// The link moves on to the next tick's execution every 2 s.
	b.follow("open the tick's execution", row+` td.last-tick a.last-execution`, `location.hash.startsWith("#/executions/console-ticks-every-2s-")`)
	b.until("the execution, started by the schedule", `document.querySelector(".execution-head h1 .badge")?.textContent.includes("succeeded") &&
		document.querySelector(".execution-head .scheduled-by")?.textContent.startsWith("◷ Started by schedule every-2s of console-ticks at its tick of ") &&
		document.querySelector(".execution-head .scheduled-by a")?.getAttribute("href") === "#/schedules?workflow=console-ticks&id=every-2s" &&
		document.querySelector(".execution-head .scheduled-by time")?.textContent.length > 0`)
	ticked := eval[string](b, "the execution's id", `decodeURIComponent(location.hash.split("/")[2])`)
	var view struct {
		Execution struct {
			ScheduleID   string         `json:"schedule_id"`
			ScheduledAt  string         `json:"scheduled_at"`
			FinalContext map[string]any `json:"final_context"`
		} `json:"execution"`
	}
	api(t, base, key, "GET", "/v1/executions/"+ticked, "", "", &view)
	if view.Execution.ScheduleID != "every-2s" || view.Execution.FinalContext["ticked"] != "eu" ||
		eval[string](b, "the tick shown", `document.querySelector(".execution-head .scheduled-by time").getAttribute("datetime")`) == "" {
		t.Errorf("execution %s: %+v", ticked, view.Execution)
	}
	b.shot("33-execution-started-by-schedule")
	b.click("back to its schedule", `.execution-head .scheduled-by a`)
	b.until("the schedule marked", fmt.Sprintf(`document.querySelector(%q)?.classList.contains("marked") &&
		document.querySelector("#schedules-workflow").value === "console-ticks"`, row))

	// Pause: the badge, no next tick.
	b.follow("pause", row+` button[data-action="pause"]`, fmt.Sprintf(`document.querySelector(%q)?.dataset.paused === "true"`, row))
	b.until("paused", fmt.Sprintf(`(() => {
		const r = document.querySelector(%q);
		return r?.dataset.paused === "true" && r.querySelector("td.state .badge")?.textContent === "‖ paused" &&
			r.querySelector("td.next-tick")?.textContent === "none while paused" && !!r.querySelector('button[data-action="resume"]');
	})()`, row))
	if l := schedules(); !l.Schedules[0].Paused || len(l.Schedules[0].NextTicks) != 0 {
		t.Errorf("paused from the page: %+v", l.Schedules[0])
	}
	b.shot("34-schedule-paused")

	// A cron of 4 fields: the 422 under the cron field.
	b.click("new schedule", `button.new-schedule`)
	b.until("the form", `!document.querySelector("form.schedule-form").hidden`)
	b.click("on a cron expression", `#schedule-kind-cron`)
	b.do("a cron of 4 fields",
		chromedp.SetValue(chromedp.CSS(`#schedule-workflow`), "console-ticks"),
		chromedp.SetValue(chromedp.CSS(`#schedule-cron`), "*/5 * * *"))
	b.click("create", `form.schedule-form button[type=submit]`)
	b.until("the cron's error", `document.querySelector('.schedule-field[data-field="cron"] .field-error')?.textContent.includes("has 4 fields; want 5") &&
		document.querySelector("#schedule-cron").getAttribute("aria-invalid") === "true" &&
		document.activeElement?.id === "schedule-cron"`)
	if other := eval[string](b, "other fields' errors", `[...document.querySelectorAll("form.schedule-form .field-error")].filter(e => e.textContent && !e.closest('[data-field="cron"]')).map(e => e.textContent).join("; ")`); other != "" {
		t.Errorf("errors beside other fields: %s", other)
	}
	b.shot("35-cron-field-error")
	b.click("cancel the form", `form.schedule-form button.secondary`)

	// Delete: a definition's schedule says it is declared there.
	b.do("all schedules", chromedp.Navigate(base+"/#/schedules"))
	b.until("both listed", `document.querySelectorAll("table.schedules tbody tr[data-schedule]").length === 2`)
	b.follow("delete nightly…", `table.schedules tr[data-schedule="nightly"] button[data-action="delete"]`, `!!document.querySelector("dialog.delete-schedule-modal[open]")`)
	b.until("the delete dialog", `document.querySelector("dialog.delete-schedule-modal[open] .from-definition")?.textContent.includes("registering the workflow again brings it back")`)
	b.view("36-delete-definition-schedule")
	b.click("keep it", `dialog.delete-schedule-modal button.secondary`)
	b.until("the dialog closed", `!document.querySelector("dialog[open]")`)
	b.follow("delete every-2s…", row+` button[data-action="delete"]`, `!!document.querySelector("dialog.delete-schedule-modal[open]")`)
	b.until("the delete dialog", `!!document.querySelector("dialog.delete-schedule-modal[open]") && !document.querySelector("dialog.delete-schedule-modal .from-definition")`)
	b.click("delete", `dialog.delete-schedule-modal button[type=submit]`)
	b.until("the schedule gone", fmt.Sprintf(`!document.querySelector(%q) && !document.querySelector("dialog[open]") &&
		document.querySelector(".note[role=status]")?.textContent.includes("deleted") &&
		document.querySelectorAll("table.schedules tbody tr[data-schedule]").length === 1`, row))
	if l := schedules(); len(l.Schedules) != 1 || l.Schedules[0].ID != "nightly" {
		t.Errorf("after the delete: %+v", l.Schedules)
	}
	b.shot("37-schedule-deleted")

	// No answer failed but the one the test asked for (the 422).
	for _, f := range b.failedAnswers() {
		if !strings.HasPrefix(f, "422 ") || !strings.HasSuffix(f, "/v1/schedules") {
			t.Errorf("the page had an answer %s", f)
		}
	}
	select {
	case msg := <-b.dialogs:
		t.Errorf("the page opened a JavaScript dialog: %q", msg)
	default:
	}
}
