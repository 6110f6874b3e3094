"""``durably audit``: every step and tool reachable from an engine's workflows, with its
kind and how a repeat of it is made safe, answering "for each tool that writes, what
happens if it runs twice?" before a crash asks it.

What is reachable is read from the workflow functions' source (ast): the targets of
``ctx.step``/``ctx.step_stream``/``saga.step`` calls, direct calls of
``@durably.tool`` functions, the tool lists passed to ``durably.tools.dispatch``, and the
same inside helper functions the context is passed to. Each name is resolved through the
function's globals and closure to the object itself, whose declared kind and step options
(the registry of decorated tools and steps) decide; a name that cannot be resolved (a
value computed at run time) is reported as unknown.
"""

from __future__ import annotations

import ast
import inspect
import os
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final

from .steps import signature_of
from .tools import Tool

if TYPE_CHECKING:
    from .engine import Engine, Workflow

FOLLOW_DEPTH_MAX: Final = 8  # helper functions followed from a workflow, nested
STEP_METHODS: Final = frozenset({"step", "step_stream"})


@dataclass(frozen=True, slots=True)
class Entry:
    """One step or tool a workflow reaches.

    ``kind``: a tool's kind (``read``, ``idempotent``, ``write``, ``destructive``),
    ``effect`` for an ``effect=True`` step, ``step`` for a plain step (its effect is not
    declared), ``unknown`` for a target that could not be resolved. ``safety``: how a
    repeat is made safe (``read-only``, ``idempotent``, ``key``, ``reconcile``,
    ``approval``, ``none``; ``unknown``). ``problem``: the fix, for an effect safe by no
    means (else None).
    """

    workflow: str
    name: str
    target: str
    kind: str
    safety: str
    where: str
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The entry as plain JSON data."""
        return asdict(self)


def _fix(target: str, kind: str) -> str:
    what = (
        "no key, no reconcile and no approval"
        if kind == "destructive"
        else "no key and no reconcile"
    )
    return (
        f"{target} is an effect with {what}: a crash in the middle of it parks the run in"
        f" doubt for a person. Give {target} an `idempotency_key` parameter (durably passes"
        " a key stable across crashes; pass it on to the service), or `reconcile=fn(key)`"
        " that finds out whether it happened"
    )


def classify(workflow: str, name: str, obj: Any, where: str) -> Entry:
    """The :class:`Entry` of one resolved step target ``obj``."""
    if isinstance(obj, Tool):
        problem = _fix(obj.name, obj.kind) if obj.kind in ("write", "destructive") else None
        if obj.safety != "none":
            problem = None
        return Entry(workflow, name, obj.name, obj.kind, obj.safety, where, problem)
    target = getattr(obj, "__qualname__", None) or type(obj).__name__
    sig = signature_of(obj)
    opts = sig.options
    if opts.reconcile is not None:
        safety = "reconcile"
    elif sig.takes_key:
        safety = "key"
    else:
        safety = "none"
    kind = "effect" if opts.effect else "step"
    problem = _fix(target, kind) if kind == "effect" and safety == "none" else None
    return Entry(workflow, name, target, kind, safety, where, problem)


class _Resolver:
    """Names of a function's source resolved to objects: closure, then globals, then
    builtins."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        try:
            cv = inspect.getclosurevars(fn)
            self.scope: dict[str, Any] = {**cv.builtins, **cv.globals, **cv.nonlocals}
        except (TypeError, ValueError):
            self.scope = {}
        self.scope = {**getattr(fn, "__globals__", {}), **self.scope}

    def resolve(self, node: ast.AST) -> tuple[bool, Any]:
        if isinstance(node, ast.Name):
            if node.id in self.scope:
                return True, self.scope[node.id]
            return False, None
        if isinstance(node, ast.Attribute):
            ok, base = self.resolve(node.value)
            if ok and hasattr(base, node.attr):
                return True, getattr(base, node.attr)
        return False, None


def _source(fn: Callable[..., Any]) -> tuple[ast.AST, str, int] | None:
    fn = inspect.unwrap(fn)
    try:
        lines, first = inspect.getsourcelines(fn)
        path = inspect.getsourcefile(fn) or "<unknown>"
    except (OSError, TypeError):
        return None
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return None
    return tree, path, first


def _label(node: ast.AST) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return ast.unparse(node)


def _ctx_name(tree: ast.AST) -> str | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = [*node.args.posonlyargs, *node.args.args]
            return args[0].arg if args else None
    return None


