// The executions page: the list (kept up to date live while it is open), its
// filters, and a form that starts a registered workflow.

import { getJSON, postJSON, Problem, stream } from "./api.js";
import { cut, duration, h, replace, since } from "./dom.js";

export interface ExecutionItem {
  execution_id: string;
  workflow_name: string;
  status: string;
  error?: string;
  started_at?: string;
  completed_at?: string;
  duration_ms?: number;
}

interface ExecutionList {
  executions: ExecutionItem[];
  next_cursor?: string;
}

interface WorkflowSummary {
  name: string;
  revision: number;
  node_count: number;
}

const statuses = ["", "running", "succeeded", "failed"];

// statusBadge shows a status as a word and a symbol, not by colour alone.
export function statusBadge(status: string): HTMLElement {
  const symbol: Record<string, string> = { running: "◔", succeeded: "✓", success: "✓", failed: "✗", error: "✗", pending: "○", skipped: "–" };
  return h("span", { class: `badge status-${status}` }, `${symbol[status] ?? "•"} ${status}`);
}

// maxRows is how many executions the list shows.
const maxRows = 50;
// retryAfter is how long the list waits before it opens its stream again.
const retryAfter = 2000;

export function executionsPage(root: HTMLElement, params: URLSearchParams, signal: AbortSignal): void {
  const workflow = h("select", { id: "filter-workflow", name: "workflow" }, h("option", { value: "" }, "all workflows"));
  const status = h(
    "select",
    { id: "filter-status", name: "status" },
    statuses.map((s) => h("option", { value: s }, s || "any status")),
  );
  workflow.value = params.get("workflow") ?? "";
  status.value = params.get("status") ?? "";
  const rows = h("tbody");
  const note = h("p", { class: "note", role: "status", "aria-live": "polite" });
  const table = h(
    "table",
    { class: "executions" },
    h("thead", null, h("tr", null, ["Execution", "Workflow", "Status", "Started", "Duration", "Error"].map((t) => h("th", { scope: "col" }, t)))),
    rows,
  );
  const onFilter = () => {
    const q = new URLSearchParams();
    if (workflow.value) q.set("workflow", workflow.value);
    if (status.value) q.set("status", status.value);
    location.hash = `#/executions${q.size ? "?" + q : ""}`;
  };
  workflow.addEventListener("change", onFilter);
  status.addEventListener("change", onFilter);

  const start = startForm(signal);
  replace(
    root,
    h("h1", null, "Executions"),
    start.form,
    h(
      "div",
      { class: "filters" },
      h("label", { for: "filter-workflow" }, "Workflow "),
      workflow,
      h("label", { for: "filter-status" }, " Status "),
      status,
    ),
    note,
    table,
  );

  getJSON<{ workflows: WorkflowSummary[] }>("/v1/workflows", signal)
    .then((doc) => {
      for (const w of doc.workflows) {
        workflow.append(h("option", { value: w.name }, w.name));
      }
      workflow.value = params.get("workflow") ?? "";
      start.setWorkflows(doc.workflows);
    })
    .catch((e) => showError(note, e));

  // The list is read once, then kept up to date from GET
  // /v1/executions/events (every execution's start and end), opened first
  // so that nothing between the two is missed; its events wait until the
  // list is read. A finished execution never goes back to running (an
  // event older than the list's answer).
  const items = new Map<string, ExecutionItem>();
  const filterWorkflow = params.get("workflow") ?? "";
  const filterStatus = params.get("status") ?? "";
  // listed: the list has been read; pending: events that came before it.
  let listed = false;
  let pending: ExecutionItem[] = [];
  let lastEventId = "";
  const draw = () => {
    const shown = [...items.values()]
      .filter((e) => !filterStatus || e.status === filterStatus)
      .sort((a, b) => (b.started_at ?? "").localeCompare(a.started_at ?? ""))
      .slice(0, maxRows);
    replace(
      rows,
      shown.map((e) =>
        h(
          "tr",
          { "data-execution": e.execution_id, "data-status": e.status },
          h("td", null, h("a", { href: `#/executions/${encodeURIComponent(e.execution_id)}` }, e.execution_id.slice(0, 8))),
          h("td", null, e.workflow_name),
          h("td", null, statusBadge(e.status)),
          h("td", { title: e.started_at ?? "" }, since(e.started_at)),
          h("td", null, duration(e.duration_ms)),
          h("td", { class: "error" }, cut(e.error ?? "", 100)),
        ),
      ),
    );
    if (shown.length) replace(note);
    else if (listed) replace(note, "No executions yet.");
  };
  const upsert = (e: ExecutionItem) => {
    const had = items.get(e.execution_id);
    if (had && had.status !== "running" && e.status === "running") return;
    items.set(e.execution_id, e);
  };

  const follow = async () => {
    const q = new URLSearchParams();
    if (filterWorkflow) q.set("workflow", filterWorkflow);
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
  void follow();

  const q = new URLSearchParams({ limit: String(maxRows) });
  if (filterWorkflow) q.set("workflow", filterWorkflow);
  if (filterStatus) q.set("status", filterStatus);
  getJSON<ExecutionList>(`/v1/executions?${q}`, signal).then(
    (doc) => {
      for (const e of doc.executions) upsert(e);
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

// startForm starts a registered workflow with a context typed as JSON,
// checked before it is sent.
function startForm(signal: AbortSignal) {
  const select = h("select", { id: "start-workflow", name: "workflow", required: true });
  const context = h("textarea", { id: "start-context", name: "context", rows: 4, spellcheck: false }, "{}");
  const message = h("p", { class: "form-message", role: "alert" });
  const button = h("button", { type: "submit" }, "Start");
  const form = h(
    "form",
    { class: "start", "aria-label": "Start a workflow" },
    h("h2", null, "Start a workflow"),
    h("label", { for: "start-workflow" }, "Workflow"),
    select,
    h("label", { for: "start-context" }, "Context (a JSON object)"),
    context,
    button,
    message,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    replace(message);
    let parsed: unknown;
    try {
      parsed = JSON.parse(context.value || "{}");
    } catch (e) {
      replace(message, `The context is not JSON: ${(e as Error).message}`);
      context.setAttribute("aria-invalid", "true");
      return;
    }
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
      replace(message, "The context must be a JSON object, like {\"total\": 1500}.");
      context.setAttribute("aria-invalid", "true");
      return;
    }
    context.removeAttribute("aria-invalid");
    button.disabled = true;
    try {
      // The context's text is sent as typed, so every number keeps its digits.
      const body = `{"workflow": ${JSON.stringify(select.value)}, "context": ${context.value || "{}"}}`;
      const accepted = await postJSON<{ execution_id: string }>("/v1/executions", body, signal);
      location.hash = `#/executions/${encodeURIComponent(accepted.execution_id)}`;
    } catch (e) {
      showError(message, e);
    } finally {
      button.disabled = false;
    }
  });
  return {
    form,
    setWorkflows(ws: WorkflowSummary[]) {
      replace(
        select,
        ws.map((w) => h("option", { value: w.name }, `${w.name} (${w.node_count} nodes, revision ${w.revision})`)),
      );
      button.disabled = ws.length === 0;
      if (ws.length === 0) replace(message, "No workflow is registered yet: POST /v1/workflows or nova dev's examples.");
    },
  };
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
