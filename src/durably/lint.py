"""``durably lint``: a static check (ast) of workflow code for non-determinism outside
steps, before it breaks a replay.

A workflow function is one decorated ``@<engine>.workflow`` (with or without
arguments) or one with a parameter annotated ``Context``/``AsyncContext`` (also
``durably.Context``, or as a string). Its body runs again on every replay, so each value
it computes must come out the same: the wall clock, random numbers, fresh UUIDs, the
environment, file and network reads, threads, ``asyncio`` scheduling around recorded
calls, the iteration order of a set and object identities do not. Functions nested in a
workflow (step functions, lambdas) are not its body and are not checked; code in the
arguments of ``ctx.step(...)`` is. ``# durably: ok`` on a line silences that line.

Nothing is imported or executed: the check reads source text only.
"""

from __future__ import annotations

import ast
import io
import os
import stat
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

OK_MARK: Final = "# durably: ok"
CONTEXT_TYPES: Final = frozenset({"Context", "AsyncContext"})
SKIP_DIRS: Final = frozenset({".git", ".venv", "venv", "__pycache__", "node_modules", ".tox"})


@dataclass(frozen=True, slots=True)
class Finding:
    """One line of workflow code that is not deterministic: where, which rule, why, and
    the durable alternative."""

    path: str
    line: int
    col: int
    rule: str
    why: str
    fix: str

    def text(self) -> str:
        """``path:line:col: rule: why; use fix`` (col 1-based, like compilers)."""
        return f"{self.path}:{self.line}:{self.col}: {self.rule}: {self.why}; instead: {self.fix}"

    def to_json(self) -> dict[str, Any]:
        """The finding as plain JSON data."""
        return asdict(self)


# rule -> (why, fix)
RULES: Final[dict[str, tuple[str, str]]] = {
    "wall-clock": (
        "reads the wall clock in the workflow body: a replay gets another time",
        "ctx.now() (recorded), or read it inside a step",
    ),
    "random": (
        "draws a random number in the workflow body: a replay draws another",
        "ctx.random() (recorded), or draw it inside a step",
    ),
    "uuid": (
        "makes a fresh UUID in the workflow body: a replay makes another",
        "ctx.uuid() (recorded)",
    ),
    "environment": (
        "reads the environment in the workflow body: another process may see other values",
        "pass it as an input of the workflow, or read it inside a step",
    ),
    "io": (
        "reads a file or the network in the workflow body: a replay may read something else",
        "do it inside a step (ctx.step), whose result is recorded",
    ),
    "thread": (
        "starts threads or processes in the workflow body: their timing is not replayed",
        "ctx.gather in an async workflow for parallel steps, or do it inside one step",
    ),
    "asyncio": (
        "schedules recorded calls with asyncio: their positions would follow completion order",
        "ctx.gather(...), whose branches get positions independent of timing",
    ),
    "set-order": (
        "iterates over a set: its order varies between processes (string hashing is salted)",
        "sorted(...) of the set",
    ),
    "identity": (
        "uses id()/hash() of an object: it differs in every process",
        "a stable key from the data (or ctx.uuid() once, recorded)",
    ),
}

_WALL: Final = frozenset(
    {
        "time.time",
        "time.time_ns",
        "time.monotonic",
        "time.monotonic_ns",
        "time.perf_counter",
        "time.perf_counter_ns",
        "time.localtime",
        "time.gmtime",
        "time.ctime",
        "datetime.datetime.now",
        "datetime.datetime.utcnow",
        "datetime.datetime.today",
        "datetime.date.today",
    }
)
_UUID: Final = frozenset({"uuid.uuid1", "uuid.uuid4"})
_ENV_CALLS: Final = frozenset({"os.getenv", "os.getenvb", "os.environ.get"})
_IO_CALLS: Final = frozenset(
    {"open", "io.open", "urllib.request.urlopen", "os.listdir", "os.scandir"}
)
_IO_PREFIXES: Final = ("requests.", "httpx.", "aiohttp.", "socket.", "urllib3.", "http.client.")
_IO_METHODS: Final = frozenset({"read_text", "read_bytes"})
_THREADS: Final = frozenset(
    {
        "threading.Thread",
        "threading.Timer",
        "_thread.start_new_thread",
        "concurrent.futures.ThreadPoolExecutor",
        "concurrent.futures.ProcessPoolExecutor",
        "multiprocessing.Process",
        "multiprocessing.Pool",
    }
)
_ASYNCIO: Final = frozenset(
    {"asyncio.gather", "asyncio.create_task", "asyncio.ensure_future", "asyncio.wait"}
)


