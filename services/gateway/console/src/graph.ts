// The workflow drawn as a graph: dagre lays it out (left to right or top to
// bottom), the console draws it as SVG. Each node shows its id, its type
// and, for an execution, its status as a word and a symbol (not by colour
// alone), a running node how long it has run; the edges the execution took
// are drawn heavier; a decision's edges carry their conditions.

import { activate, duration, elapsed, s } from "./dom.js";

// dagre is loaded by its own script tag (vendor/dagre), as a global.
declare const dagre: any;

export interface DefNode {
  id: string;
  type?: string; // NODE_TYPE_ACTION, ...
  prompt?: string;
  code?: string;
  description?: string;
  language?: string;
  model?: string;
  timeout_seconds?: number;
  max_visits?: number;
  network?: boolean;
  allow_hosts?: string[];
  // A wait node: its signal, the JSON Schema of the payload (JSON text),
  // the payload member that picks the edge; a sleep node: how long, or the
  // context key that holds until when.
  signal?: string;
  schema?: string;
  decide_on?: string;
  duration_seconds?: number;
  until?: string;
  retry?: RetryPolicy;
}

// RetryPolicy is a node's or a workflow's retry policy.
export interface RetryPolicy {
  max_attempts?: number;
  initial_interval_seconds?: number;
  backoff_coefficient?: number;
  max_interval_seconds?: number;
  on?: string[];
}

export interface DefEdge {
  from: string;
  to: string;
  condition?: string;
}

export interface Definition {
  name?: string;
  model?: string;
  timeout_seconds?: number;
  retry?: RetryPolicy;
  nodes?: DefNode[];
  edges?: DefEdge[];
}

export function typeName(t: string | undefined): string {
  return (t ?? "").replace(/^NODE_TYPE_/, "").toLowerCase() || "action";
}

const symbols: Record<string, string> = {
  succeeded: "✓", success: "✓", failed: "✗", error: "✗", running: "◔", pending: "○", skipped: "–",
  cancelled: "⊘", carried_over: "↷", waiting: "◷", retrying: "↻",
};

// Direction is dagre's rankdir: left to right, or top to bottom.
export type Direction = "LR" | "TB";

const directionItem = "nova.graphDirection";

// defaultDirection: a graph of up to 15 nodes left to right in a wide
// window; a longer one, or any in a narrow window, top to bottom, where it
// scrolls down the page instead of sideways. A person's choice, once made,
// is kept for this browser.
export function defaultDirection(def: Definition): Direction {
  const chosen = localStorage.getItem(directionItem);
  if (chosen === "LR" || chosen === "TB") return chosen;
  return (def.nodes?.length ?? 0) > 15 || window.innerWidth < 1000 ? "TB" : "LR";
}

export function chooseDirection(d: Direction): void {
  localStorage.setItem(directionItem, d);
}

const nodeW = 170;
const nodeH = 52;

// GraphState is what an execution adds to a drawing of its definition:
// each node's status ("pending" when absent), when its running visit
// began, and the path the execution followed.
export interface GraphState {
  status: Map<string, string>;
  since?: Map<string, string>;
  taken: string[];
}

// drawGraph returns the SVG of def: of an execution with state, or the
// definition alone without.
export function drawGraph(
  def: Definition,
  state: GraphState | null,
  onSelect: (id: string) => void,
  selected = "",
  direction: Direction = defaultDirection(def),
): SVGElement {
  const taken = state?.taken ?? [];
  const g = new dagre.graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: direction, nodesep: 24, ranksep: direction === "LR" ? 56 : 40, edgesep: 16, marginx: 8, marginy: 8 });
  g.setDefaultEdgeLabel(() => ({}));
  const nodes = def.nodes ?? [];
  const edges = def.edges ?? [];
  for (const n of nodes) g.setNode(n.id, { width: nodeW, height: nodeH });
  edges.forEach((e, i) => {
    const label = e.condition ?? "";
    g.setEdge(e.from, e.to, { label, width: label ? Math.min(160, 7 * label.length) : 0, height: label ? 16 : 0, labelpos: "c" }, `e${i}`);
  });
  dagre.layout(g);

  const takenEdges = new Set<string>();
  for (let i = 0; i + 1 < taken.length; i++) takenEdges.add(`${taken[i]}\u0000${taken[i + 1]}`);

  const { width, height } = g.graph();
  const svg = s(
    "svg",
    { class: "graph", viewBox: `0 0 ${width} ${height}`, width, height, role: "group", "aria-label": `Graph of ${def.name ?? "the workflow"}` },
    s("defs", null, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 9, markerHeight: 9, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" },
      s("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrowhead" }))),
  );
  edges.forEach((e, i) => {
    const ed = g.edge({ v: e.from, w: e.to, name: `e${i}` });
    if (!ed) return;
    const pts: { x: number; y: number }[] = ed.points;
    const d = pts.map((p, j) => `${j ? "L" : "M"} ${p.x.toFixed(1)} ${p.y.toFixed(1)}`).join(" ");
    const isTaken = takenEdges.has(`${e.from}\u0000${e.to}`);
    svg.append(
      s("path", { d, class: isTaken ? "edge taken" : "edge", "marker-end": "url(#arrow)", "data-from": e.from, "data-to": e.to }),
    );
    if (e.condition) {
      svg.append(s("text", { x: ed.x, y: ed.y + 4, class: isTaken ? "edge-label taken" : "edge-label", "text-anchor": "middle" }, e.condition));
    }
  });
  for (const n of nodes) {
    const box = g.node(n.id);
    const st = state ? state.status.get(n.id) ?? "pending" : "none";
    const x = box.x - nodeW / 2;
    const y = box.y - nodeH / 2;
    const label = `${n.id}: ${typeName(n.type)}${n.prompt ? " (AI)" : ""}${state ? `, ${st}` : ""}`;
    const since = st === "running" || st === "waiting" || st === "retrying" ? state?.since?.get(n.id) : undefined;
    const sinceMs = Date.parse(since ?? "");
    const group = s(
      "g",
      {
        class: `node status-${st}${n.id === selected ? " selected" : ""}`,
        tabindex: 0,
        role: "button",
        "aria-label": label,
        "data-node": n.id,
        "data-status": state ? st : null,
        transform: `translate(${x.toFixed(1)} ${y.toFixed(1)})`,
      },
      s("title", null, label),
      s("rect", { width: nodeW, height: nodeH, rx: typeName(n.type) === "decision" ? 14 : 5 }),
      s("text", { x: 10, y: 21, class: "node-id" }, clip(n.id, 20)),
      s("text", { x: 10, y: 40, class: "node-meta" }, `${typeName(n.type)}${n.prompt ? " · AI" : ""}`),
      state
        ? s(
            "text",
            { x: nodeW - 10, y: 40, class: "node-status", "text-anchor": "end" },
            `${symbols[st] ?? "•"} ${statusWord(st)}`,
            Number.isFinite(sinceMs) ? [" ", s("tspan", { "data-since": sinceMs }, elapsed(Date.now() - sinceMs))] : null,
          )
        : null,
    );
    activate(group, () => onSelect(n.id));
    svg.append(group);
  }
  return svg;
}

