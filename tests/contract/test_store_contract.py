"""The Store contract: what the engine relies on, checked against every backend."""

from __future__ import annotations

import hashlib

import pytest

from durably.clock import FakeClock
from durably.errors import LeaseLost, RunLeased, RunNotFound, RunQuarantined, StoreError
from durably.events import NewEvent, new_event
from durably.history import COMPLETED, FAILED, INTENT, OK, STEP, RunRecord, StepRecord
from durably.store.base import NewRun, Owner, Served, Store

ME = Owner("host-a", 100, "1")
OTHER = Owner("host-b", 200, "2")
DIGEST = hashlib.sha256(b"x").hexdigest()


def alive(_: str) -> bool:
    return False


def dead(_: str) -> bool:
    return True


def new_run(run_id: str = "r1", workflow: str = "wf") -> NewRun:
    return NewRun(run_id, workflow, "1", None, "default", '{"args":[],"kwargs":{}}', DIGEST, 1)


def rec(pos: str, status: str = OK, output: str | None = '"v"') -> StepRecord:
    return StepRecord(
        pos,
        STEP,
        f"s{pos}",
        DIGEST,
        status,
        output if status == OK else None,
        "ValueError" if status == FAILED else None,
        "boom" if status == FAILED else None,
        1,
        1.0,
        2.0,
    )


def test_create_run_is_idempotent(store: Store) -> None:
    run, created = store.create_run(new_run())
    assert created and run.status == "queued" and run.fencing_token == 0
    again, created2 = store.create_run(new_run())
    assert not created2 and again.run_id == "r1" and again.created_at == run.created_at
    assert store.get_run("nope") is None


def test_claim_raises_token_and_fences_appends(store: Store) -> None:
    store.create_run(new_run())
    first = store.claim("r1", ME, 30, 10, alive)
    assert first.fencing_token == 1 and first.status == "running" and first.starts == 1
    store.append("r1", 1, [rec("0")])
    # Even the same owner may not claim while its lease is live (another thread of the
    # same process may be driving the run); a dead owner is taken over with a new token.
    with pytest.raises(RunLeased):
        store.claim("r1", ME, 30, 10, alive)
    second = store.claim("r1", ME, 30, 10, dead)
    assert second.fencing_token == 2
    with pytest.raises(LeaseLost):
        store.append("r1", 1, [rec("1")])
    assert [r.position for r in store.load_history("r1", 0)] == ["0"]


def test_live_owner_blocks_claim_until_lease_expires(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run())
    store.claim("r1", ME, 30, 10, alive)
    with pytest.raises(RunLeased, match="being driven"):
        store.claim("r1", OTHER, 30, 10, alive)
    clock.advance(31)
    taken = store.claim("r1", OTHER, 30, 10, alive)
    assert taken.fencing_token == 2 and taken.owner == str(OTHER)


def test_provably_dead_owner_is_taken_over_at_once(store: Store) -> None:
    store.create_run(new_run())
    store.claim("r1", ME, 30, 10, alive)
    taken = store.claim("r1", OTHER, 30, 10, dead)
    assert taken.fencing_token == 2


def test_claim_unknown_run(store: Store) -> None:
    with pytest.raises(RunNotFound):
        store.claim("nope", ME, 30, 10, alive)


def test_intent_is_replaced_by_result_never_a_result(store: Store) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    store.append("r1", token, [rec("0", INTENT)])
    assert store.load_history("r1", 0)[0].status == INTENT
    store.append("r1", token, [rec("0")])
    assert store.load_history("r1", 0)[0].status == OK
    with pytest.raises(StoreError, match="never overwritten"):
        store.append("r1", token, [rec("0", output='"other"')])
    assert store.load_history("r1", 0)[0].output == '"v"'


def test_append_is_atomic(store: Store) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    store.append("r1", token, [rec("0")])
    with pytest.raises(StoreError):
        store.append("r1", token, [rec("1"), rec("0", output='"x"')])
    assert [r.position for r in store.load_history("r1", 0)] == ["0"]


def test_history_round_trips_every_field(store: Store) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    records = [
        rec("0"),
        rec("1", FAILED),
        rec("2.0.0"),
        rec("2.1.0", INTENT),
        StepRecord(
            "3",
            "now",
            "durably.now",
            DIGEST,
            OK,
            '{"$datetime":"x"}',
            None,
            None,
            3,
            5.5,
            6.25,
            1234,
            0.5,
        ),
    ]
    store.append("r1", token, records)
    got = sorted(store.load_history("r1", 0), key=lambda r: r.position)
    assert got == sorted(records, key=lambda r: r.position)


