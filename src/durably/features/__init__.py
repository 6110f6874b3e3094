"""One room per capability: each module holds a capability's recording calls, written as
generators and functions over the replay kernel's primitives (take a position, match
the record there, go live, buffer a marker, park), so the kernel itself knows nothing
of timers, signals, approvals, sagas, budgets or patch markers.

The facades (``durably.context``) call into these rooms; the kernel (``durably.replay``)
never does, and the rooms never reach the runtime (import-linter contracts). What a room
keeps across recording calls is its typed slot in the kernel (``replay/slots.py``).
"""
