"""``durably audit`` on workflows whose source it cannot read (made by ``exec``, a
``functools.partial``, a module shipped as bytecode only): each is reported as an
unknown entry (and fails ``--strict``), never skipped while the audit says every effect
is made safe. The real command in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

MODULE = '''
import functools
import durably

engine = durably.Engine("sqlite:///{db}")

SOURCE = """
def made(ctx):
    return ctx.step("wipe", print)
"""
namespace = {{}}
exec(SOURCE, namespace)
engine.workflow(name="made_by_exec")(namespace["made"])


def base(ctx, who):
    return ctx.step("wipe", print)


engine.workflow(name="partial")(functools.partial(base, who="x"))


@engine.workflow(name="plain")
def plain(ctx):
    return ctx.step("read", print)
'''


def _audit(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "agents.py").write_text(MODULE.format(db=tmp_path / "j.db"))
    return subprocess.run(
        [sys.executable, "-m", "durably.cli", "audit", "agents.py:engine", *flags],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )


def test_a_workflow_whose_source_cannot_be_read_is_reported_unknown(tmp_path: Path) -> None:
    r = _audit(tmp_path, "--json")
    assert "Traceback" not in r.stderr, r.stderr
    report = json.loads(r.stdout)
    unknown = {e["workflow"] for e in report["unknown"]}
    assert unknown == {"made_by_exec", "partial"}, report
    assert {e["workflow"] for e in report["entries"]} == {"made_by_exec", "partial", "plain"}
    assert r.returncode == 0  # unknown is an error only with --strict


def test_strict_audit_fails_on_a_workflow_it_could_not_read(tmp_path: Path) -> None:
    r = _audit(tmp_path, "--strict")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "made_by_exec" in r.stdout and "partial" in r.stdout
    assert "source" in r.stdout
    assert "every effect is made safe (of those resolved)" in r.stdout
