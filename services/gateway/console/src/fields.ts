// The field table: a node's output read as records (a list of
// objects), up to 20 rows with a column per field the output analysis
// detected, its type and coverage, empty cells marked, and a Fix button on
// every field populated in less than half of the records (and a menu to fix
// any other field).

import { cut, h } from "./dom.js";
import { ExactNumber, pretty } from "./exact.js";

export interface FieldDef {
  name: string;
  type: string;
  required?: boolean;
  coverage: number | ExactNumber;
  examples?: unknown[];
}

// OutputAnalysis is what the sandbox stores of an output (what
// analyzeOutput gives): the chain of work's output_analysis, /v1/execute's
// analysis.
export interface OutputAnalysis {
  type: string;
  isStructured: boolean;
  itemCount: number | ExactNumber;
  fields?: FieldDef[];
}

// maxRows and maxCell are the seed's limits.
const maxRows = 20;
const maxCell = 100;
// fixBelow: a field populated in fewer records than this share gets a Fix button.
export const fixBelow = 50;

// populated is the output analysis' rule: a value is populated unless it is
// null, blank text, an empty array or an empty object (0 and false are values).
export function populated(v: unknown): boolean {
  if (v === null || v === undefined) return false;
  if (v instanceof ExactNumber) return true;
  if (typeof v === "string") return v.trim() !== "";
  if (Array.isArray(v)) return v.length > 0;
  if (typeof v === "object") return Object.keys(v).length > 0;
  return true;
}

// analysedValue is the value an analysis describes, from a run's result as
// POST /v1/execute answers it: JavaScript's value, or for Python the
// updates, whose only key's value is analysed when the code set one key.
export function analysedValue(result: unknown, language: string): unknown {
  if (language === "python" && result !== null && typeof result === "object" && !Array.isArray(result) && !(result instanceof ExactNumber)) {
    const keys = Object.keys(result);
    if (keys.length === 1) return (result as Record<string, unknown>)[keys[0]!];
  }
  return result;
}

// updatesOf is what a visit set in the context: the keys whose value it
// added or changed (the sandbox's updates of a Python node).
export function updatesOf(before: Record<string, unknown>, after: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(after)) {
    if (!(k in before) || pretty(before[k]) !== pretty(v)) out[k] = v;
  }
  return out;
}

// fieldLogic is the field's "current logic": the lines of the code that
// name the field (as a quoted key or a property).
export function fieldLogic(code: string, field: string): string[] {
  const esc = field.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const re = new RegExp(`(["'\`])${esc}\\1|\\.${esc}\\b|\\b${esc}\\s*:`);
  return code
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "" && re.test(l));
}

// records are the objects of an output: an array's items (an item that is
// no object has no fields), or the output itself when it is one object.
export function records(output: unknown): Record<string, unknown>[] {
  const isRecord = (v: unknown): v is Record<string, unknown> =>
    v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof ExactNumber);
  if (Array.isArray(output)) return output.map((v) => (isRecord(v) ? v : {}));
  return isRecord(output) ? [output] : [];
}

export function coverageOf(f: FieldDef): number {
  return Number(f.coverage);
}

