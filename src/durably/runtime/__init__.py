"""The runtime: the sync and async drivers (:mod:`~durably.runtime.drive`), the one
awaitable every async recording call returns (:mod:`~durably.runtime.awaitables`), the
settling of ``ctx.gather`` branches (:mod:`~durably.runtime.settle`), ``durably.Branches``
(:mod:`~durably.runtime.branches`) and the lock of a sync run whose branches record from
several threads (:mod:`~durably.runtime.lock`); the thin facades built on them are
:mod:`durably.context` and :mod:`durably.saga`.
"""
