// The schedules page, #/schedules: every schedule (GET /v1/schedules) by
// workflow and id; ?workflow=NAME lists one workflow's, &id=ID marks one of
// them (an execution a schedule started links to it so), ?new=1 opens the
// form. Each row says when it ticks (a cron and its time zone, or an
// interval), its catch-up, its next tick (counting down, and the time) and
// its last with the execution that tick started, whether it is paused and
// whether the workflow's definition declares it; Pause, Resume and Delete
// change it. "New schedule" makes one (POST /v1/schedules), a 422 said next
// to the field it names. The list is read again every few seconds and when
// a tick it shows has passed; a schedule's last executions (GET
// /v1/schedules/{workflow}/{id}) are read when its last tick moved.

import { getJSON, Problem, send } from "./api.js";
import { deadline, dialogFor, tickDeadlines } from "./control.js";
import { Child, h, replace, running, since, stamp, startClock } from "./dom.js";
import { ExecutionItem, showError, statusBadge, WorkflowSummary } from "./executions.js";

// ago is the time since iso ("12 s ago"), kept current by the page's clock
// within a day, a date after.
function ago(iso: string): Child {
  const ms = Date.now() - Date.parse(iso);
  return Number.isFinite(ms) && ms >= 0 && ms < 86_400_000 ? [running("span", iso), " ago"] : since(iso);
}

// shape is a cell's markup without the texts the page's clock moves on, to
// tell whether a cell drawn again shows anything new.
function shape(el: Element): string {
  const c = el.cloneNode(true) as Element;
  for (const t of c.querySelectorAll("[data-since], [data-until]")) t.textContent = "";
  return c.outerHTML;
}

// ScheduleView is a schedule as the API shows it.
export interface ScheduleView {
  workflow: string;
  id: string;
  cron?: string;
  timezone?: string;
  every?: string;
  every_seconds?: number;
  catchup: string;
  paused: boolean;
  from_definition: boolean;
  created_at?: string;
  last_tick?: string;
  next_ticks: string[];
  pending?: boolean;
  links: { self: string; workflow: string; executions: string };
}

interface ScheduleDetail extends ScheduleView {
  recent_executions?: ExecutionItem[] | null;
}

// What the page knows of a schedule's executions: read at its last tick.
interface Runs {
  tick: string;
  recent: ExecutionItem[] | null;
}

// rereadEvery is how often the list is read again; a tick that passed
// reads it again sooner, at most every minReread.
const rereadEvery = 10_000;
const minReread = 2_000;
// detailsAtOnce is how many schedules' executions are read at a time.
const detailsAtOnce = 3;

const catchups: [string, string][] = [
  ["none", "ticks missed while NOVA was down (or while paused) are skipped"],
  ["latest", "the last tick missed while NOVA was down (or while paused) runs once it is back"],
  ["all", "every tick missed while NOVA was down (or while paused) runs once it is back"],
];

// schedulesLink is the schedules page marking schedule id of workflow.
export function schedulesLink(workflow: string, id: string): string {
  return `#/schedules?${new URLSearchParams({ workflow, id })}`;
}

// executionsOf is the console's list of the executions a schedule started:
// the engine names a tick's execution <workflow>-<id>-<tick>.
function executionsOf(s: ScheduleView): string {
  return `#/executions?${new URLSearchParams({ workflow: s.workflow, id: `${s.workflow}-${s.id}-` })}`;
}

