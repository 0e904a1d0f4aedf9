// An execution as the page shows it: what GET /v1/executions/{id} answered,
// with the events of GET /v1/executions/{id}/events applied on top. The
// events come from the execution's start, so whatever the read missed (the
// context before the audit service recorded it, a node started or an agent
// step ended since) they bring. Applying is monotonic: an event never takes
// back what a later read or event said (a completed visit stays completed),
// so every event received can be applied again to each new read.

import { ServerEvent } from "./api.js";
import { parseExact } from "./exact.js";
import { Definition } from "./graph.js";
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
      const v = visitOf(view, String(data.node_id), Number(data.visit));
      if (v.status === "running") {
        v.node_type = String(data.node_type ?? v.node_type ?? "");
        v.started_at ??= data.started_at as string | undefined;
        v.ai = data.ai === true;
        v.sequence ??= Number(data.sequence);
        if (!ended(doc.status)) doc.current_node = v.node_id;
      }
      break;
    }
    case "step.completed": {
      const step = data as unknown as StepDoc & { node_id: string; visit: number };
      const v = visitOf(view, String(step.node_id), Number(step.visit));
      const steps = (v.steps ??= []);
      const i = steps.findIndex((s) => Number(s.step_number) === Number(step.step_number));
      if (i < 0) steps.push(step);
      else if (v.status === "running") steps[i] = step;
      steps.sort((a, b) => Number(a.step_number) - Number(b.step_number));
      break;
    }
    case "node.completed": {
      const done = data as unknown as VisitDoc;
      const v = visitOf(view, String(done.node_id), Number(done.visit));
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

// visitOf is the visit of a node, added as running when the view lacks it.
function visitOf(view: ExecutionView, nodeID: string, visit: number): VisitDoc {
  let v = view.nodes.find((n) => n.node_id === nodeID && Number(n.visit) === visit);
  if (!v) {
    v = { node_id: nodeID, node_type: "", visit, status: "running", execution_time: 0 };
    view.nodes.push(v);
    view.nodes.sort((a, b) => (Number(a.sequence) || 1e9) - (Number(b.sequence) || 1e9) || (a.started_at ?? "").localeCompare(b.started_at ?? ""));
  }
  return v;
}

// liveContext is the context as far as the execution has come: the final
// one once it ended, else the last completed visit's, else the initial one;
// undefined while none of them is known.
export function liveContext(view: ExecutionView): { context: unknown; after: string } | undefined {
  const doc = view.execution;
  if (doc.final_context !== undefined && doc.final_context !== null && ended(doc.status)) return { context: doc.final_context, after: "" };
  const done = view.nodes.filter((n) => n.status !== "running" && n.output_result);
  const last = done[done.length - 1];
  if (last && !ended(doc.status)) return { context: last.output_result, after: last.node_type === "start" ? "start" : `${last.node_id} #${last.visit}` };
  if (doc.initial_context !== undefined && doc.initial_context !== null) return { context: doc.initial_context, after: "start" };
  return undefined;
}

// liveSpend is what the execution's model calls cost: the execution's
// figures, or while it runs the sum of its agent steps when that is more
// (the engine counts a step as it ends; the audit store records the
// execution's total later).
export function liveSpend(view: ExecutionView): { usd: number; calls: number } {
  let usd = 0;
  let calls = 0;
  for (const v of view.nodes) {
    if (v.status !== "running" && v.model_calls !== undefined) {
      usd += Number(v.cost_usd ?? 0);
      calls += Number(v.model_calls ?? 0);
      continue;
    }
    for (const st of v.steps ?? []) {
      usd += Number(st.cost_usd ?? 0);
      if (st.model_used || Number(st.tokens_input) > 0) calls++;
    }
  }
  return { usd: Math.max(usd, Number(view.execution.cost_usd ?? 0)), calls: Math.max(calls, Number(view.execution.model_calls ?? 0)) };
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
