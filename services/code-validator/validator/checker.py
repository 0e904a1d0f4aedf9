"""NOVA code checker: static checks of node code, without running it.

Run by the code validator as `python3 -I -S -c <this>` with a JSON request on
stdin:

  {"code": "...", "context_keys": [...], "prelude": ["context", "json", ...],
   "check_branch": true, "decision_values": ["approved", "rejected"]}

and answers one JSON document on stdout:

  {"findings": [{"rule": ..., "message": ..., "line": N}],
   "imports": [{"module": "os.path", "line": 1, "names": ["join"], "level": 0}],
   "uses": [{"name": "os.system", "line": 3}]}

The code is parsed and compiled (compile() runs the compiler's own checks:
'return' outside a function, bad nonlocal, ...) but never executed. Imports
are only collected: the Go side knows the runtime's modules and the policy.

Every check prefers silence to a false alarm: a finding sends the code back to
the model, so anything this cannot be sure of is not reported.
"""

import ast
import builtins
import difflib
import json
import sys

FILENAME = "<node>"

# Names the runtime defines besides builtins (site adds these to builtins).
SITE_BUILTINS = {"exit", "quit", "help", "copyright", "credits", "license"}
# Calls that can define names the parser cannot see.
DYNAMIC_CALLS = {"exec", "eval", "globals", "locals", "vars", "__import__"}
# Exceptions whose handler makes a failed lookup deliberate.
NAME_GUARDS = {"NameError", "UnboundLocalError", "Exception", "BaseException"}
KEY_GUARDS = {"KeyError", "LookupError", "Exception", "BaseException"}
# Conventional aliases: a missing `pd` means a missing `import pandas as pd`.
MODULE_ALIASES = {"pd": "pandas", "np": "numpy", "plt": "matplotlib.pyplot", "bs4": "bs4", "fitz": "fitz"}
BRANCH_KEY = "branch_decision"
BUILTIN_NAMES = frozenset(dir(builtins)) | SITE_BUILTINS


def main():
    # Bytes in, ASCII JSON out: nothing depends on the locale.
    req = json.loads(sys.stdin.buffer.read())
    out = check(req)
    sys.stdout.write(json.dumps(out))


def check(req):
    code = req.get("code") or ""
    try:
        compile(code, FILENAME, "exec", dont_inherit=True)
        tree = ast.parse(code, FILENAME, "exec")
    except SyntaxError as e:
        return {"findings": [syntax_finding(e)], "imports": [], "uses": []}
    except (ValueError, RecursionError, MemoryError, OverflowError) as e:
        msg = "the code cannot be compiled: %s" % (e.__class__.__name__ + (": %s" % e if str(e) else ""))
        if isinstance(e, RecursionError):
            msg = "the code is nested too deeply to compile; flatten deeply nested expressions"
        return {"findings": [{"rule": "syntax", "message": msg, "line": 0}], "imports": [], "uses": []}
    try:
        a = Analyzer(req)
        a.run(tree)
    except RecursionError:
        return {"findings": [{"rule": "syntax", "message": "the code is nested too deeply to check; flatten deeply nested expressions", "line": 0}], "imports": [], "uses": []}
    return {"findings": a.findings, "imports": a.imports, "uses": a.uses}


def syntax_finding(e):
    kind = type(e).__name__
    line = e.lineno or 0
    msg = "%s: %s" % (kind, e.msg)
    if line:
        msg += " (line %d" % line
        if e.offset:
            msg += ", column %d" % e.offset
        msg += ")"
    text = (e.text or "").rstrip("\n")
    if text.strip():
        msg += ": `%s`" % text.strip()[:200]
    return {"rule": "syntax", "message": msg, "line": line}


def pos(node):
    return (node.lineno, node.col_offset)


def end(node):
    return (node.end_lineno, node.end_col_offset)


def span(node):
    return (pos(node), end(node))


