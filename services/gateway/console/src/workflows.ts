// The workflows page, #/workflows: every registered workflow with its
// revision, its size, when it was registered, its last run and how many of
// its last runs succeeded; each links to its own page (workflow.ts).

import { getJSON } from "./api.js";
import { h, replace, since } from "./dom.js";
import { ExecutionList, showError, statusBadge, WorkflowSummary } from "./executions.js";

// recentRuns is how many of a workflow's last executions its success rate
// counts.
const recentRuns = 20;
// readersAtOnce bounds the reads of runs made at once.
const readersAtOnce = 3;

export function workflowsPage(root: HTMLElement, signal: AbortSignal): void {
  const rows = h("tbody");
  const note = h("p", { class: "note", role: "status", "aria-live": "polite" }, "Reading the registry…");
  replace(
    root,
    h("div", { class: "page-head" }, h("h1", null, "Workflows"), h("a", { href: "#/executions", class: "action" }, "All executions →")),
    h(
      "p",
      { class: "note" },
      "Registered with POST /v1/workflows or nova register. A start by name runs the latest revision; the registry keeps the last 5 of each name.",
    ),
    note,
    h(
      "div",
      { class: "table-scroll" },
      h(
        "table",
        { class: "workflows" },
        h(
          "thead",
          null,
          h("tr", null, ["Workflow", "Revision", "Nodes", "Registered", "Last run", `Succeeded (last ${recentRuns})`, ""].map((t) => h("th", { scope: "col" }, t))),
        ),
        rows,
      ),
    ),
  );

  getJSON<{ workflows: WorkflowSummary[] }>("/v1/workflows", signal).then(
    (doc) => {
      replace(note, doc.workflows.length ? "" : "No workflow is registered yet: POST /v1/workflows, or nova register FILE.");
      const stats: { name: string; last: HTMLElement; rate: HTMLElement }[] = [];
      replace(
        rows,
        doc.workflows.map((w) => {
          const last = h("td", { class: "last-run" }, "…");
          const rate = h("td", { class: "rate num" }, "…");
          stats.push({ name: w.name, last, rate });
          const page = `#/workflows/${encodeURIComponent(w.name)}`;
          return h(
            "tr",
            { "data-workflow": w.name },
            h("td", null, h("a", { href: page }, w.name)),
            h("td", { class: "num" }, w.revision),
            h("td", { class: "num" }, w.node_count),
            h("td", { title: w.updated_at ?? "" }, since(w.updated_at)),
            last,
            rate,
            h("td", null, h("a", { href: `${page}?start=1`, class: "start-link" }, "Start…")),
          );
        }),
      );
      void fillStats(stats, signal);
    },
    (e) => {
      if (!signal.aborted) showError(note, e);
    },
  );
}

// fillStats reads each workflow's last runs, a few at a time.
async function fillStats(todo: { name: string; last: HTMLElement; rate: HTMLElement }[], signal: AbortSignal): Promise<void> {
  const one = async (w: { name: string; last: HTMLElement; rate: HTMLElement }) => {
    try {
      const q = new URLSearchParams({ workflow: w.name, limit: String(recentRuns) });
      const doc = await getJSON<ExecutionList>(`/v1/executions?${q}`, signal);
      const runs = doc.executions;
      const last = runs[0];
      replace(
        w.last,
        last
          ? [statusBadge(last.status), " ", h("a", { href: `#/executions/${encodeURIComponent(last.execution_id)}`, title: last.started_at ?? "" }, since(last.started_at))]
          : h("span", { class: "note" }, "never run"),
      );
      const done = runs.filter((r) => r.status !== "running");
      const ok = done.filter((r) => r.status === "succeeded").length;
      replace(
        w.rate,
        done.length
          ? h("span", { title: `${ok} of the last ${done.length} ended runs succeeded` }, `${Math.round((100 * ok) / done.length)}% `, h("span", { class: "meta" }, `(${ok}/${done.length})`))
          : h("span", { class: "note" }, "—"),
      );
      w.last.parentElement?.setAttribute("data-success-rate", done.length ? String(ok / done.length) : "");
    } catch (e) {
      if (!signal.aborted) showError(w.last, e);
      replace(w.rate);
    }
  };
  const queue = [...todo];
  await Promise.all(
    Array.from({ length: readersAtOnce }, async () => {
      for (let w = queue.shift(); w && !signal.aborted; w = queue.shift()) await one(w);
    }),
  );
}
