// The executions page, #/executions: every execution, newest first, a page
// at a time through the API's cursor, found by id (or its first
// characters), parent, workflow, status and start time, with how many the
// filters select and what they cost. The filters and the page are in the
// URL (?id=&parent=&workflow=&status=&since=&until=&cursor=&page=), so a
// search can be bookmarked or sent. The first page is kept up to date live; Older pages on
// from the last row it shows, so rows pushed off it by new ones are on the
// next. Rows can be ticked (or every execution the filters select) and
// cancelled or rerun together (batch.ts).
import { getJSON, Problem, stream } from "./api.js";
import { batchBar, Selection } from "./batch.js";
import { cut, duration, fromLocalInput, h, localInput, money, replace, since, stamp } from "./dom.js";
import { idCell } from "./lineage.js";
// RefineWorkflow is the workflow name of a refinement's execution.
export const RefineWorkflow = "refine";
const statuses = ["", "running", "succeeded", "failed", "cancelled"];
// statusBadge shows a status as a word and a symbol, not by colour alone.
export function statusBadge(status) {
    const symbol = {
        running: "◔", succeeded: "✓", success: "✓", failed: "✗", error: "✗", pending: "○", skipped: "–",
        cancelled: "⊘", carried_over: "↷", waiting: "◷", retrying: "↻",
    };
    return h("span", { class: `badge status-${status}` }, `${symbol[status] ?? "•"} ${status.replace(/_/g, " ")}`);
}
// workflowCell names an execution's workflow, linking to its page; a
// refinement is no registered workflow.
export function workflowCell(name) {
    return name === RefineWorkflow
        ? h("span", { class: "tag", title: "a field-feedback refinement (POST /v1/refine)" }, "refinement")
        : h("a", { href: `#/workflows/${encodeURIComponent(name)}` }, name);
}
// spendCell is what an execution's model calls cost, or a dash for none.
export function spendCell(e) {
    const n = Number(e.model_calls ?? 0);
    return n
        ? h("td", { class: "num", title: `${n} model call${n === 1 ? "" : "s"}` }, `${money(e.cost_usd)} · ${n} call${n === 1 ? "" : "s"}`)
        : h("td", { class: "num note" }, "—");
}
// itemsFailed flags the map items that failed in an execution that
// succeeded (on_item_failure collect), or nothing.
function itemsFailed(e) {
    const n = Number(e.items_failed ?? 0);
    if (!n)
        return null;
    return h("span", { class: "items-failed", title: "its map collected the failed items' errors and went on" }, `, ${n} item${n === 1 ? "" : "s"} failed`);
}
// executionRow is one execution in a table of them (executionsTable); with
// select, its first cell has a checkbox.
export function executionRow(e, withWorkflow = true, select, children = 0) {
    return h("tr", { "data-execution": e.execution_id, "data-status": e.status, "data-items-failed": e.items_failed || null, class: select?.has(e.execution_id) ? "selected" : null }, idCell(e, select, children), withWorkflow ? h("td", null, workflowCell(e.workflow_name)) : null, h("td", { class: "status" }, statusBadge(e.status), itemsFailed(e)), h("td", { title: e.started_at ?? "" }, since(e.started_at)), h("td", { class: "num" }, duration(e.duration_ms)), spendCell(e), h("td", { class: "error" }, cut(e.error ?? "", 100)));
}
// executionsTable is a table of executions; head, when given, is the first
// column's heading (the executions page puts its select-all box there).
export function executionsTable(rows, withWorkflow = true, head) {
    const cols = [withWorkflow ? "Workflow" : "", "Status", "Started", "Duration", "Model cost", "Error"].filter(Boolean);
    return h("div", { class: "table-scroll" }, h("table", { class: "executions" }, h("thead", null, h("tr", null, h("th", { scope: "col" }, head ?? null, "Execution"), cols.map((t) => h("th", { scope: "col" }, t)))), rows));
}
// pageSize is how many executions a page shows.
const pageSize = 50;
// retryAfter is how long the list waits before it opens its stream again.
const retryAfter = 2000;
// totalsAfter is how long after a live change the totals are read again.
const totalsAfter = 2000;
// filterNames are the URL's filters, as GET /v1/executions names them
// (parent: the children of an execution, set by its page's link).
const filterNames = ["id", "parent", "workflow", "status", "since", "until"];
// plural is "1 execution", "3 executions".
export function plural(n, word) {
    return `${n.toLocaleString("en")} ${word}${n === 1 ? "" : "s"}`;
}
export function executionsPage(root, params, signal) {
    const f = Object.fromEntries(filterNames.map((n) => [n, params.get(n) ?? ""]));
    const cursor = params.get("cursor") ?? "";
    const pageNo = cursor ? Math.max(2, Number.parseInt(params.get("page") ?? "2", 10) || 2) : 1;
    const search = h("input", {
        id: "filter-id",
        name: "id",
        type: "search",
        value: f.id,
        placeholder: "execution id or its first characters",
        autocomplete: "off",
        spellcheck: false,
    });
    const workflow = h("select", { id: "filter-workflow", name: "workflow" });
    workflowChoices(workflow, knownWorkflows, f.workflow);
    const status = h("select", { id: "filter-status", name: "status" }, statuses.map((s) => h("option", { value: s }, s || "any status")));
    status.value = f.status;
    const from = h("input", { id: "filter-since", name: "since", type: "datetime-local", value: f.since ? localInput(f.since) : "" });
    const to = h("input", { id: "filter-until", name: "until", type: "datetime-local", value: f.until ? localInput(f.until) : "" });
    const rows = h("tbody");
    const summary = h("p", { class: "note summary", "aria-live": "polite" }, "Counting the executions…");
    const note = h("p", { class: "note", role: "status", "aria-live": "polite" });
    const pager = h("nav", { class: "pager", "aria-label": "Pages" });
    const go = (extra = {}) => {
        const q = new URLSearchParams();
        const values = {
            id: search.value.trim(),
            parent: f.parent,
            workflow: workflow.value,
            status: status.value,
            since: fromLocalInput(from.value),
            until: fromLocalInput(to.value),
            ...extra,
        };
        for (const [k, v] of Object.entries(values))
            if (v)
                q.set(k, v);
        location.hash = `#/executions${q.size ? "?" + q : ""}`;
    };
    const form = h("form", { class: "filters", role: "search", "aria-label": "Find executions" }, h("span", { class: "field field-id" }, h("label", { for: search.id }, "Id"), search), h("span", { class: "field" }, h("label", { for: workflow.id }, "Workflow"), workflow), h("span", { class: "field" }, h("label", { for: status.id }, "Status"), status), h("span", { class: "field" }, h("label", { for: from.id }, "Started from"), from), h("span", { class: "field" }, h("label", { for: to.id }, "to"), to), h("span", { class: "buttons" }, h("button", { type: "submit" }, "Find"), h("a", { href: "#/executions", class: "clear" }, "Clear")));
    form.addEventListener("submit", (ev) => {
        ev.preventDefault();
        go();
    });
    for (const el of [workflow, status])
        el.addEventListener("change", () => go());
    const filtered = filterNames.some((n) => f[n]);
    // The executions this page acts on: ticked rows, or every one the
    // filters select.
    let totals = null;
    const selection = new Selection(() => draw());
    const allBox = h("input", { type: "checkbox", class: "select-page", "aria-label": "Select every execution on this page" });
    allBox.addEventListener("change", () => selection.setPage(allBox.checked));
    const bar = batchBar(selection, f, () => totals, signal);
    replace(root, h("div", { class: "page-head" }, h("h1", null, "Executions"), h("a", { href: "#/workflows", class: "action" }, "Start a workflow →")), form, f.parent ? childrenOf(f) : null, summary, bar.el, note, executionsTable(rows, true, allBox), pager);
    getJSON("/v1/workflows", signal)
        .then((doc) => {
        knownWorkflows = doc.workflows.map((w) => w.name);
        workflowChoices(workflow, knownWorkflows, f.workflow);
    })
        .catch((e) => showError(note, e));
    // The first page is read once, then kept up to date from GET
    // /v1/executions/events (every execution's start and end), opened first
    // so that nothing between the two is missed; its events wait until the
    // page is read. A finished execution never goes back to running (an
    // event older than the list's answer). Later pages are as read.
    const items = new Map();
    let listed = false;
    let pending = [];
    let lastEventId = "";
    let next = "";
    const matches = (e) => (!f.workflow || e.workflow_name === f.workflow) &&
        (!f.status || e.status === f.status) &&
        (!f.id || e.execution_id.startsWith(f.id)) &&
        (!f.parent || e.parent_execution_id === f.parent) &&
        (!f.since || (!!e.started_at && Date.parse(e.started_at) >= Date.parse(f.since))) &&
        (!f.until || (!!e.started_at && Date.parse(e.started_at) < Date.parse(f.until)));
    const showTotals = () => {
        if (!totals)
            return;
        const n = Number(totals.executions);
        const pages = Math.max(1, Math.ceil(n / pageSize));
        replace(summary, h("strong", { class: "total" }, plural(n, "execution")), filtered ? (n === 1 ? " matches these filters" : " match these filters") : "", " · ", h("span", { class: "total-cost", title: "what the model calls of every execution the filters select cost (price table)" }, `model cost ${money(Number(totals.cost_usd))} · ${plural(Number(totals.model_calls), "model call")}`), " · ", h("span", { class: "page-no" }, `page ${pageNo} of ${Math.max(pages, pageNo)}`), 
        // A count the gateway reused (it counts a filter at most so often).
        Date.now() - Date.parse(totals.as_of ?? "") > 10_000 ? h("span", { class: "as-of", title: totals.as_of }, ` · counted ${since(totals.as_of)}`) : null);
    };
    const draw = () => {
        const sorted = [...items.values()]
            .filter((e) => cursor || matches(e))
            .sort(newestFirst);
        const shown = sorted.slice(0, pageSize);
        const children = new Map();
        for (const e of shown)
            if (e.parent_execution_id)
                children.set(e.parent_execution_id, (children.get(e.parent_execution_id) ?? 0) + 1);
        selection.shown(shown.map((e) => e.execution_id));
        replace(rows, shown.map((e) => executionRow(e, true, selection, children.get(e.execution_id) ?? 0)));
        allBox.checked = shown.length > 0 && shown.every((e) => selection.has(e.execution_id));
        allBox.disabled = shown.length === 0;
        if (!listed)
            return;
        if (shown.length === 0) {
            replace(note, filtered ? ["No execution matches. ", h("a", { href: "#/executions" }, "Clear the filters")] : "No executions yet.");
        }
        else {
            const first = shown[shown.length - 1]?.started_at;
            const last = shown[0]?.started_at;
            replace(note, `${shown.length} shown`, first && last ? `, started ${stamp(first)} to ${stamp(last)}` : "", cursor ? "" : " · kept up to date live");
        }
        // Rows the stream pushed off this page are on the next: it starts
        // after the last row shown, not after the last row read.
        const older = next || sorted.length > shown.length ? (shown[shown.length - 1]?.cursor ?? next) : "";
        replace(pager, cursor ? h("a", { href: "#/executions" + queryOf(f), class: "newest" }, "← Newest") : null, h("span", { class: "note page-no" }, `Page ${pageNo}`), older ? h("button", { type: "button", class: "secondary older", onclick: () => go({ cursor: older, page: String(pageNo + 1) }) }, "Older →") : null);
        bar.refresh();
    };
    const upsert = (e) => {
        const had = items.get(e.execution_id);
        if (had && had.status !== "running" && e.status === "running")
            return;
        items.set(e.execution_id, { ...had, ...e, cost_usd: Math.max(Number(had?.cost_usd ?? 0), Number(e.cost_usd ?? 0)) });
    };
    const q = new URLSearchParams();
    for (const n of filterNames)
        if (f[n])
            q.set(n, f[n]);
    // The totals are read once the page is (their count over every page
    // would hold up its first paint), and again a moment after the stream
    // changed what they count.
    let totalsTimer = 0;
    const readTotals = () => {
        totalsTimer = 0;
        getJSON(`/v1/execution-totals${q.size ? "?" + q : ""}`, signal).then((t) => {
            totals = t;
            showTotals();
            bar.refresh();
        }, (e) => {
            if (signal.aborted)
                return;
            // A count the gateway could not finish in time is still made
            // (and kept a while): asked again, it answers at once.
            showError(summary, e);
            totalsSoon();
        });
    };
    const totalsSoon = () => {
        if (!totalsTimer)
            totalsTimer = window.setTimeout(readTotals, totalsAfter);
    };
    signal.addEventListener("abort", () => clearTimeout(totalsTimer));
    const follow = async () => {
        const sq = new URLSearchParams();
        if (f.workflow)
            sq.set("workflow", f.workflow);
        while (!signal.aborted) {
            try {
                await stream(`/v1/executions/events${sq.size ? "?" + sq : ""}`, { signal, lastEventId }, (ev) => {
                    lastEventId = ev.id || lastEventId;
                    let item;
                    try {
                        item = JSON.parse(ev.data);
                    }
                    catch {
                        return;
                    }
                    if (ev.event === "workflow.started" || ev.event === "workflow.completed")
                        totalsSoon();
                    if (!listed) {
                        pending.push(item);
                        return;
                    }
                    upsert(item);
                    draw();
                });
            }
            catch (e) {
                if (signal.aborted || (e instanceof Problem && (e.status === 401 || e.status === 403)))
                    return;
            }
            await new Promise((r) => setTimeout(r, retryAfter));
        }
    };
    if (!cursor)
        void follow();
    const lq = new URLSearchParams(q);
    lq.set("limit", String(pageSize));
    if (cursor)
        lq.set("cursor", cursor);
    replace(note, "Reading…");
    getJSON(`/v1/executions?${lq}`, signal).then((doc) => {
        for (const e of doc.executions)
            upsert(e);
        next = doc.next_cursor ?? "";
        listed = true;
        for (const e of pending)
            upsert(e);
        pending = [];
        draw();
        readTotals();
    }, (e) => {
        if (!signal.aborted)
            showError(note, e);
    });
    // "5 s ago" moves on without a request.
    const timer = setInterval(draw, 10_000);
    signal.addEventListener("abort", () => clearInterval(timer));
}
// knownWorkflows are the workflows the last read of the page listed: the
// filter offers them at once when the page is drawn again (a filter
// changed with the arrow keys goes on to the next workflow, not to the end
// of a list still being read).
let knownWorkflows = [];
// byName orders workflow names as a person reads them: letters without
// regard to case, the numbers in them by value (team-2 before team-10).
const byName = new Intl.Collator("en", { numeric: true, sensitivity: "base" });
// workflowChoices fills the Workflow filter: every workflow in name order,
// the one filtered by among them (in its place, even when it is no longer
// registered), then refinements, which no workflow is. The options are
// replaced in place, so a filter that has the focus keeps it.
export function workflowChoices(select, names, current) {
    const set = new Set(names.filter((n) => n && n !== RefineWorkflow));
    if (current && current !== RefineWorkflow)
        set.add(current);
    const sorted = [...set].sort((a, b) => byName.compare(a, b) || (a < b ? -1 : a > b ? 1 : 0));
    select.replaceChildren(h("option", { value: "" }, "all workflows"), ...sorted.map((n) => h("option", { value: n }, n)), h("option", { value: RefineWorkflow }, "refinements"));
    select.value = current;
}
// childrenOf says the list is of one execution's children, linking it,
// and offers the list without that filter.
function childrenOf(f) {
    return h("p", { class: "children-of" }, "The executions started by ", h("a", { href: `#/executions/${encodeURIComponent(f.parent)}`, title: f.parent }, h("code", null, f.parent)), " (its workflow and map nodes) · ", h("a", { href: "#/executions" + queryOf({ ...f, parent: "" }), class: "drop-parent" }, "all executions"));
}
// newestFirst orders executions as GET /v1/executions lists them: by start
// time to the millisecond (the store's precision; the stream's times have
// more), newest first, then by id, descending; those without a start last.
function newestFirst(a, b) {
    const ta = a.started_at ? Date.parse(a.started_at) : -Infinity;
    const tb = b.started_at ? Date.parse(b.started_at) : -Infinity;
    if (ta !== tb)
        return tb > ta ? 1 : -1;
    return a.execution_id < b.execution_id ? 1 : a.execution_id > b.execution_id ? -1 : 0;
}
function queryOf(f) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(f))
        if (v)
            q.set(k, v);
    return q.size ? "?" + q : "";
}
export function showError(el, e) {
    if (e instanceof Problem) {
        replace(el, h("strong", null, e.title), e.detail ? ` ${e.detail}` : "", e.errors.length ? h("ul", null, e.errors.map((fe) => h("li", null, h("code", null, fe.field), `: ${fe.detail}`))) : null);
    }
    else if (e instanceof Error && e.name !== "AbortError") {
        replace(el, e.message);
    }
}
