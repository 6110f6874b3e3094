"""durably.limits: one home for every documented bound.

Each constant has a docstring (what it bounds and why), the module imports nothing from
durably (so every module can import it without a cycle), and every older home of a bound
still gives the same value under its old name.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import durably.limits

SOURCE = Path(durably.limits.__file__).read_text(encoding="utf-8")

# Old home -> {old name: name in durably.limits}. The old names keep working.
OLD_HOMES = {
    "durably.history": {
        n: n
        for n in (
            "NAME_BYTES_MAX",
            "KEY_CHARS_MAX",
            "INCARNATION_CHARS",
            "RUN_ID_CHARS_MAX",
            "GATHER_DEPTH_MAX",
            "SCOPE_POSITIONS_MAX",
            "POSITION_CHARS_MAX",
            "STEP_OUTPUT_BYTES_MAX",
            "OUTPUT_INLINE_BYTES_MAX",
            "SIGNAL_DATA_BYTES_MAX",
            "RUN_INPUT_BYTES_MAX",
            "RUN_RESULT_BYTES_MAX",
            "ERROR_MESSAGE_CHARS_MAX",
            "PARK_REASON_CHARS_MAX",
            "CANCEL_REASON_CHARS_MAX",
        )
    },
    "durably.core": {
        "SIGNAL_TIMEOUT_S_MAX": "SIGNAL_TIMEOUT_S_MAX",
        "TIMER_S_MAX": "TIMER_S_MAX",
        "EVENTS_BUFFERED_MAX": "EVENTS_BUFFERED_MAX",
    },
    "durably.context": {
        "SYNC_STEP_THREADS_MAX": "SYNC_STEP_THREADS_MAX",
        "SETTLE_TURNS_MAX": "SETTLE_TURNS_MAX",
    },
    "durably.engine": {
        "LEASE_WAIT_MAX_S": "LEASE_WAIT_MAX_S",
        "EVENTS_PAGE_MAX": "EVENTS_PAGE_MAX",
    },
    "durably.inputs": {
        "INLINE_CHARS_MAX": "INLINE_CHARS_MAX",
        "HASH_SHOWN_CHARS_MIN": "HASH_SHOWN_CHARS_MIN",
    },
    "durably.runlist": {
        "LIST_RUNS_LIMIT_MAX": "LIST_RUNS_LIMIT_MAX",
        "LIST_RUNS_SEARCH_CHARS_MAX": "LIST_RUNS_SEARCH_CHARS_MAX",
    },
    "durably.streamops": {"STREAM_CHUNKS_MAX": "STREAM_CHUNKS_MAX"},
    "durably.events": {"EVENT_DATA_BYTES_MAX": "EVENT_DATA_BYTES_MAX"},
    "durably.approvals": {
        "ARGS_BYTES_MAX": "APPROVAL_ARGS_BYTES_MAX",
        "NOTE_CHARS_MAX": "APPROVAL_NOTE_CHARS_MAX",
        "APPROVAL_TIMEOUT_S_MAX": "APPROVAL_TIMEOUT_S_MAX",
        "DIGEST_PREFIX_MIN": "APPROVAL_DIGEST_PREFIX_MIN",
    },
    "durably.steps": {"RETRIES_MAX": "RETRIES_MAX", "BACKOFF_MAX_S": "BACKOFF_MAX_S"},
    "durably.budget": {"TOKENS_MAX": "TOKENS_MAX", "COST_USD_MAX": "COST_USD_MAX"},
    "durably.ownership": {
        "CLOCK_SKEW_WARN_S": "CLOCK_SKEW_WARN_S",
        "RECOVER_SCAN_MAX": "RECOVER_SCAN_MAX",
    },
    "durably.worker": {"CONCURRENCY_MAX": "WORKER_CONCURRENCY_MAX"},
    "durably.store.base": {"APPROVALS_LIST_MAX": "APPROVALS_LIST_MAX"},
}


def _constants() -> list[tuple[str, ast.stmt | None]]:
    """Each top-level constant of limits.py with the statement that follows it."""
    body = ast.parse(SOURCE).body
    out = []
    for i, node in enumerate(body):
        target: ast.expr | None = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id.isupper():
            out.append((target.id, body[i + 1] if i + 1 < len(body) else None))
    return out


def test_every_limit_has_a_docstring() -> None:
    constants = _constants()
    assert len(constants) >= 30
    for name, after in constants:
        assert (
            isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
            and len(after.value.value.split()) >= 6
        ), f"durably.limits.{name} has no docstring saying what it bounds and why"


def test_limits_imports_nothing_from_durably() -> None:
    for node in ast.walk(ast.parse(SOURCE)):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("durably"), (
                "durably.limits must import nothing from durably (it sits below every module)"
            )
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("durably") for a in node.names)


def test_every_constant_is_moved_here_once() -> None:
    """No old home defines its own copy of a bound (a literal there would drift from
    durably.limits): it imports the constant, or names it (``ARGS_BYTES_MAX =
    APPROVAL_ARGS_BYTES_MAX``)."""
    for module, names in OLD_HOMES.items():
        tree = ast.parse(Path(importlib.import_module(module).__file__ or "").read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign | ast.AnnAssign):
                value = node.value
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id in names:
                        assert isinstance(value, ast.Name), (
                            f"{module}.{target.id} is defined there again; import it from"
                            " durably.limits instead"
                        )


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [(m, old, new) for m, names in OLD_HOMES.items() for old, new in names.items()],
)
def test_old_home_gives_the_same_value(module: str, old: str, new: str) -> None:
    assert getattr(importlib.import_module(module), old) == getattr(durably.limits, new)


def test_the_key_budget_holds() -> None:
    """The longest run id, incarnation and position, joined by two colons, fit the
    receiving side's key limit."""
    lim = durably.limits
    longest = lim.RUN_ID_CHARS_MAX + lim.INCARNATION_CHARS + lim.POSITION_CHARS_MAX + 2
    assert longest <= lim.KEY_CHARS_MAX
