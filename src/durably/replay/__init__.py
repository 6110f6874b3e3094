"""The sans-I/O replay kernel: :class:`~durably.replay.kernel.RunCore` (positions,
matching, the latch and halts, the outbox of records and events, the ledger charge), the
operations recording calls yield to a driver (:mod:`~durably.replay.ops`,
:mod:`~durably.replay.streamops`), the frozen :class:`~durably.replay.setup.RunSetup` a
run's replay is built from, the scopes that hand out positions
(:mod:`~durably.replay.scope`), the typed :class:`~durably.replay.park.Parked`, the state
slots of the capabilities (:mod:`~durably.replay.slots`), steps
(:mod:`~durably.replay.stepping`), deterministic values (:mod:`~durably.replay.values`)
and groups of branches (:mod:`~durably.replay.gathers`, :mod:`~durably.replay.branches`).

Nothing here does I/O or reaches an event loop, threads, a database driver or a store
(import-linter contracts in pyproject.toml say so); :mod:`durably.runtime.drive` holds
the one sync and the one async driver that carry the operations out.
"""
