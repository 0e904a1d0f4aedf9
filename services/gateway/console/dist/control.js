// Steering an execution from its page: Cancel (POST
// /v1/executions/{id}/cancel), the form of the wait node it waits at, built
// from the node's JSON Schema (POST /v1/executions/{id}/signals/{name}),
// and Rerun from a node of an ended one (POST /v1/executions/{id}/rerun).
// Also what a visit of a wait, sleep or retried node says in the lists:
// its attempt of the retry policy, when the next one runs, the signal that
// resumed it, that it timed out, or that a rerun carried it over.
import { postJSON, Problem } from "./api.js";
import { cut, elapsed, h, replace, shortID, stamp } from "./dom.js";
import { secondsText } from "./duration.js";
import { ExactNumber, parseExact, pretty } from "./exact.js";
import { showError } from "./executions.js";
import { itemOf } from "./live.js";
import { rememberStarted } from "./start.js";
let seq = 0;
// dialogFor makes a modal dialog that closes, and is removed, when the page
// it was opened from is left (signal) or when Escape or close() ends it.
export function dialogFor(title, cls, signal, ...body) {
    if (signal.aborted)
        return null;
    const titleId = `control-${++seq}-title`;
    const dialog = h("dialog", { class: `control-modal ${cls}`, "aria-labelledby": titleId }, h("h2", { id: titleId }, title), body);
    const close = () => {
        signal.removeEventListener("abort", close);
        if (dialog.open)
            dialog.close();
        dialog.remove();
    };
    dialog.addEventListener("cancel", (ev) => {
        ev.preventDefault();
        close();
    });
    signal.addEventListener("abort", close, { once: true });
    document.body.append(dialog);
    dialog.showModal();
    return { dialog, close };
}
// --- Cancel ---------------------------------------------------------------
// cancelButton opens the dialog that cancels execution id; onSent runs once
// the gateway took the cancel (the page then follows the execution to its
// end, cancelled).
export function cancelButton(id, signal, onSent) {
    return h("button", { type: "button", class: "danger cancel-execution", onclick: () => openCancel(id, signal, onSent) }, "Cancel execution…");
}
function openCancel(id, signal, onSent) {
    const n = ++seq;
    const reason = h("textarea", { id: `cancel-${n}-reason`, name: "reason", rows: 2, maxlength: 1000, placeholder: "e.g. wrong input file" });
    const message = h("div", { class: "form-message", role: "alert" });
    const confirm = h("button", { type: "submit", class: "danger" }, "Cancel the execution");
    const keep = h("button", { type: "button", class: "secondary" }, "Keep it running");
    const form = h("form", { class: "cancel-form", method: "dialog" }, h("p", null, "The node that runs now is stopped (its program killed, no further model call) and the execution ends ", h("strong", null, "cancelled"), ". This cannot be undone; an ended execution can be rerun from a node."), h("label", { for: reason.id }, "Reason ", h("span", { class: "note label-note" }, "(optional, kept in the chain of work)")), reason, message, h("div", { class: "buttons" }, confirm, keep));
    const d = dialogFor(`Cancel execution ${shortID(id)}?`, "cancel-modal", signal, form);
    if (!d)
        return;
    keep.addEventListener("click", d.close);
    reason.focus();
    form.addEventListener("submit", async (ev) => {
        ev.preventDefault();
        replace(message);
        confirm.disabled = true;
        try {
            const text = reason.value.trim();
            await postJSON(`/v1/executions/${encodeURIComponent(id)}/cancel`, text ? { reason: text } : {}, signal);
            d.close();
            onSent();
        }
        catch (e) {
            if (signal.aborted)
                return;
            confirm.disabled = false;
            showError(message, e);
        }
    });
}
function schemaOf(v) {
    if (typeof v === "string") {
        try {
            v = parseExact(v);
        }
        catch {
            return {};
        }
    }
    return v !== null && typeof v === "object" && !Array.isArray(v) ? v : {};
}
function typeOf(s) {
    const t = Array.isArray(s.type) ? s.type.find((x) => x !== "null") ?? "" : s.type ?? "";
    if (!t && s.enum)
        return "enum";
    return t;
}
// deadline is a time to come, relative ("in 71 h 59 min") and absolute;
// at: the absolute time first ("12:00:03 (in 2 s)", "… (5 s ago)"). The
// page's clock keeps the relative part current (tickDeadlines).
export function deadline(iso, at = false) {
    const t = Date.parse(iso);
    const rel = h(at ? "span" : "strong", { "data-until": Number.isFinite(t) ? t : "" }, relative(t));
    const abs = h("time", { datetime: iso, title: iso }, stamp(iso));
    return h("span", { class: "deadline" }, at ? [abs, " (", rel, ")"] : [rel, " (", abs, ")"]);
}
function relative(t, now = Date.now()) {
    if (!Number.isFinite(t))
        return "";
    const ms = t - now;
    return ms >= 0 ? `in ${elapsed(ms)}` : `${elapsed(-ms)} ago`;
}
// tickDeadlines moves every deadline of the page on; the page's clock
// calls it each second.
export function tickDeadlines(now = Date.now()) {
    for (const el of document.querySelectorAll("[data-until]")) {
        const t = Number(el.dataset.until);
        if (el.dataset.until)
            el.textContent = relative(t, now);
    }
}
// waitingPanel is the wait node an execution waits at: what the people
// asked are told, the signal, when the wait times out, and a form built from
// the payload's JSON Schema. A boolean decide_on member is answered with
// Approve and Reject (an enum one with a button per value); the other
// members are inputs by type, the required ones marked. Nothing is sent by
// Enter: a decision's button (clicked, or pressed as the focused button)
// checks every field against the schema, marks each one at fault, and when
// none is shows the payload to be sent, which a second button sends. A 422
// marks each field the gateway names, a 409 says why the signal was refused.
// timeoutSeconds is the wait node's timeout, as its definition says.
export function waitingPanel(executionId, w, signal, onSent, timeoutSeconds = 0) {
    const n = ++seq;
    const schema = schemaOf(w.schema);
    const props = schema.properties ?? {};
    const required = new Set(Array.isArray(schema.required) ? schema.required : []);
    const decide = w.decide_on && props[w.decide_on] ? w.decide_on : "";
    const decideSchema = decide ? props[decide] : null;
    const decideType = decideSchema ? typeOf(decideSchema) : "";
    // The decision is the buttons for a boolean or an enum; any other type
    // is a field like the others.
    const decisionButtons = [];
    const decisionValues = new Map();
    if (decideSchema && (decideType === "boolean" || Array.isArray(decideSchema.enum))) {
        const choices = decideType === "boolean" && !decideSchema.enum
            ? [
                ["Approve", true, "approve"],
                ["Reject", false, "reject"],
            ]
            : (decideSchema.enum ?? []).map((v) => [String(v), v, "choice"]);
        for (const [label, value, cls] of choices) {
            const b = h("button", { type: "button", class: `decision ${cls}`, "data-decision": String(value) }, label);
            decisionButtons.push(b);
            decisionValues.set(b, value);
        }
    }
    const fields = [];
    for (const [name, ps] of Object.entries(props)) {
        if (name === decide && decisionButtons.length)
            continue;
        fields.push(fieldFor(`signal-${n}-${name.replace(/[^A-Za-z0-9_-]/g, "_")}`, name, schemaOf(ps), required.has(name)));
    }
    const message = h("div", { class: "form-message", role: "alert" });
    const status = h("p", { class: "note", role: "status", "aria-live": "polite" });
    const send = decisionButtons.length ? null : h("button", { type: "button", class: "send-signal" }, `Send ${w.signal}…`);
    const buttons = [...decisionButtons, ...(send ? [send] : [])];
    const editable = h("fieldset", { class: "signal-fields" }, h("legend", { class: "visually-hidden" }, `Payload of signal ${w.signal}`), fields.length ? fields.map((f) => f.wrap) : null, fields.length === 0 && !decisionButtons.length ? h("p", { class: "note" }, "The signal carries no fields.") : null, decideSchema && decisionButtons.length
        ? h("p", { class: "decide-on" }, "Decides on ", h("code", null, decide), decideSchema.description ? `: ${decideSchema.description}` : "")
        : null, h("div", { class: "buttons" }, buttons));
    // The check before sending: what the chosen button will send.
    const review = h("div", { class: "signal-review", role: "group", "aria-labelledby": `signal-${n}-review`, tabindex: -1, hidden: true });
    const form = h("form", { class: "signal-form", novalidate: true, "aria-label": `Signal ${w.signal}` }, editable, review, message, status);
    const chooseText = decisionButtons.length ? decisionButtons.map((b) => b.textContent).join(" or ") : `Send ${w.signal}`;
    // Enter in a field sends nothing; it says what does.
    form.addEventListener("keydown", (ev) => {
        const t = ev.target;
        if (ev.key === "Enter" && t instanceof HTMLInputElement) {
            ev.preventDefault();
            replace(status, `Enter does not send the signal: press ${chooseText}.`);
        }
    });
    form.addEventListener("submit", (ev) => ev.preventDefault());
    const clearErrors = () => {
        replace(message);
        for (const f of fields) {
            replace(f.error);
            f.input.removeAttribute("aria-invalid");
        }
    };
    const closeReview = () => {
        review.hidden = true;
        replace(review);
        editable.disabled = false;
    };
    // markFields puts each problem next to its field (several of one field
    // together) and says how many fields are at fault; the rest, of no
    // field of the form, are listed.
    const markFields = (problems) => {
        const byField = new Map();
        const rest = problems.filter((p) => {
            const top = p.field.split(".")[0] ?? p.field;
            const f = fields.find((x) => x.name === top || x.name === p.field);
            if (!f)
                return true;
            byField.set(f, [...(byField.get(f) ?? []), p.field === f.name ? p.detail : `${p.field}: ${p.detail}`]);
            return false;
        });
        for (const [f, details] of byField)
            fieldError(f, details.join("; "));
        if (byField.size) {
            replace(message, byField.size === 1 ? "1 field does not meet the node's schema: see the field marked." : `${byField.size} fields do not meet the node's schema: see each field marked.`);
            fields.find((f) => byField.has(f))?.input.focus();
        }
        return rest;
    };
    // choose checks every field, then shows what button b will send.
    const choose = (b) => {
        clearErrors();
        replace(status);
        const payload = {};
        const problems = [];
        for (const f of fields) {
            let v;
            try {
                v = f.value();
            }
            catch (e) {
                problems.push({ field: f.name, detail: e.message });
                continue;
            }
            if (v === undefined) {
                if (f.required)
                    problems.push({ field: f.name, detail: "is required" });
                continue;
            }
            for (const detail of problemsOf(f.schema, v, f.input))
                problems.push({ field: f.name, detail });
            payload[f.name] = v;
        }
        if (problems.length) {
            markFields(problems);
            return;
        }
        const label = decisionValues.has(b) ? b.textContent ?? "" : "";
        if (decide && decisionValues.has(b))
            payload[decide] = decisionValues.get(b);
        const confirm = h("button", { type: "button", class: `confirm-signal ${b.className.replace(/\bdecision\b/, "").trim()}` }, label ? `${label} and send` : `Send ${w.signal}`);
        const back = h("button", { type: "button", class: "secondary change-signal" }, "Change");
        replace(review, h("h3", { id: `signal-${n}-review` }, label ? `${label}: check what will be sent` : "Check what will be sent"), h("p", { class: "note" }, "Signal ", h("code", null, w.signal), " to node ", h("code", null, w.node), ", with this payload:"), h("pre", { class: "signal-payload" }, pretty(payload)), h("div", { class: "buttons" }, confirm, back));
        editable.disabled = true;
        review.hidden = false;
        review.focus();
        back.addEventListener("click", () => {
            closeReview();
            b.focus();
        });
        review.onkeydown = (ev) => {
            if (ev.key === "Escape" && !confirm.disabled) {
                ev.preventDefault();
                closeReview();
                b.focus();
            }
        };
        confirm.addEventListener("click", () => void sendPayload(payload, label, confirm, back));
    };
    for (const b of buttons)
        b.addEventListener("click", () => choose(b));
    let waitingSince = 0;
    const sendPayload = async (payload, label, confirm, back) => {
        replace(message);
        confirm.disabled = true;
        back.disabled = true;
        try {
            await postJSON(`/v1/executions/${encodeURIComponent(executionId)}/signals/${encodeURIComponent(w.signal)}`, JSON.stringify(payload), signal);
            replace(status, `Signal ${w.signal} sent${label ? ` (${label})` : ""}; the execution goes on once the engine takes it.`);
            waitingSince = Date.now();
            onSent();
            // Should the engine not take it (the wait ended meanwhile), the page
            // still shows this wait a while later: the form can be sent again.
            setTimeout(() => {
                if (form.isConnected && Date.now() - waitingSince >= 9000)
                    closeReview();
            }, 10000);
        }
        catch (e) {
            if (signal.aborted)
                return;
            if (e instanceof Problem && e.status === 422 && e.errors.length) {
                closeReview();
                const rest = markFields(e.errors);
                if (rest.length)
                    showError(message, new Problem(e.status, e.title, e.detail, rest));
            }
            else {
                confirm.disabled = false;
                back.disabled = false;
                showError(message, e);
            }
        }
    };
    return h("section", { class: "waiting-panel", "aria-label": `Waiting for signal ${w.signal}`, "data-node": w.node, "data-signal": w.signal }, h("h2", null, "Waiting for a decision ", h("span", { class: "meta" }, "at node ", h("code", null, w.node))), w.description ? h("p", { class: "wait-description" }, w.description) : null, h("p", { class: "wait-meta" }, "Signal ", h("code", null, w.signal), " · ", w.until ? ["times out ", deadline(w.until)] : "waits until it comes (no timeout)", w.until && timeoutSeconds > 0 ? h("span", { class: "wait-timeout" }, ` · waits up to ${secondsText(timeoutSeconds)}`) : null), form);
}
function fieldError(f, detail) {
    replace(f.error, detail);
    f.input.setAttribute("aria-invalid", "true");
}
// problemsOf checks a field's value against its schema in the browser, in
// the gateway's words, before anything is sent: its type, bounds, length,
// pattern and format. What it does not check (a nested object's members)
// the gateway does.
function problemsOf(s, v, input) {
    const out = [];
    const type = typeOf(s);
    // The schema is read with its numbers exact (0.50 is an ExactNumber).
    const bound = (x) => (typeof x === "number" || x instanceof ExactNumber ? Number(x) : null);
    const [min, max, over, under] = [bound(s.minimum), bound(s.maximum), bound(s.exclusiveMinimum), bound(s.exclusiveMaximum)];
    const [minLength, maxLength] = [bound(s.minLength), bound(s.maxLength)];
    if (type === "number" || type === "integer") {
        if (!(v instanceof ExactNumber))
            return ["must be a number"];
        const x = Number(v.text);
        if (type === "integer" && !Number.isInteger(x))
            out.push("must be a whole number");
        if (min !== null && x < min)
            out.push(`must be at least ${min}`);
        if (max !== null && x > max)
            out.push(`must be at most ${max}`);
        if (over !== null && x <= over)
            out.push(`must be more than ${over}`);
        if (under !== null && x >= under)
            out.push(`must be less than ${under}`);
    }
    else if (type === "string" && typeof v === "string") {
        const length = Array.from(v).length;
        if (minLength !== null && length < minLength)
            out.push(`must be at least ${minLength} characters long`);
        if (maxLength !== null && length > maxLength)
            out.push(`must be at most ${maxLength} characters long`);
        if (typeof s.pattern === "string") {
            try {
                if (!new RegExp(s.pattern, "u").test(v))
                    out.push(`must match the pattern ${JSON.stringify(s.pattern)}`);
            }
            catch {
                // A pattern the browser cannot read: the gateway checks it.
            }
        }
        const badFormat = (s.format === "email" || s.format === "uri") && input instanceof HTMLInputElement
            ? input.validity.typeMismatch
            : s.format === "date"
                ? !/^\d{4}-\d{2}-\d{2}$/.test(v) || Number.isNaN(Date.parse(v))
                : false;
        if (badFormat)
            out.push(`must be a valid ${s.format}`);
    }
    else if (type === "object" && (v === null || typeof v !== "object" || Array.isArray(v) || v instanceof ExactNumber)) {
        out.push("must be an object");
    }
    else if (type === "array" && !Array.isArray(v)) {
        out.push("must be a list");
    }
    return out;
}
// fieldFor is the input of one payload member, by its schema's type: a
// select for an enum, a checkbox for a boolean, a number input for a
// number or an integer, a text input for a string, JSON for the rest.
function fieldFor(id, name, s, required) {
    const type = typeOf(s);
    const error = h("p", { class: "field-error", id: `${id}-error`, "aria-live": "polite" });
    const described = `${id}-error${s.description ? ` ${id}-help` : ""}`;
    const base = { id, name, "aria-describedby": described, "aria-required": required ? "true" : null };
    let input;
    let value;
    let hint = "";
    if (Array.isArray(s.enum)) {
        const values = s.enum;
        const select = h("select", base, h("option", { value: "" }, required ? "— choose —" : "— none —"), values.map((v, i) => h("option", { value: String(i) }, typeof v === "string" ? v : JSON.stringify(v))));
        const d = values.findIndex((v) => JSON.stringify(v) === JSON.stringify(s.default));
        if (d >= 0)
            select.value = String(d);
        input = select;
        value = () => (select.value === "" ? undefined : values[Number(select.value)]);
    }
    else if (type === "boolean") {
        const box = h("input", { ...base, type: "checkbox", checked: s.default === true });
        input = box;
        value = () => box.checked;
    }
    else if (type === "number" || type === "integer") {
        const num = h("input", {
            ...base,
            type: "number",
            step: type === "integer" ? 1 : "any",
            min: s.minimum !== undefined ? String(s.minimum) : null,
            max: s.maximum !== undefined ? String(s.maximum) : null,
            inputmode: type === "integer" ? "numeric" : "decimal",
            value: typeof s.default === "number" ? s.default : null,
        });
        input = num;
        hint = type;
        value = () => {
            const text = num.value.trim();
            if (text === "") {
                if (num.validity.badInput)
                    throw new Error("must be a number");
                return undefined;
            }
            // Sent as typed: 1500.0 keeps its digits.
            return /^-?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?$/.test(text) ? new ExactNumber(text) : text;
        };
    }
    else if (type === "string") {
        const long = Number(s.maxLength ?? 0) > 200 || s.format === "textarea";
        const text = long
            ? h("textarea", { ...base, rows: 3 })
            : h("input", {
                ...base,
                type: s.format === "email" ? "email" : s.format === "uri" ? "url" : "text",
                maxlength: s.maxLength !== undefined ? String(s.maxLength) : null,
                autocomplete: "off",
            });
        if (typeof s.default === "string")
            text.value = s.default;
        input = text;
        hint = s.format ?? "";
        value = () => (text.value.trim() === "" ? undefined : text.value);
    }
    else {
        const area = h("textarea", { ...base, rows: 2, spellcheck: false, placeholder: type ? `a JSON ${type}` : "JSON" });
        input = area;
        hint = type ? `${type}, as JSON` : "JSON";
        value = () => {
            const text = area.value.trim();
            if (text === "")
                return undefined;
            try {
                return parseExact(text);
            }
            catch (e) {
                throw new Error(`not JSON: ${e.message}`);
            }
        };
    }
    const label = h("label", { for: id }, s.title ?? name, s.title ? h("code", { class: "field-name" }, ` ${name}`) : null, required ? h("span", { class: "required", title: "required" }, " *") : null, hint ? h("span", { class: "field-type" }, hint) : null);
    const wrap = h("div", { class: `signal-field field-${type || "json"}${required ? " is-required" : ""}`, "data-field": name }, type === "boolean" ? h("div", { class: "check" }, input, label) : [label, input], s.description ? h("small", { id: `${id}-help`, class: "help" }, s.description) : null, error);
    return { name, schema: s, required, wrap, error, input, value };
}
// rerunButton opens the rerun dialog from node; the failed node's is the
// page's main action, the others are quieter.
export function rerunButton(of, node, visit, main) {
    return h("button", {
        type: "button",
        class: `rerun${main ? "" : " secondary"}`,
        "data-rerun": node,
        title: `Rerun this execution from node ${node}, with the context it started with`,
        onclick: () => openRerun(of, node, visit),
    }, main ? `Rerun from ${node}…` : "Rerun from here");
}
// openRerun asks for the context changes and the revision, starts the rerun
// and goes to its page.
export function openRerun(of, node, visit) {
    const n = ++seq;
    const rows = h("div", { class: "context-changes" });
    const addRow = (key = "", value = "") => {
        const k = h("input", { type: "text", class: "change-key", "aria-label": "Key", placeholder: "key", value: key, autocomplete: "off", spellcheck: false });
        const v = h("input", { type: "text", class: "change-value", "aria-label": "Value", placeholder: "value (JSON, else text)", value, autocomplete: "off", spellcheck: false });
        const row = h("div", { class: "change-row" }, k, v);
        row.append(h("button", { type: "button", class: "secondary remove", "aria-label": "Remove this change", onclick: () => row.remove() }, "×"));
        rows.append(row);
        return k;
    };
    addRow();
    const original = h("input", { type: "radio", id: `rerun-${n}-original`, name: "revision", value: "original", checked: true });
    const newest = h("input", { type: "radio", id: `rerun-${n}-newest`, name: "revision", value: "newest" });
    const message = h("div", { class: "form-message", role: "alert" });
    const submit = h("button", { type: "submit" }, "Rerun");
    const close = h("button", { type: "button", class: "secondary" }, "Close");
    const before = visit?.input_context;
    const form = h("form", { class: "rerun-form" }, h("p", null, "A new execution of ", h("strong", null, of.workflow), " starts at ", h("code", null, node), ` with the context ${node} started with, changed as set below. The nodes that ran before it are carried over, not run again.`), before && Object.keys(before).length
        ? h("details", { class: "context-before" }, h("summary", null, `Context before ${node}`), h("pre", null, pretty(before)))
        : null, h("fieldset", null, h("legend", null, "Context changes"), h("p", { class: "note" }, "Each value is JSON when it reads as JSON (1500, true, \"text\", {…}), else text."), rows, h("button", { type: "button", class: "secondary add-change", onclick: () => addRow().focus() }, "+ Add a change")), h("fieldset", { class: "revision" }, h("legend", null, "Revision"), h("div", { class: "check" }, original, h("label", { for: original.id }, "The definition this execution ran")), h("div", { class: "check" }, newest, h("label", { for: newest.id }, "The workflow's newest registration"))), message, h("div", { class: "buttons" }, submit, close));
    const d = dialogFor(`Rerun from node ${node}`, "rerun-modal", of.signal, form);
    if (!d)
        return;
    close.addEventListener("click", d.close);
    rows.querySelector("input")?.focus();
    form.addEventListener("submit", async (ev) => {
        ev.preventDefault();
        replace(message);
        const changes = {};
        for (const row of rows.querySelectorAll(".change-row")) {
            const k = row.querySelector(".change-key");
            const v = row.querySelector(".change-value");
            const key = k.value.trim();
            if (!key) {
                if (v.value.trim()) {
                    k.setAttribute("aria-invalid", "true");
                    replace(message, "A change has a value and no key.");
                    k.focus();
                    return;
                }
                continue;
            }
            k.removeAttribute("aria-invalid");
            changes[key] = jsonOrText(v.value);
        }
        const body = { from: node, revision: newest.checked ? "newest" : "original" };
        if (Object.keys(changes).length)
            body.context = changes;
        submit.disabled = true;
        // The audit store records an execution's end a moment after it: a
        // rerun asked for at once is answered 409 with Retry-After.
        for (let tries = 1;; tries++) {
            try {
                const started = await postJSON(`/v1/executions/${encodeURIComponent(of.executionId)}/rerun`, body, of.signal);
                rememberStarted(started.execution_id);
                d.close();
                location.hash = `#/executions/${encodeURIComponent(started.execution_id)}`;
                return;
            }
            catch (e) {
                if (of.signal.aborted)
                    return;
                if (e instanceof Problem && e.status === 409 && /not recorded its end yet/.test(e.detail) && tries < 5) {
                    replace(message, h("span", { class: "note" }, "The execution's end is being recorded; trying again…"));
                    await new Promise((r) => setTimeout(r, 1500));
                    continue;
                }
                submit.disabled = false;
                showError(message, e);
                return;
            }
        }
    });
}
// jsonOrText is a typed value: JSON when it parses (numbers as typed),
// else the text itself.
export function jsonOrText(text) {
    const t = text.trim();
    if (t === "")
        return "";
    try {
        return parseExact(t);
    }
    catch {
        return text;
    }
}
// --- What a visit says ----------------------------------------------------
// policyOf is the retry policy a node runs under: its own, else the
// workflow's.
function policyOf(node, def) {
    return node?.retry ?? def?.retry;
}
// attemptText is "attempt 2 of 3" (of the retry policy's max_attempts).
export function attemptText(v, node, def) {
    const a = Number(v.attempt ?? 0);
    if (!a)
        return "";
    const max = Number(policyOf(node, def)?.max_attempts ?? 0);
    return max ? `attempt ${a} of ${max}` : `attempt ${a}`;
}
// visitNotes are a visit's short lines for the nodes table: carried over,
// its attempt and, while it is still to come (retrying: the execution runs
// and no later attempt began), when the next runs, the signal that resumed
// it or its timeout.
export function visitNotes(v, node, def, retrying) {
    const notes = [];
    if (v.carried_over_from)
        notes.push(h("span", { class: "carried" }, v.status === "carried_over" ? "from " : "carried over from ", executionLink(v.carried_over_from)));
    const attempt = attemptText(v, node, def);
    if (attempt)
        notes.push(h("span", { class: "attempt" }, attempt));
    if (v.next_attempt_at && retrying)
        notes.push(h("span", { class: "next-attempt" }, "next attempt at ", deadline(v.next_attempt_at, true)));
    if (v.signal) {
        const payload = v.signal.payload && Object.keys(v.signal.payload).length ? oneLine(v.signal.payload) : "";
        notes.push(h("span", { class: "signal-received" }, "signal ", h("code", null, v.signal.name), v.signal.sent_by ? [" from ", h("strong", null, v.signal.sent_by)] : null, payload ? [": ", h("code", { class: "payload", title: payload }, cut(payload, 120))] : null));
    }
    if (v.timed_out)
        notes.push(h("span", { class: "timed-out" }, "timed out: no signal came in time"));
    // A map's item is named in its row (each[3]); its branch is its own.
    if (v.branch && itemOf(v) === null)
        notes.push(h("span", { class: "branch" }, `branch ${v.branch}`));
    if (v.child_execution_ids?.length)
        notes.push(h("span", { class: "children" }, childLinks(v, 3)));
    return notes.length ? h("div", { class: "visit-notes" }, notes) : null;
}
// visitPlace says where a visit ran: a map's item, the branch, and the
// child executions it started, each a link.
export function visitPlace(v) {
    const item = itemOf(v);
    const children = v.child_execution_ids ?? [];
    if (item === null && !v.branch && !children.length)
        return null;
    return h("p", { class: "visit-place" }, item !== null ? h("span", { class: "item" }, `Item ${item} of the map`) : null, v.branch ? h("span", { class: "branch" }, `ran in branch ${v.branch}`) : null, children.length ? h("span", { class: "children" }, childLinks(v, 30)) : null);
}
// childLinks links a visit's child executions, the first max of them. A
// child's id is its parent's with the node, visit and item after it
// (<parent>_<node>_<visit>_<item>): each reads by what follows the parent's.
function childLinks(v, max) {
    const ids = v.child_execution_ids ?? [];
    const shown = ids.slice(0, max);
    const label = (id) => {
        const at = id.lastIndexOf(`_${v.node_id}_`);
        return at > 0 ? id.slice(at + 1) : shortID(id);
    };
    return [
        ids.length === 1 ? "child execution " : "child executions ",
        shown.map((id, i) => [i ? ", " : "", h("a", { href: `#/executions/${encodeURIComponent(id)}`, title: id, class: "child-execution" }, h("code", null, label(id)))]),
        ids.length > max ? ` … and ${ids.length - max} more` : "",
    ];
}
// visitDetail is the same at length for a node's visits: the payload in
// full, who sent it and when.
export function visitDetail(v, node, def, retrying) {
    const out = [];
    if (v.status === "carried_over" || v.carried_over_from) {
        out.push(h("p", { class: "carried" }, "Carried over from ", v.carried_over_from ? executionLink(v.carried_over_from) : "the execution rerun", ": this rerun did not run it again; its work is that execution's."));
    }
    const attempt = attemptText(v, node, def);
    const next = retrying ? v.next_attempt_at : undefined;
    if (attempt || next) {
        out.push(h("p", { class: "attempt" }, attempt ? `Retry policy: ${attempt}` : "", next ? [attempt ? " · " : "", "next attempt at ", deadline(next, true)] : ""));
    }
    if (v.signal) {
        out.push(h("div", { class: "signal-received" }, h("p", null, "Resumed by signal ", h("code", null, v.signal.name), v.signal.sent_by ? [" from ", h("strong", null, v.signal.sent_by)] : null, v.signal.received_at ? [" at ", h("time", { datetime: v.signal.received_at, title: v.signal.received_at }, stamp(v.signal.received_at))] : null), v.signal.payload ? [h("h4", null, "Payload"), h("pre", { class: "payload" }, pretty(v.signal.payload))] : null));
    }
    if (v.timed_out)
        out.push(h("p", { class: "timed-out" }, "Timed out: no signal came in time; the node took its timeout edge."));
    return out;
}
// oneLine writes an object as one line of JSON with a space after each
// comma and colon, so that it wraps between members.
function oneLine(v) {
    return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${JSON.stringify(x)}`).join(", ")}}`;
}
export function executionLink(id) {
    return h("a", { href: `#/executions/${encodeURIComponent(id)}`, title: id }, h("code", null, shortID(id)));
}
// sleepUntil is when a sleep node's running visit ends: its start plus its
// duration, or the time its until key held in the context ("" unknown).
export function sleepUntil(node, v) {
    if (!node)
        return "";
    const secs = Number(node.duration_seconds ?? 0);
    const t = Date.parse(v.started_at ?? "");
    if (secs && Number.isFinite(t))
        return new Date(t + secs * 1000).toISOString();
    const key = node.until;
    const at = key ? v.input_context?.[key] : undefined;
    return typeof at === "string" ? at : "";
}
