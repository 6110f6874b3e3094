"""Code mistakes refused where they are made, with what to write instead.

- A workflow function that cannot take its context (``def wf():``, or only keyword-only
  parameters) is refused when ``@engine.workflow`` registers it: started, every run of it
  would fail at its first line.
- An async function given to ``ctx.step`` (or ``saga.step``) of a sync workflow cannot be
  awaited there: the run blocks at that step (a ``ConfigError`` latched like any misuse,
  never the run's failure), and resumes once the code is fixed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._callables import takes_positional
from .errors import ConfigError
from .steps import fn_text, signature_of


def check_workflow_fn(fn: Callable[..., Any], name: str) -> None:
    """Raise ``ConfigError`` when ``fn`` has no positional parameter for its context
    (a callable whose signature cannot be read is let through)."""
    if takes_positional(fn):
        return  # a plain function's code says so; inspect only for the rest
    import inspect

    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return
    positional = (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD) if params else ()
    if params and (params[0].kind in positional or params[0].kind is params[0].VAR_POSITIONAL):
        return
    shown = getattr(fn, "__name__", "wf")
    # Names only: a default value may be a secret, and this message may be logged.
    # Here every parameter is keyword-only or **kwargs: written as in the def.
    kw_only = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    rest = [f"**{p.name}" for p in params if p.kind is p.VAR_KEYWORD]
    names = ", ".join((["*", *kw_only] if kw_only else []) + rest)
    raise ConfigError(
        f"workflow {name!r}: {shown}({names}) takes no context: a workflow's first"
        " parameter receives it (durably.Context, or durably.AsyncContext for an async"
        f" def). Write def {shown}(ctx, ...); nothing was registered."
    )


def async_step_in_sync(fn: Callable[..., Any], call: str = "ctx.step") -> ConfigError | None:
    """The error that blocks a sync workflow asking ``call`` to run the async ``fn``
    (None when ``fn`` is not async)."""
    if not signature_of(fn).is_async:
        return None
    return ConfigError(
        f"{call}(..., {fn_text(fn)}) in a sync workflow: {fn_text(fn)} is an async function,"
        " which a sync workflow cannot await. Make the workflow async (async def, await"
        f" {call}(...)) or pass a sync function. The run is blocked; fix the code, then"
        " resume it."
    )
