// Telling executions apart and finding their relatives: the id cell of a
// list row (the whole id, a copy button, the parent of a child and the
// children on the page), the execution page's line that links a child to
// its parent and a parent to its children, and a short id pasted into the
// URL resolved to the execution whose id it begins. GET
// /v1/executions?parent=<id> lists an execution's children, whatever their
// ids (the engine names most <parent>_<node>_<visit>, some by a UUID).

import { getJSON } from "./api.js";
import type { Selection } from "./batch.js";
import { h, replace } from "./dom.js";
import type { ExecutionItem, ExecutionList, ExecutionTotals } from "./executions.js";

function executionHref(id: string): string {
  return `#/executions/${encodeURIComponent(id)}`;
}

// childrenHref lists the children of execution id.
export function childrenHref(id: string): string {
  return `#/executions?parent=${encodeURIComponent(id)}`;
}

// abbreviated is an id cut to its first 8 characters for a link whose title
// and target carry the whole (a parent named beside its child's whole id).
function abbreviated(id: string): string {
  return id.length > 12 ? id.slice(0, 8) + "…" : id;
}

// copyButton copies text to the clipboard and says whether it did.
export function copyButton(text: string, what = "id"): HTMLButtonElement {
  const b = h("button", { type: "button", class: "copy", title: `Copy the ${what} ${text}`, "aria-label": `Copy the ${what} ${text}` }, "Copy");
  b.addEventListener("click", async () => {
    let ok = false;
    try {
      await navigator.clipboard.writeText(text);
      ok = true;
    } catch {
      ok = copyBySelection(text);
    }
    b.textContent = ok ? "Copied" : "Not copied";
    b.dataset.copied = String(ok);
    setTimeout(() => (b.textContent = "Copy"), 1500);
  });
  return b;
}

// copyBySelection copies where the Clipboard API is refused (a page not
// served over https nor from localhost).
function copyBySelection(text: string): boolean {
  const area = h("textarea", { class: "copy-source", readonly: true });
  area.value = text;
  document.body.append(area);
  area.select();
  let ok = false;
  try {
    ok = document.execCommand("copy");
  } catch {
    ok = false;
  }
  area.remove();
  return ok;
}

// idCell is a list row's first cell: its checkbox (with select), the whole
// id linking to the execution, a copy button, and its parent (a child) or
// its children on the page (a parent).
export function idCell(e: ExecutionItem, select?: Selection, children = 0): HTMLElement {
  const id = e.execution_id;
  const parent = e.parent_execution_id ?? "";
  let box: HTMLInputElement | null = null;
  if (select) {
    box = h("input", { type: "checkbox", class: "select", "aria-label": `Select ${id}`, checked: select.has(id) });
    const el = box;
    el.addEventListener("change", () => select.set(id, el.checked));
  }
  return h(
    "td",
    { class: "id" },
    h(
      "span",
      { class: "id-line" },
      box,
      h("a", { href: executionHref(id), class: "execution-id", title: id }, h("code", null, id)),
      copyButton(id),
    ),
    parent
      ? h(
          "span",
          { class: "lineage parent-link" },
          "↳ child of ",
          h("a", { href: executionHref(parent), title: parent, "data-parent": parent }, h("code", null, abbreviated(parent))),
          e.parent_node ? [" · node ", h("code", null, e.parent_node)] : null,
        )
      : null,
    children
      ? h("a", { class: "lineage children-link", href: childrenHref(id), title: "list the executions it started" }, `↳ ${children} child execution${children === 1 ? "" : "s"} →`)
      : null,
  );
}

// ExecutionRef is what the execution page's line reads of its execution.
export interface ExecutionRef {
  execution_id: string;
  parent_execution_id?: string;
  parent_node?: string;
}

// lineageLine is the execution page's line that links a child to its
// parent, and a parent to its children (read once, as the page opens; a
// running parent's children are in its node visits too). The page draws
// itself again on each event: the same element comes back each time, its
// parent part drawn from the execution as it is now.
const lines = new WeakMap<AbortSignal, { line: HTMLElement; up: HTMLElement; down: HTMLElement }>();

