"""Step inputs kept by content hash: what a step was called with, a diff when the code
asks for other inputs, and storage that grows by one message per conversation turn."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import durably
from durably import inputs
from durably.history import BLOCKED


class Crash(BaseException):
    """Stands in for a process death inside one process (real deaths: tests/crash)."""


@pytest.fixture
def engine(journal_url: str) -> Iterator[durably.Engine]:
    e = durably.Engine(journal_url, clock=durably.FakeClock())
    yield e
    e.close()


def reply(messages: list[dict[str, str]], temperature: float = 0.0) -> str:
    """A stand-in model call: its output is small, its input is the whole conversation."""
    return f"reply {len(messages)}"


def message(i: int, size: int = 2000) -> dict[str, str]:
    return {"role": "user", "content": f"turn {i} " + "x" * size}


def chat(engine: durably.Engine, name: str, turns: int, changed: int | None = None) -> Any:
    """A workflow that grows a conversation by one ~2 KB message a turn; message
    ``changed`` differs from the recorded one (a deploy that edits the history)."""

    @engine.workflow(name=name)
    def wf(ctx: durably.Context) -> int:
        messages: list[dict[str, str]] = []
        for i in range(turns):
            messages.append(message(i))
            if changed is not None and i == changed:
                messages[i] = {"role": "user", "content": f"turn {i} edited"}
            ctx.step("model", reply, messages)
        return len(messages)

    return wf


def stored_bytes(engine: durably.Engine, run_id: str) -> int:
    """What a run's inputs and outputs take in the journal: its step rows' manifests and
    outputs plus every blob they name (blobs of a run are the only ones in the file)."""
    history = engine.store.load_history(run_id, 0)
    own = sum(len(r.inputs or "") + len(r.output or "") for r in history)
    digests: set[str] = set()
    read: dict[str, str] = {}

    def fetch(wanted: list[str]) -> dict[str, str]:
        # Each record's chain shares the previous record's: read every blob once (walking
        # each chain to its root read n^2/2 blobs, 9 s of queries on PostgreSQL).
        missing = [d for d in wanted if d not in read]
        if missing:
            read.update(engine.store.get_blobs(missing))
        return {d: read[d] for d in wanted if d in read}

    for r in history:
        assert r.inputs is not None
        for ref in inputs._refs(r.inputs).values():
            hashes = inputs.item_hashes(ref, fetch)
            digests.update([hashes] if isinstance(hashes, str) else hashes)
            node = ref.get("l")
            while node is not None and node not in digests:  # the chain's nodes are stored too
                digests.add(node)
                node = inputs.json.loads(fetch([node])[node])["p"]
    blobs = engine.store.get_blobs(sorted(digests))
    return own + sum(len(t.encode()) for t in blobs.values())


def test_step_inputs_are_kept_and_read_back(engine: durably.Engine) -> None:
    wf = chat(engine, "chat", 3)
    assert engine.run(wf, run_id="r") == 3
    history = engine.store.load_history("r", 0)
    assert [r.name for r in history] == ["model"] * 3
    last = inputs.load(history[2].inputs or "", engine.store.get_blobs)
    assert last == {"0": [message(0), message(1), message(2)]}


def test_bytes_per_turn_stay_constant_as_a_conversation_grows(
    engine: durably.Engine,
) -> None:
    """Stored whole, 200 turns would take 4x the bytes per turn of 50 (quadratic)."""
    engine.run(chat(engine, "short", 50), run_id="short")
    engine.run(chat(engine, "long", 200), run_id="long")
    per_turn_short = stored_bytes(engine, "short") / 50
    per_turn_long = stored_bytes(engine, "long") / 200
    assert per_turn_long < 1.5 * per_turn_short
    # Each turn's message is stored once: a turn costs about one message, not more.
    assert per_turn_long < 2 * len(str(message(0)))


def half_done(engine: durably.Engine, wf: Any, run_id: str) -> None:
    """Run ``wf`` until its third step's result is recorded, then stop it (a crash)."""

    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if (pos, window) == ("2", "recorded"):
            raise Crash(pos)

    engine.fault_hook = hook
    with pytest.raises(Crash):
        engine.run(wf, run_id=run_id)
    engine.fault_hook = None