def _imports(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted name it stands for, from the module's imports."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _dotted(node: ast.AST, imports: dict[str, str]) -> str | None:
    """The dotted name an expression stands for (``dt.datetime.now`` ->
    ``datetime.datetime.now`` after ``import datetime as dt``), else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    head = imports.get(node.id, node.id)
    return ".".join([head, *reversed(parts)])


def _annotation_name(node: ast.expr | None) -> str | None:
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value.strip()
        return text.rsplit(".", 1)[-1]
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_workflow(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The name of the workflow's context parameter if ``fn`` is a workflow function
    (or a helper taking the context), else None."""
    args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
    for a in args:
        if _annotation_name(a.annotation) in CONTEXT_TYPES:
            return a.arg
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if isinstance(target, ast.Attribute) and target.attr == "workflow":
            return args[0].arg if args else "ctx"
    return None


class _Body(ast.NodeVisitor):
    """Visits one workflow function's own body (not the functions nested in it)."""

    def __init__(self, path: str, lines: list[str], imports: dict[str, str], ctx: str) -> None:
        self.path = path
        self.lines = lines
        self.imports = imports
        self.ctx = ctx
        self.sets: set[str] = set()  # local names bound to a set
        self.found: list[Finding] = []

    def add(self, node: ast.AST, rule: str) -> None:
        line = getattr(node, "lineno", 1)
        if 0 < line <= len(self.lines) and OK_MARK in self.lines[line - 1]:
            return
        why, fix = RULES[rule]
        self.found.append(
            Finding(self.path, line, getattr(node, "col_offset", 0) + 1, rule, why, fix)
        )

    # Nested scopes run elsewhere (steps, callbacks): not the workflow's body.
    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        return

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        return

    def visit_Lambda(self, node: ast.Lambda) -> None:
        return

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        return

    def visit_Assign(self, node: ast.Assign) -> None:
        if self._is_set(node.value):
            self.sets.update(t.id for t in node.targets if isinstance(t, ast.Name))
        else:
            for t in node.targets:
                if isinstance(t, ast.Name):
                    self.sets.discard(t.id)
        self.generic_visit(node)

    def _is_set(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Set | ast.SetComp):
            return True
        if isinstance(node, ast.Name):
            return node.id in self.sets
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return node.func.id in ("set", "frozenset")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr | ast.BitAnd | ast.Sub):
            return self._is_set(node.left) or self._is_set(node.right)
        return False

    def visit_For(self, node: ast.For) -> None:
        if self._is_set(node.iter):
            self.add(node.iter, "set-order")
        self.generic_visit(node)

    visit_AsyncFor = visit_For  # type: ignore[assignment]

    def visit_comprehension(self, node: ast.comprehension) -> None:
        if self._is_set(node.iter):
            self.add(node.iter, "set-order")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if _dotted(node, self.imports) == "os.environ":
            self.add(node, "environment")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func, self.imports)
        rule = self._rule(name, node)
        if rule is not None:
            self.add(node, rule)
            if rule == "environment" and isinstance(node.func, ast.Attribute):
                # os.environ.get(...): one finding, not one more for os.environ itself.
                for arg in [*node.args, *node.keywords]:
                    self.visit(arg)
                return
        self.generic_visit(node)

    def _rule(self, name: str | None, node: ast.Call) -> str | None:
        if isinstance(node.func, ast.Attribute) and node.func.attr in _IO_METHODS:
            return "io"
        if name is None:
            return None
        if name in _WALL:
            return "wall-clock"
        if name.startswith("random.") or name.startswith("secrets."):
            return "random"
        if name in _UUID:
            return "uuid"
        if name in _ENV_CALLS:
            return "environment"
        if name in _IO_CALLS or name.startswith(_IO_PREFIXES):
            return "io"
        if name in _THREADS:
            return "thread"
        if name in _ASYNCIO and self._mentions_ctx(node):
            return "asyncio"
        if name in ("id", "hash") and name not in self.imports:
            return "identity"
        return None

    def _mentions_ctx(self, node: ast.Call) -> bool:
        return any(
            isinstance(n, ast.Name) and n.id == self.ctx
            for arg in [*node.args, *(k.value for k in node.keywords)]
            for n in ast.walk(arg)
        )


