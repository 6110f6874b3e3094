"""A process that resumes a crashed run imports only what the resume uses (issue 28).

A restart's cost is mostly imports: the standard library modules durably reaches only on
rare paths (logging for a warning, difflib for a misspelled option, random for a retry's
jitter or ``ctx.random()``, base64 for bytes values and list cursors, shlex for the chmod
advice) are imported where they are used, and so are the engine's rooms a run's own path
never calls (admin: retry/fork/cancel/recover; the read methods; signals and approvals
sent from outside), and the approvals room until a run asks for an approval or one is
read, so a resume that uses none never loads them. Nor does it import ``dataclasses``:
the records on its path are written out (``durably._record``), not generated at import;
nor ``inspect``: a plain function's code answers what the path asks of the workflow and
its steps (``durably._callables``).
The run here is real: recorded on a SQLite file by a process SIGKILLed in its last step,
resumed by a fresh interpreter that lists ``sys.modules`` at its first live step.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

# Each is what the resume below does not use: a regression that imports one at the top
# of a module on the resume's path shows here.
NOT_ON_A_RESUME = (
    *("logging", "difflib", "random", "base64", "shlex", "asyncio", "uuid"),
    # durably's records are durably._record classes, not dataclasses: @dataclass compiled
    # each class's methods at import, and the module brings inspect, ast and tokenize.
    "dataclasses",
    # What a run's path asks of a plain function is read from its code (durably._callables).
    "inspect",
    *("durably.engine.admin", "durably.engine.reads", "durably.engine.messages"),
    *("durably.recovery", "durably.approvals", "durably.features.approvals"),
)

_WORKFLOW = """
import json, os, signal, sys
import durably

engine = durably.Engine(sys.argv[1])
crash = sys.argv[2] == "crash"
seen = []

def trivial(i):
    if crash and i == 4:
        os.kill(os.getpid(), signal.SIGKILL)
    if not crash and not seen:
        seen.extend(sys.modules)
    return {"i": i, "data": [i, "x"]}

@engine.workflow(name="resume-imports")
def many(ctx, steps):
    return [ctx.step("s", trivial, i)["i"] for i in range(steps)]

assert engine.run(many, 5, run_id="crashed") == [0, 1, 2, 3, 4]
print(json.dumps(sorted(seen)))
"""


def test_a_resume_imports_none_of_the_rarely_used_stdlib_modules(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    script = textwrap.dedent(_WORKFLOW)
    crashed = subprocess.run([sys.executable, "-c", script, url, "crash"], check=False)
    assert crashed.returncode == -9, "the first process was to die by SIGKILL in step 4"
    out = subprocess.run(
        [sys.executable, "-c", script, url, "resume"], check=True, capture_output=True, text=True
    )
    loaded = set(json.loads(out.stdout))
    # The resume did replay: the engine and the journal's store are loaded.
    assert {"durably.engine.facade", "durably.store.sqlite", "sqlite3"} <= loaded
    assert sorted(loaded & set(NOT_ON_A_RESUME)) == []
