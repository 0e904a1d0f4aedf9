// A map visit's items as the execution page lists them, in its timeline,
// its Nodes table and the map node's panel: at most maxItemRows at a time.
// Until a person pages, the first ones and the last of those running or
// failed (pickItems); then the items of maxItemRows positions from one
// they chose (Earlier, Later, or an item's number), each with all its
// attempts. The three lists page together, so each shows the same items.
import { h } from "./dom.js";
// maxItemRows is how many of a map visit's items a list shows at a time;
// the others are told by their number ("… and 970 more items").
export const maxItemRows = 30;
// pickItems are the items of a map visit that a page shows, in their order:
// all of them up to max; of more, the first ones (head), then the last of
// those still open (running or failed: tail), and how many are left out
// between (hidden).
export function pickItems(items, open, max = maxItemRows) {
    if (items.length <= max)
        return { head: items, hidden: 0, tail: [] };
    const opened = items.filter(open);
    const head = items.slice(0, max - Math.min(opened.length, Math.floor(max / 2)));
    const inHead = new Set(head);
    const later = opened.filter((t) => !inHead.has(t));
    const tail = later.slice(Math.max(0, later.length - (max - head.length)));
    return { head, hidden: items.length - head.length - tail.length, tail };
}
// ItemPages keeps, for each map visit (by itemsKey), where a person paged
// its items to; changed draws the page again.
export class ItemPages {
    changed;
    from = new Map();
    // The control used last, given the focus again once the page is drawn.
    used = "";
    // The item fields, kept from drawing to drawing with what is typed in
    // them (a running map's page is drawn again with each of its events).
    fields = new Map();
    constructor(changed) {
        this.changed = changed;
    }
    window(key, items, pos, open) {
        const positions = [...new Set(items.map(pos))].sort((a, b) => a - b);
        const from = this.from.get(key);
        const count = (ts) => new Set(ts.map(pos)).size;
        if (positions.length <= maxItemRows)
            return { head: items, hidden: 0, tail: [], positions, from: null, next: null, firsts: positions.length, lasts: 0 };
        if (from === undefined) {
            const picked = pickItems(items, open);
            const last = picked.head.length ? pos(picked.head[picked.head.length - 1]) : -1;
            const next = positions.findIndex((p) => p > last);
            return { ...picked, positions, from: null, next: picked.hidden > 0 && next >= 0 ? next : null, firsts: count(picked.head), lasts: count(picked.tail) };
        }
        const start = Math.max(0, Math.min(from, positions.length - maxItemRows));
        const shown = new Set(positions.slice(start, start + maxItemRows));
        const end = start + shown.size;
        const head = items.filter((t) => shown.has(pos(t)));
        return { head, hidden: 0, tail: [], positions, from: start, next: end < positions.length ? end : null, firsts: shown.size, lasts: 0 };
    }
    // page shows the items of the map visit key from index from of its positions.
    page(key, from) {
        this.from.set(key, Math.max(0, from));
        this.changed();
    }
    // reset shows the first items and those running or failed again.
    reset(key) {
        this.from.delete(key);
        this.changed();
    }
    // pager is the controls of a list of the map visit key's items (place
    // names the list, so that the control used keeps the focus when the
    // page is drawn again): where the list is in the items, Earlier, Later,
    // an item to go to, and the way back to the first and open ones.
    pager(key, node, w, place) {
        const n = w.positions.length;
        if (n <= maxItemRows)
            return null;
        const id = (what) => `${place}:${key}:${what}`;
        const focusAgain = (el, what) => {
            if (this.used === id(what))
                queueMicrotask(() => el.isConnected && el.focus({ preventScroll: true }));
            return el;
        };
        const button = (what, label, act, title) => focusAgain(h("button", {
            type: "button",
            class: `secondary items-${what}`,
            disabled: !act,
            title,
            onclick: () => {
                this.used = id(what);
                act?.();
            },
        }, label), what);
        const at = (i) => `${node}[${w.positions[i]}]`;
        const paged = w.from !== null;
        const where = paged
            ? `${at(w.from)} to ${at((w.next ?? n) - 1)} of ${n} items`
            : `The first ${w.firsts}${w.lasts ? ` and the last ${w.lasts} running or failed` : ""} of ${n} items`;
        let goTo = this.fields.get(id("goto"));
        if (!goTo) {
            goTo = h("input", { type: "number", class: "items-goto", step: 1, placeholder: "item", "aria-label": `Go to item of ${node}` });
            this.fields.set(id("goto"), goTo);
        }
        goTo.min = String(w.positions[0]);
        goTo.max = String(w.positions[n - 1]);
        const field = goTo;
        if (document.activeElement === field)
            queueMicrotask(() => field.isConnected && field.focus({ preventScroll: true }));
        const go = (ev) => {
            ev.preventDefault();
            const want = Number(field.value);
            if (field.value === "" || !Number.isFinite(want))
                return;
            const i = w.positions.findIndex((p) => p >= want);
            this.page(key, i < 0 ? n - 1 : i);
        };
        return h("form", { class: "items-pager", "data-node": node, "data-from": w.from, "aria-label": `Items of ${node}`, onsubmit: go }, h("span", { class: "items-where" }, where), " ", button("earlier", "← Earlier", paged && w.from > 0 ? () => this.page(key, w.from - maxItemRows) : null, `the ${maxItemRows} items before`), " ", button("later", "Later →", w.next !== null ? () => this.page(key, w.next) : null, `the ${maxItemRows} items after`), " ", h("label", { class: "items-goto-label" }, "Go to ", field), " ", button("go", "Go", () => field.form?.requestSubmit(), "show the items from this one"), paged ? [" ", button("reset", "First and open ones", () => this.reset(key), "the first items and the last running or failed")] : null);
    }
}
// itemsKey names a map visit's items: its node and the visit of the map's
// own that they belong to.
export function itemsKey(node, visit) {
    return `${node}/${visit}`;
}
