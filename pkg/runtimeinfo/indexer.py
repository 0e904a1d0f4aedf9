"""NOVA runtime indexer: describes the Python runtime node code runs in.

Run by pkg/runtimeinfo as `python3 -I -c <this> SPEC_JSON`. It imports only
installed libraries and reads their docstrings and signatures; it runs no user
code. It prints one JSON document on stdout:

  {"python": "3.11.2", "modules": [...top-level importable names...],
   "libraries": [{"name": "fitz", "distribution": "PyMuPDF", "version": "1.21.1",
                  "entries": [{"name": "fitz.Page.get_text", "kind": "method",
                               "signature": "(page, option='text', ...)",
                               "doc": "Extract text from a page or an annotation."}]}]}

SPEC_JSON is {"libraries": [{"name": "PIL", "modules": ["PIL.Image", ...]}],
"max_doc": 600, "max_entries": 4000, "max_members": 400}.
"""

import contextlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import io
import json
import pkgutil
import re
import sys
import types
import warnings

SIGNATURE_IN_DOC = re.compile(r"^\s*[\w.]+\s*(\(.*\))(\s*->\s*[^\n]+)?\s*$", re.S)
# Deprecated as a whole: said in the summary, or a directive at the top level of
# the docstring (an indented one is about a parameter).
DEPRECATED = re.compile(r"^(\.\. deprecated::|deprecated\b)", re.I | re.M)
FIELD_LIST = re.compile(r"^\s*(:(param|type|returns?|rtype|raises?)\b|(Args|Arguments|Parameters|Returns|Raises|Examples?|Notes?)\s*:?\s*$)")


def main():
    spec = json.loads(sys.argv[1])
    out = sys.stdout
    # Libraries may print while importing; only the JSON goes to stdout.
    sys.stdout = sys.stderr
    warnings.simplefilter("ignore")
    result = {
        "python": "%d.%d.%d" % sys.version_info[:3],
        "modules": sorted(top_level_modules()),
        "libraries": [index_library(lib, spec) for lib in spec["libraries"]],
    }
    out.write(json.dumps(result, separators=(",", ":")))
    out.flush()


def top_level_modules():
    names = set(sys.builtin_module_names)
    for m in pkgutil.iter_modules():
        names.add(m.name)
    # Namespace packages (no __init__.py) are not listed by iter_modules.
    try:
        names.update(importlib.metadata.packages_distributions().keys())
    except Exception:
        pass
    for name in sys.stdlib_module_names:
        if name in names:
            continue
        try:
            # Finds without importing: Debian splits some of the standard
            # library (tkinter, venv, ...) into packages that may be absent.
            if importlib.util.find_spec(name) is not None:
                names.add(name)
        except Exception:
            pass
    return {n for n in names if n.isidentifier() and n != "__main__"}


def distribution_of(name):
    try:
        dists = importlib.metadata.packages_distributions().get(name) or []
    except Exception:
        dists = []
    for dist in dists:
        try:
            return dist, importlib.metadata.version(dist)
        except Exception:
            pass
    if name in sys.stdlib_module_names or name in sys.builtin_module_names:
        return "python", "%d.%d.%d" % sys.version_info[:3]
    return "", ""


def index_library(lib, spec):
    name = lib["name"]
    dist, version = distribution_of(name)
    out = {"name": name, "distribution": dist, "version": version, "entries": []}
    indexer = Indexer(name, spec)
    for modname in [name] + list(lib.get("modules") or []):
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                module = importlib.import_module(modname)
        except BaseException as e:  # a broken library must not stop the index
            if modname == name:
                out["error"] = "%s: %s" % (type(e).__name__, e)
                return out
            continue
        if modname == name and not version:
            out["version"] = str(getattr(module, "__version__", "") or "")
        indexer.module(modname, module)
    out["entries"] = indexer.entries
    return out


