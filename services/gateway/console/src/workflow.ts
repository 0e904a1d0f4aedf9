// One registered workflow, #/workflows/{name}: its graph drawn from the
// definition (no execution needed), a node's definition, the revisions the
// registry keeps with a diff between two (?revision=N&diff=M), its recent
// executions, and a form that starts it (?start=1 goes to the form).

import { getExact, getJSON, Problem } from "./api.js";
import { h, replace, since } from "./dom.js";
import { secondsText } from "./duration.js";
import { ExactNumber } from "./exact.js";
import { ExecutionList, executionRow, executionsTable, showError } from "./executions.js";
import { diffView } from "./fields.js";
import { chooseDirection, DefNode, Definition, defaultDirection, Direction, drawGraph, typeName } from "./graph.js";
import { startForm } from "./start.js";

interface WorkflowRevision {
  revision: number;
  node_count: number;
  updated_at: string;
}

interface WorkflowView {
  name: string;
  revision: number;
  node_count: number;
  updated_at: string;
  definition: Definition;
  revisions: WorkflowRevision[];
}

// recentExecutions is how many of its executions the page lists.
const recentExecutions = 10;

export function workflowPage(root: HTMLElement, name: string, params: URLSearchParams, signal: AbortSignal): void {
  const revision = params.get("revision") ?? "";
  const against = params.get("diff") ?? "";
  const note = h("p", { class: "note", role: "status", "aria-live": "polite" }, "Reading the workflow…");
  replace(root, h("p", { class: "crumbs" }, h("a", { href: "#/workflows" }, "← Workflows")), h("h1", null, name), note);
  const path = `/v1/workflows/${encodeURIComponent(name)}`;
  getExact<WorkflowView>(revision ? `${path}?revision=${encodeURIComponent(revision)}` : path, signal).then(
    (w) => {
      show(root, w, against, params.get("start") === "1", signal);
      // Come from the register form: say what it did.
      const said = params.get("registered") === "1" ? `Registered: revision ${w.revision}.` : params.get("unchanged") === "1" ? `Unchanged: revision ${w.revision} is this definition already; nothing new was stored.` : "";
      if (said) root.querySelector(".page-head")?.after(h("p", { class: "notice registered", role: "status" }, said));
    },
    (e) => {
      if (signal.aborted) return;
      showError(note, e);
      // A workflow run from a definition sent with the start is not
      // registered, but its executions are kept.
      if (e instanceof Problem && e.status === 404) {
        note.append(" ", h("a", { href: "#/executions?workflow=" + encodeURIComponent(name) }, `Executions named ${name} →`));
      }
    },
  );
}

