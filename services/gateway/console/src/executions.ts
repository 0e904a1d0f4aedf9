// The executions page, #/executions: every execution, newest first, a page
// at a time through the API's cursor, found by id (or its first
// characters), workflow, status and start time. The filters and the page
// are in the URL (?id=&workflow=&status=&since=&until=&cursor=), so a
// search can be bookmarked or sent. The first page is kept up to date live.

import { getJSON, Problem, stream } from "./api.js";
import { cut, duration, fromLocalInput, h, localInput, money, replace, shortID, since, stamp } from "./dom.js";

export interface ExecutionItem {
  execution_id: string;
  workflow_name: string;
  status: string;
  error?: string;
  started_at?: string;
  completed_at?: string;
  duration_ms?: number;
  cost_usd?: number;
  model_calls?: number;
}

export interface ExecutionList {
  executions: ExecutionItem[];
  next_cursor?: string;
}

export interface WorkflowSummary {
  name: string;
  revision: number;
  node_count: number;
  updated_at?: string;
}

// RefineWorkflow is the workflow name of a refinement's execution.
export const RefineWorkflow = "refine";

const statuses = ["", "running", "succeeded", "failed", "cancelled"];

// statusBadge shows a status as a word and a symbol, not by colour alone.
export function statusBadge(status: string): HTMLElement {
  const symbol: Record<string, string> = {
    running: "◔", succeeded: "✓", success: "✓", failed: "✗", error: "✗", pending: "○", skipped: "–",
    cancelled: "⊘", carried_over: "↷", waiting: "◷", retrying: "↻",
  };
  return h("span", { class: `badge status-${status}` }, `${symbol[status] ?? "•"} ${status.replace(/_/g, " ")}`);
}

// workflowCell names an execution's workflow, linking to its page; a
// refinement is no registered workflow.
export function workflowCell(name: string): HTMLElement {
  return name === RefineWorkflow
    ? h("span", { class: "tag", title: "a field-feedback refinement (POST /v1/refine)" }, "refinement")
    : h("a", { href: `#/workflows/${encodeURIComponent(name)}` }, name);
}

// spendCell is what an execution's model calls cost, or a dash for none.
export function spendCell(e: { cost_usd?: number; model_calls?: number }): HTMLElement {
  const n = Number(e.model_calls ?? 0);
  return n
    ? h("td", { class: "num", title: `${n} model call${n === 1 ? "" : "s"}` }, `${money(e.cost_usd)} · ${n} call${n === 1 ? "" : "s"}`)
    : h("td", { class: "num note" }, "—");
}

// executionRow is one execution in a table of them (executionsTable).
export function executionRow(e: ExecutionItem, withWorkflow = true): HTMLElement {
  return h(
    "tr",
    { "data-execution": e.execution_id, "data-status": e.status },
    h("td", null, h("a", { href: `#/executions/${encodeURIComponent(e.execution_id)}`, title: e.execution_id }, h("code", null, shortID(e.execution_id)))),
    withWorkflow ? h("td", null, workflowCell(e.workflow_name)) : null,
    h("td", null, statusBadge(e.status)),
    h("td", { title: e.started_at ?? "" }, since(e.started_at)),
    h("td", { class: "num" }, duration(e.duration_ms)),
    spendCell(e),
    h("td", { class: "error" }, cut(e.error ?? "", 100)),
  );
}

export function executionsTable(rows: HTMLElement, withWorkflow = true): HTMLElement {
  const cols = ["Execution", withWorkflow ? "Workflow" : "", "Status", "Started", "Duration", "Model cost", "Error"].filter(Boolean);
  return h(
    "div",
    { class: "table-scroll" },
    h("table", { class: "executions" }, h("thead", null, h("tr", null, cols.map((t) => h("th", { scope: "col" }, t)))), rows),
  );
}

// pageSize is how many executions a page shows.
const pageSize = 50;
// retryAfter is how long the list waits before it opens its stream again.
const retryAfter = 2000;
// filterNames are the URL's filters, as GET /v1/executions names them.
const filterNames = ["id", "workflow", "status", "since", "until"] as const;

