"""docs/events.md shows the same table of event kinds as durably.events.EVENT_KINDS."""

from __future__ import annotations

import re
from pathlib import Path

from durably import events

DOC = Path(__file__).parents[2] / "docs" / "events.md"


def _doc_rows() -> dict[str, tuple[str, dict[str, str], str]]:
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\| `([a-z_.]+)` \| (.+) \| (.+) \| (committed|stream-only) \|$", line)
        if m:
            fields = dict(re.findall(r"`(\w+)`: ([^;]+)(?:; |$)", m.group(3)))
            rows[m.group(1)] = (m.group(2), fields, m.group(4))
    return rows


def test_the_docs_table_matches_the_code() -> None:
    code = {
        k.kind: (k.meaning, dict(k.fields), "stream-only" if k.stream_only else "committed")
        for k in events.EVENT_KINDS
    }
    assert _doc_rows() == code


def test_every_kind_constant_is_in_the_table() -> None:
    constants = {
        v for n, v in vars(events).items() if n.isupper() and isinstance(v, str) and "." in v
    }
    kinds = {k.kind for k in events.EVENT_KINDS}
    assert constants | {events.USER} == kinds
    assert events.STREAM_ONLY_KINDS == {"step.started", "user", "model.delta", "model.restart"}