def _walk(workflow: str, fn: Callable[..., Any], seen: set[int], depth: int = 0) -> Iterator[Entry]:
    if id(fn) in seen or depth > FOLLOW_DEPTH_MAX:
        return
    found = _source(fn)
    if found is None:
        # Made by exec, a functools.partial, a module shipped as bytecode: what it reaches
        # cannot be read, so it is unknown, never silently left out of the audit.
        seen.add(id(fn))
        inner = getattr(fn, "func", fn)  # a functools.partial names its function
        label = str(getattr(inner, "__qualname__", None) or type(fn).__name__)
        module = getattr(inner, "__module__", None) or "(no module)"
        unread = f"{module}: its source cannot be read"
        yield Entry(workflow, "(its steps)", label, "unknown", "unknown", unread)
        return
    seen.add(id(fn))
    tree, path, first = found
    res = _Resolver(fn)
    ctx = _ctx_name(tree)

    shown = os.path.relpath(path) if path.startswith(os.getcwd() + os.sep) else path

    def where(node: ast.AST) -> str:
        return f"{shown}:{first + getattr(node, 'lineno', 1) - 1}"

    def target(name: str, expr: ast.AST, node: ast.AST) -> Entry:
        ok, obj = res.resolve(expr)
        if not ok or not callable(obj):
            text = ast.unparse(expr)
            if isinstance(expr, ast.Lambda):
                return Entry(workflow, name, "lambda", "step", "none", where(node))
            return Entry(workflow, name, text, "unknown", "unknown", where(node))
        return classify(workflow, name, obj, where(node))

    # (line, column) of each call -> what it reaches; a helper's entries at its call.
    found_at: list[tuple[tuple[int, int], list[Entry]]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        at = (node.lineno, node.col_offset)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in STEP_METHODS and len(node.args) >= 2:
            here = [target(_label(node.args[0]), node.args[1], node)]
            if func.attr == "step" and len(node.args) >= 3 and _is_saga(func, ctx):
                here.append(target(f"undo:{_label(node.args[0])}", node.args[2], node))
            found_at.append((at, here))
            continue
        ok, obj = res.resolve(func)
        if not ok:
            continue
        if isinstance(obj, Tool):
            found_at.append((at, [classify(workflow, obj.name, obj, where(node))]))
        elif getattr(obj, "__module__", "") == "durably.tools._dispatch" and len(node.args) >= 3:
            found_at.append((at, list(_tool_list(workflow, res, node.args[2], where(node)))))
        elif (
            ctx is not None
            and inspect.isfunction(obj)
            and any(isinstance(a, ast.Name) and a.id == ctx for a in node.args)
        ):
            found_at.append((at, list(_walk(workflow, obj, seen, depth + 1))))  # a helper
    for _, entries in sorted(found_at, key=lambda f: f[0]):
        yield from entries


def _is_saga(func: ast.Attribute, ctx: str | None) -> bool:
    # ctx.step takes (name, fn, *args): only a saga's step has an undo in third place.
    return not (isinstance(func.value, ast.Name) and func.value.id == ctx)


def _tool_list(workflow: str, res: _Resolver, expr: ast.AST, where: str) -> Iterator[Entry]:
    items: list[Any] = []
    if isinstance(expr, ast.List | ast.Tuple):
        for elt in expr.elts:
            ok, obj = res.resolve(elt)
            if not ok:
                yield Entry(
                    workflow, ast.unparse(elt), ast.unparse(elt), "unknown", "unknown", where
                )
            else:
                items.append(obj)
    else:
        ok, obj = res.resolve(expr)
        if not ok or not isinstance(obj, list | tuple):
            text = ast.unparse(expr)
            yield Entry(workflow, text, text, "unknown", "unknown", where)
            return
        items = list(obj)
    for obj in items:
        if isinstance(obj, Tool):
            yield classify(workflow, obj.name, obj, where)
        else:
            name = getattr(obj, "__qualname__", type(obj).__name__)
            yield Entry(workflow, name, name, "unknown", "unknown", where)


def audit(engine: Engine) -> list[Entry]:
    """Every step and tool reachable from ``engine``'s registered workflows (each target
    once per workflow, in source order)."""
    return [e for wf in engine.workflows() for e in audit_workflow(wf)]


def audit_workflow(wf: Workflow) -> list[Entry]:
    """The steps and tools one registered workflow reaches (each once, in source order,
    a helper's at its call)."""
    label = wf.name if wf.version is None else f"{wf.name}@{wf.version}"
    entries: list[Entry] = []
    done: set[tuple[str, str, str]] = set()
    for e in _walk(label, wf.fn, set()):
        if (e.name, e.target, e.kind) not in done:
            done.add((e.name, e.target, e.kind))
            entries.append(e)
    return entries
