"""The signals role, written once: send a signal, take one (over the :mod:`.tx`
protocol)."""

from __future__ import annotations

from ..errors import LeaseLost, RunFinished, RunNotFound, SignalQueueFull
from ..history import TERMINAL
from ..limits import SIGNALS_PENDING_MAX
from . import stream
from .tx import Backend, Tx


class Signals(Backend):
    """Store methods of the signals role (see :class:`~durably.store.base.Store`)."""

    def send_signal(self, run_id: str, name: str, data: str, send: str | None = None) -> int:
        """Store a signal for the run and return its per-run number (see the Store
        protocol); not fenced: any process may signal. A retry after a lost connection
        finds the first attempt's signal, if it committed, by the send's dedupe."""
        now = self.clock.time()
        dedupe = stream.signal_dedupe(send)
        params = {"run_id": run_id, "name": name, "data": data, "now": now, "dedupe": dedupe}

        def op(tx: Tx) -> int:
            # The run's lock first (PostgreSQL's row lock; SQLite's BEGIN IMMEDIATE).
            status = tx.scalar("lock_run_for_signal", **params)
            sent = tx.scalar("signal_sent", **params)
            if sent is not None:
                return stream.sent_seq(sent)  # this send, retried: already stored
            check_signalable(run_id, status, self._where)
            pending = int(tx.scalar("signals_pending", **params, pending_max=SIGNALS_PENDING_MAX))
            if pending >= SIGNALS_PENDING_MAX:
                raise SignalQueueFull(
                    f"run {run_id!r} already holds {SIGNALS_PENDING_MAX:,} signals it has"
                    f" not consumed; nothing was sent ({name!r}). The run waits for signals"
                    " more slowly than they are sent: send fewer (batch them in one"
                    " signal's data), or let the run consume some first"
                )
            seq = int(tx.scalar("next_signal_seq", **params))
            tx.q("insert_signal", **params, seq=seq)
            tx.events(run_id, [stream.signal_received(name, seq, now, dedupe)])
            if tx.q("wake_for_signal", **params).rowcount:
                # Delivered at commit: a worker waiting for work claims the run at once.
                tx.notify()
            return seq

        return self._writing(op)

    def take_signal(
        self, run_id: str, token: int, name: str, consumer: str
    ) -> tuple[int, str] | None:
        """Consume the oldest signal of ``name`` for ``consumer`` (fenced, idempotent; see
        the Store protocol). A retry after a lost connection finds what the first attempt
        consumed, if it committed, by ``consumer``."""
        params = {"run_id": run_id, "name": name, "consumer": consumer}

        def op(tx: Tx) -> tuple[int, str] | None:
            # Under the run's lock, so a claim cannot raise the token before commit.
            if tx.scalar("lock_token", **params) != token:
                raise LeaseLost(run_id, token)
            tx.q("release_renamed_signal", **params)
            found = tx.one("taken_signal", **params)
            if found is None:
                found = tx.one("oldest_signal", **params)
                if found is None:
                    return None
                tx.q("consume_signal", **params, seq=found[0])
            return int(found[0]), str(found[1])

        return self._writing(op)


def check_signalable(run_id: str, status: str | None, where: str) -> None:
    """Raise unless a run with ``status`` (None: no such run) may take a signal:
    ``RunNotFound``, or ``RunFinished`` once it is completed, failed, cancelled or
    continued (a signal nobody can ever consume must not be accepted as sent)."""
    if status is None:
        raise RunNotFound(
            f"no run {run_id!r} in {where}; nothing was sent. Check the run id"
            " (`durably runs list` shows runs) and the database (--db / DURABLY_URL)"
        )
    if status in TERMINAL:
        raise RunFinished(
            f"run {run_id!r} is already {status}, so no wait can take a signal any more;"
            " nothing was sent. Signal a run that is still going (`durably runs list"
            " --status parked` shows the waiting ones)"
        )
