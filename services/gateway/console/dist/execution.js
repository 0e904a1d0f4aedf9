// One execution: its status, its nodes and the final context, kept up to
// date from the execution's event stream while it runs.
import { getExact, Problem, stream } from "./api.js";
import { duration, h, replace } from "./dom.js";
import { pretty } from "./exact.js";
import { showError, statusBadge } from "./executions.js";
import { chooseDirection, defaultDirection, drawGraph, drawTimeline } from "./graph.js";
import { visitsPanel } from "./visits.js";
// jaeger is Jaeger's UI as the gateway was told it (NOVA_JAEGER_URL), or "".
const jaeger = document.querySelector('meta[name="nova-jaeger-url"]')?.content ?? "";
// traceLink searches Jaeger for the execution's trace: every sandbox run
// and agent step carries the tag execution.id, and one workflow is one trace.
export function traceLink(base, id) {
    return `${base}/search?service=sandbox&tags=${encodeURIComponent(JSON.stringify({ "execution.id": id }))}`;
}
export function executionPage(root, id, params, signal) {
    const head = h("div", { class: "execution-head" });
    const graph = h("div", { class: "graph-wrap" });
    const panel = h("div", { class: "panel" });
    let selected = params.get("node") ?? "";
    let last = null;
    let lastText = "";
    let direction = null;
    const nodes = h("tbody");
    const context = h("pre", { class: "context" });
    const timeline = h("div", { class: "timeline-wrap" });
    const note = h("p", { class: "note", role: "status", "aria-live": "polite" });
    replace(root, h("p", null, h("a", { href: "#/executions" }, "← Executions")), head, note, h("h2", null, "Graph"), graph, panel, h("h2", null, "Timeline"), timeline, h("h2", null, "Nodes"), h("table", { class: "nodes" }, h("thead", null, h("tr", null, ["Node", "Type", "Status", "Visit", "Duration", "Error"].map((t) => h("th", { scope: "col" }, t)))), nodes), h("h2", null, "Context"), context);
    const show = (view) => {
        last = view;
        const doc = view.execution;
        // A node's status is that of its last visit; the engine's current
        // node is running.
        const status = new Map();
        for (const n of view.nodes)
            status.set(n.node_id, n.status);
        if (doc.status === "running" && doc.current_node)
            status.set(doc.current_node, "running");
        const select = (id) => {
            selected = selected === id ? "" : id;
            if (last)
                show(last);
            document.querySelector(`svg.graph [data-node="${CSS.escape(id)}"]`)?.focus();
        };
        replace(panel, selected
            ? visitsPanel(doc.definition?.nodes?.find((n) => n.id === selected), selected, view.nodes.filter((n) => n.node_id === selected), { executionId: doc.execution_id, workflow: doc.workflow_name, finished: doc.status !== "running" && doc.status !== "pending" })
            : h("p", { class: "note" }, "Select a node to see its visits."));
        // Nodes an ended execution never reached did not run; they are not pending.
        if (doc.status !== "running" && doc.status !== "pending") {
            for (const n of doc.definition?.nodes ?? [])
                if (!status.has(n.id))
                    status.set(n.id, "skipped");
        }
        const def = doc.definition;
        if (!def?.nodes?.length) {
            replace(graph, "No definition recorded.");
        }
        else {
            const dir = direction ?? defaultDirection(def);
            const toggle = h("button", {
                type: "button",
                class: "secondary graph-direction",
                "aria-label": dir === "LR" ? "Draw the graph top to bottom" : "Draw the graph left to right",
                onclick: () => {
                    direction = dir === "LR" ? "TB" : "LR";
                    chooseDirection(direction);
                    if (last)
                        show(last);
                },
            }, dir === "LR" ? "↓ Top to bottom" : "→ Left to right");
            replace(graph, h("div", { class: "graph-tools" }, toggle, h("span", { class: "meta" }, ` ${def.nodes.length} nodes`)), drawGraph(def, status, doc.path ?? [], select, selected, dir));
        }
        replace(head, h("h1", null, doc.workflow_name, " ", statusBadge(doc.status)), h("p", { class: "meta" }, h("code", null, doc.execution_id), doc.duration_ms ? ` · ${duration(doc.duration_ms)}` : "", jaeger ? [" · ", h("a", { href: traceLink(jaeger, doc.execution_id), target: "_blank", rel: "noopener" }, "Trace in Jaeger")] : null), doc.error ? h("p", { class: "error" }, doc.error) : null);
        replace(nodes, view.nodes.filter((n) => !selected || n.node_id === selected).map((n) => h("tr", { "data-node": n.node_id, "data-status": n.status }, h("td", null, n.node_id), h("td", null, n.node_type), h("td", null, statusBadge(n.status)), h("td", null, n.visit), h("td", null, duration(Math.round(n.execution_time))), h("td", { class: "error" }, n.error_message ?? ""))));
        replace(context, pretty(doc.final_context ?? doc.initial_context ?? {}));
        replace(timeline, drawTimeline(view.nodes, select) ?? h("p", { class: "note" }, "No visit has run yet."));
    };
    const load = () => getExact(`/v1/executions/${encodeURIComponent(id)}`, signal).then((view) => {
        replace(note);
        // Drawn again only when something changed, so a node being
        // clicked or focused stays in place.
        const text = pretty(view);
        if (text === lastText)
            return;
        lastText = text;
        show(view);
    }, (e) => {
        if (signal.aborted)
            return;
        // A start just accepted is not recorded yet: its first event will
        // load it.
        if (e instanceof Problem && e.status === 404 && !last)
            replace(note, "Waiting for the execution to start…");
        else
            showError(note, e);
    });
    // settle re-reads an ended execution until the audit store has recorded
    // every visit's end (it writes a little after the engine's events).
    const settle = async () => {
        for (let i = 0; i < 40 && !signal.aborted; i++) {
            const doc = last?.execution;
            const ended = doc && doc.status !== "running" && doc.status !== "pending";
            if (ended && !last.nodes.some((n) => n.status === "running"))
                return;
            await new Promise((r) => setTimeout(r, 250));
            await load();
        }
    };
    void load().then(() => 
    // Each event of the execution re-reads it; the stream ends with the
    // completion.
    stream(`/v1/executions/${encodeURIComponent(id)}/events`, { signal }, () => void load()).then(settle, (e) => {
        if (!signal.aborted)
            showError(note, e);
    }));
}
