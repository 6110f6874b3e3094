"""Versions side by side in one engine (issue 13): registration, the newest by natural
sort, a version named through the workflow object, existing runs driven by the version
they recorded, and a version this process lacks refused by name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import durably
from durably.engine import version_key


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[durably.Engine]:
    e = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", clock=durably.FakeClock())
    yield e
    e.close()


def _versions(engine: durably.Engine, *versions: str | None) -> dict[str | None, durably.Workflow]:
    out = {}
    for v in versions:

        def flow(ctx: durably.Context, x: int, v: str | None = v) -> str:
            return f"{v}:{ctx.step('s', lambda y: y * 2, x)}"

        out[v] = engine.workflow(name="flow", version=v)(flow)
    return out


def test_natural_sort_puts_10_after_9() -> None:
    ordered = sorted(["10", "9", "1.10", "1.9", "2", "a"], key=version_key)
    assert ordered == ["1.9", "1.10", "2", "9", "10", "a"]
    assert version_key(None) < version_key("0")


def test_a_version_with_a_non_decimal_digit_registers_and_runs(engine: durably.Engine) -> None:
    # "²" is str.isdigit() but not a decimal int() reads: it sorts as text, never crashes
    # the choice of the newest version (it did: ValueError from every engine.run).
    wfs = _versions(engine, "1", "1²")
    assert sorted(["1²", "1", "v²", "1.9"], key=version_key) == ["1", "1.9", "1²", "v²"]
    assert engine.run(wfs["1"], 2) == "1²:4"


@pytest.mark.parametrize(
    ("option", "value"),
    [("version", ""), ("version", 2), ("prompt_version", ""), ("prompt_version", 3)],
)
def test_a_version_must_be_a_non_empty_str(
    engine: durably.Engine, option: str, value: object
) -> None:
    # "" would be another registration than None that sorts, routes and prints like it
    # (and an int was a TypeError from deep inside): refused, saying what to write.
    with pytest.raises(durably.ConfigError, match=f"{option}=.*non-empty str"):
        engine.workflow(name="flow", **{option: value})(lambda ctx: 1)  # type: ignore[arg-type]
    assert engine.served() == {}


def test_versions_that_sort_alike_choose_the_newest_the_same_in_every_process(
    tmp_path: Path,
) -> None:
    chosen = set()
    for order in (["1", "01"], ["01", "1"]):
        with durably.Engine(f"sqlite:///{tmp_path / 'j.db'}") as e:
            wfs = _versions(e, *order)
            chosen.add(e.run(wfs["1"], 1))
    assert len(chosen) == 1, chosen


def test_new_runs_take_the_newest_version_unless_one_is_named(engine: durably.Engine) -> None:
    flows = _versions(engine, "9", "10", None)
    assert engine.run(flows["9"], 1, run_id="a") == "10:2"
    assert engine.run("flow", 1, run_id="b") == "10:2"
    assert engine.run(flows["10"].at_version("9"), 1, run_id="c") == "9:2"
    assert engine.run(flows["10"].at_version(None), 1, run_id="d") == "None:2"
    assert [engine.get_run(r).version for r in "abcd"] == ["10", "10", "9", None]
    handle = engine.start(flows["9"].at_version("9"), 2, run_id="e")
    assert engine.get_run(handle.run_id).version == "9"


def test_the_same_version_twice_is_refused_with_what_to_do(engine: durably.Engine) -> None:
    _versions(engine, "1")
    with pytest.raises(durably.ConfigError, match="another version"):
        _versions(engine, "1")


def test_an_unknown_version_is_refused_by_name(engine: durably.Engine) -> None:
    flows = _versions(engine, "1", "2")
    with pytest.raises(durably.WorkflowNotRegistered, match="version '7'"):
        engine.run(flows["1"].at_version("7"), 1)


def test_existing_runs_are_driven_by_their_recorded_version(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url, clock=durably.FakeClock()) as old:
        _versions(old, "1")
        old.start("flow", 5, run_id="queued-v1")
        old.start("flow", 6, run_id="parked-for-resume")
    with durably.Engine(url, clock=durably.FakeClock()) as new:
        flows = _versions(new, "1", "2")
        assert new.run(flows["2"], 5, run_id="queued-v1") == "1:10"
        assert new.resume("parked-for-resume") == "1:12"
        assert new.run(flows["2"], 7) == "2:14"
    with durably.Engine(url, clock=durably.FakeClock()) as v2_only:
        _versions(v2_only, "2")
        v2_only.start("flow", 1, run_id="v1-left")
        assert v2_only.get_run("v1-left").version == "2"


def test_a_run_of_a_version_this_process_lacks_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url, clock=durably.FakeClock()) as old:
        _versions(old, "1")
        old.start("flow", 5, run_id="r")
    with durably.Engine(url, clock=durably.FakeClock()) as new:
        flows = _versions(new, "2", None)
        for drive in (lambda: new.resume("r"), lambda: new.run(flows["2"], 5, run_id="r")):
            with pytest.raises(durably.WorkflowNotRegistered, match="version '1'") as info:
                drive()
            assert "'2'" in str(info.value) and "(no version)" in str(info.value)
        assert new.get_run("r").status == "queued"  # refused, not claimed
        assert new.claim_next(["default"]) is None  # and no worker of it claims it


def test_a_run_without_a_version_takes_the_unversioned_registration_else_the_newest(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url, clock=durably.FakeClock()) as old:
        _versions(old, None)
        old.start("flow", 1, run_id="a")
        old.start("flow", 2, run_id="b")
    with durably.Engine(url, clock=durably.FakeClock()) as mixed:
        _versions(mixed, None, "3")
        assert mixed.resume("a") == "None:2"
    with durably.Engine(url, clock=durably.FakeClock()) as versioned:
        _versions(versioned, "2", "3")
        claimed = versioned.claim_next(["default"])
        assert claimed is not None and claimed.run_id == "b"
        assert versioned.execute_claimed(claimed) == "3:4"


def test_served_lists_every_registered_version(engine: durably.Engine) -> None:
    _versions(engine, "1", "2", None)
    assert engine.served() == {"flow": frozenset({"1", "2", None})}


def test_cli_lists_runs_of_a_version_and_counts_unfinished_per_version(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from durably.cli import main

    db = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(db, clock=durably.FakeClock()) as e:
        flows = _versions(e, "1", "2")
        e.start(flows["1"].at_version("1"), 1, run_id="old")
        e.start(flows["2"], 2, run_id="new")
        e.run(flows["2"], 3, run_id="done")
    runner = CliRunner()
    listed = runner.invoke(main, ["runs", "list", "--db", db, "--version", "1", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [r["run_id"] for r in json.loads(listed.output)] == ["old"]
    counted = runner.invoke(main, ["runs", "list", "--db", db, "--by-version", "--json"])
    assert json.loads(counted.output) == [
        {"workflow": "flow", "version": "1", "in_flight": 1, "by_status": {"queued": 1}},
        {"workflow": "flow", "version": "2", "in_flight": 1, "by_status": {"queued": 1}},
    ]
    # The filters given with --by-version apply to the counts (they were ignored).
    for flags, versions in [
        (["--version", "1"], ["1"]),
        (["--workflow", "flow", "--version", "2"], ["2"]),
        (["--status", "queued"], ["1", "2"]),
        (["--status", "running"], []),
    ]:
        filtered = runner.invoke(
            main, ["runs", "list", "--db", db, "--by-version", "--json", *flags]
        )
        assert [row["version"] for row in json.loads(filtered.output)] == versions, flags
    table = runner.invoke(main, ["runs", "list", "--db", db, "--by-version"])
    assert "queued 1" in table.output and "version" in table.output
    shown = runner.invoke(main, ["runs", "show", "old", "--db", db])
    assert "version=1 prompt_version=-" in shown.output
