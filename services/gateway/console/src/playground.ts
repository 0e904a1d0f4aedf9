// The playground: Python or JavaScript run against a JSON context through
// POST /v1/execute (the sandbox, as a node's code runs), its logs, result
// and field table, and the same Fix modal to refine it.

import { postJSON } from "./api.js";
import { h, replace } from "./dom.js";
import { parseExact, pretty } from "./exact.js";
import { showError } from "./executions.js";
import { analysedValue, fieldTable, OutputAnalysis } from "./fields.js";
import { openFix } from "./fix.js";

interface ExecuteResponse {
  success: boolean;
  result: unknown;
  logs?: string[];
  duration?: number;
  error?: string;
  stack?: string;
  analysis?: OutputAnalysis;
  errorKind?: string;
  limit?: string;
  stdout?: string;
  stderr?: string;
}

const samples: Record<string, string> = {
  python:
    "# The context is `context`; set keys on it. One key set is the output.\n" +
    "context['rows'] = [{'name': n.title(), 'len': len(n)} for n in context['names']]\n",
  javascript:
    "// The context is ctx; the value returned is the output.\n" +
    "module.exports = async (ctx) => ctx.names.map((n) => ({ name: n[0].toUpperCase() + n.slice(1), len: n.length }))\n",
};

export function playgroundPage(root: HTMLElement, signal: AbortSignal): void {
  const language = h(
    "select",
    { id: "play-language", name: "language" },
    h("option", { value: "python" }, "Python"),
    h("option", { value: "javascript" }, "JavaScript"),
  );
  const code = h("textarea", { id: "play-code", name: "code", rows: 12, spellcheck: false }, samples.python);
  const context = h("textarea", { id: "play-context", name: "context", rows: 5, spellcheck: false }, '{"names": ["lamp", "desk", "rug"]}');
  const message = h("div", { class: "form-message", role: "alert" });
  const run = h("button", { type: "submit" }, "Run");
  const out = h("section", { class: "play-out", "aria-live": "polite" });
  language.addEventListener("change", () => {
    // Swap the sample only while the code is still one.
    if (Object.values(samples).includes(code.value)) code.value = samples[language.value] ?? "";
  });
  const form = h(
    "form",
    { class: "playground", "aria-label": "Run code" },
    h("label", { for: language.id }, "Language"),
    language,
    h("label", { for: code.id }, "Code"),
    code,
    h("label", { for: context.id }, "Context (a JSON object)"),
    context,
    run,
    message,
  );
  replace(root, h("h1", null, "Playground"), h("p", { class: "note" }, "Code runs in the sandbox as a node's code does, through POST /v1/execute."), form, out);

  const exec = async () => {
    replace(message);
    let parsed: unknown;
    try {
      parsed = parseExact(context.value || "{}");
    } catch (e) {
      context.setAttribute("aria-invalid", "true");
      replace(message, `The context is not JSON: ${(e as Error).message}`);
      return;
    }
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
      context.setAttribute("aria-invalid", "true");
      replace(message, 'The context must be a JSON object, like {"names": ["lamp"]}.');
      return;
    }
    context.removeAttribute("aria-invalid");
    run.disabled = true;
    replace(out, h("p", { class: "note" }, "Running…"));
    try {
      // The context's text is sent as typed, so every number keeps its digits.
      const body = `{"language": ${JSON.stringify(language.value)}, "code": ${JSON.stringify(code.value)}, "context": ${context.value || "{}"}}`;
      const res = await postJSON<ExecuteResponse>("/v1/execute", body, signal);
      show(res, language.value);
    } catch (e) {
      replace(out);
      showError(message, e);
    } finally {
      run.disabled = false;
    }
  };
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    void exec();
  });

  const show = (res: ExecuteResponse, lang: string) => {
    const output = analysedValue(res.result, lang);
    replace(
      out,
      h("h2", null, res.success ? "✓ Ran" : "✗ Failed", h("span", { class: "meta" }, res.duration !== undefined ? ` · ${Math.round(res.duration)} ms` : "")),
      res.error ? h("p", { class: "error" }, res.errorKind ? `${res.errorKind}: ` : "", res.error, res.limit ? ` (limit: ${res.limit})` : "") : null,
      res.stack ? [h("h3", null, "Traceback"), h("pre", { class: "error" }, res.stack)] : null,
      res.logs?.length ? [h("h3", null, "Logs"), h("pre", null, res.logs.join("\n"))] : null,
      res.stdout ? [h("h3", null, "stdout"), h("pre", null, res.stdout)] : null,
      res.stderr ? [h("h3", null, "stderr"), h("pre", null, res.stderr)] : null,
      res.success
        ? [
            h("h3", null, "Fields"),
            fieldTable(output, res.analysis, (f) =>
              openFix(
                {
                  code: code.value,
                  language: lang,
                  analysis: res.analysis!,
                  testContext: parseExact(context.value || "{}"),
                  useCode: (c, l) => {
                    code.value = c;
                    language.value = l;
                    void exec();
                  },
                },
                f,
                signal,
              ),
            ),
            h("h3", null, "Result"),
            h("pre", null, pretty(res.result ?? null)),
          ]
        : null,
    );
  };
}
