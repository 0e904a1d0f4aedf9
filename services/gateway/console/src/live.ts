// An execution as the page shows it: what GET /v1/executions/{id} answered,
// with the events of GET /v1/executions/{id}/events applied on top. The
// events come from the execution's start, so whatever the read missed (the
// context before the audit service recorded it, a node started or an agent
// step ended since) they bring. Applying is monotonic: an event never takes
// back what a later read or event said (a completed visit stays completed),
// so every event received can be applied again to each new read.

import { ServerEvent } from "./api.js";
import { parseExact } from "./exact.js";
import { Definition, DefNode } from "./graph.js";
import { StepDoc, VisitDoc } from "./visits.js";

export interface ExecutionDoc {
  execution_id: string;
  workflow_name: string;
  status: string;
  error?: string;
  started_at?: string;
  completed_at?: string;
  duration_ms?: number;
  initial_context?: unknown;
  final_context?: unknown;
  definition?: Definition;
  path?: string[];
  current_node?: string;
  cost_usd?: number;
  model_calls?: number;
  // What a running execution waits for, at a wait node.
  waiting?: Waiting;
  // The signals a running execution keeps until a wait node takes them.
  kept_signals?: { signal: string; sent_by?: string; event_id: string; kept_at: string }[];
  // A cancelled execution: who cancelled it and why.
  cancelled_by?: string;
  cancel_reason?: string;
  // A rerun: the execution it reruns and the node it started from; an
  // original lists its reruns.
  rerun_of?: string;
  rerun_from?: string;
  reruns?: string[];
  // Started by a schedule: its id and the tick.
  schedule_id?: string;
  scheduled_at?: string;
  // The lines of control running at once, while the execution runs
  // several (a fan-out, a map's items).
  branches?: BranchView[];
}

// BranchView is one branch of a running execution: the node it is at, what
// it waits for, and for a map's item its position (node is then the map).
export interface BranchView {
  id: string;
  node?: string;
  waiting_for?: string;
  item?: number;
}

// Waiting is what a wait node waits for (GET /v1/executions/{id}): the
// signal to send, what the people asked are told, the JSON Schema of its
// payload, the member that picks the edge and when the wait times out.
export interface Waiting {
  node: string;
  signal: string;
  description?: string;
  schema?: unknown;
  decide_on?: string;
  until?: string;
}

// ExecutionView is GET /v1/executions/{id}.
export interface ExecutionView {
  execution: ExecutionDoc;
  nodes: VisitDoc[];
}

export function ended(status: string): boolean {
  return status !== "running" && status !== "pending";
}

// copyView is a copy of view that applying events to leaves view as it was.
export function copyView(view: ExecutionView): ExecutionView {
  return {
    execution: { ...view.execution },
    nodes: view.nodes.map((n) => ({ ...n, steps: n.steps ? [...n.steps] : undefined })),
  };
}

// parsed keeps each event's data as parsed once: the page applies every
// event again to each new read. Nothing applyEvent does changes it.
const parsed = new WeakMap<ServerEvent, Record<string, unknown> | null>();

function dataOf(ev: ServerEvent): Record<string, unknown> | null {
  let data = parsed.get(ev);
  if (data === undefined) {
    try {
      data = parseExact(ev.data) as Record<string, unknown>;
    } catch {
      data = null;
    }
    parsed.set(ev, data);
  }
  return data;
}

