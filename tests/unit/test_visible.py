"""Invisible characters in journal text are shown, never printed raw.

Two accounts that differ only in a zero-width space look identical to the person
approving, and Unicode tag characters can spell hidden instructions: every view of
journal text goes through :func:`durably.visible.visible` (``<U+200B>``), and
``approvals list`` / ``approve`` flag a request that holds any.
"""

from __future__ import annotations

import json
import sys
import unicodedata
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

import durably
from durably.cli import main as cli
from durably.cli.common import inert
from durably.visible import flag, invisible_chars, visible

# One of each invisible class, with the code point it must be shown as.
CLASSES = {
    "zero-width space": ("\u200b", "U+200B"),
    "word joiner": ("\u2060", "U+2060"),
    "byte-order mark": ("\ufeff", "U+FEFF"),
    "soft hyphen": ("\u00ad", "U+00AD"),
    "tag": ("\U000e0041", "U+E0041"),
    "cancel tag": ("\U000e007f", "U+E007F"),
    "language tag": ("\U000e0001", "U+E0001"),
    "variation selector": ("\ufe0f", "U+FE0F"),
    "variation selector supplement": ("\U000e0100", "U+E0100"),
    "bidi override": ("\u202e", "U+202E"),
    "bidi isolate": ("\u2066", "U+2066"),
    "line separator": ("\u2028", "U+2028"),
    "paragraph separator": ("\u2029", "U+2029"),
    "Hangul filler": ("\u3164", "U+3164"),
}
ACTION = "refund to ana\u200bsmith"  # not "ana smith" nor "anasmith"
ARGS = {f"{label}": f"a{ch}b" for label, (ch, _) in CLASSES.items()}
# Tag characters spelling "IGNORE" after a harmless note: invisible in a terminal.
ARGS["note"] = "ok" + "".join(chr(0xE0000 + ord(c)) for c in "IGNORE")
WIDE = {"COLUMNS": "400"}


@pytest.fixture
def parked(journal_url: str) -> Iterator[tuple[durably.Engine, str]]:
    with durably.Engine(journal_url, park_wait_s=0) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> Any:
            return ctx.request_approval(ACTION, ARGS, timeout_s=3600).outcome

        with pytest.raises(durably.RunParked):
            engine.run(wf, run_id="r1")
        yield engine, journal_url


def cmd(url: str, *args: str) -> Result:
    return CliRunner(env=WIDE).invoke(cli, [*args, "--db", url])


def _no_raw_invisible(text: str) -> None:
    for label, (ch, _) in CLASSES.items():
        assert ch not in text, f"{label} printed raw"
    assert not any(0xE0000 <= ord(c) <= 0xE0FFF for c in text), "tag characters printed raw"


def test_approvals_list_shows_each_invisible_class_visibly_and_flags_the_request(
    parked: tuple[durably.Engine, str],
) -> None:
    _, url = parked
    res = cmd(url, "approvals", "list")
    assert res.exit_code == 0, res.output
    _no_raw_invisible(res.output)
    assert "refund to ana<U+200B>smith" in res.output
    assert "contains invisible characters: U+200B" in res.output
    for _, code in CLASSES.values():
        # args are cut in the table; the flag names every code point the request holds
        assert code in res.output.split("contains invisible characters:")[1]
    listed = cmd(url, "approvals", "list", "--json")
    [row] = json.loads(listed.output)
    assert row["action"] == ACTION and row["args"] == ARGS  # --json keeps the data exact
    assert row["invisible"][0] == "U+200B"
    assert {code for _, code in CLASSES.values()} <= set(row["invisible"])
    assert "U+E0049" in row["invisible"]  # the hidden "IGNORE"


