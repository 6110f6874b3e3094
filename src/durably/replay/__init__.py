"""The sans-I/O replay kernel: the operations recording calls yield to a driver
(:mod:`~durably.replay.ops`, :mod:`~durably.replay.streamops`), the frozen
:class:`~durably.replay.setup.RunSetup` a run's replay is built from, and the scopes that
hand out positions (:mod:`~durably.replay.scope`).

Nothing here does I/O or imports an event loop, threads, a database driver or a store
(an import-linter contract in pyproject.toml says so); ``durably.context`` holds the one
sync and the one async driver that carry the operations out.
"""
