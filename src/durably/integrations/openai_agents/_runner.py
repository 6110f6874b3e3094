"""``DurableRunner``: ``Runner.run``/``Runner.run_streamed`` made durable inside an
async durably workflow, and exactly the SDK's own calls everywhere else."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, Model, MultiProvider, RunConfig, Runner, RunResult, RunResultStreaming
from agents.run_state import RunState

from ... import (
    AsyncContext,
    BudgetExceeded,
    Cancelled,
    ConfigError,
    Context,
    HistoryTooLarge,
    NonDeterminism,
    SerializationError,
    StoreError,
    current_context,
)
from .. import refuse
from ._agents import Views
from ._model import DurableModelProvider, durable_model
from ._turns import Turns

STEP = "openai_agents.run"

# durably's own stops: the SDK wraps an exception from a tool (UserError "Error running
# tool ...") or a model; these are never the agent's failure, so the run sees them as
# they are (a budget, a cancel, a non-determinism, a store error keep their meaning).
DURABLY_STOPS: tuple[type[BaseException], ...] = (
    BudgetExceeded,
    Cancelled,
    NonDeterminism,
    ConfigError,
    SerializationError,
    HistoryTooLarge,
    StoreError,
)


def _durably_stop(exc: BaseException) -> BaseException | None:
    """The durably stop ``exc`` wraps (its cause chain), if any."""
    seen: set[int] = set()
    found: BaseException | None = exc
    while found is not None and id(found) not in seen:
        if isinstance(found, DURABLY_STOPS):
            return found
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    return None


def _config(run_config: Any, turns: Turns) -> tuple[RunConfig, MultiProvider | None]:
    """The run config with its provider (and a model instance it names) recorded, and
    the provider this run made itself (closed at the end), if it made one."""
    owned: MultiProvider | None = None
    if run_config is None:
        config = RunConfig()
        owned = config.model_provider if isinstance(config.model_provider, MultiProvider) else None
    elif isinstance(run_config, dict):
        config = RunConfig(**run_config)
    else:
        config = run_config
    changes: dict[str, Any] = {"model_provider": DurableModelProvider(config.model_provider, turns)}
    if isinstance(config.model, Model):
        changes["model"] = durable_model(config.model, turns)
    return dataclasses.replace(config, **changes), owned


def _check(ctx: Context | AsyncContext, method: str, input: Any, kwargs: dict[str, Any]) -> None:
    """Refuse (the run is blocked, nothing recorded lost) what cannot be made durable."""
    if isinstance(ctx, Context):
        refuse(
            ctx,
            STEP,
            f"DurableRunner.{method} runs the Agents SDK's async loop: call it from an async"
            " workflow (async def, engine.run_async or engine.run of an async workflow)",
        )
    if isinstance(input, RunState):
        refuse(
            ctx,
            STEP,
            f"DurableRunner.{method} inside a workflow takes the input (a str or items),"
            " not an SDK RunState: a needs_approval tool parks the run as a durably"
            " approval (durably approve), and the run resumes by replay, with no RunState",
        )
    if kwargs.get("session") is not None:
        refuse(
            ctx,
            STEP,
            f"DurableRunner.{method}(session=...) inside a workflow: a session's reads and"
            " writes are not recorded, so a resumed run would read the items it wrote"
            " before the crash; keep the conversation in the workflow (pass"
            " result.to_input_list() + new items as the next input) instead",
        )


class DurableRunner:
    """The Agents SDK's ``Runner`` for durably workflows.

    Inside an async workflow, ``await DurableRunner.run(agent, input, **kwargs)`` runs
    the agent with every model turn a recorded step (``get_response``; ``stream_response``
    for :meth:`run_streamed`, its deltas ``model.delta`` events), every function tool call
    a recorded step under its own key (``durably.current_step()`` inside the tool), in
    the order the model listed the calls, and every ``needs_approval`` tool a durably
    approval (the run parks; ``durably approve`` resumes it by replay). Tokens go to the
    run's spend and budget. Outside a workflow (and inside a running step) both methods
    are ``Runner.run`` / ``Runner.run_streamed``, unchanged. See docs/integrations.md.
    """

    @classmethod
    async def run(cls, starting_agent: Agent[Any], input: Any, **kwargs: Any) -> RunResult:
        """``Runner.run(starting_agent, input, **kwargs)``, recorded inside a workflow."""
        ctx = current_context()
        if ctx is None:
            return await Runner.run(starting_agent, input, **kwargs)
        _check(ctx, "run", input, kwargs)
        assert isinstance(ctx, AsyncContext)
        turns = Turns(ctx)
        config, owned = _config(kwargs.pop("run_config", None), turns)
        agent = Views(turns).agent(starting_agent)
        try:
            return await Runner.run(agent, input, run_config=config, **kwargs)
        except Exception as exc:
            stop = _durably_stop(exc)
            if stop is None or stop is exc:
                raise
            raise stop from None
        finally:
            if owned is not None:
                await owned.aclose()

    @classmethod
    def run_streamed(
        cls, starting_agent: Agent[Any], input: Any, **kwargs: Any
    ) -> RunResultStreaming:
        """``Runner.run_streamed(starting_agent, input, **kwargs)``, recorded inside a
        workflow: iterate ``result.stream_events()`` to its end in the workflow."""
        ctx = current_context()
        if ctx is None:
            return Runner.run_streamed(starting_agent, input, **kwargs)
        _check(ctx, "run_streamed", input, kwargs)
        assert isinstance(ctx, AsyncContext)
        turns = Turns(ctx)
        config, owned = _config(kwargs.pop("run_config", None), turns)
        agent = Views(turns).agent(starting_agent)
        result = Runner.run_streamed(agent, input, run_config=config, **kwargs)
        events = result.stream_events

        async def stream_events() -> AsyncIterator[Any]:
            try:
                async for event in events():
                    yield event
            except Exception as exc:
                stop = _durably_stop(exc)
                if stop is None or stop is exc:
                    raise
                raise stop from None
            finally:
                if owned is not None:
                    await owned.aclose()

        # An instance attribute over the method, as for run(): durably's stops reach the
        # workflow as themselves, not as the SDK's wrapper of them.
        object.__setattr__(result, "stream_events", stream_events)
        return result