// applyEvent applies one event of the execution's stream to view.
export function applyEvent(view: ExecutionView, ev: ServerEvent): void {
  const data = dataOf(ev);
  if (!data) return;
  const doc = view.execution;
  switch (ev.event) {
    case "workflow.started":
      if (doc.initial_context === undefined || doc.initial_context === null) doc.initial_context = data.context;
      doc.started_at ??= data.started_at as string | undefined;
      if (!doc.workflow_name) doc.workflow_name = String(data.workflow_name ?? "");
      break;
    case "node.started": {
      const v = visitOf(view, String(data.node_id), Number(data.visit), itemOf(data));
      if (v.status === "running") {
        v.node_type = String(data.node_type ?? v.node_type ?? "");
        v.started_at ??= data.started_at as string | undefined;
        v.ai = data.ai === true;
        v.sequence ??= Number(data.sequence);
        if (data.branch) v.branch ??= String(data.branch);
        if (!ended(doc.status)) doc.current_node = v.node_id;
      }
      break;
    }
    case "step.completed": {
      const step = data as unknown as StepDoc & { node_id: string; visit: number };
      const v = visitOf(view, String(step.node_id), Number(step.visit), itemOf(data));
      const steps = (v.steps ??= []);
      const i = steps.findIndex((s) => Number(s.step_number) === Number(step.step_number));
      if (i < 0) steps.push(step);
      else if (v.status === "running") steps[i] = step;
      steps.sort((a, b) => Number(a.step_number) - Number(b.step_number));
      break;
    }
    case "node.completed": {
      const done = data as unknown as VisitDoc;
      const v = visitOf(view, String(done.node_id), Number(done.visit), itemOf(data));
      if (v.status === "running") {
        const steps = v.steps;
        Object.assign(v, done);
        if (!done.steps?.length) v.steps = steps;
      }
      break;
    }
    case "workflow.completed":
      if (!ended(doc.status) || doc.final_context === undefined || doc.final_context === null) {
        doc.status = String(data.status ?? doc.status);
        doc.final_context = data.context;
        doc.path = (data.path as string[] | undefined) ?? doc.path;
        doc.error = (data.error as string | undefined) || doc.error;
        doc.cost_usd = Math.max(Number(doc.cost_usd ?? 0), Number(data.cost_usd ?? 0));
        doc.model_calls = Math.max(Number(doc.model_calls ?? 0), Number(data.model_calls ?? 0));
        doc.current_node = undefined;
      }
      break;
  }
}

// itemOf is a visit's (or an event's) map item position, null for a visit
// that is not one of a map's items.
export function itemOf(v: { item?: unknown }): number | null {
  return v.item === undefined || v.item === null ? null : Number(v.item);
}

// visitKey tells the visits of a view apart: a node's visit, and for a map's
// item its position (each item is a visit of its own, with the visit number
// of the map's).
export function visitKey(nodeID: string, visit: number, item: number | null): string {
  return `${nodeID}\u0000${visit}\u0000${item ?? ""}`;
}

// byKey finds a view's visits by visitKey (a map of a thousand items has a
// thousand visits, and every event looks one up).
const byKey = new WeakMap<ExecutionView, Map<string, VisitDoc>>();

// visitOf is the visit of a node (or of a map's item), added as running when
// the view lacks it.
function visitOf(view: ExecutionView, nodeID: string, visit: number, item: number | null): VisitDoc {
  let index = byKey.get(view);
  if (!index) {
    index = new Map();
    // The first of a key wins, as a search from the start would find it.
    for (const n of view.nodes) {
      const k = visitKey(n.node_id, Number(n.visit), itemOf(n));
      if (!index.has(k)) index.set(k, n);
    }
    byKey.set(view, index);
  }
  const key = visitKey(nodeID, visit, item);
  let v = index.get(key);
  if (!v) {
    v = { node_id: nodeID, node_type: "", visit, status: "running", execution_time: 0 };
    if (item !== null) v.item = item;
    view.nodes.push(v);
    index.set(key, v);
    view.nodes.sort((a, b) => (Number(a.sequence) || 1e9) - (Number(b.sequence) || 1e9) || (a.started_at ?? "").localeCompare(b.started_at ?? ""));
  }
  return v;
}

// MapProgress is how far a visit of a map node has come through its items:
// how many ended well, failed, run now, and how many there are (null while
// the page cannot tell: the list is kept in the value store).
export interface MapProgress {
  total: number | null;
  done: number;
  failed: number;
  running: number;
}

