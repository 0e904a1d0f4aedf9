// NOVA's console: a page of the gateway that uses only its public API.
// Routes live in the URL's fragment, one module each:
//
//	#/executions        executions.ts  (?id=&workflow=&status=&since=&until=&cursor=)
//	#/executions/{id}   execution.ts   (?node=<id> opens a node's visits)
//	#/workflows         workflows.ts
//	#/workflows/{name}  workflow.ts    (?revision=N, &diff=M, ?start=1)
//	#/schedules         schedules.ts   (?workflow=&id= marks one, ?new=1 opens the form)
//	#/playground        playground.ts
//	#/login
//
// A link with #key=<API key> (as nova dev prints), optionally &to=<route>,
// stores the key for this tab and takes it out of the address bar.

import { apiKey, getJSON, onUnauthorized, Problem, setAPIKey } from "./api.js";
import { executionsPage, showError } from "./executions.js";
import { executionPage } from "./execution.js";
import { playgroundPage } from "./playground.js";
import { schedulesPage } from "./schedules.js";
import { workflowPage } from "./workflow.js";
import { workflowsPage } from "./workflows.js";
import { h, replace } from "./dom.js";

const main = document.getElementById("main") as HTMLElement;
let current: AbortController | null = null;
// shownPath is the route's path drawn last (the hash before its "?").
let shownPath = "";

function route(): void {
  // Leaving a page ends what it does: its reads and streams, and a dialog
  // it opened (which acted on that page's execution).
  current?.abort();
  current = new AbortController();
  const hash = location.hash.replace(/^#/, "");
  // The same page again with other parameters (a filter of the executions
  // list applied as it changes): the control that changed them keeps the
  // focus, so arrow keys go on through its options and Tab goes on from it.
  const path = hash.split("?", 1)[0] ?? "";
  const had = document.activeElement;
  const keep = path === shownPath && had instanceof HTMLElement && had.id && main.contains(had) ? had.id : "";
  shownPath = path;
  draw(hash);
  if (keep) document.getElementById(keep)?.focus({ preventScroll: true });
}

function draw(hash: string): void {
  if (!current) return;
  if (hash.startsWith("key=")) {
    // #key=<key>[&to=<route>]: keep the key, go to the route.
    const link = new URLSearchParams(hash);
    setAPIKey(link.get("key") ?? "");
    const to = link.get("to") ?? "";
    history.replaceState(null, "", location.pathname + "#" + (to.startsWith("/") ? to : "/executions"));
    route();
    return;
  }
  const [path, query] = hash.split("?", 2);
  const params = new URLSearchParams(query ?? "");
  const parts = (path || "/executions").split("/").filter(Boolean).map(decodeURIComponent);
  markNav(parts[0] ?? "executions");
  if (parts[0] === "login" || (!apiKey() && !noAuth)) {
    loginPage(main);
  } else if (parts[0] === "playground") {
    playgroundPage(main, current.signal);
  } else if (parts[0] === "executions" && parts.length === 2) {
    executionPage(main, parts[1]!, params, current.signal);
  } else if (parts[0] === "workflows" && parts.length === 2) {
    workflowPage(main, parts[1]!, params, current.signal);
  } else if (parts[0] === "workflows") {
    workflowsPage(main, current.signal);
  } else if (parts[0] === "schedules") {
    schedulesPage(main, params, current.signal);
  } else {
    executionsPage(main, params, current.signal);
  }
}

function markNav(section: string): void {
  for (const a of document.querySelectorAll<HTMLAnchorElement>("nav a[data-section]")) {
    if (a.dataset.section === section) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

// loginPage asks for an API key and checks it against the gateway.
function loginPage(root: HTMLElement, reason = ""): void {
  const key = h("input", { id: "login-key", name: "key", type: "password", autocomplete: "off", required: true });
  const message = h("p", { class: "form-message", role: "alert" }, reason);
  const form = h(
    "form",
    { class: "login", "aria-label": "Sign in" },
    h("h1", null, "Sign in"),
    h("p", null, "The console uses the gateway's API with a key (nova dev prints one, and a link that fills it in)."),
    h("label", { for: "login-key" }, "API key"),
    key,
    h("button", { type: "submit" }, "Sign in"),
    message,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    setAPIKey(key.value.trim());
    try {
      await getJSON("/v1/workflows");
      location.hash = "#/executions";
      if (location.hash === "#/executions") route();
    } catch (e) {
      setAPIKey("");
      showError(message, e);
    }
  });
  replace(root, form);
  key.focus();
}

// noAuth: the gateway runs without keys (nova dev --no-auth); learnt from
// a first request made without one.
let noAuth = false;

onUnauthorized((p: Problem) => {
  setAPIKey("");
  current?.abort();
  loginPage(main, p.detail || "The API key was refused.");
});

// The skip link (the page's first stop for Tab) moves the focus to the
// page's content; as a fragment link it would be taken for a route.
document.querySelector<HTMLAnchorElement>("a.skip-link")?.addEventListener("click", (ev) => {
  ev.preventDefault();
  main.focus();
});

document.getElementById("signout")?.addEventListener("click", () => {
  setAPIKey("");
  location.hash = "#/login";
});

async function boot(): Promise<void> {
  if (!apiKey() && !location.hash.startsWith("#key=")) {
    try {
      const resp = await fetch("/v1/workflows", { headers: { Accept: "application/json" } });
      noAuth = resp.ok;
    } catch {
      noAuth = false;
    }
  }
  window.addEventListener("hashchange", route);
  route();
}

void boot();