export function executionsPage(root: HTMLElement, params: URLSearchParams, signal: AbortSignal): void {
  const f = Object.fromEntries(filterNames.map((n) => [n, params.get(n) ?? ""])) as Record<(typeof filterNames)[number], string>;
  const cursor = params.get("cursor") ?? "";
  const search = h("input", {
    id: "filter-id",
    name: "id",
    type: "search",
    value: f.id,
    placeholder: "execution id or its first characters",
    autocomplete: "off",
    spellcheck: false,
  });
  const workflow = h(
    "select",
    { id: "filter-workflow", name: "workflow" },
    h("option", { value: "" }, "all workflows"),
    h("option", { value: RefineWorkflow }, "refinements"),
  );
  if (f.workflow && f.workflow !== RefineWorkflow) workflow.append(h("option", { value: f.workflow }, f.workflow));
  workflow.value = f.workflow;
  const status = h("select", { id: "filter-status", name: "status" }, statuses.map((s) => h("option", { value: s }, s || "any status")));
  status.value = f.status;
  const from = h("input", { id: "filter-since", name: "since", type: "datetime-local", value: f.since ? localInput(f.since) : "" });
  const to = h("input", { id: "filter-until", name: "until", type: "datetime-local", value: f.until ? localInput(f.until) : "" });
  const rows = h("tbody");
  const note = h("p", { class: "note", role: "status", "aria-live": "polite" });
  const pager = h("nav", { class: "pager", "aria-label": "Pages" });

  const go = (extra: Record<string, string> = {}) => {
    const q = new URLSearchParams();
    const values: Record<string, string> = {
      id: search.value.trim(),
      workflow: workflow.value,
      status: status.value,
      since: fromLocalInput(from.value),
      until: fromLocalInput(to.value),
      ...extra,
    };
    for (const [k, v] of Object.entries(values)) if (v) q.set(k, v);
    location.hash = `#/executions${q.size ? "?" + q : ""}`;
  };
  const form = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Find executions" },
    h("span", { class: "field field-id" }, h("label", { for: search.id }, "Id"), search),
    h("span", { class: "field" }, h("label", { for: workflow.id }, "Workflow"), workflow),
    h("span", { class: "field" }, h("label", { for: status.id }, "Status"), status),
    h("span", { class: "field" }, h("label", { for: from.id }, "Started from"), from),
    h("span", { class: "field" }, h("label", { for: to.id }, "to"), to),
    h("span", { class: "buttons" }, h("button", { type: "submit" }, "Find"), h("a", { href: "#/executions", class: "clear" }, "Clear")),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    go();
  });
  for (const el of [workflow, status]) el.addEventListener("change", () => go());

  const filtered = filterNames.some((n) => f[n]);
  replace(
    root,
    h("div", { class: "page-head" }, h("h1", null, "Executions"), h("a", { href: "#/workflows", class: "action" }, "Start a workflow →")),
    form,
    note,
    executionsTable(rows),
    pager,
  );

  getJSON<{ workflows: WorkflowSummary[] }>("/v1/workflows", signal)
    .then((doc) => {
      for (const w of doc.workflows) if (w.name !== f.workflow) workflow.append(h("option", { value: w.name }, w.name));
      workflow.value = f.workflow;
    })
    .catch((e) => showError(note, e));

  // The first page is read once, then kept up to date from GET
  // /v1/executions/events (every execution's start and end), opened first
  // so that nothing between the two is missed; its events wait until the
  // page is read. A finished execution never goes back to running (an
  // event older than the list's answer). Later pages are as read.
  const items = new Map<string, ExecutionItem>();
  let listed = false;
  let pending: ExecutionItem[] = [];
  let lastEventId = "";
  let next = "";
  const matches = (e: ExecutionItem) =>
    (!f.workflow || e.workflow_name === f.workflow) &&
    (!f.status || e.status === f.status) &&
    (!f.id || e.execution_id.startsWith(f.id)) &&
    (!f.since || (!!e.started_at && Date.parse(e.started_at) >= Date.parse(f.since))) &&
    (!f.until || (!!e.started_at && Date.parse(e.started_at) < Date.parse(f.until)));
  const draw = () => {
    const shown = [...items.values()]
      .filter((e) => cursor || matches(e))
      .sort((a, b) => (b.started_at ?? "").localeCompare(a.started_at ?? "") || b.execution_id.localeCompare(a.execution_id))
      .slice(0, pageSize);
    replace(rows, shown.map((e) => executionRow(e)));
    if (!listed) return;
    if (shown.length === 0) {
      replace(note, filtered ? ["No execution matches. ", h("a", { href: "#/executions" }, "Clear the filters")] : "No executions yet.");
    } else {
      const first = shown[shown.length - 1]?.started_at;
      const last = shown[0]?.started_at;
      replace(
        note,
        `${shown.length} execution${shown.length === 1 ? "" : "s"}`,
        first && last ? `, started ${stamp(first)} to ${stamp(last)}` : "",
        cursor ? "" : " · kept up to date live",
      );
    }
    replace(
      pager,
      cursor ? h("a", { href: "#/executions" + queryOf(f), class: "newest" }, "← Newest") : null,
      next ? h("button", { type: "button", class: "secondary older", onclick: () => go({ cursor: next }) }, "Older →") : null,
    );
  };
  const upsert = (e: ExecutionItem) => {
    const had = items.get(e.execution_id);
    if (had && had.status !== "running" && e.status === "running") return;
    items.set(e.execution_id, { ...had, ...e, cost_usd: Math.max(Number(had?.cost_usd ?? 0), Number(e.cost_usd ?? 0)) });
  };

  const follow = async () => {
    const q = new URLSearchParams();
    if (f.workflow) q.set("workflow", f.workflow);
    while (!signal.aborted) {
      try {
        await stream(`/v1/executions/events${q.size ? "?" + q : ""}`, { signal, lastEventId }, (ev) => {
          lastEventId = ev.id || lastEventId;
          let item: ExecutionItem;
          try {
            item = JSON.parse(ev.data) as ExecutionItem;
          } catch {
            return;
          }
          if (!listed) {
            pending.push(item);
            return;
          }
          upsert(item);
          draw();
        });
      } catch (e) {
        if (signal.aborted || (e instanceof Problem && (e.status === 401 || e.status === 403))) return;
      }
      await new Promise((r) => setTimeout(r, retryAfter));
    }
  };
  if (!cursor) void follow();

  const q = new URLSearchParams({ limit: String(pageSize) });
  for (const n of filterNames) if (f[n]) q.set(n, f[n]);
  if (cursor) q.set("cursor", cursor);
  replace(note, "Reading…");
  getJSON<ExecutionList>(`/v1/executions?${q}`, signal).then(
    (doc) => {
      for (const e of doc.executions) upsert(e);
      next = doc.next_cursor ?? "";
      listed = true;
      for (const e of pending) upsert(e);
      pending = [];
      draw();
    },
    (e) => {
      if (!signal.aborted) showError(note, e);
    },
  );
  // "5 s ago" moves on without a request.
  const timer = setInterval(draw, 10_000);
  signal.addEventListener("abort", () => clearInterval(timer));
}

function queryOf(f: Record<string, string>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(f)) if (v) q.set(k, v);
  return q.size ? "?" + q : "";
}

export function showError(el: HTMLElement, e: unknown): void {
  if (e instanceof Problem) {
    replace(
      el,
      h("strong", null, e.title),
      e.detail ? ` ${e.detail}` : "",
      e.errors.length ? h("ul", null, e.errors.map((fe) => h("li", null, h("code", null, fe.field), `: ${fe.detail}`))) : null,
    );
  } else if (e instanceof Error && e.name !== "AbortError") {
    replace(el, e.message);
  }
}