// fieldTable draws the table, or the raw output when the analysis found no
// records with fields. onFix opens the Fix modal for a field.
export function fieldTable(output: unknown, analysis: OutputAnalysis | undefined, onFix?: (f: FieldDef) => void): HTMLElement {
  const fields = analysis?.fields ?? [];
  if (!analysis || !analysis.isStructured || fields.length === 0) {
    return h(
      "div",
      { class: "field-table" },
      h("p", { class: "note" }, "The output is not a list of records with fields; here it is as it came."),
      h("pre", null, pretty(output ?? null)),
    );
  }
  const rows = records(output);
  const total = Number(analysis.itemCount);
  const fixButton = (f: FieldDef) =>
    onFix
      ? h("button", { type: "button", class: "fix", "data-field": f.name, "aria-label": `Fix field ${f.name}`, onclick: () => onFix(f) }, "Fix")
      : null;
  const badge = (f: FieldDef) => {
    const c = coverageOf(f);
    const level = c < fixBelow ? "low" : c < 100 ? "part" : "full";
    return h("span", { class: `coverage coverage-${level}`, title: `populated in ${c}% of the records` }, `${c}%`);
  };
  const table = h(
    "table",
    { class: "fields" },
    h(
      "thead",
      null,
      h(
        "tr",
        null,
        h("th", { scope: "col" }, "#"),
        fields.map((f) =>
          h(
            "th",
            { scope: "col", "data-field": f.name },
            h("span", { class: "field-name" }, f.name),
            " ",
            badge(f),
            h("span", { class: "field-type" }, f.type),
            coverageOf(f) < fixBelow ? [" ", fixButton(f)] : null,
          ),
        ),
      ),
    ),
    h(
      "tbody",
      null,
      rows.slice(0, maxRows).map((item, i) =>
        h(
          "tr",
          null,
          h("td", null, i + 1),
          fields.map((f) => {
            const v = item[f.name];
            return populated(v)
              ? h("td", { class: "populated" }, cut(typeof v === "string" ? v : pretty(v), maxCell))
              : h("td", { class: "empty" }, "(empty)");
          }),
        ),
      ),
    ),
  );
  const others = fields.filter((f) => coverageOf(f) >= fixBelow);
  let menu: HTMLElement | null = null;
  if (onFix && others.length > 0) {
    const pick = h(
      "select",
      { id: `fix-pick-${Math.random().toString(36).slice(2, 8)}`, "aria-label": "Field to fix" },
      others.map((f) => h("option", { value: f.name }, `${f.name} (${coverageOf(f)}%)`)),
    );
    menu = h(
      "p",
      { class: "fix-menu" },
      h("label", { for: pick.id }, "Fix another field "),
      pick,
      " ",
      h(
        "button",
        {
          type: "button",
          onclick: () => {
            const f = others.find((x) => x.name === pick.value);
            if (f) onFix(f);
          },
        },
        "Fix…",
      ),
    );
  }
  return h(
    "div",
    { class: "field-table" },
    h(
      "p",
      { class: "meta" },
      `${total} records, ${fields.length} fields`,
      rows.length > maxRows ? ` · the first ${maxRows} shown` : "",
    ),
    h("div", { class: "table-scroll" }, table),
    menu,
  );
}

// lineDiff is a line diff of two texts (longest common subsequence): each
// line kept (" "), removed ("-") or added ("+").
export function lineDiff(a: string, b: string): { op: " " | "-" | "+"; line: string }[] {
  const x = a.replace(/\n$/, "").split("\n");
  const y = b.replace(/\n$/, "").split("\n");
  const n = x.length;
  const m = y.length;
  if (n * m > 4_000_000) {
    return [...x.map((line) => ({ op: "-" as const, line })), ...y.map((line) => ({ op: "+" as const, line }))];
  }
  // lcs[i][j]: the common subsequence's length of x[i:] and y[j:].
  const lcs: Uint32Array[] = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i]![j] = x[i] === y[j] ? lcs[i + 1]![j + 1]! + 1 : Math.max(lcs[i + 1]![j]!, lcs[i]![j + 1]!);
    }
  }
  const out: { op: " " | "-" | "+"; line: string }[] = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) {
      out.push({ op: " ", line: x[i]! });
      i++;
      j++;
    } else if (lcs[i + 1]![j]! >= lcs[i]![j + 1]!) {
      out.push({ op: "-", line: x[i++]! });
    } else {
      out.push({ op: "+", line: y[j++]! });
    }
  }
  while (i < n) out.push({ op: "-", line: x[i++]! });
  while (j < m) out.push({ op: "+", line: y[j++]! });
  return out;
}

// diffView shows lineDiff as a <pre>, each line marked by sign and class.
export function diffView(a: string, b: string, label = "Code, before and after"): HTMLElement {
  return h(
    "pre",
    { class: "code-diff", "aria-label": label },
    lineDiff(a, b).map((d) =>
      h("span", { class: d.op === "+" ? "add" : d.op === "-" ? "del" : "same" }, `${d.op} ${d.line}\n`),
    ),
  );
}
