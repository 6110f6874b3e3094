"""Write the golden journals: ``python tests/golden/make_golden.py [NAME ...]``.

Each scenario runs one workflow of ``workflows.py`` for real (an Engine on a fresh SQLite
file, a fake clock so times are fixed, parks woken by real signals, approvals and
cancels) and writes what the journal then holds for the run to ``journals/NAME.json``.
Run it only to change the recorded format on purpose: the files are the pin that old
journals keep replaying (``test_golden.py``). Ids drawn at random (the incarnation,
uuids) differ from one generation to the next; nothing else does.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository's root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import durably
from tests.golden import journal
from tests.golden.workflows import every_tagged_value, register

HERE = Path(__file__).resolve().parent
JOURNALS = HERE / "journals"
CLOCK_START = 1_800_000_000.0  # 2027-01-15T08:00:00Z: every recorded time derives from it


def _sql(url: str, statement: str, *params: object) -> None:
    conn = sqlite3.connect(journal._sqlite_path(url))
    with conn:
        conn.execute(statement, params)
    conn.close()


def _parked(run: Callable[[], object]) -> None:
    """Drive a run that must park here (park_wait_s=0: the call returns at the park)."""
    try:
        run()
    except durably.RunParked:
        return
    raise AssertionError("the run was expected to park")


def scenario(name: str, url: str) -> None:
    """Run the golden ``name`` on the empty journal at ``url``."""
    clock = durably.FakeClock(CLOCK_START)
    # park_wait_s=0: a park that needs a person (a signal, an approval, a cancel) returns
    # RunParked at once; timers are driven by an engine that waits (the fake clock moves).
    engine = durably.Engine(url, clock=clock, park_wait_s=None if name == "timers" else 0)
    wf = register(engine)[name]
    try:
        if name == "steps":
            engine.run(wf, "db failover", run_id=name)
        elif name == "gather":
            engine.run(wf, 10, run_id=name)
        elif name in ("timers", "budgets", "patched", "blobs"):
            engine.run(wf, run_id=name)
        elif name == "sagas":
            engine.run(wf, "Lisbon", run_id=name)
        elif name == "signals":
            _parked(lambda: engine.run(wf, run_id=name))  # parks on "approve"
            clock.advance(5)
            engine.signal(name, "approve", {"by": "ana"})
            _parked(lambda: engine.resume(name))  # takes it, parks on "late"
            clock.advance(61)  # past its 60 s timeout
            engine.resume(name)
        elif name == "approvals":
            _parked(lambda: engine.run(wf, "order-7", 42, run_id=name))
            (pending,) = engine.pending_approvals(name)
            clock.advance(30)
            engine.approve(name, pending.request_id, digest=pending.digest, by="ana", note="ok")
            engine.resume(name)
        elif name == "halts":
            _parked(lambda: engine.run(wf, run_id=name))  # parks on its timer
            clock.advance(10)
            engine.cancel(name, reason="duplicate alert")
            try:
                engine.resume(name)
            except durably.Cancelled:
                pass
        elif name == "budget_stop":
            try:
                engine.run(wf, run_id=name)
            except durably.WorkflowFailed:
                pass  # stopped by its budget: a recorded halt, the run failed
        elif name == "values":
            engine.run(wf, every_tagged_value(), run_id=name)
        elif name in ("legacy_keys", "legacy_gather_keys"):
            # A run whose row has no incarnation, as rows created before migration 0002
            # were: its keys are "<run_id>:<position>".
            engine.start(wf, run_id=name)
            _sql(url, "UPDATE runs SET incarnation = NULL WHERE run_id = ?", name)
            engine.resume(name)
            if name == "legacy_gather_keys":
                # A journal from before gathers recorded a marker of their own: the
                # branches' records are there, the gather's position holds none.
                _sql(url, "DELETE FROM steps WHERE run_id = ? AND kind = 'gather'", name)
        else:
            raise SystemExit(f"no golden scenario {name!r}")
    finally:
        engine.close()


def write(name: str) -> Path:
    """Run the scenario on a fresh journal and write its golden file."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'golden.db'}"
        scenario(name, url)
        data = {"golden": name, **journal.export(url, name)}
    JOURNALS.mkdir(exist_ok=True)
    path = JOURNALS / f"{name}.json"
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


NAMES = (
    "steps",
    "gather",
    "timers",
    "signals",
    "approvals",
    "sagas",
    "budgets",
    "patched",
    "blobs",
    "halts",
    "legacy_keys",
    "legacy_gather_keys",
    "values",
    "budget_stop",
)


def main(argv: list[str]) -> None:
    for name in argv or NAMES:
        path = write(name)
        print(f"wrote {path.relative_to(HERE.parents[1])} ({path.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main(sys.argv[1:])
