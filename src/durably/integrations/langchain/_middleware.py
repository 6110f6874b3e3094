"""``DurablyMiddleware``: LangChain agent middleware that records the agent's model
calls and tool calls as steps of the durably workflow it runs in.

Inside a workflow's body (``durably.current_context()`` is the run's context) each
``wrap_model_call`` is a ``langchain.{name}.model`` step (``_model``) and each
``wrap_tool_call`` a ``langchain.{name}.tool.{tool}`` step in its turn's ordered branch
(``_tools``, ``_turns``); everywhere else (no workflow, or inside a running step) the
middleware hands the call on untouched, so the agent behaves as it does without
durably. A sync agent in an async workflow (or the reverse) is refused: the run is
blocked with a message that says which call to use.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from ... import AsyncContext, Context, current_context
from .. import refuse
from . import _digest, _model, _tools
from ._turns import Turns


class DurablyMiddleware(AgentMiddleware):
    """Record a LangChain agent's model and tool calls in the durably workflow that runs
    it: ``create_agent(model, tools, middleware=[DurablyMiddleware()])``.

    ``name`` (default ``"agent"``) names the steps, ``langchain.{name}.model`` and
    ``langchain.{name}.tool.{tool}``: give each agent of one workflow its own.
    ``prices={model_name: (usd_per_million_input, usd_per_million_output)}`` gives the
    cost of each response's tokens (a model not listed costs $0; its tokens still
    count). Put the middleware first in the list, so the others run inside the recorded
    calls (their work is replayed with them). See docs/integrations.md.
    """

    def __init__(
        self, name: str = "agent", *, prices: Mapping[str, tuple[float, float]] | None = None
    ) -> None:
        super().__init__()
        if not isinstance(name, str) or not name or any(c in name for c in ":/ "):
            raise ValueError(
                f"DurablyMiddleware(name={name!r}): give a non-empty name without ':', '/'"
                " or spaces (it names the agent's steps)"
            )
        self.step_prefix = f"langchain.{name}"
        self._prices = _check_prices(prices)
        self._turns = Turns()

    @property
    def name(self) -> str:
        """The middleware's name in LangChain's graph."""
        return "DurablyMiddleware"

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        """The model call as a recorded step of a sync workflow, else ``handler``."""
        ctx = self._sync(f"{self.step_prefix}.model")
        if ctx is None:
            return handler(request)
        self._turns.model_called(ctx)
        price = self._price(request)
        return _model.record(ctx, f"{self.step_prefix}.model", request, handler, price)

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        """The model call as a recorded step of an async workflow, else ``handler``."""
        ctx = self._async(f"{self.step_prefix}.model")
        if ctx is None:
            return await handler(request)
        self._turns.model_called(ctx)
        price = self._price(request)
        return await _model.arecord(ctx, f"{self.step_prefix}.model", request, handler, price)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """The tool call as recorded steps of a sync workflow, else ``handler``."""
        ctx = self._sync(self._tool_step(request))
        if ctx is None:
            return handler(request)
        with self._turns.call(ctx, request):
            return _tools.record(ctx, self._tool_step(request), request, handler)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """The tool call as recorded steps of an async workflow, else ``handler``."""
        ctx = self._async(self._tool_step(request))
        if ctx is None:
            return await handler(request)
        with self._turns.call(ctx, request):
            return await _tools.arecord(ctx, self._tool_step(request), request, handler)

    @staticmethod
    def _sync(step: str) -> Context | None:
        """The sync workflow's context this sync hook records in, None outside one; a
        sync agent in an async workflow is refused (it would block the run's loop)."""
        ctx = current_context()
        if isinstance(ctx, AsyncContext):
            refuse(
                ctx,
                step,
                "a LangChain agent run with invoke()/stream() inside an async workflow: use"
                " await agent.ainvoke(...) / agent.astream(...) there, or make the workflow"
                " a plain def",
            )
        return ctx

    @staticmethod
    def _async(step: str) -> AsyncContext | None:
        """The async workflow's context this async hook records in, None outside one;
        an async agent in a sync workflow (its own event loop) is refused."""
        ctx = current_context()
        if isinstance(ctx, Context):
            refuse(
                ctx,
                step,
                "a LangChain agent run with ainvoke()/astream() inside a sync workflow: use"
                " agent.invoke(...) / agent.stream(...) there, or make the workflow an"
                " async def",
            )
        return ctx

    def _price(self, request: ModelRequest) -> tuple[float, float] | None:
        return self._prices.get(_digest.model_name(request.model))

    def _tool_step(self, request: ToolCallRequest) -> str:
        return f"{self.step_prefix}.tool.{request.tool_call.get('name')}"


def _check_prices(
    prices: Mapping[str, tuple[float, float]] | None,
) -> dict[str, tuple[float, float]]:
    """``prices`` checked: model names to two non-negative numbers."""
    out: dict[str, tuple[float, float]] = {}
    for model, price in (prices or {}).items():
        ok = isinstance(price, tuple | list) and len(price) == 2
        if not (
            isinstance(model, str)
            and ok
            and all(
                isinstance(p, int | float) and not isinstance(p, bool) and 0 <= p < float("inf")
                for p in price
            )
        ):
            raise ValueError(
                f"DurablyMiddleware(prices=...): {model!r}: {price!r} is not"
                " (usd_per_million_input, usd_per_million_output), two numbers >= 0"
            )
        out[model] = (float(price[0]), float(price[1]))
    return out