// itemVisits are the visits of the items of a map node's own visit
// mapVisit, every attempt, in the view's order. An item's retry is a visit
// of its own with a higher visit number, so an item belongs to the map's
// visit with the highest number not above its own.
export function itemVisits(view: ExecutionView, mapVisit: VisitDoc): VisitDoc[] {
  const at = Number(mapVisit.visit);
  let next = Infinity;
  for (const n of view.nodes) {
    const visit = Number(n.visit);
    if (n.node_id === mapVisit.node_id && itemOf(n) === null && visit > at && visit < next) next = visit;
  }
  return view.nodes.filter((n) => n.node_id === mapVisit.node_id && itemOf(n) !== null && Number(n.visit) >= at && Number(n.visit) < next);
}

// mapItems are the items of a map node's visit, the last attempt of each,
// by item position.
export function mapItems(view: ExecutionView, mapVisit: VisitDoc): Map<number, VisitDoc> {
  const items = new Map<number, VisitDoc>();
  for (const n of itemVisits(view, mapVisit)) {
    const item = itemOf(n)!;
    const had = items.get(item);
    if (!had || Number(had.visit) <= Number(n.visit)) items.set(item, n);
  }
  return items;
}

// mapProgress counts the items of a map node's visit.
export function mapProgress(view: ExecutionView, mapVisit: VisitDoc, node: DefNode | undefined): MapProgress {
  const p: MapProgress = { total: null, done: 0, failed: 0, running: 0 };
  const items = mapItems(view, mapVisit);
  for (const v of items.values()) {
    if (v.status === "running") p.running++;
    else if (v.status === "success" || v.status === "succeeded") p.done++;
    else if (v.next_attempt_at && !ended(view.execution.status) && mapVisit.status === "running") p.running++;
    else p.failed++;
  }
  const length = (x: unknown) => (Array.isArray(x) ? x.length : null);
  const outputKey = node?.output || "results";
  let total: number | null = null;
  if (mapVisit.status !== "running") total = length(mapVisit.output_result?.[outputKey]);
  if (total === null && node?.items) {
    total = length(mapVisit.input_context?.[node.items]);
    if (total === null) {
      // The context the map began with: the last visit ended before it
      // that holds the list, else the execution's first context.
      const before = view.nodes.filter(
        (n) => itemOf(n) === null && n.status !== "running" && n.output_result && node.items! in n.output_result && (Number(n.sequence) || 1e9) < (Number(mapVisit.sequence) || 1e9),
      );
      const last = before[before.length - 1];
      total = last ? length(last.output_result![node.items]) : length((view.execution.initial_context as Record<string, unknown> | undefined)?.[node.items]);
    }
  }
  if (total !== null || mapVisit.status !== "running") p.total = Math.max(total ?? 0, items.size);
  return p;
}

// progressText reads a map's progress: "12/40 items done" ("12 items done"
// while the count is not known), with how many failed; short: "12/40 done".
export function progressText(p: MapProgress, short = false): string {
  const of = p.total !== null ? `/${p.total}` : "";
  const items = short ? "" : ` item${(p.total ?? p.done) === 1 ? "" : "s"}`;
  return `${p.done}${of}${items} done${p.failed ? ` · ${p.failed} failed` : ""}`;
}

// liveContext is the context as far as the execution has come: the final
// one once it ended, else the last completed visit's, else the initial one;
// undefined while none of them is known.
export function liveContext(view: ExecutionView): { context: unknown; after: string } | undefined {
  const doc = view.execution;
  if (doc.final_context !== undefined && doc.final_context !== null && ended(doc.status)) return { context: doc.final_context, after: "" };
  // A map's item works on a context of its own (its item, its result).
  const done = view.nodes.filter((n) => n.status !== "running" && n.output_result && itemOf(n) === null);
  const last = done[done.length - 1];
  if (last && !ended(doc.status)) return { context: last.output_result, after: last.node_type === "start" ? "start" : `${last.node_id} #${last.visit}` };
  if (doc.initial_context !== undefined && doc.initial_context !== null) return { context: doc.initial_context, after: "start" };
  return undefined;
}

