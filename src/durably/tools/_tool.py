"""``@durably.tool``: a function with a declared effect kind.

A :class:`Tool` is the function itself, plus what durably needs to know to run it
safely: its kind (``read``, ``idempotent``, ``write``, ``destructive``), whether it asks
a person first, how a crash in the middle of it is resolved (an ``idempotency_key``
parameter or a ``reconcile`` function), and a schema for the model. It records itself
as a step when called in a workflow's body (found through
:func:`durably.current_context`), and is the plain function everywhere else: outside a
workflow, in tests, and inside a running step (whose step is what is recorded), where
a tool that asks for an approval refuses to run (the step would skip its approval).
"""

from __future__ import annotations

import functools
import inspect
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, cast, get_args

from .._record import replace
from ..context import Context, current_context
from ..current import current_step
from ..errors import ConfigError, ToolRejected
from ..steps import _ATTR as _STEP_ATTR
from ..steps import DEFAULT_OPTIONS, StepOptions
from .schema import DURABLY_PARAMS

if TYPE_CHECKING:
    from ..context import AsyncContext

Kind = Literal["read", "idempotent", "write", "destructive"]
KINDS: Final[tuple[str, ...]] = get_args(Kind)


class UnsafeToolWarning(UserWarning):
    """A ``write`` tool that can neither be deduplicated nor looked up after a crash."""


# Every tool made in this process, for `durably audit` (weak: a tool made per call dies).
REGISTRY: weakref.WeakSet[Tool] = weakref.WeakSet()


