"""No message ends one sentence twice: an exception's text (which ends in a period more
often than not) followed by ``. The run is blocked`` read "not as step arguments.. The
run is blocked". Every message template of src/durably that puts a period right after
an embedded exception or message strips that text's own period first."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

import durably
from durably.journal.codec import to_json

SRC = Path(durably.__file__).parent
# Names that hold an exception or a sentence of text in the message templates.
TEXT_NAMES = {"exc", "err", "error", "e", "reason", "why", "detail", "message", "msg", "said"}


def _holds_text(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in TEXT_NAMES
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str":
        return len(node.args) == 1 and _holds_text(node.args[0])
    return False


def _double_periods(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.JoinedStr):
            continue
        parts = node.values
        for value, after in itertools.pairwise(parts):
            if (
                isinstance(value, ast.FormattedValue)
                and value.conversion == -1  # {x!r} ends in a quote, not a period
                and _holds_text(value.value)
                and isinstance(after, ast.Constant)
                and str(after.value).startswith(".")
            ):
                where = f"{path.relative_to(SRC)}:{node.lineno}"
                found.append(f"{where}: {{{ast.unparse(value.value)}}}.")
    return found


def test_no_template_puts_a_period_after_text_that_may_end_in_one() -> None:
    found = [hit for path in sorted(SRC.rglob("*.py")) for hit in _double_periods(path)]
    assert not found, "write {durably.errors.clause(exc)}.:\n" + "\n".join(found)


def test_a_step_returning_unstorable_data_blocks_with_one_period(tmp_path: Path) -> None:
    with pytest.raises(durably.SerializationError) as plain:
        to_json(object(), "x")
    assert str(plain.value).endswith("not as step arguments.")  # the text that was doubled
    with durably.Engine(f"sqlite:///{tmp_path / 'j.db'}") as engine:

        @engine.workflow(name="w")
        def w(ctx: durably.Context) -> object:
            return ctx.step("s", object)

        with pytest.raises(durably.SerializationError) as err:
            engine.run(w, run_id="r")
        reason = engine.get_run("r").park_reason or ""
    for text in (str(err.value), reason):
        assert "arguments. The run is blocked" in text and ".." not in text, text
