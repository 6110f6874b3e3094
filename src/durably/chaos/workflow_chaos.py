"""``durably chaos --workflow module:function``: crash-test any registered workflow.

A clean run (in a forked child) enumerates the workflow's steps from its history. Then,
for every step and each of the three windows, a forked child runs the workflow until the
engine's fault hook kills it with SIGKILL at that point, and a second forked child resumes
the run to its end. The fault hook also logs every live execution (the ``before`` window
fires once per execution) to an append-only file that survives the kill, so the parent can
tell which steps ran more than once, with which idempotency keys, and at what token cost.

Verdicts per re-executed step:

* it takes an ``idempotency_key``: every execution got the same key; safe if the receiver
  honours it;
* it reported model usage (``durably.usage``): a repeated model call, counted as extra
  tokens;
* it has a ``reconcile`` function: it re-ran only because reconcile said it had not
  happened;
* otherwise it is an **unkeyed re-execution**: if the step has a side effect, that effect
  happened twice. Steps known to be safe to repeat (reads, pure computation) can be listed
  with ``allow_repeat``.

A step declared ``@durably.step(effect=True)`` without key or reconcile is never re-run:
the resume parks the run ``in_doubt``, reported as "parked in doubt (safe)".

Tool kinds (``@durably.tool``) count: a ``read`` or ``idempotent`` tool may repeat
(verdict "read tool, may repeat"). A run that parks for an approval, a signal or a short
timer is answered by the harness (``park="answer"``: approved as "durably chaos", the
signal sent with null data, the timer waited out) or stopped with a message
(``park="stop"``), never waited for without end.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import tempfile
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import codec
from ..engine import Engine, Workflow
from ..errors import DurablyError, RunInDoubt, RunParked, WorkflowFailed
from ..history import NOW, RANDOM, SIGNAL, STEP, UUID
from ..replay.kernel import fault_step
from . import WINDOWS
from ._fork import EXIT_NOT_KILLED, EXIT_OK, child_error, die_now, spawn, wait_any

IN_DOUBT = "parked in doubt (safe)"
COMPLETED = "completed"
STOPPED = "stopped"
# How a chaos child meets a run that parks: "answer" approves each approval request (as
# "durably chaos"), sends each awaited signal (data null) and waits out a timer due
# within TIMER_WAIT_S_MAX; "stop" ends the run there with a message. Never an endless wait.
PARK_MODES = ("answer", "stop")
TIMER_WAIT_S_MAX = 10.0
PARKS_MAX = 100  # answers per drive: a workflow that parks forever is stopped, named
# Tool kinds that may repeat: a read re-runs freely, an idempotent tool is safe to repeat.
REPEATABLE_KINDS = frozenset({"read", "idempotent"})
# Recorded values shorter than this are not searched for inside strings (too many false
# matches); equal values are still masked whole.
MASKED_TEXT_CHARS_MIN = 6


class WorkflowLoadError(Exception):
    """``module:function`` does not name a registered durably workflow."""


def load_workflow(spec: str) -> Workflow:
    """Import ``module:attr`` (or ``path/to/file.py:attr``) and return the Workflow there.

    The attribute must be what ``@engine.workflow()`` returned: a ``durably.Workflow``.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise WorkflowLoadError(
            f"--workflow {spec!r}: write module:function, e.g."
            " myapp.agents:incident or examples/sample.py:refund"
        )
    try:
        module = import_target(module_name)
    except ImportError as exc:
        raise WorkflowLoadError(
            f"--workflow {spec!r}: cannot import {module_name!r}: {exc}"
        ) from exc
    except Exception as exc:  # the module's own code failed while it was imported
        raise WorkflowLoadError(
            f"--workflow {spec!r}: importing {module_name!r} raised {type(exc).__name__}:"
            f" {exc}; fix the module (importing it in Python shows the traceback)"
        ) from exc
    obj = getattr(module, attr, None)
    if not isinstance(obj, Workflow):
        raise WorkflowLoadError(
            f"--workflow {spec!r}: {attr!r} in {module_name!r} is {type(obj).__name__}, not a"
            " durably workflow; name the object @engine.workflow() returned"
        )
    return obj


