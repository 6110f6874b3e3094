"""The runtime: the sync and async drivers (:mod:`~durably.runtime.drive`), the one
awaitable every async recording call returns, the settling of ``ctx.gather`` branches,
and the thin facades built on them (:mod:`durably.context`, :mod:`durably.saga`).
"""
