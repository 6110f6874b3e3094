"""The Store contract for incarnations, re-opened runs and forks, on every backend."""

from __future__ import annotations

import re

import pytest

from durably.clock import FakeClock
from durably.errors import RunConflict, StoreError
from durably.history import FAILED, INTENT, NOW, OK, CorruptRecord, StepRecord
from durably.store.base import NewRun, Store
from durably.store.open import open_store

from .test_store_contract import DIGEST, ME, OTHER, alive, dead, new_run, rec


def test_create_run_draws_an_incarnation_and_keeps_the_first(store: Store) -> None:
    run, created = store.create_run(new_run())
    assert created and run.incarnation is not None
    assert re.fullmatch(r"[0-9a-f]{12}", run.incarnation)
    # Creating it again (another NewRun, another drawn incarnation) finds the same row.
    again, created2 = store.create_run(new_run())
    assert not created2 and again.incarnation == run.incarnation
    assert run.key("3") == f"r1:{run.incarnation}:3"


def test_the_incarnation_survives_claims_takeovers_requeues(store: Store) -> None:
    first = store.create_run(new_run())[0].incarnation
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    assert store.claim("r1", OTHER, 30, 10, dead).incarnation == first  # a takeover
    store.append("r1", token + 1, [rec("0", INTENT)])
    store.release("r1", token + 1, "in_doubt", park_reason="step 0 'x' in doubt")
    assert store.requeue("r1", ("in_doubt",), drop_intents=True).incarnation == first
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    store.finish("r1", token, "failed", [], error_type="ValueError", error_message="x")
    assert store.requeue("r1", ("failed",)).incarnation == first
    listed = store.list_runs()
    assert [r.incarnation for r in listed] == [first]


def test_the_same_run_id_in_two_journals_has_two_incarnations(
    store: Store, store_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    other_url = f"sqlite:///{tmp_path_factory.mktemp('other') / 'journal.db'}"
    other = open_store(other_url, FakeClock())
    try:
        a = store.create_run(new_run("alert-42"))[0]
        b = other.create_run(new_run("alert-42"))[0]
    finally:
        other.close()
    assert a.incarnation != b.incarnation and a.key("1") != b.key("1")


def test_requeue_of_a_failed_run_drops_only_failures_and_clears_the_outcome(
    store: Store,
) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    store.append("r1", token, [rec("0"), rec("1", FAILED), rec("2", INTENT)])
    store.finish("r1", token, "failed", [rec("3", FAILED)], error_type="E", error_message="m")
    with pytest.raises(StoreError, match="nothing was changed"):
        store.requeue("r1", ("blocked",))
    # A result is never dropped, whatever the caller names.
    run = store.requeue("r1", ("failed",), drop_positions=["0", "3"])
    assert (run.status, run.outcome, run.error_type, run.error_message) == (
        "queued",
        None,
        None,
        None,
    )
    assert run.finished_at is None and run.fencing_token == token + 1
    left = sorted((r.position, r.status) for r in store.load_history("r1", 0))
    assert left == [("0", OK), ("1", FAILED), ("2", INTENT)]
    again = store.claim("r1", ME, 30, 10, alive)
    assert again.status == "running" and again.starts == 2


def test_requeue_drops_one_intent_and_keeps_the_others(store: Store) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    store.append("r1", token, [rec("0.0.0", INTENT), rec("0.1.0", INTENT)])
    store.release("r1", token, "in_doubt", park_reason="step 0.0.0 'x' in doubt")
    store.requeue("r1", ("in_doubt",), drop_positions=["0.0.0"])
    assert [(r.position, r.status) for r in store.load_history("r1", 0)] == [("0.1.0", INTENT)]


def test_fork_run_creates_a_queued_run_with_the_given_history(store: Store) -> None:
    source = store.create_run(new_run())[0]
    now = StepRecord("1", NOW, "durably.now", DIGEST, OK, "1.5", started_at=1.0, finished_at=1.0)
    records = [rec("0"), now, rec("2.0.0"), rec("2.1.0", FAILED)]
    fork = NewRun(
        "r1-fork",
        source.workflow,
        source.version,
        None,
        "default",
        source.input,
        source.input_digest,
        1,
    )
    run = store.fork_run(fork, records)
    assert (run.run_id, run.status, run.generation, run.fencing_token) == (
        "r1-fork",
        "queued",
        0,
        0,
    )
    assert run.incarnation == fork.incarnation != source.incarnation
    assert run.input == source.input and run.workflow == source.workflow
    got = sorted(store.load_history("r1-fork", 0), key=lambda r: r.position)
    assert got == sorted(records, key=lambda r: r.position)
    claimed = store.claim("r1-fork", ME, 30, 10, alive)
    assert claimed.fencing_token == 1 and claimed.incarnation == fork.incarnation
    assert store.load_history("r1", 0) == []  # the original is untouched


def test_fork_run_refuses_an_existing_run_id_and_writes_nothing(store: Store) -> None:
    store.create_run(new_run())
    with pytest.raises(RunConflict, match="already exists"):
        store.fork_run(new_run("r1"), [rec("0")])
    assert store.load_history("r1", 0) == []
    with pytest.raises(CorruptRecord):  # a bad record is refused on the way in, atomically
        store.fork_run(new_run("r2"), [rec("0"), rec("1").replace(digest="short")])
    assert store.get_run("r2") is None
