"""Every ``durably.x.y`` name that README.md and docs/*.md document resolves.

The markdown's code spans and code blocks are scanned for dotted ``durably.<...>``
references and ``from durably.x import a, b`` lines; each is imported (the longest module
prefix) and the rest looked up with getattr. A doc naming something that does not exist,
or a later move of a file that drops a documented path, fails here: a move leaves a thin
re-export behind. ``KEPT_PATHS`` lists module paths users were pointed at that must keep
working even once the docs name their new home (``durably.limits``).

Names in the docs that are not Python (span attributes, logger names, record names) are
listed in ``NOT_PYTHON`` with the reason; each must still occur in the docs, so the list
cannot rot into a blanket exemption. ``engine.X``, ``ctx.X`` and ``handle.X`` references
are checked against the classes too.
"""

from __future__ import annotations

import importlib
import re
import types
from pathlib import Path

import pytest

import durably
import durably.limits

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Module paths and names documented now or before: each must keep resolving after any
# later move (a thin re-export at the old path).
KEPT_PATHS = [
    "durably.approvals.approval_digest",
    "durably.budget.Spend",
    "durably.chaos",
    "durably.cli.main",  # the console script (pyproject's durably = "durably.cli:main")
    "durably.codec.CODEC_VERSION",
    "durably.context.SYNC_STEP_THREADS_MAX",
    "durably.core.SIGNAL_TIMEOUT_S_MAX",
    "durably.core.fault_step",
    # engine.py became the engine/ package (its rooms behind the facade); these names
    # were imported from durably.engine and still are.
    "durably.engine.DEFAULT_URL",
    "durably.engine.Engine",
    "durably.engine.FaultHook",
    "durably.engine.Handle",
    "durably.engine.Workflow",
    "durably.engine.version_key",
    "durably.errors.BudgetExceeded",
    "durably.events.EVENT_KINDS",
    "durably.events.Event",
    "durably.events.EventPage",
    "durably.events.Follow",
    "durably.history.CANCEL_REASON_CHARS_MAX",
    "durably.history.ERROR_MESSAGE_CHARS_MAX",
    "durably.history.GATHER_DEPTH_MAX",
    "durably.history.NAME_BYTES_MAX",
    "durably.history.OUTPUT_INLINE_BYTES_MAX",
    "durably.history.RUN_ID_CHARS_MAX",
    "durably.history.RUN_INPUT_BYTES_MAX",
    "durably.history.RUN_RESULT_BYTES_MAX",
    "durably.history.RunRecord",
    "durably.history.SCOPE_POSITIONS_MAX",
    "durably.history.SIGNAL_DATA_BYTES_MAX",
    "durably.history.STEP_OUTPUT_BYTES_MAX",
    "durably.history.StepRecord",
    "durably.idempotency.IdempotencyMiddleware",
    "durably.idempotency.IdempotencyStore",
    "durably.idempotency.migrate",
    "durably.inputs.HASH_SHOWN_CHARS_MIN",
    "durably.inputs.INLINE_CHARS_MAX",
    "durably.ownership.CLOCK_SKEW_WARN_S",
    "durably.otel",
    "durably.otel.export_run",
    "durably.otel.follow_run",
    "durably.redact",
    "durably.redact.redact",
    "durably.replaycheck",
    # replay --check moved to durably.inspect.replaycheck; the old path re-exports it.
    "durably.replaycheck.check_run",
    "durably.replaycheck.check_runs",
    "durably.replaycheck.runs_to_check",
    "durably.runlist.LIST_RUNS_LIMIT_MAX",
    "durably.streamops.STREAM_CHUNKS_MAX",
    "durably.shell",
    "durably.shell.command",
    "durably.shell.option",
    "durably.visible",  # the dashboard (durably ui) builds on these
    "durably.visible.flag",
    "durably.visible.invisible_chars",
    "durably.visible.visible",
    "durably.why",
    "durably.why.Explanation",
    "durably.why.Fact",
    "durably.why.explain",
    "durably.why.explain_facts",
    "durably.worker.Worker",
]

# Dotted names in the docs that are not Python paths, and why.
NOT_PYTHON = {
    # OpenTelemetry span attributes (docs/otel.md's table).
    "durably.run_id": "span attribute",
    "durably.workflow": "span attribute",
    "durably.run.status": "span attribute",
    "durably.run.finished": "span attribute",
    "durably.position": "span attribute",
    "durably.step.name": "span attribute",
    "durably.step.attempt": "span attribute",
    "durably.step.retried": "span attribute",
    "durably.retry.delay_s": "span attribute",
    "durably.idempotency_key": "span attribute",
    "durably.usage.tokens": "span attribute",
    "durably.usage.cost_usd": "span attribute",
    "durably.usage.input_tokens": "span attribute",
    "durably.usage.output_tokens": "span attribute",
    # A halt record's name in the journal (the recorded Cancelled).
    "durably.cancel": "record name",
    # The qualname recorded for ctx.now() ("ctx.now() & co. are durably.now & co.").
    "durably.now": "record name",
}

