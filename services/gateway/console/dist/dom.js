// Building the page. Every value that came from a workflow, a model or a
// user reaches the document as a text node or an attribute value set
// through the DOM, never as markup: the console has no innerHTML.
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
// since is a short "how long ago" for a time.
export function since(iso, now = Date.now()) {
    if (!iso)
        return "";
    const ms = now - Date.parse(iso);
    if (!Number.isFinite(ms))
        return "";
    if (ms < 60_000)
        return `${Math.max(0, Math.round(ms / 1000))} s ago`;
    if (ms < 3_600_000)
        return `${Math.round(ms / 60_000)} min ago`;
    if (ms < 86_400_000)
        return `${Math.round(ms / 3_600_000)} h ago`;
    return new Date(iso).toISOString().slice(0, 16).replace("T", " ");
}
export function duration(ms) {
    if (ms === undefined || ms === null)
        return "";
    if (ms < 1000)
        return `${ms} ms`;
    if (ms < 60_000)
        return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
    return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
}
