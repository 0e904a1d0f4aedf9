// One execution, #/executions/{id} (?node=<id> opens a node): its status,
// cost, graph, a node's visits, the timeline, the nodes and the context.
// While it runs the page follows GET /v1/executions/{id}/events: a node
// shows as running from its node.started event with the time it has run
// and, for an AI node, the agent step it is in; an ended agent step or
// visit shows as its event comes, with the visit's output. The context is
// the one the execution started with until a node ends, then that node's.

import { getExact, Problem, ServerEvent, stream } from "./api.js";
import { cancelButton, executionLink, RerunOf, rerunButton, tickDeadlines, visitNotes, waitingPanel } from "./control.js";
import { duration, h, money, replace, running, spend, stamp, startClock } from "./dom.js";
import { parseExact, pretty } from "./exact.js";
import { showError, statusBadge, workflowCell, RefineWorkflow } from "./executions.js";
import { chooseDirection, Definition, defaultDirection, Direction, drawGraph, drawTimeline, NodeProgress, typeName } from "./graph.js";
import { ItemPages, itemsKey, ItemWindow } from "./items.js";
import { applyEvent, copyView, ended, ExecutionView, itemOf, itemVisits, liveContext, liveSpend, mapProgress, progressText, visitSpend } from "./live.js";
import { lineageLine, resolveShortID } from "./lineage.js";
import { scheduleOfId, schedulesLink } from "./schedules.js";
import { startedHere } from "./start.js";
import { VisitDoc, visitsPanel } from "./visits.js";

export type { ExecutionView } from "./live.js";

// jaeger is Jaeger's UI as the gateway was told it (NOVA_JAEGER_URL), or "".
const jaeger = document.querySelector<HTMLMetaElement>('meta[name="nova-jaeger-url"]')?.content ?? "";

// traceLink searches Jaeger for the execution's trace: every sandbox run
// and agent step carries the tag execution.id, and one workflow is one trace.
export function traceLink(base: string, id: string): string {
  return `${base}/search?service=sandbox&tags=${encodeURIComponent(JSON.stringify({ "execution.id": id }))}`;
}

// refineDefinition is what a refinement's execution runs: one node, which
// the engine records as it does an AI node's visit (no definition is kept).
const refineDefinition: Definition = {
  name: "refinement",
  nodes: [
    {
      id: "refine",
      type: "NODE_TYPE_ACTION",
      description:
        "A field-feedback refinement (POST /v1/refine): each attempt the code generator rewrites the code from the feedback, the sandbox runs it with the test context, and each feedback item is checked against the output.",
    },
  ],
  edges: [],
};