function show(root: HTMLElement, w: WorkflowView, against: string, toStart: boolean, signal: AbortSignal): void {
  const def = w.definition;
  const latest = w.revisions[0]?.revision ?? w.revision;
  const isLatest = Number(w.revision) === Number(latest);
  const page = (q: Record<string, string | number>) => {
    const s = new URLSearchParams(Object.entries(q).map(([k, v]) => [k, String(v)]));
    return `#/workflows/${encodeURIComponent(w.name)}${s.size ? "?" + s : ""}`;
  };
  let selected = "";
  let direction: Direction | null = null;
  const graph = h("div", { class: "graph-wrap" });
  const panel = h("div", { class: "panel" });
  const drawDef = () => {
    const dir = direction ?? defaultDirection(def);
    const select = (id: string) => {
      selected = selected === id ? "" : id;
      drawDef();
      document.querySelector<SVGElement>(`svg.graph [data-node="${CSS.escape(id)}"]`)?.focus();
    };
    replace(
      graph,
      h(
        "div",
        { class: "graph-tools" },
        h(
          "button",
          {
            type: "button",
            class: "secondary graph-direction",
            onclick: () => {
              direction = dir === "LR" ? "TB" : "LR";
              chooseDirection(direction);
              drawDef();
            },
          },
          dir === "LR" ? "↓ Top to bottom" : "→ Left to right",
        ),
        h("span", { class: "meta" }, ` ${def.nodes?.length ?? 0} nodes, ${def.edges?.length ?? 0} edges`),
      ),
      drawGraph(def, null, select, selected, dir),
    );
    const node = def.nodes?.find((n) => n.id === selected);
    replace(panel, node ? nodeDefinition(node, def) : h("p", { class: "note" }, "Select a node to see its definition."));
  };
  drawDef();
  let resized: ReturnType<typeof setTimeout> | undefined;
  const onResize = () => {
    clearTimeout(resized);
    resized = setTimeout(drawDef, 150);
  };
  window.addEventListener("resize", onResize);
  signal.addEventListener("abort", () => window.removeEventListener("resize", onResize));

  const diff = h("section", { class: "revision-diff", hidden: !against });
  const runs = h("tbody");
  const runsNote = h("p", { class: "note" }, "Reading its executions…");
  const start = isLatest ? startForm(w.name, signal) : null;
  replace(
    root,
    h("p", { class: "crumbs" }, h("a", { href: "#/workflows" }, "← Workflows")),
    h("div", { class: "page-head" }, h("h1", null, w.name, " ", h("span", { class: "tag" }, `revision ${w.revision}`)), h("a", { href: "#/executions?workflow=" + encodeURIComponent(w.name), class: "action" }, "Its executions →")),
    h(
      "p",
      { class: "meta" },
      `${w.node_count} nodes · registered ${since(w.updated_at)}`,
      def.model ? ` · model ${def.model}` : "",
      def.timeout_seconds ? ` · timeout ${secondsText(def.timeout_seconds)}` : "",
    ),
    isLatest
      ? null
      : h("p", { class: "notice" }, "An earlier revision: a start by name runs ", h("a", { href: page({}) }, `revision ${latest}`), "."),
    start,
    h("h2", null, "Graph"),
    graph,
    panel,
    diff,
    h("h2", null, "Revisions"),
    h("p", { class: "note" }, "The registry keeps the last 5 registrations of a name."),
    h(
      "div",
      { class: "table-scroll" },
      h(
        "table",
        { class: "revisions" },
        h("thead", null, h("tr", null, ["Revision", "Registered", "Nodes", ""].map((t) => h("th", { scope: "col" }, t)))),
        h(
          "tbody",
          null,
          w.revisions.map((r) =>
            h(
              "tr",
              { "data-revision": String(r.revision), class: Number(r.revision) === Number(w.revision) ? "shown" : null },
              h("td", { class: "num" }, Number(r.revision) === Number(w.revision) ? h("strong", null, r.revision) : h("a", { href: page({ revision: r.revision }) }, r.revision), Number(r.revision) === Number(latest) ? " (latest)" : ""),
              h("td", { title: r.updated_at }, since(r.updated_at)),
              h("td", { class: "num" }, r.node_count),
              h(
                "td",
                null,
                Number(r.revision) === Number(w.revision)
                  ? h("span", { class: "note" }, "shown")
                  : h("a", { href: page({ revision: w.revision, diff: r.revision }), class: "diff-link" }, `Diff with revision ${w.revision}`),
              ),
            ),
          ),
        ),
      ),
    ),
    h("h2", null, "Recent executions"),
    runsNote,
    executionsTable(runs, false),
  );
  if (toStart && start) {
    start.scrollIntoView({ block: "center" });
    start.querySelector("textarea")?.focus({ preventScroll: true });
  }

  if (against) {
    replace(diff, h("h2", null, `Revision ${against} → revision ${w.revision}`), h("p", { class: "note" }, "Reading…"));
    getExact<WorkflowView>(`/v1/workflows/${encodeURIComponent(w.name)}?revision=${encodeURIComponent(against)}`, signal).then(
      (other) => {
        const before = definitionText(other.definition);
        const after = definitionText(def);
        replace(
          diff,
          h("h2", null, `Revision ${other.revision} → revision ${w.revision}`),
          before === after
            ? h("p", { class: "note" }, "The two definitions are the same.")
            : diffView(before, after, `Definition of revision ${other.revision}, then of ${w.revision}`),
          h("p", null, h("a", { href: page({ revision: w.revision }) }, "Hide the diff")),
        );
      },
      (e) => {
        if (!signal.aborted) showError(diff, e);
      },
    );
  }

  const q = new URLSearchParams({ workflow: w.name, limit: String(recentExecutions) });
  getJSON<ExecutionList>(`/v1/executions?${q}`, signal).then(
    (doc) => {
      replace(runs, doc.executions.map((e) => executionRow(e, false)));
      replace(
        runsNote,
        doc.executions.length > 1 ? `Its last ${doc.executions.length} executions, newest first.` : doc.executions.length ? "Its one execution." : "Not run yet.",
        doc.next_cursor ? [" ", h("a", { href: "#/executions?workflow=" + encodeURIComponent(w.name) }, "All of them →")] : "",
      );
    },
    (e) => {
      if (!signal.aborted) showError(runsNote, e);
    },
  );
}

