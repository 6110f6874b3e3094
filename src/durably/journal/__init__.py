"""What is stored, pure data: records, kinds, statuses, keys, positions, text checks, the
canonical JSON codec and the event kinds of a run's stream.

The bottom room of the house (DESIGN "Architecture: the house"): it imports nothing of
durably but ``limits`` and ``errors``, does no I/O and imports no event loop, thread or
database driver, so every other room can use it. The older homes (``durably.history``,
``durably.codec``, ``durably.events``) re-export these names and keep working.
"""
