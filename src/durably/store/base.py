"""The Store protocol: everything the engine asks of a journal database.

The protocol is deliberately small; every backend passes the same contract suite
(``tests/contract``). All writes that change a run are *fenced*: they carry the fencing
token of the claim that produced them and are refused (``LeaseLost``) when a later claim
has raised the token, so two processes can never both drive one run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..history import RunRecord, StepRecord, new_incarnation


@dataclass(frozen=True, slots=True)
class Owner:
    """Who drives a run: host, pid and the pid's start time (so a reused pid is no owner)."""

    host: str
    pid: int
    started: str

    def __str__(self) -> str:
        return f"{self.host}|{self.pid}|{self.started}"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        """Read an owner string written by ``str(owner)``; None if it is not one."""
        parts = text.split("|")
        if len(parts) != 3 or not parts[1].isdigit():
            return None
        return cls(parts[0], int(parts[1]), parts[2])

    @classmethod
    def current(cls) -> Owner:
        """The owner identity of this process."""
        pid = os.getpid()
        return cls(_hostname(), pid, _process_start(pid) or "?")

    def provably_dead(self) -> bool:
        """True only when this owner is on this host and its process is gone.

        A process on another host can never be proven dead from here: its lease must
        expire instead.
        """
        if self.host != _hostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False  # exists, owned by someone else
        started = _process_start(self.pid)
        # A pid reused by a newer process means the owner itself is gone.
        return started is not None and self.started != "?" and started != self.started


def _hostname() -> str:
    """This machine as a lease owner sees it: ``DURABLY_HOST`` if set, else the node name,
    qualified by the pid namespace so that two containers sharing a hostname (but not
    their pids) never take each other's pids for their own."""
    override = os.environ.get("DURABLY_HOST")
    if override:
        return override
    # os.uname avoids importing socket (import time counts toward resume time).
    host = os.uname().nodename
    try:
        ns = os.readlink("/proc/self/ns/pid")  # e.g. "pid:[4026531836]"
    except OSError:
        return host
    return f"{host}/{ns[5:-1]}" if ns.startswith("pid:[") else host


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), else None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; fields after its ')' are fixed.
    rest = data[data.rfind(b")") + 2 :].split()
    return rest[19].decode() if len(rest) > 19 else None


@dataclass(frozen=True, slots=True)
class NewRun:
    """What is known about a run when it is first created.

    ``incarnation`` is drawn here, once per row to be created: it tells this run's keys
    apart from those of any other run that ever had (or will have) the same run id.
    """

    run_id: str
    workflow: str
    version: str | None
    prompt_version: str | None
    queue: str
    input: str
    input_digest: str
    codec_version: int
    incarnation: str = field(default_factory=new_incarnation)


class Store(Protocol):
    """A journal database. Every method is safe to call from any thread."""

    url: str

    def create_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Insert the run unless it exists; return the row and whether it was created.

        An existing row keeps its own incarnation (``new.incarnation`` is then unused)."""
        ...

    def fork_run(self, new: NewRun, records: Sequence[StepRecord]) -> RunRecord:
        """Create the queued run ``new`` whose history (generation 0) is ``records``, in
        one transaction; raises ``RunConflict`` when ``new.run_id`` exists."""
        ...

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run, or None."""
        ...

    def list_runs(
        self, status: str | None = None, workflow: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Runs, newest first, optionally filtered."""
        ...

    def claim(
        self,
        run_id: str,
        owner: Owner,
        lease_s: float,
        max_starts: int,
        owner_dead: Callable[[str], bool],
    ) -> RunRecord:
        """Take the run's lease with a new fencing token and mark it running.

        Raises ``RunLeased`` while another live owner holds an unexpired lease (an owner for
        which ``owner_dead`` is true is taken over at once), ``RunQuarantined`` when the run
        has been started ``max_starts`` times without progress, ``RunNotFound``.
        """
        ...

    def claim_next(
        self,
        owner: Owner,
        lease_s: float,
        max_starts: int,
        owner_dead: Callable[[str], bool],
        served: dict[str, str | None],
        queues: Sequence[str],
        queue_limits: dict[str, int] | None = None,
    ) -> RunRecord | None:
        """Claim the oldest runnable run of ``queues`` whose workflow is in ``served``
        (workflow name -> version served, None for any), or return None. Runnable: queued;
        running with an expired lease, no owner or a dead owner; parked and due. A queue
        with ``queue_limits[q]`` runs already running across the fleet is skipped."""
        ...

    def wait_for_work(self, timeout_s: float) -> None:
        """Block until new work may be runnable (a notification) or ``timeout_s`` passed."""
        ...

    def renew(self, run_id: str, token: int, lease_s: float) -> bool:
        """Extend the lease; False when the token is stale."""
        ...

    def release(
        self,
        run_id: str,
        token: int,
        status: str | None = None,
        park_reason: str | None = None,
        wake_at: float | None = None,
    ) -> None:
        """Give up the lease (fenced), optionally moving to a non-terminal status."""
        ...

    def load_history(self, run_id: str, generation: int) -> list[StepRecord]:
        """All records of one generation of a run, in one query."""
        ...

    def append(self, run_id: str, token: int, records: Sequence[StepRecord]) -> None:
        """Write records in one transaction, fenced; a result replaces an intent."""
        ...

    def finish(
        self,
        run_id: str,
        token: int,
        status: str,
        records: Sequence[StepRecord],
        outcome: str | None = None,
        error_type: str | None = None,
        error_message: str | None = None,
    ) -> None:
        """Write the last records and the run's outcome in one fenced transaction."""
        ...

    def requeue(
        self,
        run_id: str,
        from_statuses: Sequence[str],
        *,
        drop_intents: bool = False,
        drop_positions: Sequence[str] = (),
        resolve: tuple[str, str] | None = None,
    ) -> RunRecord:
        """An operator's retry/skip of a stuck or failed run: optionally drop every
        unresolved intent (``drop_intents``), or the intents and failures at
        ``drop_positions`` (never a result), or resolve one intent with an output; clear a
        failure outcome, reset the no-progress count, raise the fencing token and queue the
        run, all in one transaction. The incarnation (so every key) stays."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...