class Scope:
    def __init__(self, kind, node, parent, name, immediate):
        self.kind = kind  # "module", "function", "class" or "comprehension"
        self.node = node
        self.parent = parent
        self.name = name
        # Whether the body runs where it is written (module, class body, list
        # comprehension), rather than later (function, lambda, generator).
        self.immediate = immediate
        self.bindings = {}  # name -> [(position, by augmented assignment)]
        self.declared = set()  # bound without a position: parameters, del
        self.globals = set()
        self.nonlocals = set()
        # name -> the values assigned by `name = value` (None for any other
        # kind of binding), to follow `decision = 'x'; context[...] = decision`.
        self.values = {}

    def bind(self, name, at, aug=False):
        self.bindings.setdefault(name, []).append((at, aug))

    def binds(self, name):
        return name in self.bindings or name in self.declared


class Read:
    __slots__ = ("name", "scope", "at", "regions", "guarded")

    def __init__(self, name, scope, at, regions, guarded):
        self.name, self.scope, self.at, self.regions, self.guarded = name, scope, at, regions, guarded


class KeyRead:
    __slots__ = ("key", "at", "regions", "guarded", "deferred")

    def __init__(self, key, at, regions, guarded, deferred):
        self.key, self.at, self.regions, self.guarded, self.deferred = key, at, regions, guarded, deferred