// statusWord is a status as the pages write it: carried_over is "carried over".
export function statusWord(status: string): string {
  return status.replace(/_/g, " ");
}

function clip(text: string, n: number): string {
  const chars = Array.from(text);
  return chars.length <= n ? text : chars.slice(0, n - 1).join("") + "…";
}

// TimelineVisit is what the timeline needs of a visit.
export interface TimelineVisit {
  node_id: string;
  visit: number;
  status: string;
  started_at?: string;
  completed_at?: string;
  execution_time: number;
}

// drawTimeline draws each visit as a bar on one time axis, in the order
// the visits started: where the execution's time went, and what waited. A
// running visit's bar reaches now. It fits width (at least 420 px).
export function drawTimeline(visits: TimelineVisit[], onSelect: (id: string) => void, width: number, now = Date.now()): SVGElement | null {
  const timed = visits
    .map((v) => {
      const start = Date.parse(v.started_at ?? "");
      const live = v.status === "running" || v.status === "waiting";
      const end = live ? Math.max(start, now) : Date.parse(v.completed_at ?? "") || start + Number(v.execution_time);
      return { v, start, end };
    })
    .filter((t) => Number.isFinite(t.start) && Number.isFinite(t.end))
    .sort((a, b) => a.start - b.start);
  if (timed.length === 0) return null;
  const t0 = Math.min(...timed.map((t) => t.start));
  const span = Math.max(1, Math.max(...timed.map((t) => t.end)) - t0);
  width = Math.max(420, Math.floor(width));
  const labelW = Math.min(180, Math.round(width * 0.24));
  const textW = 130;
  const barsW = width - labelW - textW;
  const rowH = 22;
  const height = timed.length * rowH + 24;
  const x = (ms: number) => labelW + (ms / span) * barsW;
  const svg = s(
    "svg",
    { class: "timeline", viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-label": `Timeline of ${timed.length} visits over ${duration(span)}` },
    s("line", { x1: labelW, y1: height - 18, x2: labelW + barsW, y2: height - 18, class: "axis" }),
    s("text", { x: labelW, y: height - 4, class: "tick" }, "0"),
    s("text", { x: labelW + barsW / 2, y: height - 4, class: "tick", "text-anchor": "middle" }, duration(span / 2)),
    s("text", { x: labelW + barsW, y: height - 4, class: "tick", "text-anchor": "end" }, duration(span)),
  );
  const nameChars = Math.max(8, Math.floor((labelW - 40) / 7));
  timed.forEach(({ v, start, end }, i) => {
    const y = i * rowH;
    const took = v.status === "running" || v.status === "waiting" ? `${v.status} ${elapsed(end - start)}` : `${statusWord(v.status)} · ${duration(end - start)}`;
    const bar = s(
      "g",
      { class: `visit-bar status-${v.status}`, "data-node": v.node_id, tabindex: 0, role: "button", "aria-label": `${v.node_id} visit ${v.visit}: ${took}` },
      s("title", null, `${v.node_id} #${v.visit}: ${took}, from ${duration(start - t0)}`),
      s("text", { x: labelW - 8, y: y + 15, "text-anchor": "end", class: "label" }, `${clip(v.node_id, nameChars)} #${v.visit}`),
      s("rect", { x: x(start - t0), y: y + 4, width: Math.max(2, x(end - t0) - x(start - t0)), height: rowH - 8, rx: 2 }),
      s("text", { x: Math.min(x(end - t0) + 4, labelW + barsW + 4), y: y + 15, class: "duration" }, `${symbols[v.status] ?? "•"} ${took}`),
    );
    activate(bar, () => onSelect(v.node_id));
    svg.append(bar);
  });
  return svg;
}