def import_target(name: str) -> Any:
    """Import a module by name, or a Python file by path (``path/to/file.py``); the working
    directory is importable, as under ``python -m``. A module that ends the process while
    imported (``sys.exit``) raises ``ImportError`` saying so: the command that imports it
    must not end with that code as though it had checked anything."""
    try:
        return _import_target(name)
    except SystemExit as exc:
        raise ImportError(
            f"importing {name} called sys.exit({exc.code!r}); guard the script's entry point"
            ' with `if __name__ == "__main__":` so importing it only defines things'
        ) from None


def _import_target(name: str) -> Any:
    if name.endswith(".py") or os.sep in name:
        path = Path(name).resolve()
        mod_name = f"durably_chaos_target_{path.stem}"
        spec = importlib.util.spec_from_file_location(mod_name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"no Python file at {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
        return module
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the working directory imports
    return importlib.import_module(name)


@dataclass(frozen=True)
class Execution:
    """One live execution of a step, as the fault hook saw it."""

    phase: str
    position: str
    name: str
    key: str | None
    takes_key: bool | None
    effect: bool | None
    reconcile: bool | None


@dataclass
class StepRepeat:
    """A step that executed more than once after one kill."""

    position: str
    name: str
    executions: int
    keys: list[str | None]
    same_key: bool
    verdict: str
    extra_tokens: int


@dataclass
class KillOutcome:
    """What one kill at (position, window) and its resume did."""

    position: str
    name: str
    window: str
    outcome: str
    same_result: bool | None
    repeats: list[StepRepeat] = field(default_factory=list)
    extra_tokens: int = 0

    @property
    def unsafe(self) -> list[StepRepeat]:
        """Repeats that may have duplicated a side effect."""
        return [r for r in self.repeats if r.verdict == UNKEYED]


UNKEYED = "unkeyed re-execution"


@dataclass
class WorkflowChaosReport:
    """Every kill point of one workflow, and the verdict."""

    workflow: str
    steps: list[tuple[str, str]]
    clean_result: Any
    kills: list[KillOutcome]
    seconds: float = 0.0
    durability: str = "power"  # the journal's mode in every run (docs/durability.md)

    @property
    def unsafe_steps(self) -> list[str]:
        """Names of steps with no key and no reconcile that executed twice."""
        return sorted({r.name for k in self.kills for r in k.unsafe})

    @property
    def failed(self) -> bool:
        """True when the workflow should not ship as it is."""
        return bool(self.unsafe_steps) or any(
            k.outcome not in (COMPLETED, IN_DOUBT) for k in self.kills
        )

    def to_json(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        return {
            "workflow": self.workflow,
            "steps": [list(s) for s in self.steps],
            "clean_result": self.clean_result,
            "unsafe_steps": self.unsafe_steps,
            "failed": self.failed,
            "seconds": round(self.seconds, 3),
            "durability": self.durability,
            "kills": [asdict(k) for k in self.kills],
        }


# -- the child side ------------------------------------------------------------------


def _step_facts() -> tuple[str | None, bool | None, bool | None, bool | None]:
    """The key, takes-key, effect and reconcile facts of the step being executed, as the
    engine tells its fault hook (:func:`durably.core.fault_step`); unknown (None) outside
    a hook call, never guessed."""
    info = fault_step()
    if info is None:
        return None, None, None, None
    # The key the step *received*: only a function taking idempotency_key gets one.
    key = info.key if info.takes_key else None
    return key, info.takes_key, info.effect, info.has_reconcile


class _Recorder:
    """The fault hook of a chaos child: log each live execution; kill at the target."""

    def __init__(self, log: Path, phase: str, target: tuple[str, str] | None) -> None:
        self.fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.phase = phase
        self.target = target

    def __call__(self, run_id: str, position: str, name: str, window: str) -> None:
        if window == "before":
            key, takes_key, effect, reconcile = _step_facts()
            line = json.dumps(
                asdict(Execution(self.phase, position, name, key, takes_key, effect, reconcile))
            )
            os.write(self.fd, (line + "\n").encode())  # in the kernel before any kill
        if self.target == (position, window):
            die_now()


def _child(
    wf: Workflow,
    url: str,
    run_id: str,
    args: list[Any],
    kwargs: dict[str, Any],
    folder: Path,
    phase: str,
    target: tuple[str, str] | None,
    park: str = "answer",
    store: dict[str, str | None] | None = None,
) -> int:
    """Body of a forked child: a fresh Engine on the journal (in the sweep's durability
    mode, ``store``), the workflow, one drive."""
    # Only the options given: a PostgreSQL journal takes no ``synchronous`` (None included).
    options: dict[str, Any] = {k: v for k, v in (store or {}).items() if v is not None}
    engine = Engine(
        url,
        fault_hook=_Recorder(folder / "executions.jsonl", phase, target),
        park_wait_s=0,
        **options,
    )
    engine.workflow(name=wf.name, version=wf.version, prompt_version=wf.prompt_version)(wf.fn)
    out: dict[str, Any]
    try:
        result = _drive(engine, wf, run_id, args, kwargs, park)
        plain = json.loads(codec.dumps(result, "result"))
        recorded = [
            (r.kind, json.loads(r.output))
            for r in engine.history(run_id)
            if r.kind in (NOW, RANDOM, UUID) and r.output is not None
        ]
        out = {"outcome": COMPLETED, "result": mask_recorded(plain, recorded)}
    except RunInDoubt:
        out = {"outcome": IN_DOUBT}
    except _Stopped as exc:
        out = {"outcome": f"{STOPPED}: {exc}"}
    except WorkflowFailed as exc:
        out = {"outcome": f"failed: {exc.type_name}: {exc.message}"}
    except DurablyError as exc:
        out = {"outcome": f"error: {type(exc).__name__}: {exc}"}
    if phase == "clean":
        steps = [
            (r.position, r.name, r.usage_tokens or 0)
            for r in engine.history(run_id)
            if r.kind == STEP
        ]
        out["steps"] = steps
    engine.close()
    (folder / f"{phase}.json").write_text(json.dumps(out))
    return EXIT_NOT_KILLED if target is not None else EXIT_OK


class _Stopped(Exception):
    """The run parked and the harness does not answer it (the text says why)."""


def _drive(
    engine: Engine, wf: Workflow, run_id: str, args: list[Any], kwargs: dict[str, Any], park: str
) -> Any:
    """Run to the end, answering each park as ``park`` says (see ``PARK_MODES``)."""
    import time

    for _ in range(PARKS_MAX):
        try:
            return engine.run(wf.name, *args, run_id=run_id, **kwargs)
        except RunParked as exc:
            if park == "stop":
                raise _Stopped(f"the run parked ({exc.reason}); --park answer answers it") from None
            answered = False
            for p in engine.pending_approvals(run_id):
                engine.approve(run_id, p.request_id, digest=p.digest, by="durably chaos")
                answered = True
            for name in _awaited_signals(engine, run_id):
                engine.signal(run_id, name, None)
                answered = True
            if not answered and exc.wake_at is not None:
                wait_s = exc.wake_at - time.time()
                if wait_s > TIMER_WAIT_S_MAX:
                    raise _Stopped(
                        f"the run parked on a timer due in {wait_s:.0f} s (chaos waits up to"
                        f" {TIMER_WAIT_S_MAX:g} s); shorten it for the test"
                    ) from None
                time.sleep(max(0.0, wait_s))
                answered = True
            if not answered:
                raise _Stopped(
                    f"the run parked ({exc.reason}) on nothing chaos can answer"
                ) from None
    raise _Stopped(f"the run parked {PARKS_MAX} times; chaos stops it there")


def _awaited_signals(engine: Engine, run_id: str) -> list[str]:
    """The names of the signals the parked run waits for (its open signal waits)."""
    return [
        r.name.split(":", 1)[1]
        for r in engine.history(run_id)
        if r.kind == SIGNAL and r.status == "waiting" and ":" in r.name
    ]


def mask_recorded(value: Any, recorded: list[tuple[str, Any]]) -> Any:
    """``value`` (plain JSON) with the run's recorded now/random/uuid values replaced by
    ``<now>``, ``<random>``, ``<uuid>``: a resumed run draws its own, so comparing them
    with the clean run's would call a correct resume different."""
    forms: list[tuple[str, str]] = []
    for kind, plain in recorded:
        inner = next(iter(plain.values())) if isinstance(plain, dict) and len(plain) == 1 else plain
        text = repr(inner) if isinstance(inner, float) else str(inner)
        if len(text) >= MASKED_TEXT_CHARS_MIN:
            forms.append((text, f"<{kind}>"))

    def walk(node: Any) -> Any:
        for kind, plain in recorded:
            if node == plain and type(node) is type(plain):
                return f"<{kind}>"
        if isinstance(node, str):
            for text, mark in forms:
                node = node.replace(text, mark)
            return node
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        return node

    return walk(value)


# -- the parent side -----------------------------------------------------------------


def run_workflow_chaos(
    wf: Workflow,
    args: list[Any],
    kwargs: dict[str, Any],
    *,
    url: str | None = None,
    allow_repeat: frozenset[str] = frozenset(),
    jobs: int | None = None,
    park: str = "answer",
    durability: str | None = None,
    synchronous: str | None = None,
) -> WorkflowChaosReport:
    """Kill ``wf`` at every step x window, resume each, and judge what ran twice.

    ``url`` is the journal (default: a temporary SQLite file); every kill point gets its
    own run id. Steps named in ``allow_repeat`` are known to be safe to run twice, as
    are the ``read`` and ``idempotent`` tools the workflow reaches. ``park`` says how a
    run that parks is met (``PARK_MODES``). ``durability`` (and ``synchronous``, the
    SQLite setting) is the journal's mode in every run of the sweep, as
    ``Engine(durability=...)`` takes it; a bad or contradicting one is a
    ``ConfigError`` before any process starts.
    """
    if park not in PARK_MODES:
        raise WorkflowLoadError(f"park={park!r}: choose one of {', '.join(PARK_MODES)}")
    from ..store.durability import sqlite_mode

    mode, _ = sqlite_mode(durability, synchronous)  # refused here, not once per child
    store: dict[str, str | None] = {"durability": durability, "synchronous": synchronous}
    kinds = tool_kinds(wf)
    import time

    t0 = time.perf_counter()
    jobs = max(1, jobs or os.cpu_count() or 1)
    with tempfile.TemporaryDirectory(prefix="durably-wfchaos-") as tmp:
        root = Path(tmp)
        journal = url or f"sqlite:///{root / 'journal.db'}"
        nonce = os.urandom(4).hex()  # fresh run ids when --db names a journal in use
        clean_dir = root / "clean"
        clean_dir.mkdir()
        clean_point: list[tuple[Path, str, tuple[str, str] | None]] = [
            (clean_dir, f"chaos-{nonce}-clean", None)
        ]
        _run_phases(wf, journal, args, kwargs, clean_point, 1, park, store)
        clean = json.loads((clean_dir / "clean.json").read_text())
        if clean["outcome"] != COMPLETED:
            raise WorkflowLoadError(
                f"the clean run of {wf.name!r} did not complete: {clean['outcome']}"
            )
        steps = [(p, n) for p, n, _ in clean["steps"]]
        usage = {p: int(u) for p, _, u in clean["steps"]}
        points: list[tuple[Path, str, tuple[str, str] | None]] = [
            (root / f"k{i}-{w}", f"chaos-{nonce}-{p}-{w}", (p, w))
            for i, (p, _) in enumerate(steps)
            for w in WINDOWS
        ]
        for folder, _, _ in points:
            folder.mkdir()
        _run_phases(wf, journal, args, kwargs, points, jobs, park, store)
        kills = [
            _judge(folder, target, dict(steps), usage, clean.get("result"), allow_repeat, kinds)
            for folder, _, target in points
            if target is not None
        ]
    return WorkflowChaosReport(
        wf.name, steps, clean.get("result"), kills, time.perf_counter() - t0, mode
    )


def _run_phases(
    wf: Workflow,
    url: str,
    args: list[Any],
    kwargs: dict[str, Any],
    points: list[tuple[Path, str, tuple[str, str] | None]],
    jobs: int,
    park: str = "answer",
    store: dict[str, str | None] | None = None,
) -> None:
    """Run each point's kill then resume (or just the clean run), ``jobs`` at a time."""
    todo = list(points)
    active: dict[int, tuple[Path, str, tuple[str, str] | None, str]] = {}

    def start(folder: Path, run_id: str, target: tuple[str, str] | None, phase: str) -> None:
        kill = target if phase == "kill" else None
        pid = spawn(
            lambda: _child(wf, url, run_id, args, kwargs, folder, phase, kill, park, store),
            folder / f"{phase}.err",
        )
        active[pid] = (folder, run_id, target, phase)

    while todo or active:
        while todo and len(active) < jobs:
            folder, run_id, target = todo.pop(0)
            start(folder, run_id, target, "clean" if target is None else "kill")
        ex = wait_any(active)
        if ex.pid not in active:
            continue
        folder, run_id, target, phase = active.pop(ex.pid)
        if phase == "kill" and ex.sigkilled:
            start(folder, run_id, target, "resume")
        elif phase == "kill" and ex.code == EXIT_NOT_KILLED:
            (folder / "resume.json").write_text(json.dumps({"outcome": "kill point not reached"}))
        elif ex.code != EXIT_OK:
            (folder / ("clean.json" if phase == "clean" else "resume.json")).write_text(
                json.dumps({"outcome": f"error: {child_error(folder / f'{phase}.err', ex)}"})
            )


def _judge(
    folder: Path,
    target: tuple[str, str],
    names: dict[str, str],
    usage: dict[str, int],
    clean_result: Any,
    allow_repeat: frozenset[str],
    kinds: dict[str, str] | None = None,
) -> KillOutcome:
    """Read one kill point's execution log and resume outcome; decide what ran twice."""
    pos, window = target
    res = json.loads((folder / "resume.json").read_text())
    if "kill point not reached" in res["outcome"]:
        return KillOutcome(pos, names[pos], window, res["outcome"], None)
    log = folder / "executions.jsonl"
    execs = [Execution(**json.loads(line)) for line in log.read_text().splitlines()]
    by_pos: dict[str, list[Execution]] = defaultdict(list)
    for e in execs:
        by_pos[e.position].append(e)
    # The "before" that fired the kill did not execute the step.
    if window == "before":
        by_pos[pos] = [e for e in by_pos[pos] if e.phase != "kill"]
    repeats = []
    for p, runs in by_pos.items():
        if len(runs) > 1:
            repeats.append(_repeat(p, runs, usage.get(p, 0), allow_repeat, kinds or {}))
    same = res.get("result") == clean_result if res["outcome"] == COMPLETED else None
    return KillOutcome(
        pos, names[pos], window, res["outcome"], same, repeats, sum(r.extra_tokens for r in repeats)
    )


def _repeat(
    pos: str,
    runs: list[Execution],
    tokens: int,
    allow_repeat: frozenset[str],
    kinds: dict[str, str],
) -> StepRepeat:
    first = runs[0]
    keys = [e.key for e in runs]
    same_key = keys[0] is not None and len(set(keys)) == 1
    kind = kinds.get(first.name)
    if first.takes_key:
        verdict = "same key" if same_key else "different keys"
    elif kind in REPEATABLE_KINDS:
        verdict = f"{kind} tool, may repeat"
    elif first.reconcile:
        verdict = "reconciled, not done"
    elif tokens > 0:
        verdict = "repeated model call"
    elif first.name in allow_repeat:
        verdict = "allowed to repeat"
    else:
        verdict = UNKEYED
    return StepRepeat(pos, first.name, len(runs), keys, same_key, verdict, tokens * (len(runs) - 1))


def tool_kinds(wf: Workflow) -> dict[str, str]:
    """Step name -> tool kind for the ``@durably.tool`` steps ``wf`` reaches (read from
    its source by ``durably audit``'s walk), and for the tools declared in the
    workflow's module that the walk could not resolve (a list built at run time);
    plain steps are not listed."""
    from ..audit import audit_workflow
    from ..tools._tool import KINDS, REGISTRY

    module = getattr(wf.fn, "__module__", None)
    kinds = {t.name: str(t.kind) for t in list(REGISTRY) if t.fn.__module__ == module}
    kinds.update({e.name: e.kind for e in audit_workflow(wf) if e.kind in KINDS})
    return kinds
