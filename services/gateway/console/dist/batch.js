// Acting on many executions at once from the executions list: rows ticked
// (or every execution the list's filters select) are cancelled or rerun
// through POST /v1/executions/batch, after a confirmation that names how
// many, and the answer says what happened to each.
import { postJSON } from "./api.js";
import { dialogFor } from "./control.js";
import { h, replace } from "./dom.js";
import { plural, showError } from "./executions.js";
// maxBatch is the most executions one batch acts on (the gateway's limit).
const maxBatch = 500;
// Selection is what the list acts on: ticked ids, or (all) every execution
// the filters select. changed redraws the list.
export class Selection {
    changed;
    ids = new Set();
    page = [];
    all = false;
    constructor(changed) {
        this.changed = changed;
    }
    has(id) {
        return this.all || this.ids.has(id);
    }
    get size() {
        return this.ids.size;
    }
    get list() {
        return [...this.ids];
    }
    // shown tells which ids the page shows now.
    shown(ids) {
        this.page = ids;
    }
    pageSelected() {
        return this.page.length > 0 && this.page.every((id) => this.ids.has(id));
    }
    set(id, on) {
        this.narrow();
        if (on)
            this.ids.add(id);
        else
            this.ids.delete(id);
        this.changed();
    }
    setPage(on) {
        this.narrow();
        for (const id of this.page) {
            if (on)
                this.ids.add(id);
            else
                this.ids.delete(id);
        }
        this.changed();
    }
    selectAll() {
        this.all = true;
        this.changed();
    }
    clear() {
        this.all = false;
        this.ids.clear();
        this.changed();
    }
    // narrow turns "every execution the filters select" back into the rows
    // shown, before one of them is unticked.
    narrow() {
        if (!this.all)
            return;
        this.all = false;
        this.ids = new Set(this.page);
    }
}
// batchBar is the bar above the list that says what is selected and acts on
// it; refresh draws it again (the selection or the totals changed).
export function batchBar(selection, f, totals, signal) {
    const what = h("span", { class: "selected-count" });
    const widen = h("button", { type: "button", class: "link select-all" });
    const limit = h("span", { class: "note batch-limit" });
    const cancel = h("button", { type: "button", class: "secondary danger batch-cancel" });
    const rerun = h("button", { type: "button", class: "secondary batch-rerun" });
    const clear = h("button", { type: "button", class: "link batch-clear" }, "Clear the selection");
    const bar = h("div", { class: "batch-bar", role: "region", "aria-label": "Act on the selected executions", hidden: true }, what, widen, limit, cancel, rerun, clear);
    const result = h("div", { class: "batch-result", role: "status", "aria-live": "polite" });
    const el = h("div", { class: "batch" }, bar, result);
    const filtered = Object.values(f).some(Boolean);
    const count = () => (selection.all ? Number(totals()?.executions ?? 0) : selection.size);
    const refresh = () => {
        const n = count();
        bar.hidden = n === 0 && !selection.all;
        const matching = filtered ? " that match these filters" : "";
        replace(what, selection.all ? `All ${plural(n, "execution")}${matching} selected` : `${plural(n, "execution")} selected`);
        const t = totals();
        widen.hidden = selection.all || !selection.pageSelected() || !t || Number(t.executions) <= selection.size;
        replace(widen, t ? `Select all ${plural(Number(t.executions), "execution")}${matching}` : "");
        const tooMany = n > maxBatch;
        replace(limit, tooMany ? `A batch acts on at most ${maxBatch}: narrow the filters.` : "");
        cancel.disabled = rerun.disabled = tooMany || n === 0;
        replace(cancel, `Cancel ${n.toLocaleString("en")}…`);
        replace(rerun, `Rerun ${n.toLocaleString("en")}…`);
    };
    widen.addEventListener("click", () => selection.selectAll());
    clear.addEventListener("click", () => selection.clear());
    cancel.addEventListener("click", () => confirmBatch("cancel"));
    rerun.addEventListener("click", () => confirmBatch("rerun"));
    const confirmBatch = (action) => {
        const n = count();
        const all = selection.all;
        const ids = selection.list;
        const which = all ? `all ${plural(n, "execution")}${filtered ? " that match these filters" : ""}` : plural(n, "execution");
        const reason = h("textarea", { id: "batch-reason", name: "reason", rows: 2, maxlength: 1000, placeholder: "e.g. wrong input file" });
        const message = h("div", { class: "form-message", role: "alert" });
        const confirm = h("button", { type: "submit", class: action === "cancel" ? "danger" : "" }, `${action === "cancel" ? "Cancel" : "Rerun"} ${plural(n, "execution")}`);
        const keep = h("button", { type: "button", class: "secondary" }, "Keep them as they are");
        const form = h("form", { class: "batch-form", method: "dialog" }, action === "cancel"
            ? h("p", null, "Each of them that runs is stopped (the node that runs now killed, no further model call) and ends ", h("strong", null, "cancelled"), "; one that ended already is left as it is. This cannot be undone.")
            : h("p", null, "Each of them that ended runs again, as a new execution, from the node that failed; one that still runs, or has no failed node, is left as it is."), action === "cancel" ? [h("label", { for: reason.id }, "Reason ", h("span", { class: "note label-note" }, "(optional, kept in the chain of work)")), reason] : null, message, h("div", { class: "buttons" }, confirm, keep));
        const d = dialogFor(`${action === "cancel" ? "Cancel" : "Rerun"} ${which}?`, "batch-modal", signal, form);
        if (!d)
            return;
        keep.addEventListener("click", d.close);
        form.addEventListener("submit", async (ev) => {
            ev.preventDefault();
            replace(message);
            confirm.disabled = true;
            const body = { action };
            if (all)
                body.filter = Object.fromEntries(Object.entries(f).filter(([, v]) => v));
            else
                body.ids = ids;
            const text = reason.value.trim();
            if (action === "cancel" && text)
                body.reason = text;
            try {
                const a = await postJSON("/v1/executions/batch", body, signal);
                d.close();
                selection.clear();
                showAnswer(result, a);
            }
            catch (e) {
                if (signal.aborted)
                    return;
                confirm.disabled = false;
                showError(message, e);
            }
        });
    };
    return { el, refresh };
}
function showAnswer(el, a) {
    const link = (id) => h("a", { href: `#/executions/${encodeURIComponent(id)}`, title: id }, h("code", null, id));
    const done = a.action === "cancel" ? `${a.done} cancelled or cancelling` : `${a.done} rerun${a.done === 1 ? "" : "s"} started`;
    const refused = a.results.filter((r) => r.outcome === "refused");
    const reruns = a.results.filter((r) => r.rerun_id);
    replace(el, h("p", { class: "batch-summary" }, h("strong", null, `${a.action === "cancel" ? "Cancel" : "Rerun"} of ${plural(a.selected, "execution")}: `), done, a.refused ? `, ${a.refused} left as they were` : "", "."), reruns.length
        ? h("ul", { class: "batch-reruns" }, reruns.slice(0, 10).map((r) => h("li", null, link(r.rerun_id), " reruns ", link(r.execution_id))))
        : null, refused.length ? h("ul", { class: "batch-refused" }, refused.slice(0, 10).map((r) => h("li", null, link(r.execution_id), `: ${r.detail ?? "refused"}`))) : null, refused.length > 10 || reruns.length > 10 ? h("p", { class: "note" }, "The first 10 of each are shown.") : null);
}
