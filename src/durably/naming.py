"""``durably.step_name``: the name the wrapped model calls inside a block record under."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from .errors import ConfigError

_NAME: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "durably_step_name", default=None
)


@contextlib.contextmanager
def step_name(name: str) -> Iterator[None]:
    """Name the recorded model calls made inside the block (``with durably.step_name(
    "plan"): client.chat.completions.create(...)``) ``name`` instead of their fixed names
    (``openai.chat.completions.create``, ...). A context variable: it follows the code
    into ``ctx.gather`` branches and nests (the innermost wins). ``name`` is a non-empty
    str, else ``ConfigError``."""
    if not isinstance(name, str) or not name:
        from .steps import fn_text  # on the error path only

        shown = repr(name) if isinstance(name, str) else fn_text(name)
        raise ConfigError(f"durably.step_name takes a non-empty str, got {shown}")
    token = _NAME.set(name)
    try:
        yield
    finally:
        _NAME.reset(token)


def current_step_name() -> str | None:
    """The name set by the innermost ``durably.step_name`` block, else None."""
    return _NAME.get()
