// JSON with every number as it was written. The API keeps a number's digits
// (1500.0 stays 1500.0, 18446744073709551616 stays whole); JSON.parse would
// turn both into doubles, so values are parsed with the source text of each
// number (JSON.parse source text access) and printed back from it.
export class ExactNumber {
    text;
    constructor(text) {
        this.text = text;
    }
    valueOf() {
        return Number(this.text);
    }
    toString() {
        return this.text;
    }
    // toJSON lets JSON.stringify write the number's own text (JSON.rawJSON,
    // where the browser has it; else the nearest double).
    toJSON() {
        const raw = JSON.rawJSON;
        return raw ? raw(this.text) : Number(this.text);
    }
}
export function parseExact(text) {
    const reviver = (_key, value, context) => typeof value === "number" && context?.source !== undefined ? new ExactNumber(context.source) : value;
    return JSON.parse(text, reviver);
}
// pretty writes v as indented JSON, numbers as they were written.
export function pretty(v, indent = "") {
    const next = indent + "  ";
    if (v instanceof ExactNumber)
        return v.text;
    if (v === null || typeof v !== "object")
        return JSON.stringify(v) ?? "null";
    if (Array.isArray(v)) {
        if (v.length === 0)
            return "[]";
        return `[\n${v.map((x) => next + pretty(x, next)).join(",\n")}\n${indent}]`;
    }
    const entries = Object.entries(v);
    if (entries.length === 0)
        return "{}";
    return `{\n${entries.map(([k, x]) => `${next}${JSON.stringify(k)}: ${pretty(x, next)}`).join(",\n")}\n${indent}}`;
}
