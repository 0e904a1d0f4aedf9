package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/routers"
	"github.com/google/uuid"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/gateway/gateway"
)

// scheduleDoc is a schedule as a client reads it.
type scheduleDoc struct {
	Workflow       string          `json:"workflow"`
	ID             string          `json:"id"`
	Cron           string          `json:"cron"`
	Timezone       string          `json:"timezone"`
	Every          string          `json:"every"`
	EverySeconds   float64         `json:"every_seconds"`
	Context        json.RawMessage `json:"context"`
	Catchup        string          `json:"catchup"`
	Paused         bool            `json:"paused"`
	FromDefinition bool            `json:"from_definition"`
	CreatedAt      *time.Time      `json:"created_at"`
	LastTick       *time.Time      `json:"last_tick"`
	NextTicks      []time.Time     `json:"next_ticks"`
	Pending        bool            `json:"pending"`
	Links          struct {
		Self       string `json:"self"`
		Workflow   string `json:"workflow"`
		Executions string `json:"executions"`
	} `json:"links"`
	RecentExecutions []executionItem `json:"recent_executions"`
}

// scheduleAPI sends requests to the schedules' routes, each checked
// against the OpenAPI document.
type scheduleAPI struct {
	t      *testing.T
	router routers.Router
}

func (a scheduleAPI) do(method, path, key, body string) response {
	a.t.Helper()
	req := request{method: method, path: path, key: h.key[key], body: body}
	resp := h.do(a.t, h.url, req)
	documented(a.t, a.router, req, resp)
	return resp
}

// schedule decodes a schedule answered with status.
func (a scheduleAPI) schedule(resp response, status int) scheduleDoc {
	a.t.Helper()
	var s scheduleDoc
	decode(a.t, resp, status, &s)
	return s
}

func (a scheduleAPI) create(key, body string) response {
	a.t.Helper()
	return a.do("POST", "/v1/schedules", key, body)
}

