// A node's visits: what ran (the code, and the prompt of an AI node), the
// context before and after, what it printed, its error with the traceback,
// and for an AI node each agent step: its code, the error that sent it
// back, the model, tokens, cost and time. A running visit shows how long it
// has run, the agent step it is in, and the steps ended so far.
import { cut, duration, h, money, running } from "./dom.js";
import { attemptText, deadline, rerunButton, sleepUntil, visitDetail, visitPlace } from "./control.js";
import { pretty } from "./exact.js";
import { statusBadge } from "./executions.js";
import { analysedValue, fieldTable, updatesOf } from "./fields.js";
import { openFix } from "./fix.js";
import { typeName } from "./graph.js";
import { ItemPages, itemsKey } from "./items.js";
import { currentStep, itemOf, mapItems, mapProgress, stepLabel } from "./live.js";
export function visitsPanel(node, id, visits, of) {
    const prompt = node?.prompt;
    // A map's items are shown under the map's own visit they belong to.
    const own = visits.filter((v) => itemOf(v) === null);
    const orphans = visits.filter((v) => itemOf(v) !== null && !own.some((o) => o.visit <= v.visit));
    return h("section", { class: "visits", "aria-label": `Visits of node ${id}` }, h("h2", null, `Node ${id}`, h("span", { class: "meta" }, ` · ${typeName(node?.type)}${prompt || of.refinement ? " · AI" : ""}`)), node?.description ? h("p", { class: "note" }, node.description) : null, prompt ? [h("h3", null, "Prompt"), h("pre", { class: "prompt" }, prompt)] : null, visits.length === 0
        ? h("p", { class: "note" }, of.finished ? "Not visited in this execution." : "Not visited yet.")
        : [
            own.map((v, i) => [
                v.status === "running" ? runningView(v, node, of) : visitView(v, node, of, i === own.length - 1),
                typeName(node?.type) === "map" || visits.some((x) => itemOf(x) !== null && x.visit >= v.visit) ? itemsView(v, node, of) : null,
            ]),
            orphans.length ? itemList(itemsKey(id, orphans[0].visit), orphans, node, of) : null,
        ]);
}
// itemsView is a map visit's items: how far they have come, and each item
// (of a long list, the first ones and the last of those running or failed,
// or the page a person went to with the controls above them) as a line
// that opens to the item's visit; a failed one is open.
function itemsView(v, node, of) {
    if (!of.view)
        return null;
    const items = [...mapItems(of.view, v).values()].sort((a, b) => itemOf(a) - itemOf(b));
    const p = mapProgress(of.view, v, node);
    return h("section", { class: "map-items", "data-visit": String(v.visit) }, h("h4", null, "Items", h("span", { class: "meta map-progress" }, ` · ${p.done}${p.total !== null ? ` of ${p.total}` : ""} done`, p.failed ? `, ${p.failed} failed` : "", p.running ? `, ${p.running} running` : "", node?.concurrency ? ` · ${node.concurrency} at once` : "")), items.length ? itemList(itemsKey(v.node_id, v.visit), items, node, of) : h("p", { class: "note" }, "No item has started yet."));
}
function itemList(key, items, node, of) {
    const pages = of.items ?? new ItemPages(() => undefined);
    const w = pages.window(key, items, (x) => itemOf(x), (x) => x.status !== "success" && x.status !== "succeeded");
    const { head, hidden, tail } = w;
    const line = (x) => {
        const failed = x.status === "failed" || x.status === "error";
        return h("details", { class: "item-visit", "data-item": String(itemOf(x)), "data-status": x.status, open: failed }, h("summary", null, h("code", null, `${x.node_id}[${itemOf(x)}]`), " ", statusBadge(x.status), h("span", { class: "meta" }, x.status === "running" ? [" for ", running("span", x.started_at)] : ` ${duration(Math.round(Number(x.execution_time)))}`, x.branch ? ` · branch ${x.branch}` : ""), x.output_result && "result" in x.output_result && !failed
            ? [h("span", { class: "meta" }, " · result "), h("code", { class: "item-result" }, cut(JSON.stringify(x.output_result.result) ?? "null", 60))]
            : null, x.error_message ? h("span", { class: "error item-error" }, ` ${x.error_message}`) : null), x.status === "running" ? runningView(x, node, of) : visitView(x, node, of, false));
    };
    return h("div", { class: "item-list" }, pages.pager(key, items[0].node_id, w, "panel"), head.map(line), hidden > 0 ? h("p", { class: "note more-items" }, `… and ${hidden} more item${hidden === 1 ? "" : "s"}`) : null, tail.map(line));
}
// visitTitle heads a visit: "Visit 2", or a map's item "Item 3".
function visitTitle(v) {
    const item = itemOf(v);
    return item !== null ? `Item ${item} ` : `Visit ${v.visit} `;
}
// isAI: the visit ran an AI node's pipeline (or a refinement's), whose
// agent steps are worth a table; a code node's one sandbox run is not.
function isAI(v, node, of) {
    return !!node?.prompt || v.ai === true || !!v.ai_metadata || of.refinement || (v.steps ?? []).some((st) => !!st.model_used || Number(st.tokens_input) > 0);
}
// runningView is a visit under way: since when, which agent step (for an
// AI node), and what has ended so far; its output comes with its end.
function runningView(v, node, of) {
    const ai = isAI(v, node, of);
    const step = ai ? currentStep(v, of.refinement) : null;
    const kind = typeName(node?.type ?? v.node_type);
    if (kind === "wait" || kind === "sleep") {
        const until = kind === "sleep" ? sleepUntil(node, v) : "";
        return h("article", { class: "visit running", "data-visit": String(v.visit) }, h("h3", null, visitTitle(v), statusBadge("waiting"), h("span", { class: "meta" }, " for ", running("span", v.started_at))), h("p", { class: "current-step" }, kind === "wait"
            ? ["Waiting for signal ", h("code", null, node?.signal ?? "?"), " (the form above sends it)."]
            : ["Sleeping", until ? [" until ", deadline(until)] : "", "."]));
    }
    const attempt = attemptText(v, node, of.definition);
    return h("article", { class: "visit running", "data-visit": String(v.visit), "data-item": itemOf(v) }, h("h3", null, visitTitle(v), statusBadge("running"), h("span", { class: "meta" }, " for ", running("span", v.started_at), attempt ? ` · ${attempt}` : "")), visitPlace(v), h("p", { class: "current-step" }, ai
        ? step
            ? ["In step ", h("strong", null, stepLabel(step.step)), ` (${step.agent})`, step.attempt ? `, attempt ${step.attempt}` : ""]
            : "Between agent steps."
        : "Running its code in the sandbox.", v.steps?.length ? h("span", { class: "meta" }, ` · ${v.steps.length} step${v.steps.length === 1 ? "" : "s"} ended`) : null), h("p", { class: "note" }, "Its output, what it printed and its context after come when the visit ends."), ai && v.steps?.length ? stepsTable(v.steps) : null);
}
function visitView(v, node, of, last) {
    const scripted = v.steps?.some((st) => st.output_data?.scripted === true) ? " (SCRIPTED model)" : "";
    const spend = Number(v.model_calls ?? 0) > 0 ? ` · ${v.model_calls} model calls${scripted}, ${money(Number(v.cost_usd ?? 0))}` : "";
    const ai = v.ai_metadata;
    const cache = ai?.cache_hit === true
        ? ` · code from the cache${ai.cache_match === "semantic" ? ` (semantic match, similarity ${Number(ai.cache_similarity).toFixed(4)})` : ""}${ai.cached_from_execution ? `, made by ${String(ai.cached_from_execution)}` : ""}`
        : "";
    const carried = v.status === "carried_over";
    // A node is rerun from its last visit (the context that visit started with).
    const rerun = of.rerun && last && !carried ? rerunButton(of.rerun, v.node_id, v, v.node_id === of.failedNode) : null;
    return h("article", { class: `visit${carried ? " carried-over" : ""}`, "data-visit": String(v.visit), "data-item": itemOf(v) }, h("div", { class: "visit-head" }, h("h3", null, visitTitle(v), statusBadge(v.status), h("span", { class: "meta" }, carried ? "" : ` ${duration(Math.round(Number(v.execution_time)))}${spend}${cache}`)), rerun), 
    // Its next attempt is to come while the execution runs and this is the
    // node's (or the item's) last attempt so far.
    visitDetail(v, node, of.definition, !of.finished && (last || itemOf(v) !== null)), visitPlace(v), carried ? null : visitBody(v, node, of));
}
function visitBody(v, node, of) {
    return [
        v.decision_result ? h("p", null, "Decision: ", h("code", null, v.decision_result), v.path_taken ? [" → ", h("code", null, v.path_taken)] : null) : null,
        v.error_message ? h("p", { class: "error" }, v.error_message) : null,
        v.traceback ? block("Traceback", v.traceback, "error") : null,
        v.code_executed ? block("Code", v.code_executed) : null,
        contextDiff(v.input_context ?? {}, v.output_result ?? {}),
        v.output_analysis && v.status === "success" ? outputFields(v, node, of) : null,
        v.stdout ? block("stdout", v.stdout) : null,
        v.stderr ? block("stderr", v.stderr) : null,
        v.steps?.length && isAI(v, node, of) ? stepsTable(v.steps) : null,
    ];
}
// outputFields is the visit's output as the field table, with Fix
// buttons that refine this node of this execution.
function outputFields(v, node, of) {
    const analysis = v.output_analysis;
    const language = node?.language || "python";
    const output = analysedValue(updatesOf(v.input_context ?? {}, v.output_result ?? {}), language);
    // A refinement's code belongs to no workflow's node: nothing to save it to.
    const canFix = of.finished && !of.refinement && !!v.code_executed;
    return [
        h("h4", null, "Output fields"),
        fieldTable(output, analysis, canFix
            ? (f) => openFix({ code: v.code_executed ?? "", language, analysis, executionId: of.executionId, nodeId: v.node_id, workflow: of.workflow }, f, of.signal)
            : undefined),
    ];
}
function block(title, text, cls = "") {
    return [h("h4", null, title), h("pre", { class: cls }, text)];
}
// contextDiff lists the keys the visit added, changed or removed.
function contextDiff(before, after) {
    const rows = [];
    const keys = Array.from(new Set([...Object.keys(before), ...Object.keys(after)])).sort();
    for (const k of keys) {
        const had = k in before;
        const has = k in after;
        const b = had ? pretty(before[k]) : "";
        const a = has ? pretty(after[k]) : "";
        if (had && has && a === b)
            continue;
        const change = !had ? "added" : !has ? "removed" : "changed";
        rows.push(h("tr", { class: `diff-${change}` }, h("td", null, h("code", null, k)), h("td", null, change), h("td", null, had ? h("pre", null, b) : "—"), h("td", null, has ? h("pre", null, a) : "—")));
    }
    return [
        h("h4", null, "Context, before → after"),
        rows.length === 0
            ? h("p", { class: "note" }, "No change to the context.")
            : h("table", { class: "diff" }, h("thead", null, h("tr", null, ["Key", "Change", "Before", "After"].map((t) => h("th", { scope: "col" }, t)))), h("tbody", null, rows)),
    ];
}
function stepsTable(steps) {
    return [
        h("h4", null, "Agent steps"),
        h("div", { class: "table-scroll" }, h("table", { class: "steps" }, h("thead", null, h("tr", null, ["#", "Agent", "Step", "Attempt", "Status", "Model", "Tokens in/out", "Cost", "Time"].map((t) => h("th", { scope: "col" }, t)))), h("tbody", null, steps.map((st) => [
            h("tr", { "data-step": String(st.step_number), "data-status": st.status }, h("td", null, st.step_number), h("td", null, st.agent_name), h("td", null, st.step_name), h("td", null, st.attempt_number), h("td", null, statusBadge(st.status)), h("td", null, st.model_used ?? "", st.output_data?.scripted === true ? h("span", { class: "meta" }, " (SCRIPTED)") : null), h("td", null, `${st.tokens_input} / ${st.tokens_output}`), h("td", null, money(Number(st.cost_usd))), h("td", null, duration(Math.round(Number(st.execution_time_ms))))),
            st.generated_code || st.error_message || verdict(st)
                ? h("tr", { class: "step-detail" }, h("td", { colspan: 9 }, st.error_message ? h("p", { class: "error" }, st.error_message) : null, verdict(st), st.generated_code ? h("details", null, h("summary", null, "Code of this step"), h("pre", null, st.generated_code)) : null))
                : null,
        ])))),
    ];
}
// verdict is what a checking step found: a validator's findings or reason
// (what sent the code back), or the run's error kind and traceback.
function verdict(st) {
    const out = st.output_data ?? {};
    const lines = [];
    if (out.valid === false) {
        const findings = Array.isArray(out.findings) ? out.findings : [];
        for (const f of findings)
            lines.push(`line ${String(f.line ?? "?")}: ${String(f.message ?? "")}${f.rule ? ` [${String(f.rule)}]` : ""}`);
        if (typeof out.reason === "string" && out.reason)
            lines.push(out.reason);
        if (Array.isArray(out.failed_checks) && out.failed_checks.length)
            lines.push(`failed checks: ${out.failed_checks.join(", ")}`);
        return h("div", { class: "verdict" }, h("strong", null, "Sent back: "), lines.length ? h("pre", { class: "error" }, lines.join("\n")) : "not valid");
    }
    if (typeof out.traceback === "string" && out.traceback) {
        return h("details", null, h("summary", null, `Traceback${out.error_kind ? ` (${String(out.error_kind)})` : ""}`), h("pre", { class: "error" }, out.traceback));
    }
    if (typeof out.note === "string" && out.note)
        return h("p", { class: "note" }, out.note);
    return null;
}