def test_changed_message_names_the_argument_and_message(engine: durably.Engine) -> None:
    half_done(engine, chat(engine, "chat", 5), "r")
    engine._registry.versions.pop("chat", None)  # a deploy: the same workflow, new code
    chat(engine, "chat", 5, changed=1)
    with pytest.raises(durably.NonDeterminism) as err:
        engine.run("chat", run_id="r")
    text = str(err.value)
    assert "inputs differ" in text
    assert (
        "argument 'messages' (0): message 1 of 2 recorded / 2 now differs (role 'user'):"
        " field 'content' differs: " in text
    )
    # lengths and hashes, never the values: the message reaches events, spans and CI logs
    assert "turn 1 edited" not in text and "turn 1 x" not in text
    assert engine.get_run("r").status == BLOCKED


def test_changed_prompt_names_the_prompt_versions_and_the_argument_not_its_value(
    engine: durably.Engine,
) -> None:
    def plan(prompt: str, task: str) -> str:
        return "plan"

    def register(prompt: str, version: str) -> Any:
        @engine.workflow(name="agent", prompt_version=version)
        def agent(ctx: durably.Context) -> str:
            for task in ("a", "b", "c", "d"):
                ctx.step("plan", plan, prompt, task=task)
            return "done"

        return agent

    half_done(engine, register("You are a careful planner.", "p1"), "r")
    engine._registry.versions.pop("agent", None)
    register("You are a fast planner.", "p2")
    with pytest.raises(durably.NonDeterminism) as err:
        engine.run("agent", run_id="r")
    text = str(err.value)
    assert "argument 'prompt' (0) differs: 26 -> 23 chars, sha256 " in text
    assert "careful" not in text and "fast" not in text
    assert "prompt version 'p1', the code has 'p2'" in text
    assert "ctx.patched" in text and "fork" in text


def test_runs_show_inputs_prints_what_each_step_was_called_with(journal_url: str) -> None:
    import json

    from click.testing import CliRunner

    from durably.cli import main

    with durably.Engine(journal_url) as e:
        e.run(chat(e, "chat", 2), run_id="r")
    out = CliRunner().invoke(main, ["runs", "show", "r", "--db", journal_url, "--inputs"])
    assert out.exit_code == 0, out.output
    assert "step 1 model inputs:" in out.output and "turn 1 xxx" in out.output
    shown = CliRunner().invoke(
        main, ["runs", "show", "r", "--db", journal_url, "--inputs", "--json"]
    )
    steps = json.loads(shown.output)["steps"]
    assert steps[1]["inputs"] == {"0": [message(0), message(1)]}
    plain = CliRunner().invoke(main, ["runs", "show", "r", "--db", journal_url, "--json"])
    assert "inputs" not in json.loads(plain.output)["steps"][0]


