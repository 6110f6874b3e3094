"""A workflow whose result is the durability mode of the engine driving it (for the
``durably chaos --workflow --durability`` test): the test swaps the sweep's Engine for
one that notes its mode in the forked child's environment, which the step reads."""

from __future__ import annotations

import os

import durably

MODE_VAR = "DURABLY_TEST_CHAOS_MODE"

# Only registers the workflow: `durably chaos` drives it on engines of its own.
engine = durably.Engine("sqlite:///:memory:")


def _mode() -> list[str]:
    return [os.environ.get(MODE_VAR, "unset")]


@engine.workflow(name="modes")
def modes(ctx: durably.Context) -> list[str]:
    return ctx.step("mode", _mode)
