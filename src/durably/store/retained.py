"""What retention stores and returns, pure data: tombstones, redactions, what a prune
freed, and the markers redaction writes (the role is :mod:`.retention`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ..journal.records import CANCELLED, COMPLETED, FAILED_RUN, REDACTED_DIGEST

PRUNABLE: Final = (COMPLETED, FAILED_RUN, CANCELLED)
"""The statuses prune and delete take: a run that ended and can never run again by
itself. Every other status (queued, running, parked, blocked, in doubt, quarantined) is
never touched."""

MARKER: Final = "[redacted]"
"""What redaction writes in place of a text value (a message, a reason, a name)."""
MARKER_JSON: Final = json.dumps(MARKER)
"""What redaction writes in place of a JSON value (an input, an output, event data)."""
MARKER_EVENT: Final = '{"redacted":true}'
"""What redaction writes in place of an event's data (an event's data is an object)."""
MARKER_DIGEST: Final = REDACTED_DIGEST
"""What redaction writes in place of a digest (a hash of a short value is guessable)."""


@dataclass(frozen=True)
class Tombstone:
    """What is left of a pruned or deleted run."""

    run_id: str
    workflow: str
    input_digest: str
    status: str
    incarnation: str | None
    finished_at: float | None
    removed_at: float
    how: str
    """``pruned`` or ``deleted``."""

    def as_json(self) -> dict[str, Any]:
        """The tombstone as plain data (``durably runs list --pruned --json``)."""
        return {
            "run_id": self.run_id,
            "workflow": self.workflow,
            "status": self.status,
            "finished_at": self.finished_at,
            "removed_at": self.removed_at,
            "how": self.how,
        }


@dataclass(frozen=True)
class Redaction:
    """When a run's values were replaced by a marker, and by whom."""

    run_id: str
    redacted_at: float
    redacted_by: str


@dataclass
class Freed:
    """What a prune (or a delete) removed, or, for a dry run, would remove."""

    runs: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    blobs: int = 0
    blob_bytes: int = 0
    run_ids: list[str] = field(default_factory=list)


class Tombstoned(Exception):
    """Raised inside a store transaction that would create a run over a tombstone (it
    rolls back); the engine turns it into ``RunPruned`` or ``RunConflict``."""

    def __init__(self, tomb: Tombstone) -> None:
        super().__init__(tomb.run_id)
        self.tomb = tomb


class Redacted(Exception):
    """Raised inside a store transaction that would copy (fork) or re-open (retry) a run
    whose redaction committed since the caller read it (it rolls back); the engine
    turns it into ``RunRedacted``."""

    def __init__(self, red: Redaction) -> None:
        super().__init__(red.run_id)
        self.red = red


def tombstone_from_row(row: Sequence[Any]) -> Tombstone:
    """A ``get_tombstone`` row as a :class:`Tombstone`."""
    return Tombstone(
        str(row[0]),
        str(row[1]),
        str(row[2]),
        str(row[3]),
        None if row[4] is None else str(row[4]),
        None if row[5] is None else float(row[5]),
        float(row[6]),
        str(row[7]),
    )


_OUTPUT_REF: Final = '{"$blob":"'


def cited(inputs: str | None, output: str | None) -> tuple[set[str], set[str]]:
    """The blob digests a record cites directly: (values, conversation heads)."""
    values: set[str] = set()
    heads: set[str] = set()
    if output is not None and output.startswith(_OUTPUT_REF):
        values.add(str(json.loads(output)["$blob"]))
    if inputs:
        manifest = json.loads(inputs)
        refs = list(manifest.get("args", [])) + list(manifest.get("kwargs", {}).values())
        for ref in refs:
            if not isinstance(ref, dict):
                continue
            if isinstance(ref.get("b"), str):
                values.add(ref["b"])
            if isinstance(ref.get("l"), str):
                heads.add(ref["l"])
    return values, heads


def node_citations(text: str | None) -> list[str]:
    """What a conversation node's text cites (its item and its parent); nothing for any
    other blob."""
    if not text or not text.startswith("{"):
        return []
    try:
        node = json.loads(text)
    except ValueError:
        return []
    if not isinstance(node, dict) or set(node) != {"i", "p"}:
        return []
    return [d for d in (node["i"], node["p"]) if isinstance(d, str)]
