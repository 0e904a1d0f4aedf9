// The workflows page, #/workflows: every registered workflow with its
// revision, its size, when it was registered, its last run and how many of
// its last runs succeeded, all from one read (GET /v1/workflows?runs=N);
// each links to its own page (workflow.ts). "Register workflow…" (or
// #/workflows?register=1) opens the form that registers one (register.ts).

import { getJSON } from "./api.js";
import { h, replace, since } from "./dom.js";
import { ExecutionItem, showError, statusBadge, WorkflowSummary } from "./executions.js";
import { registerForm } from "./register.js";

// recentRuns is how many of a workflow's last executions its success rate
// counts.
const recentRuns = 20;

// RecentRuns sums up a workflow's last executions, as the list answers it.
interface RecentRuns {
  last?: ExecutionItem;
  counted: number;
  ended: number;
  succeeded: number;
}

export function workflowsPage(root: HTMLElement, signal: AbortSignal): void {
  const rows = h("tbody");
  const note = h("p", { class: "note", role: "status", "aria-live": "polite" }, "Reading the registry…");
  const opener = h("button", { type: "button", class: "register-open" }, "Register workflow…");
  const slot = h("div", { class: "register-slot" });
  const open = () => {
    if (slot.firstChild) return;
    const form = registerForm(signal, close);
    replace(slot, form);
    opener.hidden = true;
    form.querySelector("textarea")?.focus();
  };
  const close = () => {
    replace(slot);
    opener.hidden = false;
    if (/[?&]register=1/.test(location.hash)) history.replaceState(null, "", "#/workflows");
  };
  opener.addEventListener("click", open);
  replace(
    root,
    h("div", { class: "page-head" }, h("h1", null, "Workflows"), h("div", { class: "head-actions" }, opener, h("a", { href: "#/executions", class: "action" }, "All executions →"))),
    h(
      "p",
      { class: "note" },
      "Registered here, with POST /v1/workflows or with nova register FILE. A start by name runs the latest revision; the registry keeps the last 5 of each name.",
    ),
    slot,
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
  if (/[?&]register=1/.test(location.hash)) open();

  getJSON<{ workflows: (WorkflowSummary & { runs?: RecentRuns })[] }>(`/v1/workflows?runs=${recentRuns}`, signal).then(
    (doc) => {
      replace(note, doc.workflows.length ? "" : "No workflow is registered yet: register one here, with POST /v1/workflows, or with nova register FILE.");
      replace(
        rows,
        doc.workflows.map((w) => {
          const page = `#/workflows/${encodeURIComponent(w.name)}`;
          const runs = w.runs ?? { counted: 0, ended: 0, succeeded: 0 };
          const last = runs.last;
          const ok = runs.succeeded;
          const done = runs.ended;
          return h(
            "tr",
            { "data-workflow": w.name, "data-success-rate": done ? String(ok / done) : "" },
            h("td", null, h("a", { href: page }, w.name)),
            h("td", { class: "num" }, w.revision),
            h("td", { class: "num" }, w.node_count),
            h("td", { title: w.updated_at ?? "" }, since(w.updated_at)),
            h(
              "td",
              { class: "last-run" },
              last
                ? [statusBadge(last.status), " ", h("a", { href: `#/executions/${encodeURIComponent(last.execution_id)}`, title: last.started_at ?? "" }, since(last.started_at))]
                : h("span", { class: "note" }, "never run"),
            ),
            h(
              "td",
              { class: "rate num" },
              done
                ? h("span", { title: `${ok} of the last ${done} ended runs succeeded` }, `${Math.round((100 * ok) / done)}% `, h("span", { class: "meta" }, `(${ok}/${done})`))
                : h("span", { class: "note" }, "—"),
            ),
            h("td", null, h("a", { href: `${page}?start=1`, class: "start-link" }, "Start…")),
          );
        }),
      );
    },
    (e) => {
      if (!signal.aborted) showError(note, e);
    },
  );
}
