// Registering a workflow from the workflows page: a definition pasted or
// read from a file (YAML or JSON) is sent to POST /v1/workflows as typed;
// each problem the gateway names is shown at its line of the text, and a
// registered workflow's page opens.

import { apiKey, FieldError, Problem } from "./api.js";
import { h, replace } from "./dom.js";
import { showError } from "./executions.js";

interface Registered {
  name: string;
  revision: number;
  unchanged?: boolean;
}

// registerForm is the form; close hides it (the page's button shows it).
export function registerForm(signal: AbortSignal, close: () => void): HTMLFormElement {
  const text = h("textarea", {
    id: "register-definition",
    name: "definition",
    rows: 18,
    spellcheck: false,
    wrap: "off",
    placeholder: "name: my-workflow\nnodes:\n  - {id: start, type: start}\n  ...",
  });
  const gutter = h("div", { class: "gutter", "aria-hidden": "true" });
  const file = h("input", { id: "register-file", type: "file", accept: ".yaml,.yml,.json,application/yaml,application/json" });
  const problems = h("ul", { class: "register-problems", "aria-label": "Problems of the definition" });
  const message = h("p", { class: "form-message", role: "alert" });
  const button = h("button", { type: "submit" }, "Register");
  let marked = new Map<number, string[]>();

  // The gutter numbers the lines and marks those with a problem.
  const drawGutter = () => {
    const n = Math.max(1, text.value.split("\n").length);
    replace(
      gutter,
      Array.from({ length: n }, (_, i) => {
        const why = marked.get(i + 1);
        return h("span", { class: why ? "bad" : null, title: why ? why.join("\n") : null, "data-line": i + 1 }, String(i + 1));
      }),
    );
    gutter.scrollTop = text.scrollTop;
  };
  text.addEventListener("input", () => {
    if (marked.size) {
      marked = new Map();
      text.removeAttribute("aria-invalid");
    }
    drawGutter();
  });
  text.addEventListener("scroll", () => {
    gutter.scrollTop = text.scrollTop;
  });
  file.addEventListener("change", async () => {
    const f = file.files?.[0];
    if (!f) return;
    text.value = await f.text();
    marked = new Map();
    replace(problems);
    replace(message);
    drawGutter();
  });
  drawGutter();

  const form = h(
    "form",
    { class: "register-form", "aria-label": "Register a workflow" },
    h("h2", null, "Register a workflow"),
    h("p", { class: "note" }, "Paste a definition in YAML or JSON, or read it from a file; it is checked as nova validate checks it. The same as nova register FILE."),
    h("div", { class: "field" }, h("label", { for: file.id }, "From a file"), file),
    h("label", { for: text.id }, "Definition"),
    h("div", { class: "yaml-editor" }, gutter, text),
    problems,
    message,
    h("div", { class: "buttons" }, button, h("button", { type: "button", class: "secondary", onclick: close }, "Cancel")),
  );

  // showProblems lists each problem with its line, and marks the lines.
  const showProblems = (p: Problem) => {
    marked = new Map();
    const errors: FieldError[] = p.errors.length ? p.errors : [{ field: "", detail: p.detail || p.title }];
    replace(
      problems,
      errors.map((e) => {
        const line = Math.min(Number(e.line ?? 0), text.value.split("\n").length);
        if (line) marked.set(line, [...(marked.get(line) ?? []), e.detail]);
        const where = [line ? `line ${line}` : "", e.node ? `node ${e.node}` : "", e.field && e.field !== "body" ? e.field.replace(/^definition\.?/, "") : ""]
          .filter(Boolean)
          .join(" · ");
        const item = h("li", { "data-line": line || null }, where ? h("span", { class: "where" }, where, ": ") : null, e.detail);
        if (line) {
          item.append(" ", h("button", { type: "button", class: "secondary show-line", onclick: () => selectLine(text, line) }, "Show"));
        }
        return item;
      }),
    );
    text.setAttribute("aria-invalid", "true");
    drawGutter();
    const first = [...marked.keys()].sort((a, b) => a - b)[0];
    if (first) selectLine(text, first);
  };

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    replace(message);
    replace(problems);
    if (!text.value.trim()) {
      replace(message, "Paste a definition, or choose a file.");
      text.setAttribute("aria-invalid", "true");
      return;
    }
    button.disabled = true;
    try {
      const w = await register(text.value, signal);
      location.hash = `#/workflows/${encodeURIComponent(w.name)}?${w.unchanged ? "unchanged" : "registered"}=1`;
    } catch (e) {
      if (e instanceof Problem && (e.status === 400 || e.status === 422)) {
        replace(message, e.detail || e.title);
        showProblems(e);
      } else if (!signal.aborted) {
        showError(message, e);
      }
    } finally {
      button.disabled = false;
    }
  });
  return form;
}

// register sends text as typed: JSON as JSON, anything else as YAML.
async function register(text: string, signal: AbortSignal): Promise<Registered> {
  const isJSON = /^\s*\{/.test(text);
  const headers = new Headers({ Accept: "application/json", "Content-Type": isJSON ? "application/json" : "application/yaml" });
  const key = apiKey();
  if (key) headers.set("Authorization", `Bearer ${key}`);
  const resp = await fetch("/v1/workflows", { method: "POST", headers, body: text, signal });
  const doc = await resp.json().catch(() => ({}));
  if (!resp.ok) {
    throw new Problem(resp.status, typeof doc.title === "string" ? doc.title : resp.statusText, typeof doc.detail === "string" ? doc.detail : "", Array.isArray(doc.errors) ? doc.errors : []);
  }
  return doc as Registered;
}

// selectLine selects line n (from 1) of the text and scrolls it into view.
function selectLine(text: HTMLTextAreaElement, n: number): void {
  const lines = text.value.split("\n");
  const start = lines.slice(0, n - 1).reduce((sum, l) => sum + l.length + 1, 0);
  text.focus({ preventScroll: true });
  text.setSelectionRange(start, start + (lines[n - 1]?.length ?? 0));
  const lineH = parseFloat(getComputedStyle(text).lineHeight) || 18;
  text.scrollTop = Math.max(0, (n - 3) * lineH);
}