def test_finish_records_outcome_and_is_fenced(store: Store) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    with pytest.raises(LeaseLost):
        store.finish("r1", token + 5, COMPLETED, [], outcome='"x"')
    store.finish("r1", token, COMPLETED, [rec("0")], outcome='{"ok":true}')
    run = store.get_run("r1")
    assert run is not None and run.status == COMPLETED and run.outcome == '{"ok":true}'
    assert run.owner is None and run.finished_at is not None
    assert len(store.load_history("r1", 0)) == 1


def test_failure_outcome(store: Store) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    store.finish("r1", token, "failed", [], error_type="ValueError", error_message="bad")
    run = store.get_run("r1")
    assert run is not None and (run.status, run.error_type, run.error_message) == (
        "failed",
        "ValueError",
        "bad",
    )


def test_renew_and_release(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    clock.advance(20)
    assert store.renew("r1", token, 30)
    clock.advance(20)  # 40 s after the claim but 20 s after the renewal: still held
    with pytest.raises(RunLeased):
        store.claim("r1", OTHER, 30, 10, alive)
    assert not store.renew("r1", token + 1, 30)
    store.release("r1", token, "blocked", park_reason="why")
    run = store.get_run("r1")
    assert run is not None and run.owner is None and run.status == "blocked"
    assert run.park_reason == "why"
    assert not store.renew("r1", token, 30)  # released: nothing to renew
    assert store.claim("r1", OTHER, 30, 10, alive).fencing_token == token + 1


def test_quarantine_after_starts_without_progress(store: Store) -> None:
    store.create_run(new_run())
    for _ in range(3):  # each start "crashes": the next claim finds its owner dead
        store.claim("r1", ME, 30, 3, dead)
    with pytest.raises(RunQuarantined, match="quarantined"):
        store.claim("r1", ME, 30, 3, dead)
    run = store.get_run("r1")
    assert run is not None and run.status == "quarantined"


def test_progress_resets_the_quarantine_count(store: Store) -> None:
    store.create_run(new_run())
    for i in range(6):
        token = store.claim("r1", ME, 30, 3, dead).fencing_token
        store.append("r1", token, [rec(str(i))])
    run = store.get_run("r1")
    assert run is not None and run.starts == 6 and run.starts_without_progress == 1


def test_list_runs_filters(store: Store, clock: FakeClock) -> None:
    for i in range(3):
        store.create_run(new_run(f"r{i}", "wf" if i < 2 else "other"))
        clock.advance(1)
    token = store.claim("r0", ME, 30, 10, alive).fencing_token
    store.finish("r0", token, COMPLETED, [], outcome="1")
    assert [r.run_id for r in store.list_runs()] == ["r2", "r1", "r0"]
    assert [r.run_id for r in store.list_runs(status=COMPLETED)] == ["r0"]
    assert [r.run_id for r in store.list_runs(workflow="other")] == ["r2"]
    assert len(store.list_runs(limit=1)) == 1


def test_list_runs_keyset_queue_search_and_statuses(store: Store, clock: FakeClock) -> None:
    # Keyset paging: ``after`` is the (created_at, run_id) of the last run shown; runs of
    # one instant follow run id order, so a page may end inside them.
    store.create_run(versioned("b%1", queue="fast"))
    store.create_run(versioned("a_1"))
    clock.advance(1)
    store.create_run(versioned("c1", queue="fast"))
    everything = store.list_runs()
    assert [r.run_id for r in everything] == ["c1", "a_1", "b%1"]
    first = everything[1]
    after = (first.created_at, first.run_id)
    assert [r.run_id for r in store.list_runs(after=after)] == ["b%1"]
    last = everything[2]
    assert store.list_runs(after=(last.created_at, last.run_id)) == []
    assert [r.run_id for r in store.list_runs(queue="fast")] == ["c1", "b%1"]
    assert [r.run_id for r in store.list_runs(search="_")] == ["a_1"]  # literal, no wildcard
    assert [r.run_id for r in store.list_runs(search="%")] == ["b%1"]
    assert [r.run_id for r in store.list_runs(search="1", queue="fast")] == ["c1", "b%1"]
    assert store.list_runs(search="C1") == []  # case-sensitive on every store
    token = store.claim("c1", ME, 30, 10, alive).fencing_token
    store.finish("c1", token, COMPLETED, [], outcome="1")
    assert [r.run_id for r in store.list_runs(status=["queued", COMPLETED])] == [
        "c1",
        "a_1",
        "b%1",
    ]
    assert [r.run_id for r in store.list_runs(status=("queued",), queue="fast")] == ["b%1"]
    assert store.count_runs(queue="fast") == {"queued": 1, COMPLETED: 1}
    assert store.count_runs(search="_") == {"queued": 1}


def versioned(
    run_id: str, workflow: str = "wf", version: str | None = "1", queue: str = "default"
) -> NewRun:
    return NewRun(run_id, workflow, version, None, queue, "{}", DIGEST, 1)


def test_claim_next_takes_the_oldest_runnable_run(store: Store, clock: FakeClock) -> None:
    for i in range(3):
        store.create_run(versioned(f"r{i}"))
        clock.advance(1)
    served = {"wf": {"1"}}
    first = store.claim_next(ME, 30, 10, alive, served, ["default"])
    assert first is not None and first.run_id == "r0" and first.fencing_token == 1
    second = store.claim_next(OTHER, 30, 10, alive, served, ["default"])
    assert second is not None and second.run_id == "r1"
    assert store.claim_next(ME, 30, 10, alive, {"other": {None}}, ["default"]) is None
    assert store.claim_next(ME, 30, 10, alive, served, ["emails"]) is None


def test_claim_next_routes_versions_only_when_set(store: Store) -> None:
    store.create_run(versioned("v2", version="2"))
    store.create_run(versioned("unversioned", version=None))
    taken = []
    while (run := store.claim_next(ME, 30, 10, alive, {"wf": {"1"}}, ["default"])) is not None:
        taken.append(run.run_id)
    assert "v2" not in taken
    run = store.claim_next(ME, 30, 10, alive, {"wf": {"2"}}, ["default"])
    assert run is not None and run.run_id == "v2"


@pytest.mark.parametrize(
    ("serves", "expected"),
    [
        ({None}, ["wf-None"]),
        ({"1"}, ["wf-None", "wf-1"]),
        ({"2"}, ["wf-None", "wf-2"]),
        ({None, "2"}, ["wf-None", "wf-2"]),
        ({"1", "2"}, ["wf-None", "wf-1", "wf-2"]),
    ],
)
def test_claim_next_routes_every_version_the_same_on_every_store(
    store: Store, clock: FakeClock, serves: set[str | None], expected: list[str]
) -> None:
    """The whole routing table, identical for every backend: a run without a version is
    served by any registration of its workflow (versions route only when set); a run with
    a version only by a worker registering exactly that version (the engine refuses to
    drive a version it lacks, so it must not claim one). Runs of workflows the worker
    does not serve are never claimed."""
    for version in (None, "1", "2"):
        for workflow in ("wf", "other"):
            store.create_run(versioned(f"{workflow}-{version}", workflow, version))
            clock.advance(1)
    taken = []
    while (run := store.claim_next(ME, 30, 10, alive, {"wf": serves}, ["default"])) is not None:
        taken.append(run.run_id)
    assert taken == expected


def test_claim_next_reclaims_expired_leases_only(store: Store, clock: FakeClock) -> None:
    store.create_run(versioned("r"))
    assert store.claim_next(ME, 30, 10, alive, {"wf": {"1"}}, ["default"]) is not None
    assert store.claim_next(OTHER, 30, 10, alive, {"wf": {"1"}}, ["default"]) is None
    clock.advance(31)
    again = store.claim_next(OTHER, 30, 10, alive, {"wf": {"1"}}, ["default"])
    assert again is not None and again.fencing_token == 2 and again.owner == str(OTHER)


def test_claim_next_honours_fleet_queue_limits(store: Store) -> None:
    for i in range(3):
        store.create_run(versioned(f"m{i}", queue="mail"))
    served = {"wf": {"1"}}
    assert store.claim_next(ME, 30, 10, alive, served, ["mail"], {"mail": 2}) is not None
    assert store.claim_next(OTHER, 30, 10, alive, served, ["mail"], {"mail": 2}) is not None
    assert store.claim_next(OTHER, 30, 10, alive, served, ["mail"], {"mail": 2}) is None
    assert store.claim_next(OTHER, 30, 10, alive, served, ["mail"]) is not None


def test_requeue_drops_or_resolves_intents(store: Store) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    store.append("r1", token, [rec("0"), rec("1", INTENT)])
    store.release("r1", token, "in_doubt", park_reason="step 1 in doubt")
    with pytest.raises(StoreError, match="nothing was changed"):
        store.requeue("r1", ("quarantined",), drop_intents=True)
    with pytest.raises(StoreError, match="no effect in doubt at position 7"):
        store.requeue("r1", ("in_doubt",), resolve=("7", '"x"'))
    run = store.requeue("r1", ("in_doubt",), resolve=("1", '"skipped"'))
    assert (run.status, run.fencing_token, run.owner) == ("queued", token + 1, None)
    assert [
        (r.position, r.status, r.output)
        for r in sorted(store.load_history("r1", 0), key=lambda r: r.position)
    ] == [("0", OK, '"v"'), ("1", OK, '"skipped"')]
    with pytest.raises(LeaseLost):  # the old driver is fenced out
        store.append("r1", token, [rec("2")])


def test_requeue_retry_deletes_the_intent(store: Store) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    store.append("r1", token, [rec("0", INTENT)])
    store.release("r1", token, "in_doubt")
    store.requeue("r1", ("in_doubt",), drop_intents=True)
    assert store.load_history("r1", 0) == []


def test_wait_for_work_waits_when_nothing_happens(store: Store) -> None:
    """An idle worker sleeps in wait_for_work: with nothing runnable and no wake-up it
    takes the whole timeout (a busy return would spin the claim loop), and then returns.
    Only a lower bound is asserted, which load can never break; PostgreSQL's early wake-up
    on new work is tested in tests/integration."""
    import time

    for timeout_s in (0.01, 0.3):  # the first call also sets up any listener
        t0 = time.monotonic()
        store.wait_for_work(timeout_s)
        waited = time.monotonic() - t0
        assert waited >= timeout_s * 0.9, f"wait_for_work({timeout_s}) returned after {waited}"
        assert waited < 30


def test_a_forked_child_opens_its_own_connection(store: Store) -> None:
    """A connection must never cross a fork: parent and child both use the store at the
    same time after the fork, which breaks a shared PostgreSQL connection, and both
    succeed. (SQLite often survives a shared connection by luck; see
    tests/unit/test_sqlite_store.py for its own check.)"""
    import os

    store.create_run(new_run())
    store.create_run(new_run("p"))
    token = store.claim("p", ME, 30, 10, alive).fencing_token
    pid = os.fork()
    if pid == 0:  # the child: report through the exit code only
        code = 1
        try:
            child_token = store.claim("r1", Owner("child", 1, "1"), 30, 10, alive).fencing_token
            for i in range(40):
                store.append("r1", child_token, [rec(str(i))])
            code = 0
        finally:
            os._exit(code)
    for i in range(40):
        store.append("p", token, [rec(str(i))])
        assert store.get_run("p") is not None
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(store.load_history("r1", 0)) == 40 and len(store.load_history("p", 0)) == 40


def test_claim_never_reopens_a_finished_or_parked_for_a_person_run(store: Store) -> None:
    from durably.errors import RunFinished, RunInDoubt

    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    store.finish("r1", token, COMPLETED, [], outcome='"done"')
    with pytest.raises(RunFinished, match="already completed"):
        store.claim("r1", OTHER, 30, 10, alive)
    run = store.get_run("r1")
    assert run is not None and (run.status, run.fencing_token) == (COMPLETED, token)
    store.create_run(new_run("r2"))
    token2 = store.claim("r2", ME, 30, 10, alive).fencing_token
    store.release("r2", token2, "in_doubt", park_reason="step 3")
    with pytest.raises(RunInDoubt, match="step 3"):
        store.claim("r2", ME, 30, 10, alive)


# -- claim queries filter in SQL (issue 8 §5) ---------------------------------------------

HIDING = 70  # more than the 64-run window the old claim read before filtering in Python
HERE = Owner("node", 300, "3", "m1:b1:4026531836")


def test_claim_next_finds_a_runnable_run_behind_many_of_another_version(
    store: Store, clock: FakeClock
) -> None:
    # A rolling deploy: older runs of version 2 wait for new workers; this worker serves
    # version 1, whose one run is younger than all of them.
    for i in range(HIDING):
        store.create_run(versioned(f"v2-{i:03}", version="2"))
    clock.advance(1)
    store.create_run(versioned("v1-young", version="1"))
    got = store.claim_next(ME, 30, 10, alive, {"wf": {"1"}}, ["default"])
    assert got is not None and got.run_id == "v1-young"


def test_claim_next_finds_a_runnable_run_behind_many_live_runs_of_this_host(
    store: Store, clock: FakeClock
) -> None:
    judged: list[str] = []

    def live(owner: str) -> bool:
        judged.append(owner)
        return False

    for i in range(HIDING):
        store.create_run(versioned(f"busy-{i:03}"))
        store.claim(f"busy-{i:03}", Owner("node", 1000 + i, "1", HERE.host_id), 30, 10, live)
    clock.advance(1)
    store.create_run(versioned("young"))
    got = store.claim_next(HERE, 30, 10, live, {"wf": {"1"}}, ["default"])
    assert got is not None and got.run_id == "young"
    # Only this host's owners are judged, each once, and none was taken for dead.
    assert len(judged) == len(set(judged)) == HIDING


def test_claim_next_takes_over_only_this_hosts_dead_owners(store: Store) -> None:
    store.create_run(versioned("other-host"))
    store.create_run(versioned("this-host"))
    twin = Owner("node", 7, "1", "m2:b2:4026531836")  # same label and pid ns, other machine
    store.claim("other-host", twin, 30, 10, alive)
    store.claim("this-host", Owner("node", 7, "1", HERE.host_id), 30, 10, alive)
    pid_7_gone = lambda o: o.startswith("node|7|")  # noqa: E731
    got = store.claim_next(HERE, 30, 10, pid_7_gone, {"wf": {"1"}}, ["default"])
    assert got is not None and got.run_id == "this-host" and got.owner == str(HERE)
    assert store.claim_next(HERE, 30, 10, pid_7_gone, {"wf": {"1"}}, ["default"]) is None


def test_a_dead_owners_run_holds_no_slot_of_a_limited_queue(store: Store) -> None:
    # The slot is the dead run's own: counting it kept the queue shut until the lease
    # expired, so the run "taken over at once" was taken only then.
    store.create_run(versioned("orphan", queue="mail"))
    store.create_run(versioned("queued", queue="mail"))
    gone = Owner("node", 7, "1", HERE.host_id)
    store.claim("orphan", gone, 30, 10, alive)
    pid_7_gone = lambda o: o.startswith("node|7|")  # noqa: E731
    got = store.claim_next(HERE, 30, 10, pid_7_gone, {"wf": {"1"}}, ["mail"], {"mail": 1})
    assert got is not None and got.run_id == "orphan" and got.owner == str(HERE)
    # The limit still holds: the slot is taken now.
    assert store.claim_next(HERE, 30, 10, pid_7_gone, {"wf": {"1"}}, ["mail"], {"mail": 1}) is None


def test_unversioned_runs_route_the_same_on_every_store(store: Store, clock: FakeClock) -> None:
    # A run without a version is served by any registration of its workflow; a versioned
    # run only by a worker registering its version (an unversioned one does not).
    store.create_run(versioned("none", version=None))
    clock.advance(1)
    store.create_run(versioned("one", version="1"))
    assert [r.run_id for r in _drain(store, {"wf": {None}})] == ["none"]
    assert [r.run_id for r in _drain(store, {"wf": {"2"}})] == []
    assert [r.run_id for r in _drain(store, {"wf": {"1"}})] == ["one"]


def _drain(store: Store, served: Served) -> list[RunRecord]:
    taken = []
    while (run := store.claim_next(ME, 30, 10, alive, served, ["default"])) is not None:
        taken.append(run)
    return taken


def test_runs_filter_by_version_and_count_unfinished_per_version(
    store: Store, clock: FakeClock
) -> None:
    for run_id, version in (("a", "1"), ("b", "1"), ("c", "2"), ("d", None)):
        store.create_run(versioned(run_id, version=version))
        clock.advance(1)
    assert [r.run_id for r in store.list_runs(version="1")] == ["b", "a"]
    assert [r.run_id for r in store.list_runs(version="2", workflow="wf")] == ["c"]
    claimed = store.claim("a", ME, 30, 10, alive)
    token = store.claim("c", ME, 30, 10, alive).fencing_token
    store.finish("c", token, COMPLETED, [], outcome="null")
    assert claimed.status == "running"
    assert store.runs_by_version() == [
        ("wf", None, "queued", 1),
        ("wf", "1", "queued", 1),
        ("wf", "1", "running", 1),
    ]


def test_blobs_are_written_with_their_record_once_by_digest(store: Store) -> None:
    store.create_run(new_run())
    store.claim("r1", ME, 30, 10, alive)
    a, b = hashlib.sha256(b'"a"').hexdigest(), hashlib.sha256(b'"b"').hexdigest()
    first = rec("0").replace(inputs='{"args":[],"kwargs":{}}', blobs=((a, '"a"'), (b, '"b"')))
    store.append("r1", 1, [first])
    # The same blob again (another step, a retried write): stored once, nothing refused.
    store.append("r1", 1, [rec("1").replace(blobs=((a, '"a"'),))])
    store.append("r1", 1, [first])
    assert store.get_blobs([a, b, DIGEST]) == {a: '"a"', b: '"b"'}
    assert store.get_blobs([]) == {}
    history = {r.position: r for r in store.load_history("r1", 0)}
    assert history["0"].inputs == '{"args":[],"kwargs":{}}' and history["1"].inputs is None


def test_blobs_of_a_refused_append_are_not_written(store: Store) -> None:
    """A stale token writes nothing: neither the record nor the blobs it carries."""
    store.create_run(new_run())
    store.claim("r1", ME, 30, 10, alive)
    c = hashlib.sha256(b'"c"').hexdigest()
    with pytest.raises(LeaseLost):
        store.append("r1", 0, [rec("0").replace(blobs=((c, '"c"'),))])
    assert store.get_blobs([c]) == {}


def test_a_result_over_an_intent_without_inputs_takes_its_inputs_and_a_retry_is_accepted(
    store: Store,
) -> None:
    """An intent recorded before inputs were kept, resolved by a result that carries
    them: the row takes the result's inputs, so the same write retried (its first
    commit's outcome unknown) matches the stored row instead of looking like an
    overwrite."""
    store.create_run(new_run())
    store.claim("r1", ME, 30, 10, alive)
    store.append("r1", 1, [rec("0", INTENT, None)])
    result = rec("0").replace(inputs='{"args":[{"v":1}],"kwargs":{}}')
    store.append("r1", 1, [result])
    store.append("r1", 1, [result])  # the retry
    (row,) = store.load_history("r1", 0)
    assert row == result


def step_event(kind: str, pos: str) -> NewEvent:
    return new_event(kind, pos, {"name": f"s{pos}"}, 1.0, f"t1:{kind}:{pos}")


def step_events(store: Store, run_id: str) -> list[tuple[str, str | None]]:
    page = store.read_events(run_id, 0, 100)
    assert page is not None
    return [(e.kind, e.position) for e in page.events if e.kind.startswith("step.")]


def test_a_record_with_blobs_and_events_commits_them_in_one_transaction(store: Store) -> None:
    """A step's intent carries its blobs (issue 13) and its step.started event (issue 10):
    one append writes both or, fenced out, neither; a retried write stores each once."""
    store.create_run(new_run())
    store.claim("r1", ME, 30, 10, alive)
    d = hashlib.sha256(b'"d"').hexdigest()
    intent = rec("0", INTENT, None).replace(inputs='{"args":[],"kwargs":{}}', blobs=((d, '"d"'),))
    started = step_event("step.started", "0")
    with pytest.raises(LeaseLost):
        store.append("r1", 0, [intent], [started])
    assert store.get_blobs([d]) == {} and step_events(store, "r1") == []
    store.append("r1", 1, [intent], [started])
    store.append("r1", 1, [intent], [started])  # the same write, its outcome unknown
    assert store.get_blobs([d]) == {d: '"d"'}
    assert step_events(store, "r1") == [("step.started", "0")]
    # The result, with its event and no blobs (PostgreSQL: the one-statement path).
    store.append(
        "r1", 1, [rec("0").replace(inputs=intent.inputs)], [step_event("step.completed", "0")]
    )
    (row,) = store.load_history("r1", 0)
    assert row.status == OK and row.inputs == intent.inputs
    assert step_events(store, "r1") == [("step.started", "0"), ("step.completed", "0")]


def test_a_result_with_events_over_an_intent_without_inputs_takes_its_inputs(
    store: Store,
) -> None:
    """As a result without events: the row takes the result's inputs, so the retried
    write (with its events) matches the stored row and its event is stored once."""
    store.create_run(new_run())
    store.claim("r1", ME, 30, 10, alive)
    store.append("r1", 1, [rec("0", INTENT, None)])
    result = rec("0").replace(inputs='{"args":[{"v":1}],"kwargs":{}}')
    done = step_event("step.completed", "0")
    store.append("r1", 1, [result], [done])
    store.append("r1", 1, [result], [done])  # the retry
    (row,) = store.load_history("r1", 0)
    assert row == result
    assert step_events(store, "r1") == [("step.completed", "0")]