export function lineageLine(doc: ExecutionRef, signal: AbortSignal): HTMLElement {
  const id = doc.execution_id;
  const parent = doc.parent_execution_id ?? "";
  let l = lines.get(signal);
  if (!l) {
    const up = h("span", { class: "parent-link" });
    const down = h("span", { class: "children-links" });
    l = { line: h("p", { class: "lineage", hidden: true }, up, down), up, down };
    lines.set(signal, l);
    readChildren(id, l.down, signal);
  }
  replace(
    l.up,
    parent
      ? ["↳ Child of ", h("a", { href: executionHref(parent), title: parent, "data-parent": parent }, h("code", null, parent)),
        doc.parent_node ? [", started by its node ", h("code", null, doc.parent_node)] : null]
      : null,
  );
  l.line.hidden = !parent && !l.down.firstChild;
  return l.line;
}

// readChildren lists the children of execution id in el: the first ten,
// and a link to the list of all of them.
function readChildren(id: string, el: HTMLElement, signal: AbortSignal): void {
  const q = new URLSearchParams({ parent: id, limit: "11" });
  getJSON<ExecutionList>(`/v1/executions?${q}`, signal).then(
    (l) => {
      const kids = l.executions;
      if (!kids.length) return;
      replace(
        el,
        "Children: ",
        kids.slice(0, 10).map((k, i) => [
          i ? ", " : "",
          h(
            "a",
            { href: executionHref(k.execution_id), title: k.execution_id, class: "child-link" },
            h("code", null, k.execution_id.startsWith(id + "_") ? k.execution_id.slice(id.length + 1) : k.execution_id),
          ),
        ]),
        " ",
        h("a", { href: childrenHref(id) }, kids.length > 10 ? "all of them →" : "list them →"),
      );
      const line = el.parentElement;
      if (line) line.hidden = false;
    },
    () => undefined,
  );
}

// resolveShortID is what the page of an unknown execution does with its
// id: where it begins exactly one execution's id, it opens that execution
// (in place of the short id in the history); where it begins several, it
// says how many and links each (the first 10, and the list of all). stay
// tells whether the page still shows the unknown id.
export async function resolveShortID(root: HTMLElement, id: string, stay: () => boolean): Promise<void> {
  if (!/^[-_=a-zA-Z0-9]{1,200}$/.test(id)) return;
  const q = new URLSearchParams({ id, limit: "10" });
  let list: ExecutionList;
  let total: ExecutionTotals;
  try {
    [list, total] = await Promise.all([
      getJSON<ExecutionList>(`/v1/executions?${q}`),
      getJSON<ExecutionTotals>(`/v1/execution-totals?${new URLSearchParams({ id })}`),
    ]);
  } catch {
    return;
  }
  if (!stay() || list.executions.length === 0) return;
  if (list.executions.length === 1 && Number(total.executions) === 1) {
    location.replace(executionHref(list.executions[0]!.execution_id));
    return;
  }
  const n = Number(total.executions);
  replace(
    root,
    h(
      "section",
      { class: "not-found ambiguous" },
      h("p", { class: "crumbs" }, h("a", { href: "#/executions" }, "← Executions")),
      h("h1", null, `${n.toLocaleString("en")} executions start with `, h("code", null, id)),
      h("p", null, "Which one? A longer start of its id names it alone."),
      h(
        "ul",
        { class: "candidates" },
        list.executions.map((e) =>
          h("li", null, h("a", { href: executionHref(e.execution_id), title: e.execution_id }, h("code", null, e.execution_id)), ` · ${e.workflow_name} · ${e.status}`),
        ),
      ),
      h("p", null, h("a", { href: `#/executions?id=${encodeURIComponent(id)}` }, n > list.executions.length ? `List all ${n.toLocaleString("en")} →` : "List them →")),
    ),
  );
}
