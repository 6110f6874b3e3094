"""A module that ends its own process when imported (a script's unguarded
``sys.exit(main())``) or raises while imported: ``durably audit`` and ``durably chaos
--workflow`` say so and exit non-zero, instead of exiting 0 with nothing checked (a CI
gate passing on no audit) or printing a traceback. The real commands in subprocesses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HEAD = (
    "import sys\n"
    "import durably\n"
    'engine = durably.Engine("sqlite:///{db}")\n'
    '@engine.workflow(name="w")\n'
    "def w(ctx):\n"
    '    return ctx.step("x", print)\n'
)
ENDINGS = {
    "exit0": ("sys.exit(0)\n", "sys.exit(0)"),
    "exit_none": ("raise SystemExit\n", "sys.exit(None)"),
    "raises": ('raise ValueError("boom at import")\n', "ValueError"),
}


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durably.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_audit_of_a_module_that_exits_on_import_fails_clearly(tmp_path: Path, ending: str) -> None:
    code, said = ENDINGS[ending]
    (tmp_path / "agents.py").write_text(HEAD.format(db=tmp_path / "j.db") + code)
    r = _cli(tmp_path, "audit", "agents.py:engine")
    assert r.returncode != 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert said in r.stderr, r.stderr


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_chaos_of_a_module_that_exits_on_import_fails_clearly(tmp_path: Path, ending: str) -> None:
    code, said = ENDINGS[ending]
    (tmp_path / "agents.py").write_text(HEAD.format(db=tmp_path / "j.db") + code)
    r = _cli(tmp_path, "chaos", "--workflow", "agents.py:w")
    assert r.returncode != 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert said in r.stderr + r.stdout, r.stderr
