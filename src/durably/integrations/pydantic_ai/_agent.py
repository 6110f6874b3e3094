"""``DurableAgent``: a Pydantic AI agent whose runs inside an async durably workflow
record each model request and each tool call as a step."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

from pydantic_ai.agent import AbstractAgent, AgentRun, WrapperAgent

from ... import AsyncContext, ConfigError, Context, current_context
from .. import refuse
from ._capability import DurablyCapability

DepsT = TypeVar("DepsT")
OutputT = TypeVar("OutputT")

# The agent's name is part of every step name (pydantic_ai.{name}.model.request): a
# short identifier, stable across deploys.
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def check_name(name: Any) -> str:
    """``name``, or a ``ConfigError`` saying what a name must be."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ConfigError(
            f"DurableAgent(name={name!r}): give the agent a stable name of 1 to 64 letters,"
            " digits, '_' or '-' (it is part of every recorded step's name, so renaming it"
            " under an unfinished run is a NonDeterminism)"
        )
    return name


class DurableAgent(WrapperAgent[DepsT, OutputT], Generic[DepsT, OutputT]):
    """``agent`` with its runs recorded inside an async durably workflow.

    ``await durable.run(prompt, deps=...)``, ``durable.run_stream(...)`` and
    ``durable.iter(...)`` in an ``async def`` workflow record each model request as the
    step ``pydantic_ai.{name}.model.request`` and each tool call as
    ``pydantic_ai.{name}.tool.{tool}`` (a recorded turn is never sent to the model
    again; a tool reads its key from ``durably.current_step()``); a
    ``requires_approval=True`` tool parks the run as a durably approval. Everywhere
    else (outside a workflow, inside a step) the agent behaves exactly as ``agent``.
    ``name`` defaults to the agent's own name; one of them is required. See
    docs/integrations.md ("Pydantic AI").
    """

    def __init__(self, agent: AbstractAgent[DepsT, OutputT], *, name: str | None = None) -> None:
        if not isinstance(agent, AbstractAgent):
            raise ConfigError(
                f"DurableAgent takes a pydantic_ai Agent, got a {type(agent).__name__}"
            )
        super().__init__(agent)
        self._durable_name = check_name(name if name is not None else agent.name)

    @property
    def durable_name(self) -> str:
        """The name in this agent's step names."""
        return self._durable_name

    @asynccontextmanager
    async def iter(  # the wrapped signature, its options passed on as they are
        self, user_prompt: Any = None, **kwargs: Any
    ) -> AsyncIterator[AgentRun[DepsT, Any]]:
        """The wrapped agent's ``iter``; inside an async workflow with durably's
        capability added to the run (``run`` and ``run_stream`` go through here)."""
        ctx = current_context()
        step = f"pydantic_ai.{self._durable_name}.run"
        if isinstance(ctx, Context):
            refuse(
                ctx,
                step,
                f"DurableAgent {self._durable_name!r} runs in an async workflow (async def,"
                " await durable.run(...)): Pydantic AI is async, and a sync workflow would"
                " block on it",
            )
        if isinstance(ctx, AsyncContext):
            if kwargs.get("cancellation_token") is not None:
                refuse(
                    ctx,
                    step,
                    "DurableAgent: a CancellationToken fires at a point durably did not"
                    " record; cancel the run with engine.cancel(run_id) instead",
                )
            extra: Sequence[Any] = kwargs.pop("capabilities", None) or ()
            kwargs["capabilities"] = [*extra, DurablyCapability(self._durable_name, ctx)]
        async with super().iter(user_prompt, **kwargs) as run:
            yield run