class Tool:
    """A tool function with a declared kind (made by ``@durably.tool``).

    Calling it in a workflow body records it as a step named :attr:`name` (a sync
    workflow gets the value, an async one an awaitable); ``ctx.step(name, tool, ...)``
    does the same under ``name``. Anywhere else it is the plain function. ``kind``,
    ``approval`` (whether a person approves each call first), ``reconcile`` and
    ``options`` (the effective ``durably.step`` options) are read-only attributes.
    """

    __durably_tool__: Final = True

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        kind: Kind,
        approval: bool,
        name: str,
        reconcile: Callable[[str], Any] | None,
        description: str | None = None,
        input_schema: dict[str, Any] | None = None,
    ) -> None:
        self.fn = fn
        self.kind: Kind = kind
        self.approval = approval
        self.name = name
        self.reconcile = reconcile
        self.description = description
        # A schema given from outside (an MCP server's inputSchema) instead of the
        # signature's; arguments are then checked against it by a minimal validator.
        self.input_schema = input_schema
        self.is_async = inspect.iscoroutinefunction(fn)
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}  # type: ignore[assignment]
        self.takes_key = "idempotency_key" in params
        self._base = cast(StepOptions, getattr(fn, _STEP_ATTR, DEFAULT_OPTIONS))
        self._step_fn = self._make_step_fn()
        functools.update_wrapper(self, fn)
        REGISTRY.add(self)

    # -- what durably reads ----------------------------------------------------------

    @property
    def options(self) -> StepOptions:
        """The step options a call runs with: the function's ``@durably.step`` options,
        with ``effect=True`` for writes and destructive tools (an intent is recorded, so
        a crash in the middle is detected) and the tool's ``reconcile``."""
        opts = self._base
        if self.reconcile is not None:
            opts = replace(opts, reconcile=self.reconcile, effect=True)
        if self.kind in ("write", "destructive"):
            opts = replace(opts, effect=True)
        return opts

    @property
    def __durably_step__(self) -> StepOptions:
        return self.options

    @__durably_step__.setter
    def __durably_step__(self, opts: StepOptions) -> None:
        # `@durably.step(...)` applied on top of `@durably.tool(...)`: its options are
        # the base the kind is applied to, as when applied below it.
        self._base = opts
        if opts.reconcile is not None and self.reconcile is None:
            self.reconcile = opts.reconcile
        self._step_fn = self._make_step_fn()

    @property
    def safety(self) -> str:
        """How a repeat of this tool is made safe: ``"read-only"``, ``"idempotent"``,
        ``"key"``, ``"reconcile"``, ``"approval"`` or ``"none"`` (what ``durably audit``
        reports)."""
        if self.kind == "read":
            return "read-only"
        if self.kind == "idempotent":
            return "idempotent"
        if self.takes_key:
            return "key"
        if self.reconcile is not None:
            return "reconcile"
        if self.approval:
            return "approval"
        return "none"

    @property
    def step_function(self) -> Callable[..., Any]:
        """The plain function a call records as its step: the tool's function (sync or
        async, as declared) carrying :attr:`options`; what ``saga.step`` runs for a tool."""
        return self._step_fn

    def _make_step_fn(self) -> Callable[..., Any]:
        fn = self.fn
        if self.is_async:

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                return await fn(*args, **kwargs)

            step_fn: Callable[..., Any] = run_async
        else:

            @functools.wraps(fn)
            def run_sync(*args: Any, **kwargs: Any) -> Any:
                return fn(*args, **kwargs)

            step_fn = run_sync
        setattr(step_fn, _STEP_ATTR, self.options)
        return step_fn

    # -- calling ---------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        ctx = current_context()
        if ctx is None:
            if self.approval and current_step() is not None:
                # Inside a running step: the step records the call alone, so the
                # approval would be skipped and the tool would run unapproved.
                raise ConfigError(
                    f"tool {self.name!r} asks for an approval, which a call inside a running"
                    " step cannot request: call it from the workflow body (or"
                    f" ctx.step({self.name!r}, {self.name}, ...)) so its approval comes"
                    f" first, or call {self.name}.fn knowingly after ctx.request_approval"
                )
            return self.fn(*args, **kwargs)
        return self.record(ctx, self.name, args, kwargs)

    def record(
        self,
        ctx: Context | AsyncContext,
        name: str,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> Any:
        """Record one call as the step ``name`` of the workflow whose context is
        ``ctx`` (after an approval request bound to ``name`` and the arguments, when the
        tool asks for one): the value for a sync ``Context``, an awaitable for an
        ``AsyncContext``. ``ctx.step(name, tool, ...)`` and a direct call both end here."""
        if isinstance(ctx, Context):
            if self.is_async:
                # ctx.step refuses it before anything runs or is asked for: the run blocks
                # (misuse), as for any async function in a sync workflow.
                return ctx.step(name, self._step_fn, *args, **kwargs)
            if self.approval:
                self._check_decision(name, ctx.request_approval(name, self.bound(args, kwargs)))
            return ctx.step(name, self._step_fn, *args, **kwargs)
        if not self.approval:
            # The context's own awaitable: it refuses use without `await`, like ctx.step.
            return ctx.step(name, self._step_fn, *args, **kwargs)
        coro = self._record_async(ctx, name, args, dict(kwargs))
        # What ctx.gather records for the branch: the step's name.
        coro.__qualname__ = name  # type: ignore[attr-defined]
        return coro

    async def _record_async(
        self, ctx: AsyncContext, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        decision = await ctx.request_approval(name, self.bound(args, kwargs))
        self._check_decision(name, decision)
        return await ctx.step(name, self._step_fn, *args, **kwargs)

    def bound(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name (what an approval is bound to), without
        the parameters durably passes itself."""
        try:
            bound = inspect.signature(self.fn).bind_partial(*args, **kwargs)
        except TypeError as exc:
            raise ConfigError(
                f"tool {self.name!r} called with arguments it does not take: {exc}"
            ) from None
        params = bound.signature.parameters
        out: dict[str, Any] = {}
        for k, v in bound.arguments.items():
            if params[k].kind is params[k].VAR_KEYWORD:
                out.update({n: x for n, x in v.items() if n not in DURABLY_PARAMS})
            elif k not in DURABLY_PARAMS:
                out[k] = v
        return out

    def _check_decision(self, name: str, decision: Any) -> None:
        if not decision.approved:
            raise ToolRejected(name, decision.outcome, decision.by, decision.note)

    # -- schemas ---------------------------------------------------------------------

    def json_schema(self) -> dict[str, Any]:
        """The JSON Schema of the tool's arguments (from the signature, type hints and
        docstring, via pydantic; or the schema the tool was made with)."""
        from .schema import json_schema

        return json_schema(self)

    def openai_schema(self, api: Literal["chat", "responses"] = "chat") -> dict[str, Any]:
        """The tool as OpenAI's ``tools=[...]`` expects it: Chat Completions
        (``{"type": "function", "function": {...}}``) or, with ``api="responses"``, the
        Responses API's flat ``{"type": "function", "name": ..., ...}``."""
        fn: dict[str, Any] = {"name": self.name, "parameters": self.json_schema()}
        if self.doc:
            fn["description"] = self.doc
        if api == "responses":
            return {"type": "function", **fn}
        if api != "chat":
            raise ConfigError(f"api={api!r}: choose 'chat' or 'responses'")
        return {"type": "function", "function": fn}

    def anthropic_schema(self) -> dict[str, Any]:
        """The tool as Anthropic's ``tools=[...]`` expects it (``name``,
        ``description``, ``input_schema``)."""
        out: dict[str, Any] = {"name": self.name, "input_schema": self.json_schema()}
        if self.doc:
            out["description"] = self.doc
        return out

    @property
    def doc(self) -> str:
        """The description the model sees: the given one, else the docstring's text
        before its argument section."""
        if self.description is not None:
            return self.description
        from .schema import split_doc

        return split_doc(inspect.getdoc(self.fn) or "")[0]

    def __repr__(self) -> str:
        return f"<durably.tool {self.name!r} kind={self.kind!r} safety={self.safety!r}>"


def _unsafe_warning(tool: Tool, stacklevel: int) -> None:
    warnings.warn(
        f"tool {tool.name!r} is a write that can be neither deduplicated nor looked up:"
        " after a crash in the middle of it the run parks in doubt for a person. Give it"
        " an `idempotency_key` parameter (and pass the key to the service), or a"
        " `reconcile=fn(key)` that finds out whether it happened",
        UnsafeToolWarning,
        stacklevel=stacklevel,
    )


def make_tool(
    fn: Callable[..., Any],
    *,
    kind: str,
    approval: bool | None,
    name: str | None,
    reconcile: Callable[[str], Any] | None,
    description: str | None = None,
    input_schema: dict[str, Any] | None = None,
    takes_key: bool | None = None,
    stacklevel: int = 2,
) -> Tool:
    """Check the options and build the :class:`Tool` (see ``durably.tool``);
    ``stacklevel`` is the frame an unsafe write's warning names, counted from here."""
    if kind not in KINDS:
        raise ConfigError(f"kind={kind!r}: choose one of {', '.join(map(repr, KINDS))}")
    if approval not in (None, True, False):
        raise ConfigError(f"approval={approval!r}: choose True, False or None (the kind's)")
    if reconcile is not None and not callable(reconcile):
        raise ConfigError("reconcile must be a callable taking the idempotency key")
    if reconcile is not None and kind in ("read", "idempotent"):
        raise ConfigError(f"reconcile= is for writes; a {kind!r} tool may simply run again")
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigError(f"name={name!r}: a non-empty string")
    if isinstance(fn, Tool):
        raise ConfigError(f"{fn.name!r} is already a tool (kind {fn.kind!r})")
    if not callable(fn):
        raise ConfigError(f"@durably.tool decorates a function, not a {type(fn).__name__}")
    t = Tool(
        fn,
        kind=cast(Kind, kind),
        approval=(kind == "destructive") if approval is None else approval,
        name=name or str(getattr(fn, "__name__", "tool")),
        reconcile=reconcile,
        description=description,
        input_schema=input_schema,
    )
    if takes_key is not None:
        t.takes_key = takes_key
    if kind == "write" and t.safety == "none":
        _unsafe_warning(t, stacklevel + 1)
    return t


def from_mcp(annotations: Any) -> Kind:
    """The kind of an MCP tool from its annotations (``ToolAnnotations``, its dict, or
    None), with MCP's defaults for a missing hint (not read-only, destructive, not
    idempotent): ``readOnlyHint`` true → ``read``; otherwise ``destructiveHint``
    (default true) → ``destructive``; otherwise ``idempotentHint`` true →
    ``idempotent``; otherwise ``write``. Annotations are hints a server states about
    itself: for a server you do not trust, keep the conservative kind (pass ``kinds=``
    to ``durably.tools.from_mcp_session`` only for tools you checked)."""

    def hint(camel: str, snake: str, default: bool) -> bool:
        if annotations is None:
            return default
        if isinstance(annotations, Mapping):
            value = annotations.get(camel, annotations.get(snake))
        else:
            value = getattr(annotations, snake, getattr(annotations, camel, None))
        return default if value is None else bool(value)

    if hint("readOnlyHint", "read_only_hint", False):
        return "read"
    if hint("destructiveHint", "destructive_hint", True):
        return "destructive"
    if hint("idempotentHint", "idempotent_hint", False):
        return "idempotent"
    return "write"


class ToolDecorator:
    """``durably.tool``: ``@durably.tool(kind=..., approval=None, name=None,
    reconcile=None)`` makes a function a :class:`Tool`; ``durably.tool.from_mcp`` maps
    MCP annotations onto a kind."""

    def __call__(
        self,
        *,
        kind: Kind,
        approval: bool | None = None,
        name: str | None = None,
        reconcile: Callable[[str], Any] | None = None,
        description: str | None = None,
    ) -> Callable[[Callable[..., Any]], Tool]:
        """Declare a tool of ``kind``.

        ``read``: reads only, re-runs freely. ``idempotent``: safe to repeat by nature.
        ``write``: give it an ``idempotency_key`` parameter (durably passes a key stable
        across retries and crashes) or a ``reconcile(key)`` that finds out whether the
        call happened; one with neither still runs, as an ``effect=True`` step (a crash
        in the middle parks the run in doubt), and warns (``UnsafeToolWarning``) once,
        when it is declared. ``destructive``: a write that asks a person first — an
        approval request bound to the tool's name and arguments, at its own position
        before the call's — unless ``approval=False``; ``approval=True`` asks for any
        kind. A rejected or expired request raises ``durably.ToolRejected`` (``dispatch``
        hands it to the model as a tool error). ``name`` (default: the function's name)
        is the step's name and what the model calls; ``description`` (default: the
        docstring) what the model reads. ``@durably.step(...)`` options (retries,
        timeout, ...) compose, applied above or below.
        """

        def wrap(fn: Callable[..., Any]) -> Tool:
            return make_tool(
                fn,
                kind=kind,
                approval=approval,
                name=name,
                reconcile=reconcile,
                description=description,
                stacklevel=3,  # make_tool, wrap, then the line applying the decorator
            )

        if callable(kind):
            raise ConfigError("write @durably.tool(kind=...): the kind is required")
        if kind not in KINDS:
            raise ConfigError(f"kind={kind!r}: choose one of {', '.join(map(repr, KINDS))}")
        return wrap

    @staticmethod
    def from_mcp(annotations: Any) -> Kind:
        """See :func:`durably.tools.from_mcp`."""
        return from_mcp(annotations)


tool: Final = ToolDecorator()