// removeSchedules deletes schedules a test made, should it have failed
// before it did (a test's end).
func removeSchedules(wf string, ids ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range ids {
		req, err := http.NewRequestWithContext(ctx, http.MethodDelete, h.url+"/v1/schedules/"+wf+"/"+id, nil)
		if err != nil {
			continue
		}
		req.Header.Set("Authorization", "Bearer "+h.key["admin"])
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
}

// scheduledYAML is a workflow of one code node, which a schedule starts.
func scheduledYAML(name string) string {
	return fmt.Sprintf(`name: %s
nodes:
  - {id: start, type: start}
  - {id: tick, type: action, code: 'context["ticked"] = True'}
  - {id: done, type: end}
edges:
  - {from: start, to: tick}
  - {from: tick, to: done}
`, name)
}

// TestSchedules: POST /v1/schedules refuses what the engine could not run,
// naming the problem, and answers with the schedule once the engine stored
// it; the schedule is listed, read, paused, resumed and deleted; a schedule
// of every second starts executions of its workflow.
func TestSchedules(t *testing.T) {
	api := scheduleAPI{t: t, router: openapiRouter(t)}
	wf := "scheduled-" + uuid.NewString()[:8]
	h.register(t, scheduledYAML(wf))
	t.Cleanup(func() { removeSchedules(wf, "weekdays", "each-second") })

	t.Run("refused", func(t *testing.T) {
		api := scheduleAPI{t: t, router: api.router}
		commands := h.lastCommand(t)
		for _, c := range []struct {
			name, key, body string
			status          int
			typ             string
			fields          []string
			detail          string
		}{
			{"four cron fields", "admin", `{"workflow": "` + wf + `", "schedule": {"cron": "*/5 * * *"}}`,
				422, gateway.TypeInvalidSchedule, []string{"schedule.cron"},
				`cron "*/5 * * *" has 4 fields; want 5 (minute hour day-of-month month day-of-week)`},
			{"a minute out of range", "admin", `{"workflow": "` + wf + `", "schedule": {"cron": "61 * * * *"}}`,
				422, gateway.TypeInvalidSchedule, []string{"schedule.cron"}, `minute field "61"`},
			{"an unknown time zone", "admin", `{"workflow": "` + wf + `", "schedule": {"cron": "0 9 * * *", "timezone": "Mars/Base"}}`,
				422, gateway.TypeInvalidSchedule, []string{"schedule.timezone"}, `"Mars/Base"`},
			{"both cron and every", "admin", `{"workflow": "` + wf + `", "schedule": {"cron": "0 9 * * *", "every": "1m"}}`,
				422, gateway.TypeInvalidSchedule, []string{"schedule"}, "both cron and every"},
			{"neither", "admin", `{"workflow": "` + wf + `", "schedule": {"catchup": "all"}}`,
				422, gateway.TypeInvalidSchedule, []string{"schedule"}, "needs cron"},
			{"an interval under a second", "admin", `{"workflow": "` + wf + `", "schedule": {"every": "500ms"}}`,
				422, gateway.TypeInvalidSchedule, []string{"schedule.every"}, "at least 1s"},
			{"a catchup misspelt", "admin", `{"workflow": "` + wf + `", "schedule": {"every": 60, "catchup": "lates"}}`,
				422, gateway.TypeInvalidSchedule, []string{"schedule.catchup"}, `did you mean "latest"`},
			{"an unknown schedule field", "admin", `{"workflow": "` + wf + `", "schedule": {"every": 60, "evry": 1}}`,
				422, gateway.TypeInvalidSchedule, []string{"schedule.evry"}, "unknown field"},
			{"an id with a dot", "admin", `{"workflow": "` + wf + `", "schedule": {"every": 60, "id": "a.b"}}`,
				422, gateway.TypeInvalidSchedule, []string{"schedule.id"}, `"a.b"`},
			{"a workflow not registered", "admin", `{"workflow": "never-registered", "schedule": {"every": 60}}`,
				404, gateway.TypeNotFound, []string{"workflow"}, "never-registered"},
			{"no schedule", "admin", `{"workflow": "` + wf + `"}`, 400, gateway.TypeInvalidRequest, []string{"schedule"}, ""},
			{"an unknown member", "admin", `{"workflow": "` + wf + `", "schedule": {"every": 60}, "when": 1}`,
				400, gateway.TypeInvalidRequest, []string{"when"}, ""},
			{"a schedule that is no object", "admin", `{"workflow": "` + wf + `", "schedule": "every minute"}`,
				400, gateway.TypeInvalidRequest, []string{"schedule"}, ""},
			{"a starting key", "writer", `{"workflow": "` + wf + `", "schedule": {"every": 60}}`, 403, gateway.TypeForbidden, nil, "admin"},
			{"a reading key", "reader", `{"workflow": "` + wf + `", "schedule": {"every": 60}}`, 403, gateway.TypeForbidden, nil, "admin"},
		} {
			t.Run(c.name, func(t *testing.T) {
				p := problem(t, api.create(c.key, c.body), c.status, c.typ)
				if c.fields != nil && !slices.Equal(p.fields(), c.fields) {
					t.Errorf("fields %v, want %v", p.fields(), c.fields)
				}
				if !strings.Contains(p.Detail+fmt.Sprint(p.Errors), c.detail) {
					t.Errorf("problem %+v does not say %q", p, c.detail)
				}
			})
		}
		if got := h.lastCommand(t); got != commands {
			t.Errorf("a command was published for a refused schedule")
		}
	})

	self := "/v1/schedules/" + wf + "/weekdays"
	t.Run("create", func(t *testing.T) {
		resp := api.create("admin", `{"workflow": "`+wf+`", "schedule": {"id": "weekdays", "cron": "0 9 * * 1-5",
			"timezone": "Europe/Madrid", "context": {"amount": 9007199254740993, "rate": 1.50}, "catchup": "latest"}}`)
		s := api.schedule(resp, http.StatusCreated)
		if resp.header.Get("Location") != self || s.Links.Self != self || s.Workflow != wf || s.ID != "weekdays" ||
			s.Cron != "0 9 * * 1-5" || s.Timezone != "Europe/Madrid" || s.Catchup != "latest" || s.Paused || s.FromDefinition ||
			s.CreatedAt == nil || s.Pending {
			t.Errorf("answer %s", resp.body)
		}
		if string(s.Context) != `{"amount":9007199254740993,"rate":1.50}` {
			t.Errorf("context %s: numbers not as written", s.Context)
		}
		if !strings.Contains(string(resp.body), "T09:00:00+0") {
			t.Errorf("next ticks not in the schedule's time zone: %s", resp.body)
		}
		madrid, _ := time.LoadLocation("Europe/Madrid")
		if len(s.NextTicks) != 3 {
			t.Fatalf("next ticks %v, want 3", s.NextTicks)
		}
		for i, tick := range s.NextTicks {
			local := tick.In(madrid)
			if !tick.After(time.Now()) || local.Hour() != 9 || local.Minute() != 0 || local.Weekday() == time.Saturday ||
				local.Weekday() == time.Sunday || i > 0 && !tick.After(s.NextTicks[i-1]) {
				t.Errorf("next ticks %v: not weekdays at 9:00 in Madrid, in order", s.NextTicks)
			}
		}
		if want := "/v1/executions?workflow=" + wf + "&id=" + url.QueryEscape(wf+"-weekdays-"); s.Links.Executions != want {
			t.Errorf("executions link %q, want %q", s.Links.Executions, want)
		}

		// The same again: stored so already, nothing is sent.
		commands := h.lastCommand(t)
		again := api.schedule(api.create("admin", `{"workflow": "`+wf+`", "schedule": {"id": "weekdays", "cron": "0 9 * * 1-5",
			"timezone": "Europe/Madrid", "context": {"amount": 9007199254740993, "rate": 1.50}, "catchup": "latest"}}`), http.StatusOK)
		if again.ID != "weekdays" || h.lastCommand(t) != commands {
			t.Errorf("the same schedule again: %+v; commands %d, then %d", again, commands, h.lastCommand(t))
		}
		// Another schedule of that id replaces it.
		replaced := api.schedule(api.create("admin", `{"workflow": "`+wf+`", "schedule": {"id": "weekdays", "cron": "30 8 * * 1-5",
			"timezone": "Europe/Madrid"}}`), http.StatusOK)
		if replaced.Cron != "30 8 * * 1-5" || string(replaced.Context) != "{}" || replaced.Catchup != "none" ||
			!replaced.CreatedAt.Equal(*s.CreatedAt) {
			t.Errorf("replaced %+v", replaced)
		}
		// No id: a new one.
		fresh := api.schedule(api.create("admin", `{"workflow": "`+wf+`", "schedule": {"every": "1h", "paused": true}}`), http.StatusCreated)
		if len(fresh.ID) != 8 || fresh.Every != "1h0m0s" || fresh.EverySeconds != 3600 || !fresh.Paused || len(fresh.NextTicks) != 0 {
			t.Errorf("a schedule without id: %+v", fresh)
		}
		if resp := api.do("DELETE", fresh.Links.Self, "admin", ""); resp.status != http.StatusNoContent {
			t.Errorf("DELETE %s: %d %s", fresh.Links.Self, resp.status, resp.body)
		}
	})

	t.Run("read", func(t *testing.T) {
		var list struct {
			Schedules []scheduleDoc `json:"schedules"`
		}
		decode(t, api.do("GET", "/v1/schedules?workflow="+wf, "reader", ""), http.StatusOK, &list)
		if len(list.Schedules) != 1 || list.Schedules[0].ID != "weekdays" || list.Schedules[0].Cron != "30 8 * * 1-5" {
			t.Errorf("schedules of %s: %+v", wf, list.Schedules)
		}
		decode(t, api.do("GET", "/v1/schedules", "reader", ""), http.StatusOK, &list)
		if !slices.ContainsFunc(list.Schedules, func(s scheduleDoc) bool { return s.Workflow == wf && s.ID == "weekdays" }) {
			t.Errorf("every schedule: %+v", list.Schedules)
		}
		s := api.schedule(api.do("GET", self, "reader", ""), http.StatusOK)
		if s.ID != "weekdays" || len(s.NextTicks) != 3 || s.LastTick == nil || s.RecentExecutions == nil {
			t.Errorf("GET %s: %+v", self, s)
		}
		p := problem(t, api.do("GET", "/v1/schedules/"+wf+"/nightly", "reader", ""), http.StatusNotFound, gateway.TypeNotFound)
		if !strings.Contains(p.Detail, `"nightly"`) || !strings.Contains(p.Detail, "weekdays") {
			t.Errorf("detail %q does not name the schedule asked for and the workflow's", p.Detail)
		}
		problem(t, api.do("GET", "/v1/schedules/never-registered/weekdays", "reader", ""), http.StatusNotFound, gateway.TypeNotFound)
		problem(t, api.do("GET", "/v1/schedules?workflow=a.b", "reader", ""), http.StatusBadRequest, gateway.TypeInvalidRequest)
		problem(t, api.do("GET", self, "writer", ""), http.StatusForbidden, gateway.TypeForbidden)
	})

	t.Run("pause and resume", func(t *testing.T) {
		problem(t, api.do("POST", self+"/pause", "writer", ""), http.StatusForbidden, gateway.TypeForbidden)
		paused := api.schedule(api.do("POST", self+"/pause", "admin", ""), http.StatusOK)
		if !paused.Paused || len(paused.NextTicks) != 0 {
			t.Errorf("paused %+v", paused)
		}
		commands := h.lastCommand(t)
		if again := api.schedule(api.do("POST", self+"/pause", "admin", ""), http.StatusOK); !again.Paused || h.lastCommand(t) != commands {
			t.Errorf("paused again: %+v, a command sent", again)
		}
		resumed := api.schedule(api.do("POST", self+"/resume", "admin", ""), http.StatusOK)
		if resumed.Paused || len(resumed.NextTicks) != 3 || resumed.Cron != "30 8 * * 1-5" {
			t.Errorf("resumed %+v", resumed)
		}
		problem(t, api.do("POST", "/v1/schedules/"+wf+"/nightly/pause", "admin", ""), http.StatusNotFound, gateway.TypeNotFound)
	})

	t.Run("delete", func(t *testing.T) {
		problem(t, api.do("DELETE", self, "writer", ""), http.StatusForbidden, gateway.TypeForbidden)
		if resp := api.do("DELETE", self, "admin", ""); resp.status != http.StatusNoContent || len(resp.body) != 0 {
			t.Fatalf("DELETE: %d %s", resp.status, resp.body)
		}
		problem(t, api.do("GET", self, "reader", ""), http.StatusNotFound, gateway.TypeNotFound)
		problem(t, api.do("DELETE", self, "admin", ""), http.StatusNotFound, gateway.TypeNotFound)
	})

	t.Run("ticks", func(t *testing.T) {
		s := api.schedule(api.create("admin", `{"workflow": "`+wf+`", "schedule": {"id": "each-second", "every": "1s",
			"context": {"n": 9007199254740993}}}`), http.StatusCreated)
		if s.Every != "1s" || s.EverySeconds != 1 || len(s.NextTicks) != 3 {
			t.Errorf("answer %+v", s)
		}
		// The engine starts an execution at each tick; the audit store
		// records it with the schedule that started it.
		prefix := wf + "-each-second-"
		var ran executionItem
		deadline := time.Now().Add(time.Minute)
		for ran.ExecutionID == "" {
			for _, e := range h.list(t, url.Values{"workflow": {wf}, "id": {prefix}}).Executions {
				if e.Status == "succeeded" {
					ran = e
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("the schedule started no execution that succeeded within a minute")
			}
			time.Sleep(100 * time.Millisecond)
		}
		var doc struct {
			Execution struct {
				ScheduleID     string          `json:"schedule_id"`
				ScheduledAt    *time.Time      `json:"scheduled_at"`
				InitialContext json.RawMessage `json:"initial_context"`
				FinalContext   map[string]any  `json:"final_context"`
			} `json:"execution"`
		}
		decode(t, h.do(t, h.url, request{method: "GET", path: ran.Links.Self, key: h.key["reader"]}), http.StatusOK, &doc)
		if doc.Execution.ScheduleID != "each-second" || doc.Execution.ScheduledAt == nil || doc.Execution.FinalContext["ticked"] != true ||
			!strings.Contains(string(doc.Execution.InitialContext), "9007199254740993") {
			t.Errorf("execution %s: %+v", ran.ExecutionID, doc.Execution)
		}
		if want := prefix + doc.Execution.ScheduledAt.UTC().Format("20060102T150405Z"); ran.ExecutionID != want {
			t.Errorf("execution id %s, want %s", ran.ExecutionID, want)
		}
		got := api.schedule(api.do("GET", s.Links.Self, "reader", ""), http.StatusOK)
		if len(got.RecentExecutions) == 0 || !strings.HasPrefix(got.RecentExecutions[0].ExecutionID, prefix) ||
			got.LastTick == nil || !got.LastTick.After(*got.CreatedAt) {
			t.Errorf("schedule after its ticks: %+v", got)
		}
		if resp := api.do("DELETE", s.Links.Self, "admin", ""); resp.status != http.StatusNoContent {
			t.Errorf("DELETE: %d %s", resp.status, resp.body)
		}
	})
}

// TestSchedulesFromDefinition: a schedule the workflow's definition
// declares is listed as such, cannot be replaced through the API, and can
// be paused there.
func TestSchedulesFromDefinition(t *testing.T) {
	api := scheduleAPI{t: t, router: openapiRouter(t)}
	wf := "declared-" + uuid.NewString()[:8]
	h.register(t, scheduledYAML(wf)+"schedules:\n  - {id: nightly, cron: '0 2 * * *', paused: true}\n")
	t.Cleanup(func() { removeSchedules(wf, "nightly") })
	self := "/v1/schedules/" + wf + "/nightly"
	var s scheduleDoc
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := api.do("GET", self, "reader", "")
		if resp.status == http.StatusOK {
			s = api.schedule(resp, http.StatusOK)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the definition's schedule was not stored: %d %s", resp.status, resp.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !s.FromDefinition || !s.Paused || s.Cron != "0 2 * * *" {
		t.Errorf("the definition's schedule: %+v", s)
	}
	p := problem(t, api.create("admin", `{"workflow": "`+wf+`", "schedule": {"id": "nightly", "every": "1m"}}`),
		http.StatusConflict, gateway.TypeConflict)
	if !slices.Equal(p.fields(), []string{"schedule.id"}) || !strings.Contains(p.Detail, "definition") {
		t.Errorf("problem %+v", p)
	}
	if resumed := api.schedule(api.do("POST", self+"/resume", "admin", ""), http.StatusOK); resumed.Paused || len(resumed.NextTicks) != 3 {
		t.Errorf("resumed %+v", resumed)
	}
}

// TestSchedulePending: a change the engine has not stored within the wait
// is answered 202, the command on the bus as the engine reads it.
func TestSchedulePending(t *testing.T) {
	wf := "pending-" + uuid.NewString()[:8]
	h.register(t, scheduledYAML(wf))
	withoutEngine(t)
	api := scheduleAPI{t: t, router: openapiRouter(t)}
	commands := h.lastCommand(t)
	resp := api.create("admin", `{"workflow": "`+wf+`", "schedule": {"id": "hourly", "cron": "@hourly", "context": {"rate": 1.50}}}`)
	s := api.schedule(resp, http.StatusAccepted)
	if !s.Pending || s.ID != "hourly" || s.CreatedAt != nil || len(s.NextTicks) != 3 || resp.header.Get("Location") != s.Links.Self {
		t.Errorf("answer %s", resp.body)
	}
	var put novav1.PutSchedule
	got := takeCommand(t, commands, &put)
	if got.typ != bus.TypeSchedulePut || put.Workflow != wf || put.Schedule.GetId() != "hourly" || put.Schedule.GetCron() != "@hourly" ||
		string(jsonvalue.MustObject(put.Schedule.GetContext()).Bytes()) != `{"rate":1.50}` {
		t.Errorf("command %+v: %v", got, &put)
	}
}