def lint_source(source: str, path: str = "<string>") -> list[Finding]:
    """The findings in one module's source text (a file that does not parse is one
    finding of rule ``syntax``)."""
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        return [
            Finding(
                path,
                exc.lineno or 1,
                exc.offset or 1,
                "syntax",
                f"does not parse ({exc.msg})",
                "fix the syntax error",
            )
        ]
    except (RecursionError, MemoryError):  # the parser's own depth limit, or Python's
        return [_too_deep(path)]
    try:
        return _check(tree, source, path)
    except RecursionError:  # parsed, but deeper than the checker's recursion follows
        return [_too_deep(path)]


def _too_deep(path: str) -> Finding:
    return Finding(
        path,
        1,
        1,
        "syntax",
        "does not parse here (an expression is nested too deeply to check)",
        "split the expression into smaller ones",
    )


def _check(tree: ast.Module, source: str, path: str) -> list[Finding]:
    imports = _imports(tree)
    lines = source.splitlines()
    found: list[Finding] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            ctx = _is_workflow(node)
            if ctx is None:
                continue
            body = _Body(path, lines, imports, ctx)
            for stmt in node.body:
                body.visit(stmt)
            found.extend(body.found)
    return sorted(set(found), key=lambda f: (f.path, f.line, f.col, f.rule))


def _mode(path: Path) -> int:
    try:
        return path.stat().st_mode
    except OSError:  # a dangling symlink
        return 0


def python_files(paths: Iterable[str]) -> Iterator[Path]:
    """The ``.py`` files under ``paths`` (files as given, folders walked in name order,
    skipping virtual environments, caches and hidden folders)."""
    for p in paths:
        path = Path(p)
        if path.is_file() or not path.is_dir():
            yield path
            continue
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
            for f in sorted(files):
                if f.endswith(".py") and stat.S_ISREG(_mode(Path(root) / f)):
                    yield Path(root) / f


def _read_source(path: Path) -> str:
    """A file's text in the encoding its coding line declares (PEP 263; UTF-8 without
    one), bytes that do not decode replaced (the parser then names them)."""
    data = path.read_bytes()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding, errors="replace")


def lint_paths(paths: Iterable[str]) -> list[Finding]:
    """The findings in every ``.py`` file under ``paths``."""
    found: list[Finding] = []
    for f in python_files(paths):
        # Only regular files: a dangling symlink (an editor's ``.#x.py`` lock) is no
        # source, and reading a named pipe would wait forever.
        if not f.is_file():
            continue
        try:
            source = _read_source(f)
        except SyntaxError as exc:  # a coding cookie naming no codec
            found.append(
                Finding(str(f), 1, 1, "syntax", f"does not parse ({exc})", "fix the encoding line")
            )
            continue
        except OSError as exc:
            found.append(
                Finding(
                    str(f),
                    1,
                    1,
                    "syntax",
                    f"cannot be read ({exc.strerror or exc})",
                    "make it readable, or leave it out of the paths",
                )
            )
            continue
        found.extend(lint_source(source, str(f)))
    return found