// scheduleOfId reads the schedule and tick out of the id the engine gives a
// tick's execution, <workflow>-<schedule id>-<tick, UTC, 20060102T150405Z>:
// what an execution says before the audit store recorded its schedule_id.
export function scheduleOfId(executionId: string, workflow: string): { id: string; tick: string } | null {
  if (!workflow || !executionId.startsWith(workflow + "-")) return null;
  const m = /^([-_A-Za-z0-9]{1,64})-(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(executionId.slice(workflow.length + 1));
  return m ? { id: m[1]!, tick: `${m[2]}-${m[3]}-${m[4]}T${m[5]}:${m[6]}:${m[7]}Z` } : null;
}

// everyText is a Go duration as people write it: 2s, 15m, 1h30m, 24h.
export function everyText(every: string): string {
  return every.replace(/([hm])0s$/, "$1").replace(/h0m$/, "h");
}

// nextTick is the first of a schedule's next ticks still to come.
function nextTick(s: ScheduleView, now = Date.now()): string {
  return s.next_ticks.find((t) => Date.parse(t) > now) ?? "";
}

// tickExecution is the id of the execution a schedule's tick started.
function tickExecution(workflow: string, id: string, tick: string): string {
  const t = new Date(tick);
  if (Number.isNaN(t.getTime())) return "";
  return `${workflow}-${id}-${t.toISOString().replace(/\.\d+Z$/, "Z").replace(/[-:]/g, "")}`;
}

const keyOf = (s: { workflow: string; id: string }) => `${s.workflow}/${s.id}`;

export function schedulesPage(root: HTMLElement, params: URLSearchParams, signal: AbortSignal): void {
  const only = params.get("workflow") ?? "";
  let marked = only && params.get("id") ? `${only}/${params.get("id")}` : "";
  const filter = h("select", { id: "schedules-workflow", name: "workflow" }, h("option", { value: "" }, "all workflows"));
  if (only) filter.append(h("option", { value: only }, only));
  filter.value = only;
  filter.addEventListener("change", () => {
    location.hash = filter.value ? `#/schedules?${new URLSearchParams({ workflow: filter.value })}` : "#/schedules";
  });
  const rows = h("tbody");
  const note = h("p", { class: "note", role: "status", "aria-live": "polite" }, "Reading the schedules…");
  const message = h("div", { class: "form-message schedules-message", role: "alert" });
  const newButton = h("button", { type: "button", class: "new-schedule", "aria-expanded": "false" }, "New schedule");
  // tell says what an action did; it stays a while, then the count of
  // the schedules comes back.
  let told: ReturnType<typeof setTimeout> | undefined;
  const tell = (...what: Child[]) => {
    replace(note, what);
    note.dataset.keep = "1";
    clearTimeout(told);
    told = setTimeout(() => {
      delete note.dataset.keep;
      draw();
    }, 10_000);
  };
  signal.addEventListener("abort", () => clearTimeout(told));
  const created = (s: ScheduleView) => {
    marked = keyOf(s);
    scrolled = false;
    void load();
  };
  const form = scheduleForm(signal, only, tell, created, () => toggle(false));
  const toggle = (open: boolean) => {
    form.el.hidden = !open;
    newButton.setAttribute("aria-expanded", String(open));
    if (open) form.open();
  };
  newButton.addEventListener("click", () => toggle(form.el.hidden));

  replace(
    root,
    h(
      "div",
      { class: "page-head schedules-head" },
      h("h1", null, "Schedules"),
      h(
        "span",
        { class: "head-filter" },
        h("label", { for: filter.id }, "Workflow"),
        filter,
        only ? h("a", { href: "#/schedules", class: "clear" }, "All") : null,
      ),
      newButton,
    ),
    h(
      "p",
      { class: "note" },
      "A schedule starts a registered workflow on a cron expression or at an interval, with the context it names. A workflow's definition can declare its own (",
      h("code", null, "schedules:"),
      "); POST /v1/schedules and nova schedule add make more.",
    ),
    form.el,
    note,
    message,
    h(
      "div",
      { class: "table-scroll" },
      h(
        "table",
        { class: "schedules" },
        h(
          "thead",
          null,
          h("tr", null, ["Schedule", "When", "Next tick", "Last tick", "State", ""].map((t) => h("th", { scope: "col" }, t))),
        ),
        rows,
      ),
    ),
  );

  toggle(params.get("new") === "1");

  getJSON<{ workflows: WorkflowSummary[] }>("/v1/workflows", signal).then(
    (doc) => {
      for (const w of doc.workflows) if (w.name !== only) filter.append(h("option", { value: w.name }, w.name));
      filter.value = only;
      form.setWorkflows(doc.workflows.map((w) => w.name));
    },
    (e) => {
      if (!signal.aborted) showError(message, e);
    },
  );

  let schedules: ScheduleView[] = [];
  let listed = false;
  const runs = new Map<string, Runs>();
  const drawn = new Map<string, { tr: HTMLTableRowElement; sig: string }>();
  // busy: the schedules with a change in flight.
  const busy = new Set<string>();
  let scrolled = false;

  const act = async (s: ScheduleView, action: "pause" | "resume") => {
    const key = keyOf(s);
    busy.add(key);
    replace(message);
    draw();
    try {
      const a = await send<ScheduleView>("POST", `${s.links.self}/${action}`, undefined, signal);
      if (a.body) schedules = schedules.map((x) => (keyOf(x) === key ? a.body! : x));
      tell(
        a.status === 202
          ? `Sent: the engine has not ${action}d schedule ${s.id} of ${s.workflow} yet; it shows once it has.`
          : `Schedule ${s.id} of ${s.workflow} ${action === "pause" ? "paused: it starts nothing until resumed" : "resumed"}.`,
      );
    } catch (e) {
      if (!signal.aborted) showError(message, e);
    } finally {
      busy.delete(key);
      draw();
      void load();
    }
  };

  const remove = (s: ScheduleView) => {
    const key = keyOf(s);
    const confirm = h("button", { type: "submit", class: "danger" }, "Delete the schedule");
    const keep = h("button", { type: "button", class: "secondary" }, "Keep it");
    const problem = h("div", { class: "form-message", role: "alert" });
    const body = h(
      "form",
      { class: "delete-schedule-form", method: "dialog" },
      h(
        "p",
        null,
        "It starts no more executions of ",
        h("strong", null, s.workflow),
        "; the executions it started are kept.",
      ),
      s.from_definition
        ? h(
            "p",
            { class: "notice from-definition" },
            h("strong", null, "Declared in the definition. "),
            `The definition of ${s.workflow} declares this schedule: registering the workflow again brings it back as declared. To stop it for good, take it out of the definition's schedules (pausing it here keeps it stopped until then).`,
          )
        : null,
      problem,
      h("div", { class: "buttons" }, confirm, keep),
    );
    const d = dialogFor(`Delete schedule ${s.id} of ${s.workflow}?`, "delete-schedule-modal", signal, body);
    if (!d) return;
    keep.addEventListener("click", d.close);
    keep.focus();
    body.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      replace(problem);
      confirm.disabled = true;
      try {
        const a = await send<ScheduleView>("DELETE", s.links.self, undefined, signal);
        d.close();
        if (a.status === 202) {
          tell(`Sent: the engine has not deleted schedule ${s.id} of ${s.workflow} yet; it goes once it has.`);
        } else {
          schedules = schedules.filter((x) => keyOf(x) !== key);
          tell(`Schedule ${s.id} of ${s.workflow} deleted.`);
        }
        draw();
        void load();
      } catch (e) {
        if (signal.aborted) return;
        confirm.disabled = false;
        showError(problem, e);
      }
    });
  };

  const rowOf = (s: ScheduleView, tr: HTMLTableRowElement) => {
    const key = keyOf(s);
    const r = runs.get(key);
    const next = nextTick(s);
    const last = r?.recent?.[0];
    const wait = busy.has(key);
    tr.className = [s.paused ? "paused" : "active", key === marked ? "marked" : ""].filter(Boolean).join(" ");
    tr.dataset.workflow = s.workflow;
    tr.dataset.schedule = s.id;
    tr.dataset.paused = String(s.paused);
    const cells: Child[] = [
      h(
        "td",
        { class: "schedule-id" },
        h("a", { href: `#/workflows/${encodeURIComponent(s.workflow)}`, class: "workflow" }, s.workflow),
        h(
          "span",
          { class: "id-line" },
          h("code", { class: "id" }, s.id),
          s.from_definition
            ? [" ", h("span", { class: "tag from-definition", title: "Declared in the workflow's definition: registering it again sets it as declared" }, "from definition")]
            : null,
        ),
      ),
      h(
        "td",
        { class: "when" },
        h(
          "span",
          { class: "rule" },
          s.cron ? ["cron ", h("code", { class: "cron" }, s.cron)] : s.every ? ["every ", h("code", { class: "every" }, everyText(s.every))] : "—",
        ),
        s.cron ? h("span", { class: "meta zone", title: "the time zone the cron is read in" }, s.timezone || "UTC") : null,
        h("span", { class: "meta catchup", title: catchups.find(([c]) => c === s.catchup)?.[1] ?? "" }, `catch-up: ${s.catchup}`),
      ),
      h(
        "td",
        { class: "next-tick", title: s.next_ticks.length ? `next ticks: ${s.next_ticks.map(stamp).join(", ")}` : "" },
        s.paused
          ? h("span", { class: "note" }, "none while paused")
          : next
            ? h(
                "span",
                { class: "deadline" },
                // The page's clock writes and moves on the relative time.
                h("strong", { class: "next-in", "data-until": Date.parse(next) }),
                h("time", { datetime: next, title: next }, stamp(next)),
              )
            : h("span", { class: "note" }, s.pending ? "once the engine stored it" : "due"),
      ),
      h(
        "td",
        { class: "last-tick" },
        r && r.recent && r.recent.length === 0
          ? h("span", { class: "note", title: s.last_tick ? `missed ticks are counted from ${s.last_tick}` : "" }, "none yet")
          : s.last_tick
            ? h("time", { datetime: s.last_tick, title: s.last_tick }, ago(s.last_tick))
            : "—",
        last
          ? h(
              "span",
              { class: "last-run" },
              statusBadge(last.status),
              " ",
              h("a", { href: `#/executions/${encodeURIComponent(last.execution_id)}`, title: last.execution_id, class: "last-execution" }, last.started_at ? stamp(last.started_at) : "execution"),
            )
          : null,
      ),
      h(
        "td",
        { class: "state" },
        s.pending
          ? h("span", { class: "badge status-pending" }, "… pending")
          : s.paused
            ? h("span", { class: "badge status-paused" }, "‖ paused")
            : h("span", { class: "badge status-active" }, "● active"),
      ),
      h(
        "td",
        { class: "actions" },
        h(
          "span",
          { class: "row-actions" },
          h(
            "button",
            {
              type: "button",
              class: "secondary pause-resume",
              "data-action": s.paused ? "resume" : "pause",
              disabled: wait,
              "aria-label": `${s.paused ? "Resume" : "Pause"} schedule ${s.id} of ${s.workflow}`,
              onclick: () => {
                const now = current(s);
                void act(now, now.paused ? "resume" : "pause");
              },
            },
            s.paused ? "Resume" : "Pause",
          ),
          h(
            "button",
            {
              type: "button",
              class: "secondary danger delete",
              "data-action": "delete",
              disabled: wait,
              "aria-label": `Delete schedule ${s.id} of ${s.workflow}`,
              onclick: () => remove(current(s)),
            },
            "Delete…",
          ),
        ),
        h("a", { href: executionsOf(s), class: "executions-link", title: `The executions schedule ${s.id} started` }, "Executions →"),
      ),
    ];
    // The row is drawn again in place, a cell only where what it shows
    // changed: the link or button a person presses stays the element they
    // press (a row drawn whole each second lost a click whose press and
    // release straddled it), and a button that had the focus keeps it.
    const focused = (document.activeElement as HTMLElement | null)?.closest?.("[data-action]");
    const action = focused && tr.contains(focused) ? focused.getAttribute("data-action") : "";
    const old = [...tr.children];
    if (old.length !== cells.length) {
      replace(tr, cells);
    } else {
      cells.forEach((c, i) => {
        if (shape(c as Element) !== shape(old[i])) old[i].replaceWith(c as Element);
      });
    }
    if (action && !tr.contains(document.activeElement)) {
      const again = tr.querySelector<HTMLElement>(`[data-action="${action}"]`) ?? tr.querySelector<HTMLElement>("[data-action]");
      again?.focus({ preventScroll: true });
    }
  };

  // current is the schedule as last read (a row's buttons outlive the read
  // that drew them).
  const current = (s: ScheduleView): ScheduleView => schedules.find((x) => keyOf(x) === keyOf(s)) ?? s;

  const draw = () => {
    const now = Date.now();
    const want: HTMLTableRowElement[] = [];
    for (const s of schedules) {
      const key = keyOf(s);
      // The row is drawn again when what it shows changed (the clock moves
      // "2 s ago" and "in 3 s" on).
      const sig = JSON.stringify([s, runs.get(key) ?? null, nextTick(s, now), busy.has(key), key === marked]);
      let d = drawn.get(key);
      if (!d) {
        d = { tr: h("tr"), sig: "" };
        drawn.set(key, d);
      }
      if (d.sig !== sig) {
        rowOf(s, d.tr);
        d.sig = sig;
      }
      want.push(d.tr);
    }
    for (const [key, d] of drawn) if (!want.includes(d.tr)) drawn.delete(key);
    const have = [...rows.children];
    if (have.length !== want.length || have.some((tr, i) => tr !== want[i])) {
      replace(
        rows,
        want.length
          ? want
          : listed
            ? h(
                "tr",
                { class: "empty" },
                h(
                  "td",
                  { colspan: 6, class: "note" },
                  only ? `${only} has no schedule. ` : "No schedule yet. ",
                  "Make one with New schedule, declare one in a definition's schedules, or run nova schedule add.",
                ),
              )
            : null,
      );
    }
    tickDeadlines(now);
    if (!listed) return;
    const paused = schedules.filter((s) => s.paused).length;
    if (!note.dataset.keep) {
      replace(
        note,
        `${schedules.length} schedule${schedules.length === 1 ? "" : "s"}`,
        only ? ` of ${only}` : "",
        paused ? `, ${paused} paused` : "",
        " · read again every few seconds",
      );
    }
    const m = marked ? drawn.get(marked)?.tr : undefined;
    if (m && !scrolled) {
      scrolled = true;
      m.scrollIntoView({ block: "nearest" });
    }
  };

  let loading = false;
  let again = false;
  let lastRead = 0;
  const load = async (): Promise<void> => {
    if (loading) {
      again = true;
      return;
    }
    loading = true;
    lastRead = Date.now();
    try {
      const q = only ? `?${new URLSearchParams({ workflow: only })}` : "";
      const doc = await getJSON<{ schedules: ScheduleView[] }>(`/v1/schedules${q}`, signal);
      schedules = doc.schedules;
      listed = true;
      // A read that failed before is told no more.
      if (message.dataset.from === "load") {
        replace(message);
        delete message.dataset.from;
      }
      draw();
      void readRuns();
    } catch (e) {
      if (!signal.aborted) {
        showError(message, e);
        message.dataset.from = "load";
      }
    } finally {
      loading = false;
      if (again && !signal.aborted) {
        again = false;
        void load();
      }
    }
  };

  // readRuns reads the last executions of each schedule whose last tick
  // moved since they were read, whose last execution was running, or
  // whose last tick's execution is not listed yet (the audit store records
  // it a moment after the tick).
  let reading = false;
  const readRuns = async () => {
    if (reading) return;
    reading = true;
    try {
      const todo = schedules.filter((s) => {
        const r = runs.get(keyOf(s));
        const tick = s.last_tick ?? "";
        return (
          !r ||
          r.tick !== tick ||
          r.recent?.[0]?.status === "running" ||
          (Date.now() - Date.parse(tick) < 30_000 && r.recent?.[0]?.execution_id !== tickExecution(s.workflow, s.id, tick))
        );
      });
      const one = async (s: ScheduleView) => {
        try {
          const d = await getJSON<ScheduleDetail>(s.links.self, signal);
          runs.set(keyOf(s), { tick: d.last_tick ?? "", recent: d.recent_executions ?? null });
        } catch (e) {
          if (signal.aborted) return;
          // Deleted meanwhile: the next read of the list drops it.
          if (!(e instanceof Problem && e.status === 404)) showError(message, e);
        }
        draw();
      };
      const queue = [...todo];
      await Promise.all(
        Array.from({ length: detailsAtOnce }, async () => {
          for (let s = queue.shift(); s && !signal.aborted; s = queue.shift()) await one(s);
        }),
      );
    } finally {
      reading = false;
    }
  };

  startClock(signal, () => {
    const now = Date.now();
    // A tick that passed: its execution, and the ticks after it.
    const passed = schedules.some((s) => !s.paused && s.next_ticks.length > 0 && Date.parse(s.next_ticks[0]!) < now - 1000);
    if ((passed && now - lastRead >= minReread) || now - lastRead >= rereadEvery) void load();
    else draw();
  });
  void load();
}