export function executionPage(root: HTMLElement, id: string, params: URLSearchParams, signal: AbortSignal): void {
  const head = h("div", { class: "execution-head" }, h("h1", null, "Execution ", h("code", null, id)));
  // The wait node's form: drawn again only for another wait, so what a
  // person types in it stays while the page follows the execution.
  const waitSlot = h("div", { class: "waiting-slot" });
  let waitKey = "";
  const graph = h("div", { class: "graph-wrap" });
  const panel = h("div", { class: "panel" });
  const refineLog = h("section", { class: "refine-messages", hidden: true });
  const timeline = h("div", { class: "timeline-wrap" });
  const nodes = h("tbody");
  const nodesHead = h("thead");
  const nodesScope = h("p", { class: "meta nodes-scope", "aria-live": "polite" });
  const contextTitle = h("h2", null, "Context");
  const context = h("pre", { class: "context" }, "Reading the context…");
  const note = h("p", { class: "note", role: "status", "aria-live": "polite" }, "Reading the execution…");
  const page = h(
    "div",
    { class: "execution" },
    h("p", { class: "crumbs" }, h("a", { href: "#/executions" }, "← Executions")),
    head,
    note,
    waitSlot,
    refineLog,
    h("h2", null, "Graph"),
    graph,
    panel,
    h("h2", null, "Timeline"),
    timeline,
    h("h2", null, "Nodes"),
    nodesScope,
    h(
      "div",
      { class: "table-scroll" },
      h(
        "table",
        { class: "nodes" },
        nodesHead,
        nodes,
      ),
    ),
    contextTitle,
    context,
  );
  replace(root, page);

  let selected = params.get("node") ?? "";
  let direction: Direction | null = null;
  // read is the last answer of GET; events every event of the stream so
  // far; view is read with events applied, as drawn.
  let read: ExecutionView | null = null;
  const events: ServerEvent[] = [];
  let view: ExecutionView | null = null;
  let drawn = "";
  let completed = false;
  // Where a person paged a map's items to, in every list of them at once.
  const itemPages = new ItemPages(() => compose(true));

  const compose = (force = false) => {
    if (!read) return;
    const v = copyView(read);
    for (const ev of events) applyEvent(v, ev);
    const text = pretty(v);
    // Drawn again only when something changed, so a node being clicked or
    // focused stays in place.
    if (!force && text === drawn) return;
    drawn = text;
    view = v;
    show(v);
  };

  // Events that come together (a replay, a burst) are drawn once.
  let composing = false;
  const composeSoon = () => {
    if (composing) return;
    composing = true;
    setTimeout(() => {
      composing = false;
      compose();
    }, 0);
  };

  const select = (node: string) => {
    selected = selected === node ? "" : node;
    // The open node is in the URL (a link to it), without a new history entry.
    history.replaceState(null, "", `#/executions/${encodeURIComponent(id)}${selected ? `?node=${encodeURIComponent(selected)}` : ""}`);
    compose(true);
    document.querySelector<SVGElement>(`svg.graph [data-node="${CSS.escape(node)}"]`)?.focus();
  };

  const show = (v: ExecutionView) => {
    const doc = v.execution;
    const refinement = doc.workflow_name === RefineWorkflow && !doc.definition?.nodes?.length;
    const def = refinement ? refineDefinition : doc.definition;
    if (refinement && !selected) selected = "refine";
    const focused = (document.activeElement as Element | null)?.closest?.("[data-node]");
    const focusedNode = focused?.getAttribute("data-node") ?? "";
    const focusedIn = focused?.closest("svg.graph") ? "graph" : focused?.closest("svg.timeline") ? "timeline" : "";

    // A node's status is that of its last visit (a map's own, not its
    // items'); the engine's current node, and the node of each branch, is
    // running. Several run at once in a fan-out.
    const status = new Map<string, string>();
    const startedAt = new Map<string, string>();
    for (const n of v.nodes) {
      if (itemOf(n) !== null) continue;
      status.set(n.node_id, n.status);
      if (n.status === "running" && n.started_at) startedAt.set(n.node_id, n.started_at);
      else startedAt.delete(n.node_id);
    }
    if (!ended(doc.status)) {
      for (const at of [doc.current_node, ...(doc.branches ?? []).map((b) => b.node)]) if (at && !status.has(at)) status.set(at, "running");
    }
    // A wait or sleep node that runs waits; a node whose failed attempt is
    // tried again later is retrying.
    const defNode = (nodeId: string) => def?.nodes?.find((n) => n.id === nodeId);
    // A node's last visit: a map's own, not one of its items'.
    const lastVisit = (nodeId: string) => v.nodes.filter((n) => n.node_id === nodeId && itemOf(n) === null).pop();
    // A map node's items: how far its last visit has come.
    const progress = new Map<string, NodeProgress>();
    for (const dn of def?.nodes ?? []) {
      const mv = typeName(dn.type) === "map" ? lastVisit(dn.id) : undefined;
      if (!mv) continue;
      const p = mapProgress(v, mv, dn);
      progress.set(dn.id, {
        text: progressText(p, p.failed > 0),
        done: p.total ? p.done / p.total : 0,
        failed: p.total ? p.failed / p.total : 0,
        title: `${progressText(p)}${p.running ? `, ${p.running} running` : ""}`,
      });
    }
    if (!ended(doc.status)) {
      for (const [nodeId, st] of status) {
        const kind = typeName(defNode(nodeId)?.type);
        if (st === "running" && (kind === "wait" || kind === "sleep")) status.set(nodeId, "waiting");
      }
      // Each node's last visit (of any branch) that failed and is tried again.
      for (const [nodeId, st] of status) {
        const last = st === "failed" ? lastVisit(nodeId) : undefined;
        if (last && last.next_attempt_at) {
          status.set(nodeId, "retrying");
          if (last.completed_at) startedAt.set(nodeId, last.completed_at);
        }
      }
    }
    for (const [nodeId, st] of status) if (st === "waiting" && !startedAt.has(nodeId)) {
      const vs = v.nodes.filter((n) => n.node_id === nodeId && n.started_at && itemOf(n) === null);
      if (vs.length) startedAt.set(nodeId, vs[vs.length - 1]!.started_at!);
    }
    // The node whose failure (or cancel) ended the execution: a rerun
    // starts there by default.
    const failedNode =
      doc.status === "failed" || doc.status === "cancelled"
        ? [...v.nodes].reverse().find((n) => (n.status === doc.status || n.status === "failed") && itemOf(n) === null)?.node_id ?? ""
        : "";
    const rerunOf: RerunOf | null = ended(doc.status) && !refinement ? { executionId: doc.execution_id, workflow: doc.workflow_name, signal } : null;
    // Nodes an ended execution never reached did not run; they are not pending.
    if (ended(doc.status)) for (const n of def?.nodes ?? []) if (!status.has(n.id)) status.set(n.id, "skipped");

    const cost = liveSpend(v);
    replace(
      head,
      h(
        "div",
        { class: "page-head" },
        h(
          "h1",
          null,
          refinement ? "Refinement" : workflowCell(doc.workflow_name),
          " ",
          statusBadge(doc.status),
        ),
        h(
          "div",
          { class: "execution-actions" },
          !ended(doc.status) && !refinement ? cancelButton(doc.execution_id, signal, () => {
            replace(note, "Cancel sent: the execution ends cancelled once the engine takes it…");
            reloadSoon();
          }) : null,
          rerunOf && failedNode ? rerunButton(rerunOf, failedNode, lastVisit(failedNode), true) : null,
        ),
      ),
      h(
        "p",
        { class: "meta" },
        h("code", null, doc.execution_id),
        doc.started_at ? [" · started ", h("time", { datetime: doc.started_at, title: doc.started_at }, stamp(doc.started_at))] : null,
        ended(doc.status)
          ? doc.duration_ms
            ? ` · took ${duration(doc.duration_ms)}`
            : ""
          : doc.started_at
            ? [" · running for ", running("span", doc.started_at)]
            : "",
        " · ",
        h("span", { class: "spend", title: "what the execution's model calls cost (price table)" }, spend(cost.usd, cost.calls)),
        jaeger ? [" · ", h("a", { href: traceLink(jaeger, doc.execution_id), target: "_blank", rel: "noopener" }, "Trace in Jaeger")] : null,
      ),
      doc.status === "cancelled"
        ? h(
            "p",
            { class: "notice cancelled-by" },
            h("strong", null, "Cancelled"),
            doc.cancelled_by ? [" by ", h("strong", null, doc.cancelled_by)] : "",
            doc.cancel_reason ? [": ", h("q", null, doc.cancel_reason)] : " (no reason given)",
            ((c) => (c ? [" · it was at node ", h("code", null, c.node_id)] : ""))(v.nodes.find((n) => n.status === "cancelled")),
          )
        : doc.error
          ? h("p", { class: "error" }, doc.error)
          : null,
      doc.rerun_of
        ? h(
            "p",
            { class: "rerun-of" },
            "↷ Rerun of ",
            executionLink(doc.rerun_of),
            doc.rerun_from ? [" from node ", h("code", null, doc.rerun_from)] : "",
            "; the nodes before it are carried over.",
          )
        : null,
      scheduledBy(doc.execution_id, doc.workflow_name, doc.schedule_id, doc.scheduled_at),
      doc.kept_signals?.length && !ended(doc.status)
        ? h(
            "p",
            { class: "notice kept-signals" },
            `Kept for a wait node still to come (${doc.kept_signals.length}): `,
            doc.kept_signals.map((k, i) => [i ? ", " : "", h("code", null, k.signal), k.sent_by ? ` from ${k.sent_by}` : ""]),
            ".",
          )
        : null,
      lineageLine(doc, signal),
      doc.reruns?.length
        ? h("p", { class: "reruns" }, `Rerun ${doc.reruns.length === 1 ? "once" : `${doc.reruns.length} times`}: `, doc.reruns.map((r, i) => [i ? ", " : "", executionLink(r)]))
        : null,
    );

    // The wait node's form, while the execution waits there.
    const w = doc.waiting;
    const atWait = w && !ended(doc.status) ? lastVisit(w.node) : undefined;
    const waitingNow = !!w && !ended(doc.status) && (!atWait || atWait.status === "running");
    const key = waitingNow ? `${w!.node}/${w!.signal}/${atWait?.visit ?? ""}/${w!.until ?? ""}` : "";
    if (key !== waitKey) {
      waitKey = key;
      replace(waitSlot, waitingNow ? waitingPanel(doc.execution_id, w!, signal, () => reloadSoon(), Number(defNode(w!.node)?.timeout_seconds ?? 0)) : null);
    }
    // A wait node just entered: the engine's state says what it waits for
    // a moment after its node.started event.
    if (!waitingNow && !ended(doc.status) && [...status].some(([nodeId, st]) => st === "waiting" && typeName(defNode(nodeId)?.type) === "wait")) {
      if (waitReads++ < 40) reloadSoon(500);
    } else waitReads = 0;

    replace(
      panel,
      selected
        ? visitsPanel(
            def?.nodes?.find((n) => n.id === selected),
            selected,
            v.nodes.filter((n) => n.node_id === selected),
            {
              executionId: doc.execution_id,
              workflow: doc.workflow_name,
              finished: ended(doc.status),
              refinement,
              signal,
              definition: def,
              rerun: rerunOf,
              failedNode,
              view: v,
              items: itemPages,
            },
          )
        : h("p", { class: "note" }, "Select a node to see its visits."),
    );

    if (!def?.nodes?.length) {
      replace(graph, h("p", { class: "note" }, "No definition recorded."));
    } else {
      const dir = direction ?? defaultDirection(def);
      const toggle = h(
        "button",
        {
          type: "button",
          class: "secondary graph-direction",
          "aria-label": dir === "LR" ? "Draw the graph top to bottom" : "Draw the graph left to right",
          onclick: () => {
            direction = dir === "LR" ? "TB" : "LR";
            chooseDirection(direction);
            compose(true);
          },
        },
        dir === "LR" ? "↓ Top to bottom" : "→ Left to right",
      );
      replace(
        graph,
        h("div", { class: "graph-tools" }, toggle, h("span", { class: "meta" }, ` ${def.nodes.length} node${def.nodes.length === 1 ? "" : "s"}`)),
        drawGraph(def, { status, since: startedAt, taken: doc.path ?? [], takenEdges: branchEdges(def, v.nodes), progress }, select, selected, dir),
      );
    }

    const columns = ["Node", "Type", "Status", "Visit", "Duration", "Model cost", "Error"];
    if (rerunOf) columns.push("Rerun");
    replace(nodesHead, h("tr", null, columns.map((t) => h("th", { scope: "col" }, t))));
    // A map's items are listed under its visit: the first ones and the last
    // of those running or failed, the others told by their number, with the
    // controls that page through them.
    const listed = v.nodes.filter((n) => !selected || n.node_id === selected);
    // laterAttempt: a visit of the same node (and item) began after n.
    const laterAttempt = (n: VisitDoc) => v.nodes.some((x) => x.node_id === n.node_id && itemOf(x) === itemOf(n) && Number(x.visit) > Number(n.visit));
    // With a node selected the table lists its visits only, and says so.
    replace(
      nodesScope,
      selected
        ? [
            "Only the visits of node ",
            h("code", null, selected),
            ` (${listed.length} of ${v.nodes.length} visit${v.nodes.length === 1 ? "" : "s"}). `,
            h("button", { type: "button", class: "link show-all-nodes", onclick: () => select(selected) }, "Show all nodes"),
          ]
        : `All ${v.nodes.length} visit${v.nodes.length === 1 ? "" : "s"} of the execution.`,
    );
    const rows: (VisitDoc | { more: number; node: string; key: string; w: ItemWindow<VisitDoc> })[] = [];
    const placed = new Set<VisitDoc>();
    const mapped = new Set(listed.filter((n) => itemOf(n) !== null).map((n) => n.node_id));
    for (const n of listed) {
      if (itemOf(n) !== null) continue;
      rows.push(n);
      // By position (an item's attempts in turn).
      const items = mapped.has(n.node_id) ? itemVisits(v, n).sort((a, b) => itemOf(a)! - itemOf(b)! || Number(a.visit) - Number(b.visit)) : [];
      if (!items.length) continue;
      const key = itemsKey(n.node_id, n.visit);
      const w = itemPages.window(key, items, (x) => itemOf(x)!, (x) => x.status !== "success" && x.status !== "succeeded");
      rows.push(...w.head);
      const after = w.from !== null ? w.positions.length - (w.next ?? w.positions.length) : w.hidden;
      if (after > 0 || w.from !== null) rows.push({ more: after, node: n.node_id, key, w });
      rows.push(...w.tail);
      for (const x of items) placed.add(x);
    }
    for (const n of listed) if (itemOf(n) !== null && !placed.has(n)) rows.push(n);
    replace(
      nodes,
      rows.map((n) => {
        if ("more" in n) {
          return h(
            "tr",
            { class: "more-items", "data-node": n.node },
            h("td", { colspan: columns.length, class: "note" }, itemPages.pager(n.key, n.node, n.w, "nodes")),
          );
        }
        const item = itemOf(n);
        const dn = defNode(n.node_id);
        const kind = dn?.type ? typeName(dn.type) : n.node_type;
        const shown = n.status === "running" && (kind === "wait" || kind === "sleep") && !ended(doc.status) ? "waiting" : n.status;
        const carried = n.status === "carried_over";
        const isLast = lastVisit(n.node_id) === n;
        return h(
          "tr",
          {
            "data-node": n.node_id,
            "data-status": n.status,
            "data-item": item,
            class: carried ? "carried-over" : n.node_id === failedNode && isLast ? (n.status === "failed" ? "failed-node" : "ended-here") : item !== null ? "item-row" : null,
          },
          h("td", null, item !== null ? `${n.node_id}[${item}]` : n.node_id),
          h("td", null, kind),
          h("td", null, statusBadge(shown), visitNotes(n, dn, def, !ended(doc.status) && !laterAttempt(n))),
          h("td", { class: "num" }, n.visit),
          h("td", { class: "num" }, n.status === "running" ? running("span", n.started_at) : carried ? "—" : duration(Math.round(Number(n.execution_time)))),
          h("td", { class: "num" }, ((c) => (c.calls ? `${money(c.usd)} · ${c.calls}` : "—"))(visitSpend(n))),
          h("td", { class: "error" }, n.error_message ?? ""),
          rerunOf ? h("td", null, isLast && !carried ? rerunButton(rerunOf, n.node_id, n, n.node_id === failedNode) : null) : null,
        );
      }),
    );
    if (v.nodes.length === 0) replace(nodes, h("tr", null, h("td", { colspan: columns.length, class: "note" }, "No node has started yet.")));

    const live = liveContext(v);
    if (!live) {
      replace(contextTitle, "Context");
      replace(context, "Reading the context…");
    } else {
      replace(contextTitle, live.after === "" ? "Final context" : live.after === "start" ? "Context at the start" : `Context after ${live.after}`);
      replace(context, pretty(live.context ?? {}));
    }
    drawTimelineOf(v);

    if (focusedNode) {
      const sel = focusedIn === "timeline" ? "svg.timeline" : "svg.graph";
      document.querySelector<SVGElement>(`${sel} [data-node="${CSS.escape(focusedNode)}"]`)?.focus({ preventScroll: true });
    }
  };

  const drawTimelineOf = (v: ExecutionView) => {
    const width = timeline.clientWidth || page.clientWidth || 800;
    // A wait or sleep node's running visit waits.
    const def = v.execution.definition;
    const visits = ended(v.execution.status)
      ? v.nodes
      : v.nodes.map((n) => {
          const kind = typeName(def?.nodes?.find((d) => d.id === n.node_id)?.type);
          return n.status === "running" && (kind === "wait" || kind === "sleep") ? { ...n, status: "waiting" } : n;
        });
    const svg = drawTimeline(visits as VisitDoc[], select, width, Date.now(), itemPages);
    replace(
      timeline,
      svg ?? h("p", { class: "note" }, "No visit has run yet."),
      svg?.querySelector(".visit-bar.waited")
        ? h("p", { class: "note timeline-key" }, "A bar's pale part is time the visit waited for a free sandbox (and for its messages there and back); the solid part is where the sandbox ran its program.")
        : null,
    );
  };

  // Each second a running execution's times move on (startClock), and its
  // timeline's running bars grow.
  startClock(signal, () => {
    tickDeadlines();
    if (view && !ended(view.execution.status) && view.nodes.some((n) => n.status === "running")) {
      const focused = document.activeElement?.closest?.("svg.timeline [data-node]")?.getAttribute("data-node");
      drawTimelineOf(view);
      if (focused) document.querySelector<SVGElement>(`svg.timeline [data-node="${CSS.escape(focused)}"]`)?.focus({ preventScroll: true });
    }
  });
  let resized: ReturnType<typeof setTimeout> | undefined;
  const onResize = () => {
    clearTimeout(resized);
    resized = setTimeout(() => compose(true), 150);
  };
  window.addEventListener("resize", onResize);
  signal.addEventListener("abort", () => window.removeEventListener("resize", onResize));

  let missing: Problem | null = null;
  let retries = 0;
  // reloadSoon reads the execution again a moment later (once for a burst):
  // what only a read says (what a wait node waits for, who cancelled it)
  // comes that way.
  let reloading: ReturnType<typeof setTimeout> | undefined;
  let waitReads = 0;
  const reloadSoon = (ms = 300) => {
    if (reloading !== undefined || signal.aborted) return;
    reloading = setTimeout(() => {
      reloading = undefined;
      void load();
    }, ms);
  };
  signal.addEventListener("abort", () => clearTimeout(reloading));
  const load = async (): Promise<void> => {
    try {
      const got = await getExact<ExecutionView>(`/v1/executions/${encodeURIComponent(id)}`, signal);
      read = got;
      missing = null;
      replace(note);
      if (!page.isConnected) replace(root, page);
      compose();
    } catch (e) {
      if (signal.aborted) return;
      if (e instanceof Problem && e.status === 404 && !read) {
        missing = e;
        // A start this tab just made is not recorded yet: its first event
        // loads it. Any other id is said to be unknown at once; should
        // its events come after all, the page shows it.
        if (startedHere(id) || events.length > 0) {
          replace(note, "Starting the execution…");
          // The engine records its state a moment after its first events.
          if (events.length > 0 && retries++ < 20) setTimeout(() => void load(), 250);
        } else notFound(root, id, e);
      } else {
        showError(note, e);
      }
    }
  };

  // settle reads an ended execution again (for up to 30 s) until the audit
  // store has recorded its start (the definition, what it reruns) and every
  // visit's end: it writes a little after the engine's events, and not
  // always in their order.
  const settle = async () => {
    for (let i = 0; i < 120 && !signal.aborted; i++) {
      const doc = read?.execution;
      if (
        doc &&
        ended(doc.status) &&
        doc.final_context &&
        doc.definition &&
        !read!.nodes.some((n) => n.status === "running") &&
        (doc.status !== "cancelled" || doc.cancelled_by)
      )
        return;
      await new Promise((r) => setTimeout(r, 250));
      await load();
    }
  };

  // waitChanged reads the execution again when a wait node begins or ends:
  // its events do not say what it waits for.
  const waitChanged = (ev: ServerEvent) => {
    let nodeId = "";
    try {
      nodeId = String((JSON.parse(ev.data) as { node_id?: unknown }).node_id ?? "");
    } catch {
      return;
    }
    const n = read?.execution.definition?.nodes?.find((x) => x.id === nodeId);
    if (typeName(n?.type) === "wait" || read?.execution.waiting?.node === nodeId) reloadSoon();
  };

  const follow = async () => {
    let lastEventId = "";
    for (let tries = 0; !signal.aborted && !completed && tries < 30; tries++) {
      try {
        await stream(`/v1/executions/${encodeURIComponent(id)}/events`, { signal, lastEventId }, (ev) => {
          lastEventId = ev.id || lastEventId;
          events.push(ev);
          if (ev.event === "workflow.completed") completed = true;
          if (!read) {
            if (ev.event === "workflow.started" && !page.isConnected) replace(root, page);
            void load();
          } else {
            composeSoon();
            if (ev.event === "node.started" || ev.event === "node.completed") waitChanged(ev);
          }
        });
        if (completed || signal.aborted) break;
      } catch (e) {
        if (signal.aborted) return;
        if (e instanceof Problem) {
          // 404: nobody knows the execution; 410: its events are gone and
          // the read is all there is.
          if (e.status === 404 && !read) notFound(root, id, missing ?? e);
          else if (e.status !== 404 && e.status !== 410) showError(note, e);
          return;
        }
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
    await settle();
  };

  // An execution this tab just started is read once its first event
  // comes (until then the API does not know it).
  if (startedHere(id)) replace(note, "Starting the execution…");
  else void load();
  void follow();
  void refinementMessages(id, refineLog, signal);
}

// branchEdges are the edges an execution that ran branches took: its path
// interleaves the branches, so an edge is taken when a visit of its source
// sent the line there (path_taken names the targets), or, for a visit that
// does not say, when its target began as or after its source ended. Empty
// for an execution that followed one line (its path says it all).
function branchEdges(def: Definition, visits: VisitDoc[]): Set<string> {
  const out = new Set<string>();
  const own = visits.filter((n) => itemOf(n) === null);
  if (!own.some((n) => n.branch) && own.length === visits.length) return out;
  for (const e of def.edges ?? []) {
    const from = own.filter((n) => n.node_id === e.from && n.status !== "running" && n.completed_at);
    const to = own.filter((n) => n.node_id === e.to && n.started_at);
    if (!from.length || !to.length) continue;
    const said = from.filter((n) => n.path_taken);
    const taken = said.length
      ? said.some((n) => n.path_taken!.split(",").includes(e.to))
      : from.some((f) => to.some((x) => Date.parse(x.started_at!) >= Date.parse(f.completed_at!)));
    if (taken) out.add(`${e.from}\u0000${e.to}`);
  }
  return out;
}

// scheduledBy says which schedule started the execution and at which tick,
// linking to it on the schedules page. Before the audit store recorded its
// schedule_id, the id the engine gave it says the same.
function scheduledBy(id: string, workflow: string, scheduleId?: string, tick?: string): HTMLElement | null {
  const named = scheduleId ? { id: scheduleId, tick: tick ?? "" } : scheduleOfId(id, workflow);
  if (!named) return null;
  return h(
    "p",
    { class: "scheduled-by", "data-schedule": named.id },
    "◷ Started by schedule ",
    h("a", { href: schedulesLink(workflow, named.id) }, h("code", null, named.id)),
    " of ",
    h("strong", null, workflow),
    named.tick ? [" at its tick of ", h("time", { datetime: named.tick, title: named.tick }, stamp(named.tick))] : "",
  );
}

// notFound says there is no such execution, with the API's words, and
// offers the executions whose id begins with what was asked.
function notFound(root: HTMLElement, id: string, p: Problem): void {
  replace(
    root,
    h(
      "section",
      { class: "not-found" },
      h("p", { class: "crumbs" }, h("a", { href: "#/executions" }, "← Executions")),
      h("h1", null, "No such execution"),
      h("p", null, h("strong", null, p.title), p.detail ? ` ${p.detail}` : ""),
      /^[-_=a-zA-Z0-9]{1,200}$/.test(id)
        ? h("p", null, h("a", { href: `#/executions?id=${encodeURIComponent(id)}` }, `Find executions whose id begins with ${id}`))
        : null,
    ),
  );
  void resolveShortID(root, id, () => !!root.querySelector(".not-found") && location.hash === `#/executions/${encodeURIComponent(id)}`);
}

// refinementMessages shows a refinement's messages (GET
// /v1/refine/{id}/events, from the first), live while it runs.
async function refinementMessages(id: string, el: HTMLElement, signal: AbortSignal): Promise<void> {
  if (!id.startsWith("refine-")) return;
  const list = h("ol", { class: "refine-log" });
  replace(el, h("h2", null, "Refinement messages"), list);
  el.hidden = false;
  try {
    await stream(`/v1/refine/${encodeURIComponent(id)}/events`, { signal }, (e) => {
      const msg = parseExact(e.data) as Record<string, unknown>;
      const attempt = Number(msg.attempt ?? 0);
      const text = String(msg.message ?? msg.error ?? "");
      list.append(
        h(
          "li",
          { class: String(msg.type ?? "") },
          attempt && !/^Refinement attempt/.test(text) ? `attempt ${attempt}: ` : "",
          text,
          Array.isArray(msg.remaining) && msg.remaining.length ? ` · remaining: ${msg.remaining.join(", ")}` : "",
        ),
      );
    });
  } catch (e) {
    if (signal.aborted) return;
    if (e instanceof Problem && e.status === 403) replace(el, h("p", { class: "note" }, "A refinement's messages need a key with the refine scope."));
    else if (e instanceof Problem) showError(el, e);
  }
}