class Analyzer(ast.NodeVisitor):
    def __init__(self, req):
        self.context_keys = [k for k in req.get("context_keys") or [] if isinstance(k, str)]
        self.prelude = set(req.get("prelude") or ["context", "json", "math", "re", "datetime"])
        self.check_branch = bool(req.get("check_branch"))
        self.decision_values = [v for v in req.get("decision_values") or [] if isinstance(v, str)]
        self.findings = []
        self.imports = []
        self.uses = []
        self.used = set()
        self.module_aliases = {}  # local name -> module, from import statements
        self.scopes = []
        self.reads = []
        self.dynamic = False  # exec/eval/globals(): names may come from anywhere
        self.star_import = False
        # context['k'] bookkeeping
        self.key_reads = []
        self.key_writes = {}  # key -> [position]
        self.key_guards = set()  # keys tested with `'k' in context`
        self.context_dynamic = False  # writes or aliases the checker cannot follow
        self.context_rebound = False
        self.branch_values = []  # (value expression, scope) of branch_decision writes
        # walking state
        self.scope = None
        self.regions = []  # enclosing loop-like spans in the current run of code
        self.name_guard = 0
        self.key_guard = 0
        self.in_annotation = 0

    # ---- driving

    def run(self, tree):
        self.scope = self.new_scope("module", tree, None, "<module>", True)
        self.visit_body(tree.body)
        self.report_names()
        self.report_context_keys()
        if self.check_branch:
            self.report_branch()

    def new_scope(self, kind, node, parent, name, immediate):
        s = Scope(kind, node, parent, name, immediate)
        self.scopes.append(s)
        return s

    def visit_body(self, stmts):
        for s in stmts:
            self.visit(s)

    def in_scope(self, scope, fn):
        saved = (self.scope, self.regions, self.name_guard, self.key_guard)
        self.scope = scope
        if not scope.immediate:
            # A deferred body runs later: loops around its definition say
            # nothing about the order of what happens inside it.
            self.regions, self.name_guard, self.key_guard = [], 0, 0
        try:
            fn()
        finally:
            self.scope, self.regions, self.name_guard, self.key_guard = saved

    def deferred(self):
        s = self.scope
        while s is not None:
            if not s.immediate:
                return True
            s = s.parent
        return False

    # ---- binding helpers

    def bind_target(self, target, at, aug=False, value=None):
        """Records what an assignment target binds; value is the assigned
        expression when target is the whole target of `target = value`."""
        if isinstance(target, ast.Name):
            scope = self.scope
            if target.id in scope.globals:
                scope = self.scopes[0]
            scope.bind(target.id, at, aug)
            scope.values.setdefault(target.id, []).append(value)
            if target.id == "context" and self.binding_scope_is_module():
                self.context_rebound = True
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self.bind_target(elt, at, aug)
        elif isinstance(target, ast.Starred):
            self.bind_target(target.value, at, aug)
        elif isinstance(target, ast.Subscript):
            if self.is_context(target.value):
                self.context_write(target, at)
            else:
                self.visit(target.value)
            self.visit(target.slice)
        elif isinstance(target, ast.Attribute):
            self.visit(target.value)

    def binding_scope_is_module(self):
        return self.scope.kind == "module" or "context" in self.scope.globals

    # ---- statements

    def visit_Assign(self, node):
        self.visit(node.value)
        for t in node.targets:
            self.bind_target(t, end(node), value=node.value)
            if isinstance(t, ast.Subscript) and self.is_context(t.value):
                self.branch_value(t, node.value)

    def visit_AugAssign(self, node):
        t = node.target
        if isinstance(t, ast.Name):
            self.read(t.id, pos(t))
        elif isinstance(t, ast.Subscript) and self.is_context(t.value):
            key = const_str(t.slice)
            if key is not None:
                self.key_read(key, pos(t))
        if isinstance(t, ast.Name) and t.id == "context" and isinstance(node.op, ast.BitOr):
            # context |= {...}
            self.context_update(node.value, end(node))
            self.visit(node.value)
            return
        self.visit(node.value)
        self.bind_target(t, end(node), aug=True)

    def visit_AnnAssign(self, node):
        if node.value is not None:
            self.visit(node.value)
        self.in_annotation += 1
        self.visit(node.annotation)
        self.in_annotation -= 1
        if node.value is not None or not isinstance(node.target, ast.Name):
            self.bind_target(node.target, end(node))
        else:
            # `x: int` makes x local without a value; never report around it.
            self.scope.declared.add(node.target.id)

    def visit_For(self, node):
        self.visit(node.iter)
        self.regions.append(span(node))
        self.bind_target(node.target, end(node.iter))
        self.visit_body(node.body)
        self.visit_body(node.orelse)
        self.regions.pop()

    visit_AsyncFor = visit_For

    def visit_While(self, node):
        self.regions.append(span(node))
        self.visit(node.test)
        self.visit_body(node.body)
        self.visit_body(node.orelse)
        self.regions.pop()

    def visit_With(self, node):
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self.bind_target(item.optional_vars, end(item.optional_vars))
        self.visit_body(node.body)

    visit_AsyncWith = visit_With

    def visit_Try(self, node):
        names, keys = self.guards(node.handlers)
        self.name_guard += names
        self.key_guard += keys
        self.visit_body(node.body)
        self.name_guard -= names
        self.key_guard -= keys
        for h in node.handlers:
            if h.type is not None:
                self.visit(h.type)
            if h.name:
                self.scope.bind(h.name, end(h.type) if h.type is not None else pos(h))
            self.visit_body(h.body)
        self.visit_body(node.orelse)
        self.visit_body(node.finalbody)

    visit_TryStar = visit_Try

    def guards(self, handlers):
        names = keys = 0
        for h in handlers:
            caught = set()
            if h.type is None:
                names = keys = 1
                continue
            types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
            for t in types:
                if isinstance(t, ast.Name):
                    caught.add(t.id)
                elif isinstance(t, ast.Attribute):
                    caught.add(t.attr)
            if caught & NAME_GUARDS:
                names = 1
            if caught & KEY_GUARDS:
                keys = 1
        return names, keys

    def visit_Import(self, node):
        for alias in node.names:
            self.imports.append({"module": alias.name, "line": node.lineno, "level": 0})
            local = alias.asname or alias.name.split(".")[0]
            self.scope.bind(local, end(node))
            self.module_aliases[local] = alias.name if alias.asname else alias.name.split(".")[0]

    def visit_ImportFrom(self, node):
        module = node.module or ""
        names = [a.name for a in node.names]
        self.imports.append({"module": module, "line": node.lineno, "level": node.level or 0, "names": names})
        for alias in node.names:
            if alias.name == "*":
                self.star_import = True
                continue
            local = alias.asname or alias.name
            self.scope.bind(local, end(node))
            if not node.level and module:
                self.module_aliases[local] = module + "." + alias.name
                self.use(module + "." + alias.name, node.lineno)

    def use(self, name, line):
        if name not in self.used:
            self.used.add(name)
            self.uses.append({"name": name, "line": line})

    def visit_Global(self, node):
        self.scope.globals.update(node.names)

    def visit_Nonlocal(self, node):
        self.scope.nonlocals.update(node.names)

    def visit_Delete(self, node):
        for t in node.targets:
            if isinstance(t, ast.Name):
                self.scope.declared.add(t.id)
            else:
                self.visit(t)

    def visit_FunctionDef(self, node):
        for d in node.decorator_list:
            self.visit(d)
        self.visit_arg_defaults(node.args)
        self.annotations(node)
        fn = self.new_scope("function", node, self.scope, node.name, False)
        self.declare_params(fn, node.args)
        self.in_scope(fn, lambda: self.visit_body(node.body))
        self.scope.bind(node.name, end(node))

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        self.visit_arg_defaults(node.args)
        fn = self.new_scope("function", node, self.scope, "<lambda>", False)
        self.declare_params(fn, node.args)
        self.in_scope(fn, lambda: self.visit(node.body))

    def visit_ClassDef(self, node):
        for d in node.decorator_list:
            self.visit(d)
        for b in node.bases:
            self.visit(b)
        for k in node.keywords:
            self.visit(k.value)
        cls = self.new_scope("class", node, self.scope, node.name, True)
        self.in_scope(cls, lambda: self.visit_body(node.body))
        self.scope.bind(node.name, end(node))

    def visit_arg_defaults(self, args):
        for d in args.defaults:
            self.visit(d)
        for d in args.kw_defaults:
            if d is not None:
                self.visit(d)

    def annotations(self, node):
        self.in_annotation += 1
        a = node.args
        for arg in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]:
            if arg is not None and arg.annotation is not None:
                self.visit(arg.annotation)
        if node.returns is not None:
            self.visit(node.returns)
        self.in_annotation -= 1

    def declare_params(self, scope, a):
        for arg in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]:
            if arg is not None:
                scope.declared.add(arg.arg)

    def visit_Match(self, node):
        self.visit(node.subject)
        for case in node.cases:
            self.visit(case.pattern)
            if case.guard is not None:
                self.visit(case.guard)
            self.visit_body(case.body)

    def visit_MatchAs(self, node):
        if node.pattern is not None:
            self.visit(node.pattern)
        if node.name:
            self.scope.bind(node.name, end(node))

    def visit_MatchStar(self, node):
        if node.name:
            self.scope.bind(node.name, end(node))

    def visit_MatchMapping(self, node):
        for k in node.keys:
            self.visit(k)
        for p in node.patterns:
            self.visit(p)
        if node.rest:
            self.scope.bind(node.rest, end(node))

    # ---- expressions

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load):
            self.read(node.id, pos(node))
        elif isinstance(node.ctx, ast.Store):
            self.bind_target(node, end(node))
        elif isinstance(node.ctx, ast.Del):
            self.scope.declared.add(node.id)

    def visit_NamedExpr(self, node):
        self.visit(node.value)
        # The target belongs to the nearest scope that is not a comprehension.
        s = self.scope
        while s.kind == "comprehension":
            s = s.parent
        s.bind(node.target.id, end(node))

    def visit_IfExp(self, node):
        # `a if (a := f()) else b`: the test runs first though written second.
        self.regions.append(span(node))
        self.generic_visit(node)
        self.regions.pop()

    def comprehension(self, node, kind_name, elements):
        gens = node.generators
        self.visit(gens[0].iter)
        immediate = not isinstance(node, ast.GeneratorExp)
        comp = self.new_scope("comprehension", node, self.scope, kind_name, immediate)

        def body():
            self.regions.append(span(node))
            for k, g in enumerate(gens):
                if k > 0:
                    self.visit(g.iter)
                self.bind_target(g.target, end(g.iter))
                for cond in g.ifs:
                    self.visit(cond)
            for e in elements:
                self.visit(e)
            self.regions.pop()

        self.in_scope(comp, body)

    def visit_ListComp(self, node):
        self.comprehension(node, "<listcomp>", [node.elt])

    def visit_SetComp(self, node):
        self.comprehension(node, "<setcomp>", [node.elt])

    def visit_GeneratorExp(self, node):
        self.comprehension(node, "<genexpr>", [node.elt])

    def visit_DictComp(self, node):
        self.comprehension(node, "<dictcomp>", [node.key, node.value])

    def visit_Subscript(self, node):
        if isinstance(node.ctx, ast.Load) and self.is_context(node.value):
            key = const_str(node.slice)
            if key is not None:
                self.key_read(key, pos(node))
            self.visit(node.slice)
            return
        if isinstance(node.ctx, ast.Del) and self.is_context(node.value):
            self.visit(node.slice)
            return
        self.generic_visit(node)

    def visit_Attribute(self, node):
        if isinstance(node.value, ast.Name) and isinstance(node.ctx, ast.Load):
            module = self.module_aliases.get(node.value.id)
            if module:
                self.use(module + "." + node.attr, node.lineno)
        if self.is_context(node.value):
            return  # context.get, context.update, ...: handled by visit_Call
        self.generic_visit(node)

    def visit_Compare(self, node):
        # 'k' in context / 'k' not in context.keys(): a guarded key.
        for op, right in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)) and self.is_context_view(right):
                key = const_str(node.left)
                if key is not None:
                    self.key_guards.add(key)
        self.visit(node.left)
        for c in node.comparators:
            if self.is_context_view(c):
                continue
            self.visit(c)

    def visit_Call(self, node):
        f = node.func
        if isinstance(f, ast.Name) and f.id in DYNAMIC_CALLS:
            if f.id == "__import__":
                self.dynamic_import(node)
            elif not (f.id == "vars" and node.args):
                self.dynamic = True
        if isinstance(f, ast.Attribute) and f.attr == "import_module" and isinstance(f.value, ast.Name) \
                and self.module_aliases.get(f.value.id) == "importlib":
            self.dynamic_import(node)
        if isinstance(f, ast.Attribute) and self.is_context(f.value):
            self.context_method(node, f.attr)
        else:
            self.visit(f)
        user_function = isinstance(f, ast.Name) and f.id not in BUILTIN_NAMES
        for a in node.args:
            arg = a.value if isinstance(a, ast.Starred) else a
            if self.is_context(arg):
                # The code's own functions may write keys we cannot see.
                if user_function:
                    self.context_dynamic = True
                continue
            self.visit(a)
        for k in node.keywords:
            if self.is_context(k.value):
                if user_function:
                    self.context_dynamic = True
                continue
            self.visit(k.value)

    def dynamic_import(self, node):
        if node.args and const_str(node.args[0]):
            self.imports.append({"module": const_str(node.args[0]), "line": node.lineno, "level": 0})

    def context_method(self, node, method):
        at = end(node)
        if method == "update":
            for a in node.args:
                self.context_update(a, at)
            for k in node.keywords:
                if k.arg is None:
                    self.context_dynamic = True
                else:
                    self.add_key_write(k.arg, at, k.value)
        elif method == "setdefault":
            key = const_str(node.args[0]) if node.args else None
            if key is None:
                self.context_dynamic = True
            else:
                self.add_key_write(key, at, node.args[1] if len(node.args) > 1 else None)
        elif method in ("__setitem__", "fromkeys"):
            self.context_dynamic = True
        elif method == "clear":
            pass  # keys disappear; reads after it are not followed
        # get, pop, keys, items, values, copy: reads that tolerate absence

    def context_update(self, value, at):
        """context.update(x) and context |= x: which keys x writes."""
        if isinstance(value, ast.Dict):
            for k, v in zip(value.keys, value.values):
                key = const_str(k) if k is not None else None
                if key is None:
                    self.context_dynamic = True
                else:
                    self.add_key_write(key, at, v)
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict" and not value.args:
            for k in value.keywords:
                if k.arg is None:
                    self.context_dynamic = True
                else:
                    self.add_key_write(k.arg, at, k.value)
        else:
            self.context_dynamic = True

    def context_write(self, target, at):
        if not self.is_context(target.value):
            return
        key = const_str(target.slice)
        if key is None:
            self.context_dynamic = True
        else:
            self.add_key_write(key, at, None)

    def add_key_write(self, key, at, value):
        self.key_writes.setdefault(key, []).append(at)
        if key == BRANCH_KEY and value is not None:
            self.branch_values.append((value, self.scope))

    def branch_value(self, target, value):
        if const_str(target.slice) == BRANCH_KEY:
            self.branch_values.append((value, self.scope))

    def is_context(self, node):
        """Whether node is the `context` the runtime provides."""
        if not (isinstance(node, ast.Name) and node.id == "context"):
            return False
        s = self.scope
        while s is not None:
            if "context" in s.globals:
                return True
            if s.kind != "module" and s.kind != "class" and (s.binds("context") or "context" in s.nonlocals):
                return False
            s = s.parent
        return True

    def is_context_view(self, node):
        if self.is_context(node):
            return True
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "keys" and self.is_context(node.func.value))

    # ---- recording reads

    def read(self, name, at):
        if self.in_annotation:
            return
        if name == "context" and self.is_context(ast.Name(id="context")):
            # Bare `context` used other than as context[...] / context.x: an
            # alias (ctx = context) may write keys we cannot see.
            self.context_dynamic = True
        self.reads.append(Read(name, self.scope, at, list(self.regions), self.name_guard > 0))

    def key_read(self, key, at):
        self.key_reads.append(KeyRead(key, at, list(self.regions), self.key_guard > 0, self.deferred()))

    # ---- reports

    def module(self):
        return self.scopes[0]

    def module_binds(self, name):
        if self.module().binds(name):
            return True
        # `global x` in a function that assigns x.
        return any(name in s.globals and s.binds(name) for s in self.scopes)

    def known(self, name):
        return name in self.prelude or name in BUILTIN_NAMES

    def resolve(self, read):
        """The scope whose binding a read uses: a Scope, "global", "builtin",
        or None when nothing defines the name."""
        name = read.name
        s = read.scope
        if name in s.nonlocals:
            return "nonlocal"
        if name in s.globals:
            return self.resolve_global(name)
        if s.binds(name):
            if s.kind == "class":
                return "class"  # falls back to globals until bound: not followed
            return s
        p = s.parent
        while p is not None and p.kind != "module":
            if p.kind == "class":
                if p.binds(name):
                    return "class"  # invisible from here, but do not report
                p = p.parent
                continue
            if name in p.nonlocals:
                return "nonlocal"
            if name in p.globals:
                return self.resolve_global(name)
            if p.binds(name):
                return p
            p = p.parent
        return self.resolve_global(name)

    def resolve_global(self, name):
        if self.module_binds(name):
            return self.module()
        if self.known(name):
            return "builtin"
        return None

    def report_names(self):
        undefined = {}  # name -> [lines]
        early = {}  # (name, scope) -> (read, first binding)
        for r in self.reads:
            if r.name.startswith("__") and r.name.endswith("__"):
                continue
            target = self.resolve(r)
            if target is None:
                if self.dynamic or self.star_import or r.guarded:
                    continue
                undefined.setdefault(r.name, []).append(r.at[0])
                continue
            if not isinstance(target, Scope) or r.guarded:
                continue
            first = self.unbound_at(r, target)
            if first is not None and (r.name, id(target)) not in early:
                early[(r.name, id(target))] = (r, target, first)

        for name, lines in undefined.items():
            self.findings.append({"rule": "undefined-name", "message": self.undefined_message(name, lines), "line": lines[0]})
        for r, target, first in early.values():
            if first == "aug":
                self.findings.append({"rule": "undefined-name", "message": self.aug_message(r, target), "line": r.at[0]})
                continue
            what = "name '%s'" % r.name
            if target.kind != "module":
                what = "local variable '%s' of function '%s'" % (r.name, target.name)
            if first[0] == r.at[0]:
                msg = "%s is read on line %d before it has a value: that line is its first assignment" % (what, r.at[0])
            else:
                msg = "%s is used on line %d before it is assigned (first assigned on line %d)" % (what, r.at[0], first[0])
            if target.kind != "module":
                msg += self.outer_hint(r.name, target)
            self.findings.append({"rule": "undefined-name", "message": msg, "line": r.at[0]})
        self.findings.sort(key=lambda f: f["line"])

    def aug_message(self, r, target):
        if target.kind == "module":
            return "name '%s' is not defined (line %d): `%s += ...` needs a value first; assign it before (e.g. %s = 0)" % (
                r.name, r.at[0], r.name, r.name)
        msg = "local variable '%s' of function '%s' has no value when `%s += ...` runs (line %d)" % (
            r.name, target.name, r.name, r.at[0])
        return msg + (self.outer_hint(r.name, target) or "; assign it first")

    def outer_hint(self, name, fn):
        """For a function's local that shadows an outer name: how to use that one."""
        p = fn.parent
        while p is not None and p.kind != "module":
            if p.kind == "function" and p.binds(name):
                return ("; the assignment hides the enclosing function's '%s': rename the local variable, "
                        "or declare `nonlocal %s` to change that one" % (name, name))
            p = p.parent
        if self.module().binds(name):
            return ("; the assignment hides the module's '%s': rename the local variable, "
                    "or declare `global %s` to change that one" % (name, name))
        return ""

    def unbound_at(self, r, target):
        """For a read that runs where it is written, the position of the first
        binding when none can have run before it; else None."""
        if target.kind == "module" and (self.dynamic or self.star_import):
            return None
        # Only reads whose every scope up to the binding scope runs at once.
        s = r.scope
        while s is not target:
            if not s.immediate or s.kind == "class":
                return None
            s = s.parent
        name = r.name
        if name in target.declared:
            return None
        if target.kind == "module":
            if self.known(name):
                return None  # builtins and the prelude answer until it is bound
            if any(name in s.globals for s in self.scopes if s is not target):
                return None
        events = target.bindings.get(name, [])
        if not events:
            return None
        if all(aug for _, aug in events):
            return "aug"  # only ever `x += ...`: never given a first value
        for at, _ in events:
            if at < r.at:
                return None
            if any(start <= at <= stop for start, stop in r.regions):
                return None
        return min(at for at, _ in events)

    def undefined_message(self, name, lines):
        msg = "name '%s' is not defined (line %d" % (name, lines[0])
        others = sorted(set(lines[1:]) - {lines[0]})
        if others:
            msg += "; also used on line%s %s" % ("s" if len(others) > 1 else "", ", ".join(map(str, others[:5])))
        msg += ")"
        if name in self.context_keys:
            return msg + "; it is a context key: read it with context['%s']" % name
        if name in MODULE_ALIASES:
            mod = MODULE_ALIASES[name]
            return msg + "; import it first (`import %s%s`)" % (mod, "" if mod == name else " as " + name)
        if name in getattr(sys, "stdlib_module_names", ()):
            return msg + "; import it first (`import %s`)" % name
        candidates = set(self.context_keys)
        for s in self.scopes:
            candidates.update(s.bindings)
            candidates.update(s.declared)
        candidates.update(self.prelude)
        candidates.update(n for n in dir(builtins) if not n.startswith("_"))
        close = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.65)
        if close:
            c = close[0]
            if c in self.context_keys and not any(c in s.bindings or c in s.declared for s in self.scopes):
                return msg + "; did you mean context['%s']?" % c
            return msg + "; did you mean '%s'?" % c
        return msg

    def report_context_keys(self):
        if self.context_rebound or self.context_dynamic:
            return
        available = set(self.context_keys)
        reported = {}
        for r in self.key_reads:
            if r.key in available or r.key in self.key_guards or r.guarded or r.key in reported:
                continue
            writes = self.key_writes.get(r.key, [])
            if writes and r.deferred:
                continue
            if any(w < r.at or any(a <= w <= b for a, b in r.regions) for w in writes):
                continue
            reported[r.key] = (r, writes)
        for key, (r, writes) in reported.items():
            line = r.at[0]
            if writes:
                msg = "context key '%s' is read on line %d before the code sets it (line %d)" % (key, line, min(writes)[0])
            else:
                msg = "context key '%s' is read on line %d but the context has no such key (%s)" % (
                    key, line, self.available_keys())
                close = difflib.get_close_matches(key, self.context_keys + sorted(self.key_writes), n=1, cutoff=0.6)
                if close:
                    msg += "; did you mean context['%s']?" % close[0]
            self.findings.append({"rule": "unknown-context-key", "message": msg, "line": line})
        self.findings.sort(key=lambda f: f["line"])

    def constant_strings(self, node, scope, depth=0):
        """The string constants an expression can evaluate to, when it is made
        of string constants, conditional expressions and names only ever
        assigned such expressions; [] when anything else is involved."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [(node.value, node.lineno)]
        if isinstance(node, ast.IfExp):
            a = self.constant_strings(node.body, scope, depth)
            b = self.constant_strings(node.orelse, scope, depth)
            return a + b if a and b else []
        if isinstance(node, ast.Name) and depth < 5:
            s = scope
            while s is not None and not s.binds(node.id):
                s = s.parent
            values = s.values.get(node.id) if s is not None else None
            if not values or any(v is None for v in values) or node.id in s.declared \
                    or len(values) != len(s.bindings.get(node.id, ())):
                return []
            out = []
            for v in values:
                found = self.constant_strings(v, s, depth + 1)
                if not found:
                    return []
                out += found
            return out
        return []

    def available_keys(self):
        if not self.context_keys:
            return "the context is empty"
        keys = self.context_keys[:40]
        more = len(self.context_keys) - len(keys)
        return "available: " + ", ".join(keys) + (" and %d more" % more if more > 0 else "")

    def report_branch(self):
        allowed = ", ".join("'%s'" % v for v in self.decision_values)
        if BRANCH_KEY not in self.key_writes:
            if self.context_dynamic or self.context_rebound:
                return
            msg = "this is a decision node, but the code never sets context['%s']" % BRANCH_KEY
            msg += "; set it to one of: %s" % allowed if allowed else "; set it to the value of the outgoing edge to take"
            self.findings.append({"rule": "no-branch-decision", "message": msg, "line": 0})
            return
        if not self.decision_values:
            return
        for value, scope in self.branch_values:
            for const, line in self.constant_strings(value, scope):
                if const in self.decision_values:
                    continue
                msg = "context['%s'] is set to '%s' (line %d), which is not an allowed value; allowed: %s" % (
                    BRANCH_KEY, const, line, allowed)
                same = [v for v in self.decision_values if v.lower() == const.strip().lower()]
                if same:
                    msg += " (values are case-sensitive: use '%s')" % same[0]
                self.findings.append({"rule": "bad-branch-decision", "message": msg, "line": line})




def const_str(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


if __name__ == "__main__":
    main()
