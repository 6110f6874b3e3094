"""A workflow whose result is the durability mode of the engine driving it (for the
``durably chaos --workflow --durability`` test): the sweep's child engine is the one
that holds the chaos fault hook."""

from __future__ import annotations

import gc

import durably
from durably.chaos.workflow_chaos import _Recorder

# Only registers the workflow: `durably chaos` drives it on engines of its own.
engine = durably.Engine("sqlite:///:memory:")


def _modes() -> list[str]:
    return sorted(
        {
            o.durability
            for o in gc.get_objects()
            if isinstance(o, durably.Engine) and isinstance(o.fault_hook, _Recorder)
        }
    )


@engine.workflow(name="modes")
def modes(ctx: durably.Context) -> list[str]:
    return ctx.step("mode", _modes)
