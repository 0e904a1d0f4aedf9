// The gateway's public HTTP API, the only way the console reads or changes
// anything. The API key is kept in this tab's sessionStorage and sent as
// Authorization: Bearer; it never goes into a URL the console requests.

import { parseExact } from "./exact.js";

const keyItem = "nova.apiKey";

export function apiKey(): string {
  return sessionStorage.getItem(keyItem) ?? "";
}

export function setAPIKey(key: string): void {
  if (key) sessionStorage.setItem(keyItem, key);
  else sessionStorage.removeItem(keyItem);
}

// FieldError and Problem are the gateway's RFC 9457 problem documents.
export interface FieldError {
  field: string;
  detail: string;
  // The workflow node the problem belongs to, and the line of a
  // definition sent to register that it is at (from 1).
  node?: string;
  line?: number;
}

export class Problem extends Error {
  constructor(
    readonly status: number,
    readonly title: string,
    readonly detail: string,
    readonly errors: FieldError[] = [],
  ) {
    super(detail ? `${title}: ${detail}` : title);
  }

  // unauthorized: the key is missing or wrong; the console asks for one.
  get unauthorized(): boolean {
    return this.status === 401;
  }
}

type Listener = (p: Problem) => void;
const unauthorizedListeners: Listener[] = [];

// onUnauthorized is called whenever the gateway refuses the key.
export function onUnauthorized(l: Listener): void {
  unauthorizedListeners.push(l);
}

async function problemOf(resp: Response): Promise<Problem> {
  let title = resp.statusText || `HTTP ${resp.status}`;
  let detail = "";
  let errors: FieldError[] = [];
  try {
    const doc = await resp.json();
    if (typeof doc.title === "string") title = doc.title;
    if (typeof doc.detail === "string") detail = doc.detail;
    if (Array.isArray(doc.errors)) errors = doc.errors;
  } catch {
    // Not a problem document: the status says enough.
  }
  const p = new Problem(resp.status, title, detail, errors);
  if (p.unauthorized) unauthorizedListeners.forEach((l) => l(p));
  return p;
}

function headers(extra: Record<string, string> = {}): Headers {
  const hs = new Headers(extra);
  const key = apiKey();
  if (key) hs.set("Authorization", `Bearer ${key}`);
  return hs;
}

export async function getJSON<T>(path: string, signal?: AbortSignal): Promise<T> {
  const resp = await fetch(path, { headers: headers({ Accept: "application/json" }), signal });
  if (!resp.ok) throw await problemOf(resp);
  return (await resp.json()) as T;
}

// getExact is getJSON with every number kept as written (see exact.ts).
export async function getExact<T>(path: string, signal?: AbortSignal): Promise<T> {
  const resp = await fetch(path, { headers: headers({ Accept: "application/json" }), signal });
  if (!resp.ok) throw await problemOf(resp);
  return parseExact(await resp.text()) as T;
}

export async function postJSON<T>(path: string, body: unknown, signal?: AbortSignal): Promise<T> {
  const resp = await fetch(path, {
    method: "POST",
    headers: headers({ "Content-Type": "application/json", Accept: "application/json" }),
    body: typeof body === "string" ? body : JSON.stringify(body),
    signal,
  });
  if (!resp.ok) throw await problemOf(resp);
  return (await resp.json()) as T;
}

// Answer is a change's answer with its status, for routes whose 200, 201,
// 202 and 204 say different things (a schedule made, replaced, not stored
// yet, deleted); body is null for an answer without one.
export interface Answer<T> {
  status: number;
  body: T | null;
}

// send makes a change (POST, DELETE) and answers its status and body; a
// string body is sent as typed, so every number keeps its digits.
export async function send<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<Answer<T>> {
  const hs = headers({ Accept: "application/json" });
  if (body !== undefined) hs.set("Content-Type", "application/json");
  const resp = await fetch(path, {
    method,
    headers: hs,
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    signal,
  });
  if (!resp.ok) throw await problemOf(resp);
  const text = resp.status === 204 ? "" : await resp.text();
  return { status: resp.status, body: text ? (JSON.parse(text) as T) : null };
}

// ServerEvent is one Server-Sent Event.
export interface ServerEvent {
  id: string;
  event: string;
  data: string;
}

// stream reads a text/event-stream answer (GET, or POST with a body) and
// calls onEvent for each event until the stream ends or signal aborts.
// EventSource cannot send the Authorization header, so this reads the
// body of a fetch.
export async function stream(
  path: string,
  init: { method?: string; body?: unknown; lastEventId?: string; signal?: AbortSignal },
  onEvent: (e: ServerEvent) => void,
): Promise<void> {
  const hs = headers({ Accept: "text/event-stream" });
  if (init.body !== undefined) hs.set("Content-Type", "application/json");
  if (init.lastEventId) hs.set("Last-Event-ID", init.lastEventId);
  const resp = await fetch(path, {
    method: init.method ?? "GET",
    headers: hs,
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
    signal: init.signal,
  });
  if (!resp.ok) throw await problemOf(resp);
  if (!resp.body) return;
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = new EventParser(onEvent);
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    parser.push(value);
  }
  parser.end();
}

// EventParser splits the text of an event stream into events, as the
// HTML standard's "interpret an event stream" does (comments ignored,
// data lines joined with newlines, CR, LF and CRLF line ends).
export class EventParser {
  private buf = "";
  private id = "";
  private event = "";
  private data: string[] = [];

  constructor(private readonly onEvent: (e: ServerEvent) => void) {}

  push(text: string): void {
    this.buf += text;
    for (;;) {
      const m = /\r\n|\r|\n/.exec(this.buf);
      // A lone CR at the end may be the first half of CRLF.
      if (!m || (m[0] === "\r" && m.index === this.buf.length - 1)) return;
      const line = this.buf.slice(0, m.index);
      this.buf = this.buf.slice(m.index + m[0].length);
      this.line(line);
    }
  }

  end(): void {
    if (this.buf) this.line(this.buf);
    this.buf = "";
    this.line("");
  }

  private line(line: string): void {
    if (line === "") {
      if (this.data.length > 0) {
        this.onEvent({ id: this.id, event: this.event || "message", data: this.data.join("\n") });
      }
      this.event = "";
      this.data = [];
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "event":
        this.event = value;
        break;
      case "data":
        this.data.push(value);
        break;
      case "id":
        if (!value.includes("\0")) this.id = value;
        break;
    }
  }
}
