"""A digest is a value's unsalted sha256: shown where a message leaves the process, it
gives back a short value (a PIN, an amount, an account number) to anyone who tries the
few candidates offline, which is why a diff shows no hash of a value shorter than
``durably.limits.HASH_SHOWN_CHARS_MIN``. Once, every ``NonDeterminism`` message named
the recorded and the new step's input digests (``'verify'(35ba51e51db6)``): the diff said
"argument 'pin' differs: 4 -> 4 chars", and 10,000 tries of the digest recovered both
PINs from the exception text, the ``run.blocked`` event and ``replay --check`` output."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

import durably
from durably import codec

OLD_PIN, NEW_PIN = "4821", "1234"


def _register(engine: durably.Engine, pin: str, *, shape: str = "same") -> None:
    def check(pin: str) -> bool:
        return True

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> int:
        if shape == "renamed":
            ctx.step("verify again", check, pin=pin)
        elif shape != "dropped":
            ctx.step("verify", check, pin=pin)
        ctx.wait_for_signal("go")
        return 1


def _pins_recovered(text: str) -> set[str]:
    """The PINs whose step digest (either codec version, as ``verify``'s step) shows
    in ``text`` as a 12-character hex prefix."""
    shown = set(re.findall(r"[0-9a-f]{12}", text))
    found = set()
    for n in range(10_000):
        pin = f"{n:04d}"
        for name in ("verify", "verify again"):
            for version in codec.CODEC_VERSIONS:
                if codec.digest(name, [], {"pin": pin}, version=version)[:12] in shown:
                    found.add(pin)
    return found


@pytest.mark.parametrize("shape", ["same", "renamed", "dropped"])
def test_a_nondeterminism_message_shows_no_digest_a_short_argument_is_recovered_from(
    tmp_path: Path, shape: str
) -> None:
    db = tmp_path / "j.db"
    url = f"sqlite:///{db}"
    with durably.Engine(url, park_wait_s=0) as engine:
        _register(engine, OLD_PIN)
        with pytest.raises(durably.RunParked):
            engine.run("wf", run_id="r1")
    with durably.Engine(url, park_wait_s=0) as engine:
        _register(engine, NEW_PIN, shape=shape)
        engine.signal("r1", "go")
        with pytest.raises(durably.NonDeterminism) as err:
            engine.run("wf", run_id="r1")
        reason = engine.get_run("r1").park_reason or ""
    text = str(err.value)
    assert "step 0: history has 'verify'" in text
    with sqlite3.connect(db) as conn:
        events = repr(conn.execute("SELECT * FROM events").fetchall())
    assert _pins_recovered(f"{text}\n{reason}\n{events}") == set()


def test_a_run_started_again_with_other_input_shows_no_digest_of_either(tmp_path: Path) -> None:
    with durably.Engine(f"sqlite:///{tmp_path / 'j.db'}") as engine:

        @engine.workflow(name="pay")
        def pay(ctx: durably.Context, pin: str) -> str:
            return "ok"

        engine.run("pay", OLD_PIN, run_id="p1")
        with pytest.raises(durably.RunConflict) as err:
            engine.run("pay", NEW_PIN, run_id="p1")
    text = str(err.value)
    assert "was started with other input" in text
    shown = set(re.findall(r"[0-9a-f]{12}", text))
    assert shown == set(), text


def test_a_changed_map_names_no_key_that_is_data(tmp_path: Path) -> None:
    # A dict's keys are field names in a request ("Authorization", "role") but data in a
    # map keyed by customer: an e-mail address, a phone number, an account id. Once, the
    # diff named them ("field 'ana@example.com' added"): personal data in the exception,
    # the run.blocked event and replay --check output.
    url = f"sqlite:///{tmp_path / 'j.db'}"

    def register(engine: durably.Engine, balances: dict[str, int]) -> None:
        def settle(balances: dict[str, int], headers: dict[str, str]) -> bool:
            return True

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> int:
            ctx.step("settle", settle, balances, {"X-Request-Id": "r-1"})
            ctx.wait_for_signal("go")
            return 1

    with durably.Engine(url, park_wait_s=0) as engine:
        register(engine, {"ana@example.com": 10, "plan": 1})
        with pytest.raises(durably.RunParked):
            engine.run("wf", run_id="r1")
    with durably.Engine(url, park_wait_s=0) as engine:
        register(engine, {"ana@example.com": 11, "+44 7700 900123": 5, "plan": 2})
        engine.signal("r1", "go")
        with pytest.raises(durably.NonDeterminism) as err:
            engine.run("wf", run_id="r1")
    text = str(err.value)
    for data in ("ana@", "7700", "example.com"):
        assert data not in text, text
    assert "field 'plan' differs" in text  # a key shaped like a name is still named
    assert "a key of 15 chars" in text  # the others by their length
