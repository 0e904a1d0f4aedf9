// JSON with every number as it was written. The API keeps a number's digits
// (1500.0 stays 1500.0, 18446744073709551616 stays whole); JSON.parse would
// turn both into doubles, so values are parsed with the source text of each
// number (JSON.parse source text access) and printed back from it.

export class ExactNumber {
  constructor(readonly text: string) {}
  valueOf(): number {
    return Number(this.text);
  }
  toString(): string {
    return this.text;
  }
  // toJSON lets JSON.stringify write the number's own text (JSON.rawJSON,
  // where the browser has it; else the nearest double).
  toJSON(): unknown {
    const raw = (JSON as unknown as { rawJSON?: (text: string) => unknown }).rawJSON;
    return raw ? raw(this.text) : Number(this.text);
  }
}

type Reviver = (this: unknown, key: string, value: unknown, context?: { source?: string }) => unknown;

export function parseExact(text: string): unknown {
  const reviver: Reviver = (_key, value, context) =>
    typeof value === "number" && context?.source !== undefined ? new ExactNumber(context.source) : value;
  return JSON.parse(text, reviver as (this: unknown, key: string, value: unknown) => unknown);
}

// pretty writes v as indented JSON, numbers as they were written.
export function pretty(v: unknown, indent = ""): string {
  const next = indent + "  ";
  if (v instanceof ExactNumber) return v.text;
  if (v === null || typeof v !== "object") return JSON.stringify(v) ?? "null";
  if (Array.isArray(v)) {
    if (v.length === 0) return "[]";
    return `[\n${v.map((x) => next + pretty(x, next)).join(",\n")}\n${indent}]`;
  }
  const entries = Object.entries(v as Record<string, unknown>);
  if (entries.length === 0) return "{}";
  return `{\n${entries.map(([k, x]) => `${next}${JSON.stringify(k)}: ${pretty(x, next)}`).join(",\n")}\n${indent}}`;
}
