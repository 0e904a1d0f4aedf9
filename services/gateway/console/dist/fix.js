// The Fix modal: what is known of a field (coverage, type, the code
// that writes it), the feedback a person gives (the issue, fields that
// depend on the agent type, notes, expected examples), then the refinement
// as it streams from POST /v1/refine, and on complete the new field table,
// the code's diff and Save to workflow or Discard.
import { postJSON, Problem, stream } from "./api.js";
import { h, replace } from "./dom.js";
import { parseExact } from "./exact.js";
import { showError } from "./executions.js";
import { analysedValue, coverageOf, diffView, fieldLogic, fieldTable } from "./fields.js";
// The agent types and the issue kinds, as the modal names them.
const agentTypes = ["transformer", "scraper", "analyzer", "api-client", "general"];
const issueKinds = [
    ["missing", "No data extracted"],
    ["wrong", "Wrong data extracted"],
    ["partial", "Inconsistent results"],
    ["format", "Wrong format"],
];
// guessAgentType reads the code for what kind of agent wrote it.
export function guessAgentType(code) {
    if (/cheerio|BeautifulSoup|querySelector|\$\(['"]/.test(code))
        return "scraper";
    if (/\bfetch\(|requests\.(get|post)|urllib|httpx/.test(code))
        return "api-client";
    return "transformer";
}
let seq = 0;
// openFix opens the modal for field; it closes when signal aborts (the
// page it was opened from is left).
export function openFix(target, field, signal) {
    const id = (name) => `fix-${seq}-${name}`;
    seq++;
    const total = Number(target.analysis.itemCount);
    const cov = coverageOf(field);
    const populatedCount = Math.round((cov * total) / 100);
    const logic = fieldLogic(target.code, field.name);
    const agent = h("select", { id: id("agent"), name: "agentType" }, agentTypes.map((t) => h("option", { value: t }, t)));
    agent.value = guessAgentType(target.code);
    const issue = h("select", { id: id("issue"), name: "issue" }, issueKinds.map(([v, label]) => h("option", { value: v }, label)));
    issue.value = cov < 100 ? "missing" : "wrong";
    const specific = h("div", { class: "agent-fields" });
    const notes = h("textarea", { id: id("notes"), name: "notes", rows: 3, placeholder: "Describe what the field should contain…" });
    const correctValue = h("input", { id: id("value"), name: "correctValue", type: "text", placeholder: "a value the field should have (optional)" });
    const examples = h("div", { class: "examples" });
    const attempts = h("input", { id: id("attempts"), name: "maxAttempts", type: "number", min: 1, max: 10, value: 3 });
    const message = h("div", { class: "form-message", role: "alert" });
    const submit = h("button", { type: "submit" }, "Refine");
    const cancel = h("button", { type: "button", class: "secondary" }, "Cancel");
    let selector = null;
    let expression = null;
    let pattern = null;
    const drawSpecific = () => {
        selector = expression = pattern = null;
        switch (agent.value) {
            case "scraper":
                selector = h("input", { id: id("selector"), name: "correctSelector", type: "text", placeholder: ".element .selector" });
                replace(specific, h("label", { for: selector.id }, "Correct CSS selector"), selector, h("small", null, "Use the browser's developer tools to find the right selector."));
                break;
            case "transformer":
            case "api-client":
                expression = h("textarea", {
                    id: id("expression"),
                    name: "correctExpression",
                    rows: 2,
                    placeholder: target.language === "javascript" ? "x => x.toUpperCase()" : 'item["name"].strip().upper()',
                });
                replace(specific, h("label", { for: expression.id }, "Correct expression / logic"), expression);
                break;
            case "analyzer":
                pattern = h("textarea", { id: id("pattern"), name: "correctPattern", rows: 2, placeholder: "Describe the pattern to detect…" });
                replace(specific, h("label", { for: pattern.id }, "Correct analysis pattern"), pattern);
                break;
            default:
                replace(specific);
        }
    };
    agent.addEventListener("change", drawSpecific);
    drawSpecific();
    const exampleRows = [];
    const addExample = () => {
        const n = exampleRows.length + 1;
        const input = h("textarea", { id: id(`ex${n}-in`), rows: 1, placeholder: '"lamp" (JSON)' });
        const output = h("textarea", { id: id(`ex${n}-out`), rows: 1, placeholder: '"Lamp" (JSON)' });
        exampleRows.push({ input, output });
        examples.append(h("div", { class: "example" }, h("label", { for: input.id }, `Example ${n} input`), input, h("label", { for: output.id }, "expected output"), output));
    };
    const form = h("form", { class: "fix-form" }, h("dl", { class: "field-info" }, h("dt", null, "Coverage"), h("dd", null, `${cov}% (${populatedCount}/${total})`), h("dt", null, "Type"), h("dd", null, field.type), h("dt", null, "Current logic"), h("dd", null, logic.length ? h("pre", { class: "logic" }, logic.join("\n")) : h("span", { class: "note" }, "(no line of the code names it)"))), h("label", { for: agent.id }, "Agent type"), agent, h("label", { for: issue.id }, "What's the issue?"), issue, specific, h("label", { for: correctValue.id }, "Correct value"), correctValue, h("label", { for: notes.id }, "Guidance notes"), notes, h("fieldset", null, h("legend", null, "Expected examples"), examples, h("button", { type: "button", class: "secondary", onclick: addExample }, "+ Add example")), h("label", { for: attempts.id }, "Attempts at most"), attempts, message, h("div", { class: "buttons" }, submit, cancel));
    const progress = h("ol", { class: "refine-log", "aria-live": "polite" });
    // Once sent, the form folds into a line saying what was asked.
    const asked = h("div", { class: "asked", hidden: true });
    const outcome = h("div", { class: "refine-outcome" });
    const dialog = h("dialog", { class: "fix-modal", "aria-labelledby": id("title") }, h("h2", { id: id("title") }, `Fix field "${field.name}"`), form, asked, progress, outcome);
    const close = () => {
        abort.abort();
        dialog.close();
        dialog.remove();
    };
    let abort = new AbortController();
    cancel.addEventListener("click", close);
    dialog.addEventListener("cancel", close);
    if (signal.aborted)
        return;
    signal.addEventListener("abort", close, { once: true });
    document.body.append(dialog);
    dialog.showModal();
    form.addEventListener("submit", async (ev) => {
        ev.preventDefault();
        replace(message);
        // The examples are JSON values; say which one is not.
        const exs = [];
        for (const [i, row] of exampleRows.entries()) {
            const ex = {};
            for (const [name, el] of [
                ["input", row.input],
                ["expectedOutput", row.output],
            ]) {
                const text = el.value.trim();
                if (!text)
                    continue;
                try {
                    ex[name] = parseExact(text);
                    el.removeAttribute("aria-invalid");
                }
                catch (e) {
                    el.setAttribute("aria-invalid", "true");
                    replace(message, `Example ${i + 1}'s ${name === "input" ? "input" : "expected output"} is not JSON: ${e.message}`);
                    el.focus();
                    return;
                }
            }
            if (ex.input !== undefined || ex.expectedOutput !== undefined)
                exs.push(ex);
        }
        const feedback = { field: field.name, issue: issue.value };
        if (notes.value.trim())
            feedback.notes = notes.value.trim();
        if (correctValue.value.trim())
            feedback.correctValue = correctValue.value.trim();
        if (selector?.value.trim())
            feedback.correctSelector = selector.value.trim();
        if (expression?.value.trim())
            feedback.correctExpression = expression.value.trim();
        if (pattern?.value.trim())
            feedback.correctPattern = pattern.value.trim();
        if (exs.length)
            feedback.examples = exs;
        const body = { agentType: agent.value, feedback: [feedback], maxAttempts: Number(attempts.value) || 3 };
        if (target.executionId && target.nodeId) {
            body.executionId = target.executionId;
            body.nodeId = target.nodeId;
        }
        else {
            Object.assign(body, { originalCode: target.code, language: target.language, outputAnalysis: target.analysis, testContext: target.testContext ?? {} });
        }
        submit.disabled = true;
        form.hidden = true;
        asked.hidden = false;
        replace(asked, h("p", null, `Asked: ${field.name} — ${issueKinds.find(([v]) => v === issue.value)?.[1] ?? issue.value} (${agent.value})`, notes.value.trim() ? `: “${notes.value.trim()}”` : ""), h("button", {
            type: "button",
            class: "secondary",
            onclick: () => {
                form.hidden = false;
                asked.hidden = true;
            },
        }, "Change the feedback"));
        replace(progress);
        replace(outcome);
        abort = new AbortController();
        let done = false;
        // maxAttempts comes with the info messages; the others name only their attempt.
        let max = 0;
        const attemptOf = (msg) => {
            const n = Number(msg.attempt ?? 0);
            return n ? (max ? `attempt ${n}/${max}: ` : `attempt ${n}: `) : "";
        };
        try {
            await stream("/v1/refine", { method: "POST", body, signal: abort.signal }, (e) => {
                const msg = parseExact(e.data);
                switch (msg.type) {
                    case "info": {
                        max = Number(msg.maxAttempts ?? 0) || max;
                        const text = String(msg.message ?? "");
                        // "Refinement attempt n/N" says its attempt itself.
                        progress.append(h("li", { class: "info" }, /^Refinement attempt/.test(text) ? "" : attemptOf(msg), text));
                        break;
                    }
                    case "progress":
                        progress.append(h("li", { class: "progress" }, attemptOf(msg), String(msg.message ?? ""), listOf(" · fixed: ", msg.fixed), listOf(" · remaining: ", msg.remaining), msg.error ? h("span", { class: "error" }, ` · ${String(msg.error)}`) : null));
                        break;
                    case "complete":
                        done = true;
                        progress.append(h("li", { class: "complete" }, String(msg.message ?? "")));
                        showComplete(msg);
                        break;
                    case "error":
                        done = true;
                        progress.append(h("li", { class: "error" }, String(msg.error ?? "the refinement failed")));
                        break;
                }
            });
            if (!done)
                progress.append(h("li", { class: "error" }, "The stream ended before the refinement completed."));
        }
        catch (e) {
            if (!abort.signal.aborted)
                showError(message, e);
        }
        finally {
            submit.disabled = false;
        }
    });
    const showComplete = (msg) => {
        const code = String(msg.code ?? "");
        const language = String(msg.language ?? target.language);
        const result = msg.result ?? null;
        const saveNote = h("p", { class: "note", role: "status" });
        const save = h("button", { type: "button" }, target.workflow ? "Save to workflow" : "Use this code");
        const discard = h("button", { type: "button", class: "secondary" }, "Discard");
        discard.addEventListener("click", close);
        save.addEventListener("click", async () => {
            if (!target.workflow) {
                target.useCode?.(code, language);
                close();
                return;
            }
            save.disabled = true;
            try {
                const saved = await postJSON(`/v1/workflows/${encodeURIComponent(target.workflow)}/nodes/${encodeURIComponent(target.nodeId ?? "")}/code`, { code, language });
                replace(saveNote, `Saved: ${saved.name} is now at revision ${saved.revision} (was ${saved.previous_revision}); node ${saved.node} runs this code and calls no model.`);
                discard.textContent = "Close";
            }
            catch (e) {
                save.disabled = false;
                if (e instanceof Problem)
                    showError(saveNote, e);
                else
                    replace(saveNote, String(e));
            }
        });
        replace(outcome, h("h3", null, msg.partialSuccess ? "Partly fixed" : "Fixed"), listOf("Resolved: ", msg.resolved), listOf(" Remaining: ", msg.remaining), h("h4", null, "New output"), fieldTable(analysedValue(result, language), msg.analysis), h("h4", null, "Code"), diffView(target.code, code), h("div", { class: "buttons" }, save, discard), saveNote);
        save.focus({ preventScroll: true });
    };
}
function listOf(label, v) {
    return Array.isArray(v) && v.length ? `${label}${v.join(", ")}` : "";
}