def test_large_outputs_go_to_the_blob_table_and_are_read_only_when_reached(
    engine: durably.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durably.history import OUTPUT_INLINE_BYTES_MAX

    big = "y" * (OUTPUT_INLINE_BYTES_MAX + 1)
    seen: list[str] = []

    @engine.workflow(name="big")
    def wf(ctx: durably.Context, stop_after_first: bool) -> int:
        first = ctx.step("fetch", lambda: big)
        seen.append(first)
        if stop_after_first:
            return 0
        return len(ctx.step("small", lambda: "z"))

    half_done_at = {"0": "recorded"}

    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if half_done_at.get(pos) == window:
            raise Crash(pos)

    engine.fault_hook = hook
    with pytest.raises(Crash):
        engine.run(wf, False, run_id="r")
    engine.fault_hook = None
    (rec,) = engine.store.load_history("r", 0)
    assert rec.output is not None and len(rec.output) < 100  # a reference, not the payload
    fetched: list[list[str]] = []
    real = engine.store.get_blobs

    def counting(digests: Any) -> Any:
        fetched.append(list(digests))
        return real(digests)

    monkeypatch.setattr(engine.store, "get_blobs", counting)
    assert engine.run(wf, False, run_id="r") == 1
    assert seen[-1] == big and len(fetched) == 1  # read once, when the replay reached it


@pytest.mark.parametrize("long", [False, True], ids=["inline", "blob"])
def test_changed_prompt_argument_is_named_whatever_its_size(
    engine: durably.Engine, long: bool
) -> None:
    rules = " Rules: " + "r" * 300 if long else ""

    def plan(prompt: str, task: str) -> str:
        return "plan"

    def register(prompt: str) -> Any:
        @engine.workflow(name="a")
        def agent(ctx: durably.Context) -> str:
            for task in ("a", "b", "c", "d"):
                ctx.step("plan", plan, prompt, task=task)
            return "done"

        return agent

    half_done(engine, register("Be careful." + rules), "r")
    engine._registry.versions.pop("a", None)
    register("Be fast." + rules)
    with pytest.raises(durably.NonDeterminism) as err:
        engine.run("a", run_id="r")
    text = str(err.value)
    assert "argument 'prompt' (0) differs: " in text
    assert "careful" not in text and "fast" not in text and "rrrr" not in text


# -- codec version 2: list digests from per-item hashes ---------------------------------


def test_list_digest_v2_is_the_same_cached_or_not_and_differs_from_v1() -> None:
    from durably import codec

    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    cache = codec.ItemHashes()
    first = codec.digest("m", [msgs], {"t": 0.5}, 2, cache)
    assert codec.digest("m", [msgs], {"t": 0.5}, 2, cache) == first
    assert codec.digest("m", [[dict(m) for m in msgs]], {"t": 0.5}, 2) == first
    assert codec.digest("m", [msgs], {"t": 0.5}, 1) != first
    # Without a list argument the rules agree: old digests of such steps stay valid.
    assert codec.digest("m", ["p"], {"k": {"a": 1}}, 2) == codec.digest("m", ["p"], {"k": {"a": 1}})
    with pytest.raises(durably.SerializationError, match="codec version 9"):
        codec.digest("m", [], {}, 9)


@pytest.mark.parametrize(
    ("before", "after"),
    [("hi", "changed"), (1, True), (1, 1.0), ([1], [1, 2]), ({"a": 1}, {"a": 1, "b": 2})],
)
def test_an_item_changed_in_place_is_hashed_again(before: Any, after: Any) -> None:
    """The cache is keyed by object: a message edited in place (even to an equal value of
    another type, which encodes differently) must not keep its old hash."""
    from durably import codec

    msg = {"role": "user", "content": before}
    msgs = [msg]
    cache = codec.ItemHashes()
    old = codec.digest("m", [msgs], {}, 2, cache)
    msg["content"] = after
    assert codec.digest("m", [msgs], {}, 2, cache) == codec.digest("m", [msgs], {}, 2)
    assert codec.digest("m", [msgs], {}, 2, cache) != old


def test_a_message_edited_in_place_under_a_half_finished_run_is_detected(
    engine: durably.Engine,
) -> None:
    def register(edit: bool) -> Any:
        @engine.workflow(name="c")
        def wf(ctx: durably.Context) -> int:
            first = {"role": "user", "content": "hello"}
            messages = [first]
            for i in range(4):
                ctx.step("model", reply, messages)
                if edit and i == 0:
                    first["content"] = "hello, edited in place"
                messages.append(message(i, 10))
            return len(messages)

        return wf

    half_done(engine, register(False), "r")
    engine._registry.versions.pop("c", None)
    register(True)
    with pytest.raises(durably.NonDeterminism, match="message 0 of 2 recorded"):
        engine.run("c", run_id="r")


def test_runs_recorded_under_codec_version_1_keep_their_rule(
    engine: durably.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durably import codec

    monkeypatch.setattr(codec, "CODEC_VERSION", 1)  # a run created by an older durably
    wf = chat(engine, "chat", 4)
    half_done(engine, wf, "old")
    monkeypatch.setattr(codec, "CODEC_VERSION", 2)
    assert engine.get_run("old").codec_version == 1
    assert engine.run(wf, run_id="old") == 4  # replays: its steps digest by rule 1
    assert engine.run(wf, run_id="new") == 4
    assert engine.get_run("new").codec_version == 2
    old, new = engine.store.load_history("old", 0), engine.store.load_history("new", 0)
    assert old[0].digest != new[0].digest  # the same call, digested by each run's rule


def test_runs_show_inputs_names_an_unreadable_manifest_and_shows_the_rest(tmp_path: Any) -> None:
    import json
    import sqlite3

    from click.testing import CliRunner

    from durably.cli import main

    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url) as e:
        e.run(chat(e, "chat", 2), run_id="r")
    with sqlite3.connect(tmp_path / "j.db") as conn:
        conn.execute("UPDATE steps SET inputs = 'not json' WHERE position = '0'")
    out = CliRunner().invoke(main, ["runs", "show", "r", "--db", url, "--inputs", "--json"])
    assert out.exit_code == 0, out.output
    steps = json.loads(out.output)["steps"]
    assert "recorded inputs unreadable" in steps[0]["inputs"]["error"]
    assert steps[1]["inputs"] == {"0": [message(0), message(1)]}