// nodeDefinition is what a node of the definition says it does.
function nodeDefinition(n: DefNode, def: Definition): HTMLElement {
  const out = (def.edges ?? []).filter((e) => e.from === n.id);
  const settings: [string, string][] = [];
  if (n.language) settings.push(["Language", n.language]);
  if (n.model) settings.push(["Model", n.model]);
  if (n.timeout_seconds) settings.push(["Timeout", secondsText(n.timeout_seconds)]);
  if (n.max_visits) settings.push(["Visits at most", String(n.max_visits)]);
  if (n.network) settings.push(["Network", n.allow_hosts?.length ? n.allow_hosts.join(", ") : "any host"]);
  return h(
    "section",
    { class: "visits node-definition", "aria-label": `Definition of node ${n.id}` },
    h("h2", null, `Node ${n.id}`, h("span", { class: "meta" }, ` · ${typeName(n.type)}${n.prompt ? " · AI" : ""}`)),
    n.description ? h("p", null, n.description) : null,
    n.prompt ? [h("h3", null, "Prompt"), h("pre", { class: "prompt" }, n.prompt)] : null,
    n.code ? [h("h3", null, "Code"), h("pre", null, n.code)] : null,
    settings.length ? h("dl", { class: "field-info" }, settings.map(([k, v]) => [h("dt", null, k), h("dd", null, v)])) : null,
    out.length
      ? [
          h("h3", null, "Then"),
          h(
            "ul",
            null,
            out.map((e) => h("li", null, "→ ", h("code", null, e.to), e.condition ? [" when ", h("code", null, e.condition)] : "")),
          ),
        ]
      : null,
  );
}

// definitionText writes a definition for reading and diffing, in the shape
// of YAML: one line per field, a node's code or prompt of several lines as a
// block of its lines (a diff then shows the lines that changed, not one
// long string), a node's type without its NODE_TYPE_ prefix.
export function definitionText(v: unknown, indent = ""): string {
  const out: string[] = [];
  const scalar = (x: unknown): string =>
    x instanceof ExactNumber ? x.text : typeof x === "string" ? (x === "" || /^\s|\s$|^[-?:,[\]{}#&*!|>'"%@`]/.test(x) ? JSON.stringify(x) : x) : JSON.stringify(x);
  const field = (k: string, x: unknown, pad: string, first: string) => {
    if (k === "type" && typeof x === "string") x = typeName(x);
    if (typeof x === "string" && x.includes("\n")) {
      out.push(`${first}${k}: |`);
      for (const line of x.replace(/\n$/, "").split("\n")) out.push(`${pad}  ${line}`);
    } else if (Array.isArray(x)) {
      out.push(`${first}${k}:${x.length ? "" : " []"}`);
      for (const item of x) {
        if (item !== null && typeof item === "object" && !(item instanceof ExactNumber)) {
          const text = definitionText(item, `${pad}    `);
          out.push(`${pad}  - ${text.trimStart()}`);
        } else out.push(`${pad}  - ${scalar(item)}`);
      }
    } else if (x !== null && typeof x === "object" && !(x instanceof ExactNumber)) {
      out.push(`${first}${k}:`);
      out.push(definitionText(x, `${pad}  `));
    } else {
      out.push(`${first}${k}: ${scalar(x)}`);
    }
  };
  for (const [k, x] of Object.entries((v ?? {}) as Record<string, unknown>)) field(k, x, indent, indent);
  return out.join("\n");
}