// liveSpend is what the execution's model calls cost: the execution's
// figures, or while it runs the sum of its visits' (visitSpend) when that is
// more (the engine counts a step as it ends; the audit store records the
// execution's total later).
export function liveSpend(view: ExecutionView): { usd: number; calls: number } {
  let usd = 0;
  let calls = 0;
  for (const v of view.nodes) {
    const c = visitSpend(v);
    usd += c.usd;
    calls += c.calls;
  }
  return { usd: Math.max(usd, Number(view.execution.cost_usd ?? 0)), calls: Math.max(calls, Number(view.execution.model_calls ?? 0)) };
}

// visitSpend is what a visit's model calls cost: an ended visit's figures,
// or, while it runs, the sum of its agent steps ended so far.
export function visitSpend(v: VisitDoc): { usd: number; calls: number } {
  if (v.status !== "running" && v.model_calls !== undefined) return { usd: Number(v.cost_usd ?? 0), calls: Number(v.model_calls ?? 0) };
  let usd = 0;
  let calls = 0;
  for (const st of v.steps ?? []) {
    usd += Number(st.cost_usd ?? 0);
    if (st.model_used || Number(st.tokens_input) > 0) calls++;
  }
  return { usd, calls };
}

// Where an AI node's pipeline goes after each step (the engine's phases):
// the next step and its agent, on success and on failure. A failed check
// or run sends the code back to generation for the next attempt.
const after: Record<string, { ok: [string, string] | null; failed: [string, string] | null }> = {
  "": { ok: ["input_analysis", "input-analyzer"], failed: null },
  cache_lookup: { ok: ["code_validation", "code-validator"], failed: ["input_analysis", "input-analyzer"] },
  input_analysis: { ok: ["code_generation", "code-generator"], failed: null },
  analysis_generation: { ok: ["analysis_validation", "code-validator"], failed: ["code_generation", "code-generator"] },
  analysis_validation: { ok: ["analysis_execution", "sandbox"], failed: ["code_generation", "code-generator"] },
  analysis_execution: { ok: ["code_generation", "code-generator"], failed: ["code_generation", "code-generator"] },
  code_generation: { ok: ["code_validation", "code-validator"], failed: ["code_generation", "code-generator"] },
  code_validation: { ok: ["code_execution", "sandbox"], failed: ["code_generation", "code-generator"] },
  code_execution: { ok: ["output_validation", "output-validator"], failed: ["code_generation", "code-generator"] },
  output_validation: { ok: null, failed: ["code_generation", "code-generator"] },
  // A refinement: each attempt's code is generated, then run.
  code_refinement: { ok: ["code_execution", "sandbox"], failed: ["code_refinement", "code-generator"] },
};

export interface CurrentStep {
  step: string;
  agent: string;
  attempt: number;
}

// currentStep is the agent step a running AI visit is in, as its ended
// steps tell it (no event says when a step begins); null when they do not.
export function currentStep(v: VisitDoc, refinement = false): CurrentStep | null {
  const steps = v.steps ?? [];
  const last = steps[steps.length - 1];
  if (!last) return refinement ? { step: "code_refinement", agent: "code-generator", attempt: 1 } : { step: "input_analysis", agent: "input-analyzer", attempt: 0 };
  const ok = last.status === "success" || last.status === "succeeded";
  let name = last.step_name;
  if (refinement && name === "code_execution") {
    return { step: "code_refinement", agent: "code-generator", attempt: Number(last.attempt_number) + 1 };
  }
  if (name === "input_analysis" && ok && (last.output_data as Record<string, unknown> | undefined)?.needs_analysis === true) {
    return { step: "analysis_generation", agent: "code-generator", attempt: Number(last.attempt_number) };
  }
  const next = after[name]?.[ok ? "ok" : "failed"];
  if (!next) return null;
  name = next[0];
  let attempt = Number(last.attempt_number) || 0;
  if (name === "code_generation" || name === "code_refinement") attempt = last.step_name === "input_analysis" || last.step_name.startsWith("analysis_") ? Math.max(1, attempt) : attempt + 1;
  return { step: name, agent: next[1], attempt };
}

// stepLabel reads a step's name: "code_execution" is "code execution".
export function stepLabel(name: string): string {
  return name.replace(/_/g, " ");
}
