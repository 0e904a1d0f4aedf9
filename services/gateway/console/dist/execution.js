// One execution: its status, its nodes and the final context, kept up to
// date from the execution's event stream while it runs.
import { getJSON, stream } from "./api.js";
import { duration, h, replace } from "./dom.js";
import { showError, statusBadge } from "./executions.js";
export function executionPage(root, id, signal) {
    const head = h("div", { class: "execution-head" });
    const nodes = h("tbody");
    const context = h("pre", { class: "context" });
    const note = h("p", { class: "note", role: "status", "aria-live": "polite" });
    replace(root, h("p", null, h("a", { href: "#/executions" }, "← Executions")), head, note, h("h2", null, "Nodes"), h("table", { class: "nodes" }, h("thead", null, h("tr", null, ["Node", "Type", "Status", "Visit", "Duration", "Error"].map((t) => h("th", { scope: "col" }, t)))), nodes), h("h2", null, "Context"), context);
    const show = (view) => {
        const doc = view.execution;
        replace(head, h("h1", null, doc.workflow_name, " ", statusBadge(doc.status)), h("p", { class: "meta" }, h("code", null, doc.execution_id), doc.duration_ms ? ` · ${duration(doc.duration_ms)}` : ""), doc.error ? h("p", { class: "error" }, doc.error) : null);
        replace(nodes, view.nodes.map((n) => h("tr", { "data-node": n.node_id, "data-status": n.status }, h("td", null, n.node_id), h("td", null, n.node_type), h("td", null, statusBadge(n.status)), h("td", null, n.visit), h("td", null, duration(Math.round(n.execution_time))), h("td", { class: "error" }, n.error_message ?? ""))));
        replace(context, JSON.stringify(doc.final_context ?? doc.initial_context ?? {}, null, 2));
    };
    const load = () => getJSON(`/v1/executions/${encodeURIComponent(id)}`, signal).then(show, (e) => {
        if (!signal.aborted)
            showError(note, e);
    });
    void load().then(() => 
    // Each event of the execution re-reads it; the stream ends with the
    // completion.
    stream(`/v1/executions/${encodeURIComponent(id)}/events`, { signal }, () => void load()).catch((e) => {
        if (!signal.aborted)
            showError(note, e);
    }));
}