# ``durably.x.y`` not preceded by a word character, a dot, a slash, a colon or a dash
# (``myapp.durably``, ``sqlite:///durably.db``, ``pip install durably-x`` are not ours).
_DOTTED = re.compile(r"(?<![\w./:\-])durably(?:\.[A-Za-z_]\w*)+")
_FROM_IMPORT = re.compile(
    r"^[ \t]*from[ \t]+(durably(?:\.\w+)*)[ \t]+import[ \t]+(?:\(([^)]*)\)|([\w \t,]+))", re.M
)
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
_SPAN = re.compile(r"`([^`\n]+)`")
_METHOD = re.compile(r"(?<![\w.])(engine|ctx|handle)\.([a-z_]\w*)")
# A file name ending a dotted name (``durably.db``), not an attribute.
_FILE_SUFFIXES = (".db", ".md", ".py", ".png", ".json", ".toml", ".sql")


def _code(text: str) -> list[str]:
    """The code of a markdown text: its fenced blocks and its inline code spans."""
    blocks = _FENCE.findall(text)
    prose = _FENCE.sub("", text)
    return blocks + _SPAN.findall(prose)


def documented_names() -> dict[str, set[str]]:
    """Every dotted durably name in the docs' code -> the files naming it."""
    found: dict[str, set[str]] = {}
    for path in DOCS:
        for code in _code(path.read_text(encoding="utf-8")):
            names = [m.group(0) for m in _DOTTED.finditer(code)]
            for module, wrapped, plain in _FROM_IMPORT.findall(code):
                imported = [n.split(" as ")[0].strip() for n in (wrapped or plain).split(",")]
                names += [f"{module}.{n}" for n in imported if n]
            for name in names:
                if not name.endswith(_FILE_SUFFIXES):
                    found.setdefault(name, set()).add(path.name)
    return found


def resolve(dotted: str) -> object:
    """The object ``dotted`` names: modules imported as needed, attributes looked up."""
    parts = dotted.split(".")
    assert parts[0] == "durably"
    obj: object = durably
    for i, part in enumerate(parts[1:], start=1):
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        if isinstance(obj, types.ModuleType):
            try:
                obj = importlib.import_module(".".join(parts[: i + 1]))
                continue
            except ModuleNotFoundError as exc:
                if exc.name != ".".join(parts[: i + 1]):
                    raise
        raise AttributeError(f"{dotted}: {'.'.join(parts[:i])} has no {part!r}")
    return obj


def test_the_scan_finds_the_documented_names() -> None:
    """The scanner itself works: it finds names known to be documented, in code spans, in
    code blocks and in ``from ... import`` lines, and skips file names and CLI words."""
    found = documented_names()
    assert len(found) >= 60, sorted(found)
    for name in (
        "durably.Engine",  # a code block
        "durably.core.fault_step",  # a code span (chaos.md)
        "durably.otel.export_run",  # a code block (otel.md)
        "durably.idempotency.fingerprint_of",  # from durably.idempotency import ...
        "durably.limits.SIGNAL_TIMEOUT_S_MAX",  # api.md
    ):
        assert name in found, name
    assert "durably.db" not in found  # sqlite:///durably.db
    assert not any(" " in n for n in found)  # `durably runs list` is a command


@pytest.mark.parametrize("name", sorted(set(documented_names()) - set(NOT_PYTHON)))
def test_documented_name_resolves(name: str) -> None:
    resolve(name)


@pytest.mark.parametrize("name", KEPT_PATHS)
def test_kept_path_resolves(name: str) -> None:
    resolve(name)


def test_not_python_names_are_still_in_the_docs() -> None:
    found = documented_names()
    stale = sorted(n for n in NOT_PYTHON if n not in found)
    assert not stale, f"NOT_PYTHON lists names the docs no longer use: {stale}"


def test_every_limit_is_reachable_from_its_documented_module() -> None:
    """Each public constant of durably.limits is an int or float, and the docs' old
    spellings give the same value as the new home."""
    limits = {n: v for n, v in vars(durably.limits).items() if n.isupper()}
    assert len(limits) >= 30
    for name, value in limits.items():
        assert isinstance(value, int | float) and not isinstance(value, bool), name
    for old in KEPT_PATHS:
        head, _, attr = old.rpartition(".")
        if attr in limits and head != "durably.limits":
            assert resolve(old) == limits[attr], old


def _method_refs() -> set[tuple[str, str]]:
    refs: set[tuple[str, str]] = set()
    for path in DOCS:
        for code in _code(path.read_text(encoding="utf-8")):
            refs.update(_METHOD.findall(code))
    return refs


def test_documented_engine_context_and_handle_members_exist(tmp_path: Path) -> None:
    """``engine.X``, ``ctx.X`` and ``handle.X`` in the docs exist on real objects: an
    engine on a SQLite file, a handle it returned, and the contexts a sync and an async
    workflow received."""
    engine = durably.Engine(f"sqlite:///{tmp_path / 'doc.db'}")
    seen: list[object] = []

    @engine.workflow(name="sync_probe")
    def sync_probe(ctx: durably.Context) -> None:
        seen.append(ctx)

    @engine.workflow(name="async_probe")
    async def async_probe(ctx: durably.AsyncContext) -> None:
        seen.append(ctx)

    engine.run(sync_probe, run_id="sync")
    engine.run(async_probe, run_id="async")
    handle = engine.start(sync_probe, run_id="queued")
    owners: dict[str, list[object]] = {"engine": [engine], "ctx": seen, "handle": [handle]}
    refs = _method_refs()
    assert ("engine", "run") in refs and ("ctx", "step") in refs and ("handle", "run_id") in refs
    missing = sorted(
        f"{owner}.{member}"
        for owner, member in refs
        if not any(hasattr(obj, member) for obj in owners[owner])
    )
    assert not missing, f"documented but not defined: {missing}"
