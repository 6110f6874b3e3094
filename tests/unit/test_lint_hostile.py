"""``durably lint`` on a tree that is not all plain Python files: an editor's lock file
(a dangling symlink named ``.#x.py``), a named pipe called ``x.py``, an expression nested
deeper than the parser or the checker can follow. Each is a finding naming the file (or
is skipped, for what is no file), never a traceback or a hang; the real command in a
subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from durably.lint import lint_paths

WORKFLOW = (
    "import time\nimport durably\ndef wf(ctx: durably.Context) -> float:\n    return time.time()\n"
)


def _lint(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durably.cli", "lint", "--json", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_lint_skips_what_is_no_file_and_still_checks_the_rest(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(WORKFLOW)
    os.symlink("ana@host.1234:1700000000", tmp_path / ".#agent.py")  # an Emacs lock file
    os.symlink(tmp_path / "gone.py", tmp_path / "dangling.py")
    os.mkfifo(tmp_path / "pipe.py")  # reading it would wait forever
    r = _lint(str(tmp_path))
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 1, r.stderr
    found = json.loads(r.stdout)
    assert [(Path(f["path"]).name, f["rule"]) for f in found] == [("agent.py", "wall-clock")]


def test_source_nested_too_deeply_is_a_finding_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "minus.py").write_text("x = " + "-" * 100_000 + "1\n")
    (tmp_path / "plus.py").write_text("x = " + "+".join(["1"] * 50_000) + "\n")
    (tmp_path / "wide.py").write_text(
        "import durably\ndef wf(ctx: durably.Context) -> int:\n    return "
        + "+".join(["1"] * 3000)
        + "\n"
    )
    (tmp_path / "agent.py").write_text(WORKFLOW)
    r = _lint(str(tmp_path))
    assert "Traceback" not in r.stderr, r.stderr
    found = {Path(f["path"]).name: f for f in json.loads(r.stdout)}
    assert found["agent.py"]["rule"] == "wall-clock"
    for name in ("minus.py", "plus.py"):
        assert found[name]["rule"] == "syntax", found
        assert "nested too deeply" in found[name]["why"]
    assert lint_paths([str(tmp_path / "agent.py")])[0].rule == "wall-clock"


def test_a_file_in_its_declared_encoding_is_read_in_it(tmp_path: Path) -> None:
    # PEP 263: a coding cookie names the file's encoding; read as UTF-8 the "é" of this
    # Latin-1 file is no character, and the file seemed not to parse.
    source = "# -*- coding: latin-1 -*-\n" + WORKFLOW.replace("wf(", "caf\u00e9(")
    (tmp_path / "latin.py").write_bytes(source.encode("latin-1"))
    (found,) = lint_paths([str(tmp_path / "latin.py")])
    assert (found.rule, found.line) == ("wall-clock", 5)
    (tmp_path / "bad_cookie.py").write_bytes(b"# -*- coding: no-such-codec -*-\nx = 1\n")
    (bad,) = lint_paths([str(tmp_path / "bad_cookie.py")])
    assert bad.rule == "syntax" and "no-such-codec" in bad.why
