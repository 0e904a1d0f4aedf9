// Starting a registered workflow with a context typed as JSON, checked
// before it is sent; the page then follows the new execution.

import { postJSON } from "./api.js";
import { h, replace } from "./dom.js";
import { showError } from "./executions.js";

const startedItem = "nova.started";

// rememberStarted notes an execution this tab started: its page waits for
// it to be recorded instead of saying there is no such execution.
export function rememberStarted(id: string): void {
  const ids = [id, ...startedList().filter((x) => x !== id)].slice(0, 20);
  sessionStorage.setItem(startedItem, JSON.stringify(ids));
}

function startedList(): string[] {
  try {
    const ids = JSON.parse(sessionStorage.getItem(startedItem) ?? "[]");
    return Array.isArray(ids) ? ids.map(String) : [];
  } catch {
    return [];
  }
}

export function startedHere(id: string): boolean {
  return startedList().includes(id);
}

// startForm starts workflow; the context's text is sent as typed, so every
// number keeps its digits.
export function startForm(workflow: string, signal: AbortSignal): HTMLFormElement {
  const context = h("textarea", { id: "start-context", name: "context", rows: 4, spellcheck: false }, "{}");
  const message = h("p", { class: "form-message", role: "alert" });
  const button = h("button", { type: "submit" }, `Start ${workflow}`);
  const form = h(
    "form",
    { class: "start", "aria-label": `Start ${workflow}`, "data-workflow": workflow },
    h("h2", null, "Start"),
    h("label", { for: context.id }, "Context (a JSON object)"),
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
      replace(message, 'The context must be a JSON object, like {"total": 1500}.');
      context.setAttribute("aria-invalid", "true");
      return;
    }
    context.removeAttribute("aria-invalid");
    button.disabled = true;
    try {
      const body = `{"workflow": ${JSON.stringify(workflow)}, "context": ${context.value || "{}"}}`;
      const accepted = await postJSON<{ execution_id: string }>("/v1/executions", body, signal);
      rememberStarted(accepted.execution_id);
      location.hash = `#/executions/${encodeURIComponent(accepted.execution_id)}`;
    } catch (e) {
      showError(message, e);
    } finally {
      button.disabled = false;
    }
  });
  return form;
}