class Indexer:
    def __init__(self, library, spec):
        self.library = library
        self.max_doc = int(spec.get("max_doc", 600))
        self.max_entries = int(spec.get("max_entries", 4000))
        self.max_members = int(spec.get("max_members", 400))
        self.entries = []
        self.seen = {}  # id of each indexed function and class -> its name

    def full(self):
        return len(self.entries) >= self.max_entries

    def add(self, name, kind, obj, signature=True, alias_of=""):
        if self.full():
            return
        full = safe_getdoc(obj)
        doc = first_paragraph(full, self.max_doc)
        if not doc and kind == "class":
            # Some classes document themselves in __init__ only (fitz.Document).
            init = getattr(obj, "__init__", None)
            if init is not None and init is not object.__init__:
                doc = first_paragraph(safe_getdoc(init), self.max_doc)
        if alias_of:
            doc = ("Another name for %s. %s" % (alias_of, doc)).strip()
        entry = {"name": name, "kind": kind}
        if signature:
            sig = signature_of(obj, doc_of(obj))
            if sig:
                entry["signature"] = sig
        if doc:
            entry["doc"] = doc
        if DEPRECATED.search(head_of(full)) or "deprecated" in doc.lower():
            entry["deprecated"] = True
        self.entries.append(entry)

    def module(self, modname, module):
        names = getattr(module, "__all__", None)
        if not isinstance(names, (list, tuple)):
            names = dir(module)
        for attr in sorted(set(n for n in names if isinstance(n, str))):
            if attr.startswith("_") or self.full():
                continue
            try:
                obj = getattr(module, attr)
            except Exception:
                continue
            if isinstance(obj, types.ModuleType) or not self.belongs(obj):
                continue
            kind = "class" if inspect.isclass(obj) else "function" if callable(obj) else ""
            if not kind:
                continue
            qualname = modname + "." + attr
            if id(obj) in self.seen:
                # Another name of something indexed (fitz.open is fitz.Document):
                # listed, without its members again.
                self.add(qualname, kind, obj, alias_of=self.seen[id(obj)])
                continue
            self.seen[id(obj)] = qualname
            self.add(qualname, kind, obj)
            if kind == "class":
                self.members(qualname, obj)

    def belongs(self, obj):
        """Whether obj is part of this library, not something it imported."""
        mod = getattr(obj, "__module__", None)
        if not isinstance(mod, str) or not mod:
            return True
        top = mod.split(".")[0]
        return top == self.library or top.lstrip("_") == self.library.lstrip("_")

    def members(self, qualname, cls):
        count = 0
        own_builtin = cls.__module__ == "builtins"
        try:
            names = dir(cls)
        except Exception:
            return
        for attr in names:
            if attr.startswith("_") or count >= self.max_members or self.full():
                continue
            owner = next((k for k in getattr(cls, "__mro__", (cls,)) if attr in getattr(k, "__dict__", {})), None)
            if owner is None:
                continue
            # Methods every object or exception has say nothing about the library.
            if owner.__module__ == "builtins" and not own_builtin:
                continue
            raw = owner.__dict__[attr]
            if isinstance(raw, (staticmethod, classmethod)):
                raw = raw.__func__
            if isinstance(raw, property) or inspect.isdatadescriptor(raw) or inspect.isgetsetdescriptor(raw):
                self.add(qualname + "." + attr, "property", raw, signature=False)
            elif inspect.isclass(raw):
                self.add(qualname + "." + attr, "class", raw)
            elif callable(raw) or inspect.ismethoddescriptor(raw):
                self.add(qualname + "." + attr, "method", raw)
            else:
                continue
            count += 1


def head_of(doc):
    """The docstring before its first section (Parameters, Notes, :param ...)."""
    lines = doc.splitlines()
    for k, line in enumerate(lines):
        underline = k + 1 < len(lines) and re.match(r"^\s*-{3,}\s*$", lines[k + 1])
        if FIELD_LIST.match(line) or underline:
            return "\n".join(lines[:k])
    return doc


def safe_getdoc(obj):
    try:
        doc = inspect.getdoc(obj)
    except Exception:
        return ""
    return doc if isinstance(doc, str) else ""


def doc_of(obj):
    try:
        doc = obj.__doc__
    except Exception:
        return ""
    return doc if isinstance(doc, str) else ""


def first_paragraph(doc, limit):
    """The summary of a docstring: its first paragraph up to any field list
    (":param", "Args:", ...), or the next paragraph when the first is only a
    signature line."""
    paras = [p.strip() for p in re.split(r"\n\s*\n", doc.strip()) if p.strip()]
    while paras and SIGNATURE_IN_DOC.match(paras[0]):
        paras = paras[1:]
    if not paras:
        return ""
    lines = []
    for line in paras[0].splitlines():
        if FIELD_LIST.match(line):
            break
        lines.append(line)
    text = " ".join(" ".join(lines).split())
    if len(text) > limit:
        text = text[: limit - 3].rstrip() + "..."
    return text


def signature_of(obj, raw_doc):
    try:
        return str(inspect.signature(obj))
    except Exception:
        pass
    # C extensions often state their signature in the docstring's first paragraph.
    first = re.split(r"\n\s*\n", inspect.cleandoc(raw_doc).strip())[0] if raw_doc.strip() else ""
    m = SIGNATURE_IN_DOC.match(first)
    if m:
        return " ".join((m.group(1) + (m.group(2) or "")).split())
    return ""


if __name__ == "__main__":
    main()