def test_approve_echoes_the_action_and_args_visibly_and_flags_them(
    parked: tuple[durably.Engine, str],
) -> None:
    engine, url = parked
    digest = engine.pending_approvals()[0].digest
    res = cmd(url, "approve", "r1", "0", "--digest", digest[:8], "--by", "ana\u2060")
    assert res.exit_code == 0, res.output
    _no_raw_invisible(res.output)
    assert "action:  refund to ana<U+200B>smith" in res.output
    for label, (_, code) in CLASSES.items():
        assert f'"{label}": "a<{code}>b"' in res.output
    assert "ok<U+E0049><U+E0047><U+E004E><U+E004F><U+E0052><U+E0045>" in res.output
    assert "WARNING: this request contains invisible characters: U+200B" in res.output
    assert "by ana<U+2060>" in res.output
    # --json: the flag is a field of the decided request too
    with durably.Engine(url, park_wait_s=0) as other:

        @other.workflow(name="wf")
        def wf(ctx: durably.Context) -> Any:
            return ctx.request_approval("send\ufeff", {"to": "x"}, timeout_s=60).outcome

        with pytest.raises(durably.RunParked):
            other.run(wf, run_id="r2")
        d2 = other.pending_approvals("r2")[0].digest
    out = cmd(url, "reject", "r2", "0", "--digest", d2[:8], "--reason", "no", "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["invisible"] == ["U+FEFF"]


def test_visible_shows_every_format_character_of_the_running_unicode_database() -> None:
    for cp in range(sys.maxunicode + 1):
        ch = chr(cp)
        if unicodedata.category(ch) in ("Cf", "Zl", "Zp", "Cc"):
            assert visible(ch) != ch, f"U+{cp:04X} ({unicodedata.category(ch)}) printed raw"
    for cp in range(0xE0000, 0xE0FFF + 1):
        assert visible(chr(cp)) == f"<U+{cp:04X}>"


def test_visible_keeps_text_and_escapes_controls_as_the_cli_always_has() -> None:
    assert visible("café Ελλάδα 日本 e\u0301 👍") == "café Ελλάδα 日本 e\u0301 👍"
    assert visible("a\x1b[2J\r\n\t\x9b\x7f") == "a\\x1b[2J\\r\\n\\t\\x9b\\x7f"
    assert visible("a\nb\u200b", keep="\n") == "a\nb<U+200B>"
    assert inert("x\u202ey\x1b") == visible("x\u202ey\x1b") == "x<U+202E>y\\x1b"
    assert invisible_chars("a\u200bb\u2060c\u200b\x1b") == ["U+200B", "U+2060", "U+001B"]
    assert invisible_chars("a\nb", keep="\n") == [] and flag("plain") is None
    assert flag("\u00ad") == "contains invisible characters: U+00AD"


def test_runs_views_and_fork_messages_show_invisible_characters_visibly(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    hidden = "\u200b\u2060\ufeff\u00ad\U000e0041\u202e"
    with durably.Engine(url) as engine:

        @engine.workflow(name="wf" + hidden)
        def wf(ctx: durably.Context) -> Any:
            ctx.step("pay" + hidden, lambda: "paid" + hidden)
            ctx.emit("note" + hidden, {"text": "x" + hidden})
            raise RuntimeError("failed" + hidden)

        with pytest.raises(durably.WorkflowFailed):
            engine.run(wf, run_id="r1")
    shown = "<U+200B><U+2060><U+FEFF><U+00AD><U+E0041><U+202E>"
    outputs = {
        "list": cmd(url, "runs", "list"),
        "show": cmd(url, "runs", "show", "r1"),
        "tail": cmd(url, "runs", "tail", "r1"),
        "why": cmd(url, "runs", "why", "r1"),
        "fork": cmd(url, "fork", "r1", "--at", "1", "--run-id", "r2"),
    }
    for view, res in outputs.items():
        assert res.exit_code == 0, (view, res.output)
        _no_raw_invisible(res.output)
    assert "wf" + shown in outputs["list"].output
    assert "pay" + shown in outputs["show"].output and "failed" + shown in outputs["show"].output
    assert "pay" + shown in outputs["tail"].output
    assert "failed" + shown in outputs["why"].output
