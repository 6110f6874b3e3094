"""``engine.list_runs`` / ``engine.count_runs`` / ``engine.live_workers`` and
``durably.explain``: the read seams the CLI and the dashboard use, on both stores.

The runs are real (``engine.start`` / ``engine.run`` on a FakeClock, so their order is
known); the 100,000-run paging walk is in tests/unit/test_list_runs_scale.py.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli
from durably.runlist import LIST_RUNS_LIMIT_MAX, STATUS_ORDER


@pytest.fixture
def clock() -> durably.FakeClock:
    return durably.FakeClock()


@pytest.fixture
def engine(journal_url: str, clock: durably.FakeClock) -> Iterator[durably.Engine]:
    e = durably.Engine(journal_url, clock=clock)
    yield e
    e.close()


def _noop(ctx: durably.Context) -> str:
    return "ok"


def _start(engine: durably.Engine, clock: durably.FakeClock, ids: list[str], **kw: Any) -> None:
    wf = engine.workflow(name=kw.pop("name", "wf"), version=kw.pop("version", None))(_noop)
    for run_id in ids:
        engine.start(wf, run_id=run_id, **kw)
        clock.advance(1)


def _walk(engine: durably.Engine, after: str | None = None, **kw: Any) -> list[str]:
    """Every run id the pages of ``list_runs(**kw)`` show (from ``after`` on), in order."""
    out: list[str] = []
    while True:
        page = engine.list_runs(after=after, **kw)
        out.extend(r.run_id for r in page.runs)
        if page.next is None:
            return out
        assert page.runs, "a page with a next cursor is never empty"
        after = page.next


def test_pages_newest_first_without_repeats(engine: durably.Engine, clock: Any) -> None:
    ids = [f"r{i:02d}" for i in range(23)]
    _start(engine, clock, ids)
    page = engine.list_runs(limit=10)
    assert isinstance(page, durably.RunPage)
    assert [r.run_id for r in page.runs] == ids[::-1][:10]
    assert _walk(engine, limit=10) == ids[::-1]
    assert _walk(engine, limit=23) == ids[::-1]  # exactly one full page: next is None
    assert engine.list_runs(limit=23).next is None
    assert engine.list_runs().runs == engine.list_runs(limit=50).runs  # default 50


def test_ties_on_created_at_page_by_run_id(engine: durably.Engine, clock: Any) -> None:
    wf = engine.workflow(name="wf")(_noop)
    for run_id in ["b", "d", "a", "c", "e"]:  # one instant: the run id orders them
        engine.start(wf, run_id=run_id)
    assert _walk(engine, limit=2) == ["a", "b", "c", "d", "e"]


def test_new_runs_never_shift_later_pages(engine: durably.Engine, clock: Any) -> None:
    old = [f"old{i}" for i in range(9)]
    _start(engine, clock, old)
    page = engine.list_runs(limit=4)
    seen = [r.run_id for r in page.runs]
    _start(engine, clock, [f"new{i}" for i in range(5)])  # arrive between pages
    assert page.next is not None
    seen += _walk(engine, page.next, limit=4)
    assert seen == old[::-1]


def test_filters_combine(engine: durably.Engine, clock: Any) -> None:
    _start(engine, clock, ["a-1", "a-2"], name="alpha", version="1")
    _start(engine, clock, ["a-3"], name="alpha", version="2", queue="fast")
    _start(engine, clock, ["b-1", "b_2", "b%3"], name="beta", queue="fast")
    done = engine.workflow(name="gamma")(_noop)
    engine.run(done, run_id="g-1")
    assert _walk(engine, workflow="alpha") == ["a-3", "a-2", "a-1"]
    assert _walk(engine, workflow="alpha", version="1") == ["a-2", "a-1"]
    assert _walk(engine, queue="fast") == ["b%3", "b_2", "b-1", "a-3"]
    assert _walk(engine, queue="fast", workflow="alpha") == ["a-3"]
    assert _walk(engine, status="completed") == ["g-1"]
    assert _walk(engine, status=["completed", "queued"], workflow="gamma") == ["g-1"]
    assert _walk(engine, status=("queued",), queue="fast", limit=1) == ["b%3", "b_2", "b-1", "a-3"]
    # search: a substring of the run id, wildcards taken literally, case-sensitive
    assert _walk(engine, search="a-") == ["a-3", "a-2", "a-1"]
    assert _walk(engine, search="-2") == ["a-2"]
    assert _walk(engine, search="_") == ["b_2"]
    assert _walk(engine, search="%") == ["b%3"]
    assert _walk(engine, search="b") == ["b%3", "b_2", "b-1"]
    assert _walk(engine, search="A-") == []
    assert _walk(engine, search="") == _walk(engine)
    assert _walk(engine, search="b", queue="fast", status="queued", workflow="beta") == [
        "b%3",
        "b_2",
        "b-1",
    ]


def test_count_runs_every_status(engine: durably.Engine, clock: Any) -> None:
    _start(engine, clock, ["q1", "q2"], name="alpha")
    done = engine.workflow(name="beta")(_noop)
    engine.run(done, run_id="c1")
    counts = engine.count_runs()
    assert list(counts) == list(STATUS_ORDER)
    assert counts == {**dict.fromkeys(STATUS_ORDER, 0), "queued": 2, "completed": 1}
    assert engine.count_runs(workflow="beta")["completed"] == 1
    assert engine.count_runs(workflow="beta")["queued"] == 0
    assert engine.count_runs(search="q")["queued"] == 2
    assert sum(engine.count_runs(queue="nope").values()) == 0
    by_status = {s: len(_walk(engine, status=s)) for s in STATUS_ORDER}
    assert by_status == counts


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"limit": 0}, f"limit must be an int from 1 to {LIST_RUNS_LIMIT_MAX}"),
        ({"limit": LIST_RUNS_LIMIT_MAX + 1}, "limit must be an int from 1"),
        ({"limit": True}, "limit must be an int"),
        ({"limit": "10"}, "limit must be an int"),
        ({"after": "garbage"}, "after must be None (the first page) or the .next cursor"),
        ({"after": "r1.!!!"}, "the .next cursor"),
        ({"after": "r1.WzEsMl0"}, "the .next cursor"),  # [1,2]: no run id
        ({"after": 5}, "the .next cursor"),
        ({"status": "done"}, "status must be None (any status), a run status"),
        ({"status": []}, "a non-empty list"),
        ({"status": ["queued", "nope"]}, "queued, running, parked"),
        ({"status": 3}, "status must be"),
        ({"workflow": 3}, "workflow must be None (no filter) or a str"),
        ({"queue": ["a"]}, "queue must be None"),
        ({"search": "x" * 129}, "search must be at most 128 characters"),
        ({"since": "yesterday"}, "since must be None or a time in epoch seconds"),
    ],
)
def test_bad_arguments_say_what_to_pass(
    engine: durably.Engine, kw: dict[str, Any], says: str
) -> None:
    with pytest.raises(durably.ConfigError) as info:
        engine.list_runs(**kw)
    assert says in str(info.value)


def test_cursor_is_opaque_but_stable(engine: durably.Engine, clock: Any) -> None:
    _start(engine, clock, ["a", "b", "c"])
    page = engine.list_runs(limit=1)
    assert page.next is not None and page.next.startswith("r1.")
    assert "b" not in page.next and "c" not in page.next[3:]  # not the run id in clear
    # The same cursor gives the same page again (nothing is consumed).
    assert engine.list_runs(limit=1, after=page.next) == engine.list_runs(limit=1, after=page.next)


def test_live_workers(journal_url: str) -> None:
    import threading
    import time

    from durably.worker import Worker

    engine = durably.Engine(journal_url)  # real time: the worker's row expires by it
    try:
        assert engine.live_workers() == []
        worker = Worker(engine, queues=("fast", "slow"), poll_interval_s=0.05, drain_s=5)
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            deadline = time.monotonic() + 30
            while not engine.live_workers() and time.monotonic() < deadline:
                time.sleep(0.02)
            (only,) = engine.live_workers()
            assert isinstance(only, durably.LiveWorker)
            assert sorted(only.queues) == ["fast", "slow"] and only.pid is not None
            assert engine.live_workers("fast") == [only]
            assert engine.live_workers("other") == []
        finally:
            worker.stop()
            thread.join(30)
        assert engine.live_workers() == []  # a stopped worker drops its row
        with pytest.raises(durably.ConfigError, match="queue must be None"):
            engine.live_workers(3)  # type: ignore[arg-type]
    finally:
        engine.close()


def test_explain_is_what_runs_why_prints(
    engine: durably.Engine, clock: Any, journal_url: str
) -> None:
    _start(engine, clock, ["waiting"])
    done = engine.workflow(name="done")(_noop)
    engine.run(done, run_id="finished")
    for run_id in ("waiting", "finished"):
        ex = durably.explain(engine, run_id)
        assert isinstance(ex, durably.Explanation)
        assert ex.run_id == run_id
        res = CliRunner().invoke(cli, ["runs", "why", run_id, "--db", journal_url, "--json"])
        assert res.exit_code == 0, res.output
        assert json.loads(res.output) == ex.to_json()
        assert ex.to_json()["sentence"] == ex.sentence
        assert all(isinstance(f, durably.Fact) for f in ex.facts)
    ex = durably.explain(engine, "waiting")
    assert ex.status == "queued" and ex.state == "queued"
    assert ex.sentence.startswith("queued since ")
    labels = {f.label: f.text for f in ex.facts}
    assert labels["runs ahead"] == "0" and labels["workers"] == "0"
    assert labels["runs ahead capped"] == "no"
    assert labels["queued at"].endswith(" UTC")
    with pytest.raises(durably.RunNotFound):
        durably.explain(engine, "nope")


def test_engine_does_not_import_the_inspect_room() -> None:
    import ast
    import importlib
    from pathlib import Path

    package = Path(str(importlib.import_module("durably.engine").__file__)).parent
    imported = {
        node.module
        for path in package.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "why" not in imported and not any(m.endswith(".why") for m in imported)


def test_cli_pages_with_after(engine: durably.Engine, clock: Any, journal_url: str) -> None:
    ids = [f"c{i}" for i in range(5)]
    _start(engine, clock, ids)
    runner = CliRunner()
    seen: list[str] = []
    argv = ["runs", "list", "--db", journal_url, "--limit", "2", "--json"]
    after: list[str] = []
    for _ in range(10):
        res = runner.invoke(cli, [*argv, *after])
        assert res.exit_code == 0, res.output
        seen += [row["run_id"] for row in json.loads(res.stdout)]  # stdout: the array only
        if not res.stderr:
            break
        hint = res.stderr.strip()
        assert hint.startswith("next page: --after r1.")
        after = ["--after", hint.rsplit(" ", 1)[1]]
    assert seen == ids[::-1]
    text = runner.invoke(cli, ["runs", "list", "--db", journal_url, "--limit", "4"])
    assert text.exit_code == 0 and "next page: --after r1." in text.stdout
    full = runner.invoke(cli, ["runs", "list", "--db", journal_url])
    assert full.exit_code == 0 and "next page" not in full.output


def test_cli_refuses_a_bad_cursor(engine: durably.Engine, journal_url: str) -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["runs", "list", "--db", journal_url, "--after", "nope"])
    assert res.exit_code == 1
    assert "after must be None (the first page) or the .next cursor" in res.stderr
    res = runner.invoke(cli, ["runs", "list", "--db", journal_url, "--after", "nope", "--json"])
    assert res.exit_code == 1 and "the .next cursor" in json.loads(res.stdout)["error"]


def test_readers_walk_pages_past_the_page_bound(
    engine: durably.Engine, clock: Any, journal_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `runs list --limit N` and `replay --check` read more runs than one page holds by
    # walking pages: shrink the bound so a few runs take several pages.
    import durably.cli.runs
    import durably.runlist
    from durably.replaycheck import runs_to_check

    monkeypatch.setattr(durably.runlist, "LIST_RUNS_LIMIT_MAX", 2)
    monkeypatch.setattr(durably.cli.runs, "LIST_RUNS_LIMIT_MAX", 2)
    done = engine.workflow(name="done")(_noop)
    for i in range(5):
        engine.run(done, run_id=f"d{i}")
        clock.advance(1)
    _start(engine, clock, ["q0", "q1"])  # newest: queued, no history to check
    with pytest.raises(durably.ConfigError, match="from 1 to 2"):
        engine.list_runs(limit=3)
    checked = [r.run_id for r in runs_to_check(engine, None, None, None, 6, finished=True)]
    assert checked == ["d4", "d3", "d2", "d1"]  # the newest 6 less the queued ones
    since = [
        r.run_id for r in runs_to_check(engine, None, None, clock.time() - 4.5, 100, finished=True)
    ]
    assert since == ["d4", "d3"]
    res = CliRunner().invoke(cli, ["runs", "list", "--db", journal_url, "--limit", "5", "--json"])
    assert res.exit_code == 0, res.output
    assert [r["run_id"] for r in json.loads(res.stdout)] == ["q1", "q0", "d4", "d3", "d2"]
    assert res.stderr.startswith("next page: --after r1.")


def test_cli_queue_and_search(engine: durably.Engine, clock: Any, journal_url: str) -> None:
    _start(engine, clock, ["a-1", "b_1"], queue="fast")
    _start(engine, clock, ["a-2"])
    runner = CliRunner()

    def listed(*flags: str) -> list[str]:
        res = runner.invoke(cli, ["runs", "list", "--db", journal_url, "--json", *flags])
        assert res.exit_code == 0, res.output
        return [row["run_id"] for row in json.loads(res.stdout)]

    assert listed("--queue", "fast") == ["b_1", "a-1"]
    assert listed("--search", "a-") == ["a-2", "a-1"]
    assert listed("--search", "_") == ["b_1"]
    assert listed("--search", "a", "--queue", "default") == ["a-2"]
    text = runner.invoke(cli, ["runs", "list", "--db", journal_url, "--search", "a-"])
    assert "2 runs: 2 queued" in text.stdout  # the count line takes the same filters
    refused = runner.invoke(
        cli, ["runs", "list", "--db", journal_url, "--by-version", "--queue", "fast"]
    )
    assert refused.exit_code == 1 and "not --queue, --search or --after" in refused.stderr


def test_nothing_above_the_engine_reads_engine_store_or_its_private_names() -> None:
    """The worker, replay --check and every other module above the engine use its
    public methods only (issue 20): no ``engine.store``, no ``engine._x``."""
    import ast
    from pathlib import Path

    root = Path(durably.__file__).parent
    found: dict[str, list[int]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("store/", "engine/")):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Attribute):
                continue
            if node.attr != "store" and not node.attr.startswith("_"):
                continue
            if node.attr.startswith("__"):
                continue  # dunders (__name__, __class__) are no engine internals
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name in ("engine", "e", "_engine"):
                found.setdefault(rel, []).append(node.lineno)
    assert found == {}, found


@pytest.mark.parametrize("run_id", ["a\x00b", "\ud800"], ids=["nul", "lone-surrogate"])
def test_a_forged_cursor_naming_a_run_id_no_journal_holds_is_refused_as_a_bad_cursor(
    engine: durably.Engine, clock: Any, journal_url: str, run_id: str
) -> None:
    _start(engine, clock, ["a", "b", "c"])
    # A cursor is base64 of JSON anyone can write: this one names a run id with a
    # character neither database takes (PostgreSQL's text refuses NUL, UTF-8 a lone
    # surrogate). Once, it reached the query: UnicodeEncodeError or a StoreError.
    raw = json.dumps([1e9, run_id]).encode()
    forged = "r1." + base64.urlsafe_b64encode(raw).decode().rstrip("=")
    with pytest.raises(durably.ConfigError, match=r"the \.next cursor of a page"):
        engine.list_runs(after=forged)
    res = CliRunner().invoke(cli, ["runs", "list", "--db", journal_url, "--after", forged])
    assert res.exit_code == 1, res.output
    assert "the .next cursor" in res.stderr and "Traceback" not in res.output
