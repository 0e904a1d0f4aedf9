// Building the page. Every value that came from a workflow, a model or a
// user reaches the document as a text node or an attribute value set
// through the DOM, never as markup: the console has no innerHTML.
import { agoText, durationText, elapsedText } from "./duration.js";
// h makes an element: attributes starting with "on" are listeners, true
// and false set or leave out a boolean attribute, the rest are text.
export function h(tag, attrs = null, ...children) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
}
const svgNS = "http://www.w3.org/2000/svg";
// s makes an SVG element, the same way.
export function s(tag, attrs = null, ...children) {
    const el = document.createElementNS(svgNS, tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
}
function setAttrs(el, attrs) {
    if (!attrs)
        return;
    for (const [name, value] of Object.entries(attrs)) {
        if (value === null || value === undefined || value === false)
            continue;
        if (name.startsWith("on") && typeof value === "function") {
            el.addEventListener(name.slice(2), value);
        }
        else if (value === true) {
            el.setAttribute(name, "");
        }
        else {
            el.setAttribute(name, String(value));
        }
    }
}
export function append(el, children) {
    for (const c of children) {
        if (c === null || c === undefined || c === false)
            continue;
        if (Array.isArray(c)) {
            append(el, c);
        }
        else if (c instanceof Node) {
            el.appendChild(c);
        }
        else {
            el.appendChild(document.createTextNode(String(c)));
        }
    }
}
// activate makes el act on a click and, as a button does, on Enter or Space
// (for elements that are not buttons, such as SVG groups with role=button).
export function activate(el, act) {
    el.addEventListener("click", act);
    el.addEventListener("keydown", (ev) => {
        const k = ev.key;
        if (k === "Enter" || k === " ") {
            ev.preventDefault();
            act();
        }
    });
}
// replace empties el and puts children in its place.
export function replace(el, ...children) {
    while (el.firstChild)
        el.removeChild(el.firstChild);
    append(el, children);
}
// cut shortens text to n characters, marking the cut.
export function cut(text, n) {
    const chars = Array.from(text);
    return chars.length <= n ? text : chars.slice(0, n).join("") + "…";
}
// stamp is a time as the pages show it, in the browser's time zone: the
// time of day for today, else the date too.
export function stamp(iso) {
    const t = new Date(iso);
    if (Number.isNaN(t.getTime()))
        return "";
    return new Date().toDateString() === t.toDateString() ? t.toLocaleTimeString() : t.toLocaleString();
}
// since is a short "how long ago" for a time: "5 s ago", "3 min ago",
// "2 h ago"; a day or more ago, the date and time.
export function since(iso, now = Date.now()) {
    if (!iso)
        return "";
    const ms = now - Date.parse(iso);
    if (!Number.isFinite(ms))
        return "";
    if (ms < 86_400_000)
        return `${agoText(ms)} ago`;
    return new Date(iso).toISOString().slice(0, 16).replace("T", " ");
}
// duration is a measured duration in milliseconds ("850 ms", "2 min 30 s").
export function duration(value) {
    // A number read exactly (ExactNumber) is a number here.
    return durationText(Number(value ?? NaN));
}
// elapsed is how long something has been running, in whole seconds.
export function elapsed(ms) {
    return elapsedText(ms);
}
// running is an element whose text is the time since iso, kept current by
// startClock (data-since); prefix and suffix go around it.
export function running(tag, iso, now = Date.now()) {
    const t = Date.parse(iso ?? "");
    return h(tag, { class: "elapsed", "data-since": Number.isFinite(t) ? t : now }, elapsed(now - (Number.isFinite(t) ? t : now)));
}
// startClock moves every [data-since] element of the page on, each second,
// until signal aborts; onTick runs after.
export function startClock(signal, onTick) {
    const timer = setInterval(() => {
        const now = Date.now();
        for (const el of document.querySelectorAll("[data-since]")) {
            el.textContent = elapsed(now - Number(el.getAttribute("data-since")));
        }
        onTick?.();
    }, 1000);
    signal.addEventListener("abort", () => clearInterval(timer));
}
// money is a cost in US dollars: below a cent to two significant digits
// ($0.00012), else to a tenth of a cent.
export function money(usd) {
    const v = Number(usd ?? 0);
    if (!Number.isFinite(v) || v === 0)
        return "$0";
    if (v < 0.000001)
        return "<$0.000001";
    return v < 0.01 ? `$${Number(v.toPrecision(2))}` : `$${v.toFixed(v < 10 ? 3 : 2)}`;
}
// spend says what an execution's model calls cost, or that it made none.
export function spend(usd, calls) {
    const n = Number(calls ?? 0);
    if (!n)
        return "no model calls";
    return `${money(usd)} · ${n} model call${n === 1 ? "" : "s"}`;
}
// shortID is what the lists show of an execution id: a refinement's
// refine-<uuid> by its uuid's first characters, as any other.
export function shortID(id) {
    return id.replace(/^refine-/, "").slice(0, 8);
}
// localInput and fromLocalInput convert between an RFC 3339 time and the
// value of an <input type="datetime-local"> (the browser's time zone).
export function localInput(iso) {
    const t = new Date(iso);
    if (Number.isNaN(t.getTime()))
        return "";
    const pad = (n) => String(n).padStart(2, "0");
    return `${t.getFullYear()}-${pad(t.getMonth() + 1)}-${pad(t.getDate())}T${pad(t.getHours())}:${pad(t.getMinutes())}`;
}
export function fromLocalInput(value) {
    if (!value)
        return "";
    const t = new Date(value);
    return Number.isNaN(t.getTime()) ? "" : t.toISOString();
}