// The "New schedule" form: a workflow, cron (and its time zone) or an
// interval, catch-up, the context as JSON, an id and whether it starts
// paused. The context is sent as typed (numbers keep their digits).
function scheduleForm(
  signal: AbortSignal,
  workflow: string,
  tell: (...what: Child[]) => void,
  onCreated: (s: ScheduleView) => void,
  onClose: () => void,
): { el: HTMLFormElement; open: () => void; setWorkflows: (names: string[]) => void } {
  type Field = { wrap: HTMLElement; input: HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement; error: HTMLElement };
  const field = (
    name: string,
    label: string,
    input: HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement,
    help: Child,
  ): Field => {
    const error = h("p", { class: "field-error", id: `${input.id}-error`, "aria-live": "polite" });
    input.setAttribute("aria-describedby", `${input.id}-error${help ? ` ${input.id}-help` : ""}`);
    const wrap = h(
      "div",
      { class: "schedule-field", "data-field": name },
      h("label", { for: input.id }, label),
      input,
      error,
      help ? h("small", { class: "help", id: `${input.id}-help` }, help) : null,
    );
    return { wrap, input, error };
  };

  const wfSelect = h("select", { id: "schedule-workflow", name: "workflow", required: true }, h("option", { value: "" }, "— choose a workflow —"));
  if (workflow) {
    wfSelect.append(h("option", { value: workflow }, workflow));
    wfSelect.value = workflow;
  }
  const fWorkflow = field("workflow", "Workflow", wfSelect, null);

  const kindCron = h("input", { type: "radio", id: "schedule-kind-cron", name: "kind", value: "cron", checked: true });
  const kindEvery = h("input", { type: "radio", id: "schedule-kind-every", name: "kind", value: "every" });
  const kindError = h("p", { class: "field-error", id: "schedule-kind-error", "aria-live": "polite" });
  const kind = h(
    "fieldset",
    { class: "schedule-kind", "data-field": "schedule", "aria-describedby": kindError.id },
    h("legend", null, "Runs"),
    h("span", { class: "check" }, kindCron, h("label", { for: kindCron.id }, "on a cron expression")),
    h("span", { class: "check" }, kindEvery, h("label", { for: kindEvery.id }, "at an interval")),
    kindError,
  );

  const fCron = field(
    "cron",
    "Cron",
    h("input", { id: "schedule-cron", name: "cron", type: "text", placeholder: "0 9 * * 1-5", autocomplete: "off", spellcheck: false }),
    ["five fields: minute hour day-of-month month day-of-week (", h("code", null, "0 9 * * 1-5"), ": 9:00 on weekdays), or ", h("code", null, "@hourly"), ", ", h("code", null, "@daily"), ", ", h("code", null, "@weekly"), ", ", h("code", null, "@monthly"), ", ", h("code", null, "@yearly")],
  );
  const here = Intl.DateTimeFormat().resolvedOptions().timeZone;
  const zones = h("datalist", { id: "schedule-zones" });
  const tzInput = h("input", { id: "schedule-timezone", name: "timezone", type: "text", list: zones.id, placeholder: "UTC", autocomplete: "off", spellcheck: false });
  const fZone = field("timezone", "Time zone", tzInput, [
    "the IANA zone the cron is read in; UTC when empty",
    here && here !== "UTC" ? [" (this browser's: ", h("button", { type: "button", class: "link use-zone", onclick: () => (tzInput.value = here) }, here), ")"] : "",
  ]);
  fZone.wrap.append(zones);
  const fEvery = field(
    "every",
    "Every",
    h("input", { id: "schedule-every", name: "every", type: "text", placeholder: "15m", autocomplete: "off", spellcheck: false }),
    ["a duration (", h("code", null, "90s"), ", ", h("code", null, "15m"), ", ", h("code", null, "1h30m"), ", ", h("code", null, "1d"), ") or seconds; at least 1 s, counted from when it is made"],
  );
  const catchup = h("select", { id: "schedule-catchup", name: "catchup" }, catchups.map(([v]) => h("option", { value: v }, v)));
  const catchupHelp = h("span");
  const fCatchup = field("catchup", "Catch-up", catchup, catchupHelp);
  const sayCatchup = () => replace(catchupHelp, catchups.find(([v]) => v === catchup.value)?.[1] ?? "");
  catchup.addEventListener("change", sayCatchup);
  sayCatchup();
  const context = h("textarea", { id: "schedule-context", name: "context", rows: 3, spellcheck: false }, "{}");
  const fContext = field("context", "Context (a JSON object)", context, "each run starts with it");
  const fId = field(
    "id",
    "Id",
    h("input", { id: "schedule-id", name: "id", type: "text", placeholder: "a new one (8 hex digits) when empty", maxlength: 64, autocomplete: "off", spellcheck: false }),
    "letters, digits, - and _, at most 64; the id of one of the workflow's schedules replaces it",
  );
  const paused = h("input", { id: "schedule-paused", name: "paused", type: "checkbox" });
  const message = h("div", { class: "form-message", role: "alert" });
  const submit = h("button", { type: "submit" }, "Create schedule");
  const cancel = h("button", { type: "button", class: "secondary" }, "Cancel");
  const fields: Record<string, Field> = {
    workflow: fWorkflow,
    "schedule.cron": fCron,
    "schedule.timezone": fZone,
    "schedule.every": fEvery,
    "schedule.catchup": fCatchup,
    "schedule.context": fContext,
    "schedule.id": fId,
  };

  const form = h(
    "form",
    { class: "start schedule-form", novalidate: true, "aria-label": "New schedule" },
    h("h2", null, "New schedule"),
    h("div", { class: "schedule-grid" }, fWorkflow.wrap, fId.wrap),
    kind,
    h("div", { class: "schedule-grid" }, fCron.wrap, fZone.wrap, fEvery.wrap, fCatchup.wrap),
    fContext.wrap,
    h("span", { class: "check" }, paused, h("label", { for: paused.id }, "Create it paused ", h("span", { class: "note label-note" }, "(it starts nothing until resumed)"))),
    h("div", { class: "buttons" }, submit, cancel),
    message,
  );
  const showKind = () => {
    const cron = kindCron.checked;
    fCron.wrap.hidden = !cron;
    fZone.wrap.hidden = !cron;
    fEvery.wrap.hidden = cron;
  };
  kindCron.addEventListener("change", showKind);
  kindEvery.addEventListener("change", showKind);
  showKind();

  const clear = () => {
    replace(message);
    replace(kindError);
    kind.removeAttribute("aria-invalid");
    for (const f of Object.values(fields)) {
      replace(f.error);
      f.input.removeAttribute("aria-invalid");
    }
  };
  const mark = (f: Field | null, detail: string): boolean => {
    if (!f) return false;
    replace(f.error, detail);
    f.input.setAttribute("aria-invalid", "true");
    return true;
  };
  const focusInvalid = () =>
    (form.querySelector<HTMLElement>('input[aria-invalid="true"], select[aria-invalid="true"], textarea[aria-invalid="true"]') ??
      (kind.getAttribute("aria-invalid") === "true" ? kindCron : null))?.focus();
  cancel.addEventListener("click", () => {
    clear();
    onClose();
  });

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clear();
    const cron = kindCron.checked;
    const when = (cron ? fCron : fEvery).input.value.trim();
    let bad = false;
    if (!wfSelect.value) bad = mark(fWorkflow, "choose the workflow it starts") || bad;
    if (!when) bad = mark(cron ? fCron : fEvery, cron ? "a cron expression is needed" : "an interval is needed") || bad;
    const text = context.value.trim() || "{}";
    try {
      const c = JSON.parse(text);
      if (c === null || typeof c !== "object" || Array.isArray(c)) bad = mark(fContext, 'must be a JSON object, like {"total": 1500}') || bad;
    } catch (e) {
      bad = mark(fContext, `not JSON: ${(e as Error).message}`) || bad;
    }
    if (bad) {
      focusInvalid();
      return;
    }
    const parts: string[] = [];
    const id = fId.input.value.trim();
    if (id) parts.push(`"id": ${JSON.stringify(id)}`);
    if (cron) {
      parts.push(`"cron": ${JSON.stringify(when)}`);
      if (tzInput.value.trim()) parts.push(`"timezone": ${JSON.stringify(tzInput.value.trim())}`);
    } else {
      // Seconds as a number, a duration as text.
      parts.push(`"every": ${/^\d+(\.\d+)?$/.test(when) ? when : JSON.stringify(when)}`);
    }
    parts.push(`"catchup": ${JSON.stringify(catchup.value)}`);
    if (paused.checked) parts.push(`"paused": true`);
    parts.push(`"context": ${text}`);
    const body = `{"workflow": ${JSON.stringify(wfSelect.value)}, "schedule": {${parts.join(", ")}}}`;
    submit.disabled = true;
    try {
      const a = await send<ScheduleView>("POST", "/v1/schedules", body, signal);
      const s = a.body!;
      const next = nextTick(s);
      tell(
        a.status === 202
          ? `Sent: the engine has not stored schedule ${s.id} of ${s.workflow} yet; it shows once it has.`
          : [
              `Schedule ${s.id} of ${s.workflow} ${a.status === 201 ? "created" : "saved (it replaced the one of that id, or was so already)"}`,
              s.paused ? ", paused." : next ? [": its first tick ", deadline(next, true), "."] : ".",
            ],
      );
      form.reset();
      if (workflow) wfSelect.value = workflow;
      showKind();
      sayCatchup();
      onClose();
      onCreated(s);
    } catch (e) {
      if (signal.aborted) return;
      if (e instanceof Problem && e.errors.length) {
        const rest = e.errors.filter((fe) => {
          if (fe.field !== "schedule") return !mark(fields[fe.field] ?? null, fe.detail);
          // Both cron and every, or neither: about the schedule as a whole.
          replace(kindError, fe.detail);
          kind.setAttribute("aria-invalid", "true");
          return false;
        });
        if (rest.length) showError(message, new Problem(e.status, e.title, e.detail, rest));
        else replace(message, e.status === 422 ? "The engine could not run this schedule: see the field marked." : e.detail || e.title);
        focusInvalid();
      } else {
        showError(message, e);
      }
    } finally {
      submit.disabled = false;
    }
  });

  let zonesFilled = false;
  return {
    el: form,
    open: () => {
      if (!zonesFilled) {
        zonesFilled = true;
        try {
          replace(zones, Intl.supportedValuesOf("timeZone").map((z) => h("option", { value: z })));
        } catch {
          // An older browser: the zone is typed.
        }
      }
      wfSelect.focus();
    },
    setWorkflows: (names) => {
      const chosen = wfSelect.value;
      for (const n of names) if (n !== workflow) wfSelect.append(h("option", { value: n }, n));
      wfSelect.value = chosen;
    },
  };
}
