// The workflow drawn as a graph: dagre lays it out (left to right or top to
// bottom), the console draws it as SVG. Each node shows its id, its type
// and, for an execution, its status as a word and a symbol (not by colour
// alone), a running node how long it has run; the edges the execution took
// are drawn heavier; a decision's edges carry their conditions.
import { activate, duration, elapsed, s } from "./dom.js";
import { ItemPages, itemsKey, maxItemRows } from "./items.js";
// seconds writes a duration as the workflow does: 1h, 5m, 30s, 1.5s.
function seconds(n) {
    if (n >= 3600 && n % 3600 === 0)
        return `${n / 3600}h`;
    if (n >= 60 && n % 60 === 0)
        return `${n / 60}m`;
    return `${n}s`;
}
// boundaryLabel names a boundary event as the graph writes it on its edge.
export function boundaryLabel(b) {
    const what = b.signal ? `signal ${b.signal}` : `after ${seconds(b.after_seconds ?? 0)}`;
    return b.interrupt === false ? `${what} (beside)` : what;
}
export function typeName(t) {
    return (t ?? "").replace(/^NODE_TYPE_/, "").toLowerCase() || "action";
}
const symbols = {
    succeeded: "✓", success: "✓", failed: "✗", error: "✗", running: "◔", pending: "○", skipped: "–",
    cancelled: "⊘", carried_over: "↷", waiting: "◷", retrying: "↻",
};
const directionItem = "nova.graphDirection";
// defaultDirection: a graph of up to 15 nodes left to right in a wide
// window; a longer one, or any in a narrow window, top to bottom, where it
// scrolls down the page instead of sideways. A person's choice, once made,
// is kept for this browser.
export function defaultDirection(def) {
    const chosen = localStorage.getItem(directionItem);
    if (chosen === "LR" || chosen === "TB")
        return chosen;
    return (def.nodes?.length ?? 0) > 15 || window.innerWidth < 1000 ? "TB" : "LR";
}
export function chooseDirection(d) {
    localStorage.setItem(directionItem, d);
}
const nodeW = 170;
const nodeH = 52;
const progressH = 22;
// drawGraph returns the SVG of def: of an execution with state, or the
// definition alone without.
export function drawGraph(def, state, onSelect, selected = "", direction = defaultDirection(def)) {
    const taken = state?.taken ?? [];
    const g = new dagre.graphlib.Graph({ multigraph: true });
    g.setGraph({ rankdir: direction, nodesep: 24, ranksep: direction === "LR" ? 56 : 40, edgesep: 16, marginx: 8, marginy: 8 });
    g.setDefaultEdgeLabel(() => ({}));
    const nodes = def.nodes ?? [];
    const edges = def.edges ?? [];
    const heightOf = (id) => (state?.progress?.has(id) ? nodeH + progressH : nodeH);
    for (const n of nodes)
        g.setNode(n.id, { width: nodeW, height: heightOf(n.id) });
    edges.forEach((e, i) => {
        const label = e.condition ?? "";
        g.setEdge(e.from, e.to, { label, width: label ? Math.min(160, 7 * label.length) : 0, height: label ? 16 : 0, labelpos: "c" }, `e${i}`);
    });
    // A boundary event is a dashed edge from its node to its goto.
    const boundaries = [];
    for (const n of nodes) {
        (n.on ?? []).forEach((b, i) => {
            if (!b.goto || !g.hasNode(b.goto))
                return;
            const name = `b${n.id}\u0000${i}`;
            const label = boundaryLabel(b);
            g.setEdge(n.id, b.goto, { label, width: Math.min(160, 7 * label.length), height: 16, labelpos: "c" }, name);
            boundaries.push({ from: n.id, b, name });
        });
    }
    dagre.layout(g);
    const takenEdges = new Set();
    for (let i = 0; i + 1 < taken.length; i++)
        takenEdges.add(`${taken[i]}\u0000${taken[i + 1]}`);
    for (const k of state?.takenEdges ?? [])
        takenEdges.add(k);
    const { width, height } = g.graph();
    // The graph is drawn in a canvas of its own, whose viewBox zoom and pan
    // move; the outer SVG is the box it fits and holds the zoom buttons.
    const svg = s("svg", { class: "graph-canvas", viewBox: `0 0 ${width} ${height}`, width: "100%", height: "100%", preserveAspectRatio: "xMidYMid meet" }, s("defs", null, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 9, markerHeight: 9, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" }, s("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrowhead" }))));
    edges.forEach((e, i) => {
        const ed = g.edge({ v: e.from, w: e.to, name: `e${i}` });
        if (!ed)
            return;
        const pts = ed.points;
        const d = pts.map((p, j) => `${j ? "L" : "M"} ${p.x.toFixed(1)} ${p.y.toFixed(1)}`).join(" ");
        const isTaken = takenEdges.has(`${e.from}\u0000${e.to}`);
        svg.append(s("path", { d, class: isTaken ? "edge taken" : "edge", "marker-end": "url(#arrow)", "data-from": e.from, "data-to": e.to }));
        if (e.condition) {
            svg.append(s("text", { x: ed.x, y: ed.y + 4, class: isTaken ? "edge-label taken" : "edge-label", "text-anchor": "middle" }, e.condition));
        }
    });
    for (const { from, b, name } of boundaries) {
        const ed = g.edge({ v: from, w: b.goto, name });
        if (!ed)
            continue;
        const pts = ed.points;
        const d = pts.map((p, j) => `${j ? "L" : "M"} ${p.x.toFixed(1)} ${p.y.toFixed(1)}`).join(" ");
        const isTaken = takenEdges.has(`${from}\u0000${b.goto}`);
        svg.append(s("path", { d, class: `edge boundary${isTaken ? " taken" : ""}`, "marker-end": "url(#arrow)", "data-from": from, "data-to": b.goto }), s("text", { x: ed.x, y: ed.y + 4, class: "edge-label boundary", "text-anchor": "middle" }, boundaryLabel(b)));
    }
    for (const n of nodes) {
        const box = g.node(n.id);
        const st = state ? state.status.get(n.id) ?? "pending" : "none";
        const boxH = heightOf(n.id);
        const x = box.x - nodeW / 2;
        const y = box.y - boxH / 2;
        const progress = state?.progress?.get(n.id);
        const label = `${n.id}: ${typeName(n.type)}${n.prompt ? " (AI)" : ""}${state ? `, ${st}` : ""}${progress ? `, ${progress.title}` : ""}`;
        const since = st === "running" || st === "waiting" || st === "retrying" ? state?.since?.get(n.id) : undefined;
        const sinceMs = Date.parse(since ?? "");
        const group = s("g", {
            class: `node status-${st}${n.id === selected ? " selected" : ""}`,
            tabindex: 0,
            role: "button",
            "aria-label": label,
            "data-node": n.id,
            "data-status": state ? st : null,
            transform: `translate(${x.toFixed(1)} ${y.toFixed(1)})`,
        }, s("title", null, label), s("rect", { width: nodeW, height: boxH, rx: typeName(n.type) === "decision" ? 14 : 5 }), s("text", { x: 10, y: 21, class: "node-id" }, clip(n.id, 20)), s("text", { x: 10, y: 40, class: "node-meta" }, `${typeName(n.type)}${n.prompt ? " · AI" : ""}`), n.lock ? s("text", { x: nodeW - 10, y: 21, class: "node-lock", "text-anchor": "end" }, `lock ${clip(n.lock, 12)}`) : null, state
            ? s("text", { x: nodeW - 10, y: 40, class: "node-status", "text-anchor": "end" }, `${symbols[st] ?? "•"} ${statusWord(st)}`, Number.isFinite(sinceMs) ? [" ", s("tspan", { "data-since": sinceMs }, elapsed(Date.now() - sinceMs))] : null)
            : null, progress ? progressBar(progress) : null, 
        // Its boundary events, as BPMN draws them: a circle on its edge.
        (n.on ?? []).length
            ? s("g", { class: "boundary-mark" }, s("circle", { cx: nodeW - 12, cy: boxH, r: 9 }), s("text", { x: nodeW - 12, y: boxH + 4, "text-anchor": "middle" }, (n.on ?? []).some((b) => b.signal) ? "✉" : "◷"))
            : null);
        activate(group, () => onSelect(n.id));
        svg.append(group);
    }
    return viewport(def, direction, svg, width, height);
}
// views keep a definition's zoom and pan while its page draws it again
// (a node selected, an execution's event): a view of its own, or "fit"
// once the Fit button fitted it.
const views = new WeakMap();
// Zoom bounds, as the box's pixels per unit of the graph.
const minScale = 0.1;
const maxScale = 4;
const zoomStep = 1.25;
// minFit is the smallest scale a graph is fitted to on load: one that
// would have to be drawn smaller (forty nodes and more) is drawn at its
// size from its start instead, its nodes readable; Fit fits it all the
// same.
const minFit = 0.5;
// viewport puts the drawn canvas in a box as wide as the page allows:
// on load the whole graph fits it (never drawn larger than its size, nor
// below minFit), the wheel zooms at the pointer, a drag pans, and the
// buttons zoom in, out and fit the whole graph.
function viewport(def, direction, canvas, gw, gh) {
    const maxH = Math.max(160, Math.round(window.innerHeight * 0.7));
    const box = s("svg", {
        class: "graph",
        width: "100%",
        height: Math.min(gh, maxH),
        role: "group",
        "aria-label": `Graph of ${def.name ?? "the workflow"}: the wheel zooms, a drag pans`,
        "data-graph-width": Math.round(gw),
        "data-graph-height": Math.round(gh),
    });
    const kept = views.get(def);
    // null: as on load; "fit": the whole graph; else a view zoomed or
    // panned. The first two follow the box's size.
    let view = kept === "fit" || (kept && kept.direction === direction) ? kept : null;
    const auto = (whole) => {
        const r = box.getBoundingClientRect();
        const bw = r.width || gw;
        const bh = r.height || gh;
        let f = Math.min(1, bw / gw, bh / gh);
        if (f < minFit && !whole)
            f = 1;
        const w = bw / f;
        const h = bh / f;
        // Centred where it fits, from its start (top left) where it does not.
        return { direction, x: w >= gw ? (gw - w) / 2 : 0, y: h >= gh ? (gh - h) / 2 : 0, w, h };
    };
    const current = () => (view === null ? auto(false) : view === "fit" ? auto(true) : view);
    const apply = () => {
        const v = current();
        canvas.setAttribute("viewBox", `${v.x.toFixed(1)} ${v.y.toFixed(1)} ${v.w.toFixed(1)} ${v.h.toFixed(1)}`);
        box.setAttribute("data-zoomed", typeof view === "object" && view !== null ? "zoomed" : v.w >= gw - 0.5 && v.h >= gh - 0.5 ? "fit" : "full-size");
    };
    const set = (v) => {
        view = v;
        views.set(def, v);
        apply();
    };
    const fit = () => {
        view = "fit";
        views.set(def, "fit");
        apply();
    };
    // pixels per unit, as the canvas draws the view now (1 before layout)
    const scale = () => canvas.getScreenCTM()?.a || 1;
    // zoomAt zooms by k keeping the graph's point under (cx, cy), client
    // pixels, where it is; without a point, at the box's middle.
    const zoomAt = (k, cx, cy) => {
        const now = scale();
        k = Math.min(maxScale / now, Math.max(minScale / now, k));
        if (Math.abs(k - 1) < 1e-3)
            return;
        const v = current();
        let px = v.x + v.w / 2;
        let py = v.y + v.h / 2;
        const ctm = canvas.getScreenCTM();
        if (cx !== undefined && cy !== undefined && ctm) {
            const p = new DOMPoint(cx, cy).matrixTransform(ctm.inverse());
            px = p.x;
            py = p.y;
        }
        set({ direction, x: px - (px - v.x) / k, y: py - (py - v.y) / k, w: v.w / k, h: v.h / k });
    };
    box.addEventListener("wheel", (ev) => {
        const e = ev;
        if (e.deltaY === 0)
            return;
        e.preventDefault();
        zoomAt(Math.pow(zoomStep, -Math.sign(e.deltaY) * Math.min(3, Math.abs(e.deltaY) / 100 || 1)), e.clientX, e.clientY);
    }, { passive: false });
    // A drag pans; a press that does not move is a click (a node's).
    let drag = null;
    box.addEventListener("pointerdown", (ev) => {
        const e = ev;
        if (e.button !== 0 || e.target.closest(".graph-zoom"))
            return;
        drag = { id: e.pointerId, x: e.clientX, y: e.clientY, moved: false, from: current() };
    });
    box.addEventListener("pointermove", (ev) => {
        const e = ev;
        if (!drag || e.pointerId !== drag.id)
            return;
        const dx = e.clientX - drag.x;
        const dy = e.clientY - drag.y;
        if (!drag.moved && Math.hypot(dx, dy) < 4)
            return;
        if (!drag.moved) {
            drag.moved = true;
            box.classList.add("panning");
            try {
                box.setPointerCapture(e.pointerId);
            }
            catch {
                // A pointer the browser does not know (a synthetic event) pans all the same.
            }
        }
        const k = scale();
        set({ ...drag.from, x: drag.from.x - dx / k, y: drag.from.y - dy / k });
    });
    const endDrag = (ev) => {
        const e = ev;
        if (!drag || e.pointerId !== drag.id)
            return;
        if (drag.moved) {
            // The click that ends a drag selects nothing.
            box.addEventListener("click", (c) => c.stopPropagation(), { capture: true, once: true });
            setTimeout(() => box.classList.remove("panning"), 0);
        }
        drag = null;
    };
    box.addEventListener("pointerup", endDrag);
    box.addEventListener("pointercancel", endDrag);
    const button = (label, text, x, act, cls) => {
        const b = s("g", { class: `zoom-button ${cls}`, role: "button", tabindex: 0, "aria-label": label, transform: `translate(${x} 0)` }, s("title", null, label), s("rect", { width: text.length > 1 ? 34 : 26, height: 24, rx: 4 }), s("text", { x: text.length > 1 ? 17 : 13, y: 16.5, "text-anchor": "middle" }, text));
        activate(b, act);
        return b;
    };
    box.append(canvas, s("svg", { x: "100%", y: 0, overflow: "visible", class: "graph-zoom" }, s("g", { transform: "translate(-100 6)" }, button("Zoom out", "−", 0, () => zoomAt(1 / zoomStep), "zoom-out"), button("Zoom in", "+", 30, () => zoomAt(zoomStep), "zoom-in"), button("Fit the graph in its box", "Fit", 60, fit, "zoom-fit"))));
    apply();
    // Once on the page, before it is painted, the box is made as tall as
    // the graph fitted to its width (within bounds) and the view fitted to
    // the box. Once only: the pages draw the graph again when the window's
    // width changes, and an observer per drawing would outlive it.
    requestAnimationFrame(() => {
        const w = box.getBoundingClientRect().width;
        if (w <= 0)
            return;
        box.setAttribute("height", String(Math.min(maxH, Math.max(Math.min(gh, 120), Math.ceil(gh * Math.min(1, w / gw))))));
        apply();
    });
    return box;
}
// progressBar is a map node's items under its status: how many ended well
// (and failed) as text, and as a bar along the box's foot.
function progressBar(p) {
    const w = nodeW - 20;
    const done = Math.max(0, Math.min(1, p.done));
    const failed = Math.max(0, Math.min(1 - done, p.failed));
    return s("g", { class: "node-progress" }, s("text", { x: 10, y: nodeH + 6, class: "progress-text" }, p.text), s("rect", { x: 10, y: nodeH + 12, width: w, height: 4, rx: 2, class: "progress-track" }), done > 0 ? s("rect", { x: 10, y: nodeH + 12, width: Math.max(1, w * done), height: 4, rx: 2, class: "progress-done" }) : null, failed > 0 ? s("rect", { x: 10 + w * done, y: nodeH + 12, width: Math.max(1, w * failed), height: 4, class: "progress-failed" }) : null);
}
// statusWord is a status as the pages write it: carried_over is "carried over".
export function statusWord(status) {
    return status.replace(/_/g, " ");
}
function clip(text, n) {
    const chars = Array.from(text);
    return chars.length <= n ? text : chars.slice(0, n - 1).join("") + "…";
}
// timelineRows orders the visits as the timeline draws them: in the order
// they started, each map visit's items right under it, at most maxItemRows
// of them (the first ones and those running or failed, or the page of
// them pages chose).
function timelineRows(timed, pages) {
    const own = timed.filter((t) => t.item === null);
    const groups = new Map();
    for (const t of timed) {
        if (t.item === null)
            continue;
        // The map's own visit: the one of the highest visit number not above
        // the item's (an item's retry has a number of its own).
        let owner;
        for (const o of own) {
            if (o.v.node_id === t.v.node_id && Number(o.v.visit) <= Number(t.v.visit) && (!owner || Number(o.v.visit) > Number(owner.v.visit)))
                owner = o;
        }
        const key = owner ?? itemsKey(t.v.node_id, t.v.visit);
        let g = groups.get(key);
        if (!g)
            groups.set(key, (g = []));
        g.push(t);
    }
    const blocks = own.map((o) => ({ start: o.start, rows: [{ t: o }] }));
    const itemRows = (key, items) => {
        const w = pages.window(key, items, (t) => t.item, (t) => t.v.status !== "success" && t.v.status !== "succeeded");
        const of = items[0].v.node_id;
        const rows = [];
        if (w.from)
            rows.push({ more: w.from, of, earlier: true, show: () => pages.page(key, w.from - maxItemRows) });
        for (const t of w.head)
            rows.push({ t });
        const after = w.from !== null ? w.positions.length - (w.next ?? w.positions.length) : w.hidden;
        if (after > 0)
            rows.push({ more: after, of, earlier: false, show: w.next !== null ? () => pages.page(key, w.next) : null });
        for (const t of w.tail)
            rows.push({ t });
        return rows;
    };
    for (const [owner, items] of groups) {
        // Items started together read in their order.
        items.sort((a, b) => a.start - b.start || a.item - b.item || Number(a.v.visit) - Number(b.v.visit));
        const key = typeof owner === "string" ? owner : itemsKey(owner.v.node_id, owner.v.visit);
        const rows = itemRows(key, items);
        const block = typeof owner === "string" ? undefined : blocks.find((b) => b.rows[0].t === owner);
        if (block)
            block.rows.push(...rows);
        else
            blocks.push({ start: items[0].start, rows });
    }
    blocks.sort((a, b) => a.start - b.start);
    return blocks.flatMap((b) => b.rows);
}
// sandboxRuns are the spans of an ended visit in which the sandbox ran its
// program, for a visit whose every step is the sandbox's (a code node's, a
// map item's): each step ended at its timestamp after running for its
// execution_time_ms, as the sandbox measured it; the rest of the visit it
// waited, for a sandbox slot mostly. Empty for any other visit, and for
// one whose steps do not say.
export function sandboxRuns(v, start, end) {
    const steps = v.steps ?? [];
    if (!steps.length || steps.some((st) => st.agent_name !== "sandbox"))
        return [];
    const runs = [];
    for (const st of steps) {
        const to = Math.min(end, Date.parse(st.timestamp ?? ""));
        const ms = Number(st.execution_time_ms);
        if (!Number.isFinite(to) || !Number.isFinite(ms) || ms < 0)
            return [];
        runs.push({ from: Math.max(start, to - ms), to: Math.max(start, to) });
    }
    return runs.sort((a, b) => a.from - b.from);
}
// drawTimeline draws each visit as a bar on one time axis, in the order
// the visits started (a map's items under it, as pages shows them): where
// the execution's time went, what ran at once (each visit has a row of its
// own, so bars that overlap in time are side by side) and what waited. A
// code visit's bar is pale where it waited for a sandbox slot and solid
// where the sandbox ran it (known once it ended). A running visit's bar
// reaches now. It fits width (at least 420 px).
export function drawTimeline(visits, onSelect, width, now = Date.now(), pages = new ItemPages(() => undefined)) {
    const timed = visits
        .map((v) => {
        const start = Date.parse(v.started_at ?? "");
        const live = v.status === "running" || v.status === "waiting";
        const end = live ? Math.max(start, now) : Date.parse(v.completed_at ?? "") || start + Number(v.execution_time);
        return { v, start, end, item: v.item === undefined || v.item === null ? null : Number(v.item) };
    })
        .filter((t) => Number.isFinite(t.start) && Number.isFinite(t.end))
        .sort((a, b) => a.start - b.start);
    if (timed.length === 0)
        return null;
    const t0 = Math.min(...timed.map((t) => t.start));
    const span = Math.max(1, Math.max(...timed.map((t) => t.end)) - t0);
    const rows = timelineRows(timed, pages);
    // What each bar says of its time: how long it took, and for a code visit
    // that waited for a sandbox how long the sandbox ran it.
    const times = new Map();
    for (const row of rows) {
        if ("more" in row)
            continue;
        const { v, start, end } = row.t;
        const live = v.status === "running" || v.status === "waiting";
        const runs = live ? [] : sandboxRuns(v, start, end);
        const ran = runs.reduce((sum, r) => sum + (r.to - r.from), 0);
        const waited = runs.length ? Math.max(0, end - start - ran) : 0;
        // A wait of a few milliseconds (the sandbox taking the command) is not told.
        const told = waited >= 100;
        const took = live
            ? `${v.status} ${elapsed(end - start)}`
            : `${statusWord(v.status)} · ${duration(end - start)}${told ? ` (ran ${duration(ran)})` : ""}`;
        times.set(row.t, { runs, ran, waited, told, took });
    }
    width = Math.max(420, Math.floor(width));
    const labelW = Math.min(180, Math.round(width * 0.24));
    // Room for the longest of those texts (11 px type, some 6.2 px a character).
    const textW = Math.min(240, Math.max(130, ...[...times.values()].map((t) => Math.ceil((t.took.length + 2) * 6.2) + 8)));
    const barsW = width - labelW - textW;
    const rowH = 22;
    const height = rows.length * rowH + 24;
    const x = (ms) => labelW + (ms / span) * barsW;
    const svg = s("svg", { class: "timeline", viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-label": `Timeline of ${timed.length} visits over ${duration(span)}` }, s("line", { x1: labelW, y1: height - 18, x2: labelW + barsW, y2: height - 18, class: "axis" }), s("text", { x: labelW, y: height - 4, class: "tick" }, "0"), s("text", { x: labelW + barsW / 2, y: height - 4, class: "tick", "text-anchor": "middle" }, duration(span / 2)), s("text", { x: labelW + barsW, y: height - 4, class: "tick", "text-anchor": "end" }, duration(span)));
    const nameChars = Math.max(8, Math.floor((labelW - 40) / 7));
    rows.forEach((row, i) => {
        const y = i * rowH;
        if ("more" in row) {
            const n = `${row.more} ${row.earlier ? "earlier " : "more "}item${row.more === 1 ? "" : "s"}`;
            const text = s("text", {
                x: labelW + 4,
                y: y + 15,
                class: `more-items${row.earlier ? " earlier" : ""}`,
                "data-more": row.more,
                "data-node": row.of,
                tabindex: row.show ? 0 : null,
                role: row.show ? "button" : null,
                "aria-label": row.show ? `Show the ${row.earlier ? "earlier" : "next"} items of ${row.of}` : null,
            }, row.earlier ? `… ${n}: show them ↑` : `… and ${n}${row.show ? ": show the next ↓" : ""}`);
            if (row.show)
                activate(text, row.show);
            svg.append(text);
            return;
        }
        const { v, start, end, item } = row.t;
        const { runs, ran, waited, told, took } = times.get(row.t);
        const what = `${v.node_id} ${item !== null ? `[${item}] ` : ""}#${v.visit}${v.branch ? ` in branch ${v.branch}` : ""}`;
        // An item reads as its map's, by position: each[3]; a visit in a
        // branch names the branch.
        const label = item !== null
            ? [`${clip(v.node_id, Math.max(4, nameChars - String(item).length - 2))}[${item}]`]
            : v.branch
                ? [`${clip(v.node_id, Math.max(4, nameChars - v.branch.length - 3))} #${v.visit} `, s("tspan", { class: "branch" }, v.branch)]
                : [`${clip(v.node_id, nameChars)} #${v.visit}`];
        const toldWait = told ? `; it waited ${duration(waited)} for a sandbox and ran ${duration(ran)}` : "";
        const bar = s("g", {
            class: `visit-bar status-${v.status}${item !== null ? " item" : ""}${told ? " waited" : ""}`,
            "data-node": v.node_id,
            "data-visit": v.visit,
            "data-item": item,
            "data-branch": v.branch || null,
            "data-waited-ms": runs.length ? Math.round(waited) : null,
            "data-ran-ms": runs.length ? Math.round(ran) : null,
            tabindex: 0,
            role: "button",
            "aria-label": `${v.node_id} visit ${v.visit}${item !== null ? ` item ${item}` : ""}${v.branch ? ` in branch ${v.branch}` : ""}: ${took}${toldWait}`,
        }, s("title", null, `${what}: ${took}, from ${duration(start - t0)}${toldWait}`), s("text", { x: labelW - 8, y: y + 15, "text-anchor": "end", class: "label" }, label), s("rect", { x: x(start - t0), y: y + 4, width: Math.max(2, x(end - t0) - x(start - t0)), height: rowH - 8, rx: 2, class: told ? "span" : null }), 
        // Where it waited the bar is pale; where the sandbox ran it, solid.
        told ? runs.map((r) => s("rect", { x: x(r.from - t0), y: y + 4, width: Math.max(2, x(r.to - t0) - x(r.from - t0)), height: rowH - 8, rx: 2, class: "ran" })) : null, s("text", { x: Math.min(x(end - t0) + 4, labelW + barsW + 4), y: y + 15, class: "duration" }, `${symbols[v.status] ?? "•"} ${took}`));
        activate(bar, () => onSelect(v.node_id));
        svg.append(bar);
    });
    return svg;
}
