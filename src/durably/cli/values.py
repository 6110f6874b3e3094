"""``durably runs why RUN --show-values``: the values behind a blocked run's reason, for a
person on the journal's host.

A replay mismatch's message (the run's reason, its ``run.blocked`` event, spans, the
exception and ``replay --check`` output) names the argument, message and field that
differ with lengths and sha256 prefixes, never the values: those may be API keys or
personal data, and the message leaves the process. This prints what the journal holds:
the recorded arguments of the step the run is blocked at, in full, with real line
breaks. The arguments the code passes now were never recorded (the step did not run
with them), so they cannot be shown here; the reason's hashes and lengths are their
whole trace.
"""

from __future__ import annotations

import re
from typing import Any

from .. import inputs
from ..history import BLOCKED
from .common import inert

# The reason of a replay mismatch at a recorded position: "step 3: history has ...".
_AT_STEP = re.compile(r"^step ([0-9][0-9.g]*): history has ")

CODE_SIDE = (
    "the code's side: the arguments today's code passes were never recorded (the step did"
    " not run with them), so they are not in the journal and cannot be shown here; the"
    " lengths in the reason above (and sha256 prefixes, for values of 16 characters or"
    " more) are all that was kept of them. To compare, print them where the code runs."
)


def show_values(engine: Any, run_id: str) -> str:
    """What ``--show-values`` prints for ``run_id``: the run's full reason and the
    recorded arguments of the step it is blocked at (journal text, made inert but with
    its line breaks kept). Raises what ``engine.get_run`` raises for an unknown run."""
    run = engine.get_run(run_id)
    reason = run.park_reason or ""
    m = _AT_STEP.match(reason)
    if run.status != BLOCKED or m is None:
        return (
            "no values to show: --show-values shows the recorded arguments of a step a run"
            " is blocked at by a replay mismatch, and this run is "
            + ("blocked for another reason" if run.status == BLOCKED else run.status)
        )
    position = m.group(1)
    step = next((s for s in engine.history(run_id) if s.position == position), None)
    lines = [f"reason: {reason}", ""]
    if step is None or step.inputs is None:
        lines.append(
            f"step {position} kept no record of its inputs (recorded before durably kept"
            " them): there are no recorded values to show"
        )
    else:
        try:
            recorded = inputs.show(step.inputs, engine.blobs)
        except (ValueError, KeyError, TypeError, LookupError, AttributeError) as exc:
            recorded = f"(recorded inputs unreadable: {type(exc).__name__}: {exc})"
        lines += [
            f"recorded inputs of step {position} {step.name!r} (from the journal):",
            recorded,
        ]
    lines += ["", CODE_SIDE]
    return inert("\n".join(lines), keep="\n")
