"""The registry: workflows by name and version, and the routing of runs to them.

A new run takes the version pinned with :meth:`Workflow.at_version`, else the newest
(natural sort); an existing run is driven by the version it recorded, and a version this
process does not register is refused, naming it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .. import codec
from .._callables import is_coroutine_function
from .._record import Record, replace, set_field
from ..budget import Budget
from ..errors import ConfigError, WorkflowNotRegistered
from ..history import RunRecord, check_name
from ..misuse import check_workflow_fn


class Workflow(Record, frozen=True, uncompared=("pinned",)):
    """A registered workflow function."""

    name: str
    version: str | None
    prompt_version: str | None
    fn: Callable[..., Any]
    is_async: bool
    return_hint: Any
    param_hints: dict[str, Any]

    # Set on the copy at_version() returns: a new run takes exactly this version.
    pinned: bool
    # The run's spending limit (``budget=``), applied at the top of every claim as if the
    # workflow called ctx.budget first.
    budget: Budget | None

    def __init__(
        self,
        name: str,
        version: str | None,
        prompt_version: str | None,
        fn: Callable[..., Any],
        is_async: bool,
        return_hint: Any = None,
        param_hints: dict[str, Any] | None = None,
        pinned: bool = False,
        budget: Budget | None = None,
    ) -> None:
        set_field(self, "name", name)
        set_field(self, "version", version)
        set_field(self, "prompt_version", prompt_version)
        set_field(self, "fn", fn)
        set_field(self, "is_async", is_async)
        set_field(self, "return_hint", return_hint)
        set_field(self, "param_hints", {} if param_hints is None else param_hints)
        set_field(self, "pinned", pinned)
        set_field(self, "budget", budget)

    def __repr__(self) -> str:
        return f"<durably workflow {self.name!r} version={self.version!r}>"

    def at_version(self, version: str | None) -> Workflow:
        """This workflow's ``version`` as registered in the engine, for a new run:
        ``engine.run(wf.at_version("1"), ...)`` (without it a new run takes the newest
        version). ``None`` names the registration without a version. The engine refuses a
        version it does not register, naming it."""
        if version is not None and not isinstance(version, str):
            raise ConfigError(f"at_version takes a str or None, got {version!r:.100}")
        return replace(self, version=version, pinned=True)


class Registry:
    """The workflows one engine registers: name -> version -> registration."""

    def __init__(self) -> None:
        self.versions: dict[str, dict[str | None, Workflow]] = {}

    def workflow(
        self,
        name: str | None,
        version: str | None,
        prompt_version: str | None,
        budget: Budget | None,
    ) -> Callable[[Callable[..., Any]], Workflow]:
        """The decorator ``@engine.workflow(...)`` returns (see the facade)."""
        if budget is not None and not isinstance(budget, Budget):
            raise ConfigError(
                f"@engine.workflow(budget=...) takes a durably.Budget(tokens=..., cost_usd=...),"
                f" got {budget!r:.100}"
            )

        def register(fn: Callable[..., Any]) -> Workflow:
            if not callable(fn):
                raise ConfigError("@engine.workflow() decorates a function")
            wf_name = name or fn.__qualname__
            check_name(wf_name, "the workflow name")
            check_workflow_fn(fn, wf_name)
            _check_version(version, "version")
            _check_version(prompt_version, "prompt_version")
            versions = self.versions.setdefault(wf_name, {})
            existing = versions.get(version)
            if existing is not None and existing.fn is not fn:
                raise ConfigError(
                    f"a workflow named {wf_name!r} with version {version!r} is already"
                    " registered; give the new code another version (versions of one name"
                    " register side by side)"
                )
            wf = Workflow(
                wf_name,
                version,
                prompt_version,
                fn,
                is_coroutine_function(fn),
                codec.return_hint(fn),
                codec.param_hints(fn),
                budget=budget,
            )
            versions[version] = wf
            return wf

        return register

    def resolve(self, wf: Workflow | str) -> Workflow:
        """The registration a new run of ``wf`` takes: the version pinned with
        :meth:`Workflow.at_version`, else the newest."""
        key = wf if isinstance(wf, str) else getattr(wf, "name", None)
        versions = self.versions.get(key) if isinstance(key, str) else None
        if not versions:
            known = ", ".join(sorted(self.versions)) or "none"
            raise WorkflowNotRegistered(
                f"workflow {getattr(wf, '__qualname__', wf)!r} is not registered with this"
                f" engine (registered: {known}); decorate it with @engine.workflow()"
            )
        if isinstance(wf, Workflow) and wf.pinned:
            return self._version_of(wf.name, wf.version, versions)
        return newest(versions)

    def for_run(self, run: RunRecord) -> Workflow:
        """The registration that drives an existing run: the version it recorded (a run
        without one: the registration without a version, else the newest); a version
        this process lacks is refused, naming it."""
        versions = self.versions.get(run.workflow)
        if not versions:
            return self.resolve(run.workflow)  # raises, naming what is registered
        if run.version is None:
            return versions.get(None) or newest(versions)
        return self._version_of(run.workflow, run.version, versions, run.run_id)

    def _version_of(
        self,
        name: str,
        version: str | None,
        versions: dict[str | None, Workflow],
        run_id: str | None = None,
    ) -> Workflow:
        found = versions.get(version)
        if found is None:
            what = f"run {run_id!r} is of" if run_id else "a new run asked for"
            have = ", ".join(_version_text(v) for v in sorted(versions, key=version_key))
            raise WorkflowNotRegistered(
                f"{what} workflow {name!r} version {_version_text(version)}, which this"
                f" process does not register (it has {have}); run it where that version is"
                f" registered (@engine.workflow(name={name!r}, version={version!r}))"
            )
        return found

    def served(self) -> dict[str, frozenset[str | None]]:
        """The versions registered per workflow name (None: the registration without a
        version); a worker claims only runs it can drive."""
        return {name: frozenset(versions) for name, versions in self.versions.items()}

    def workflows(self) -> list[Workflow]:
        """Every registration, sorted by name, then version (none first)."""
        return [
            versions[v]
            for name, versions in sorted(self.versions.items())
            for v in sorted(versions, key=version_key)
        ]


def unregistered(run: RunRecord) -> Workflow:
    """A stand-in for a workflow this engine does not know (a fork made by ``durably
    fork``): its handle can wait for the run, and decodes the result without types."""

    def not_here(*_: Any, **__: Any) -> Any:
        raise WorkflowNotRegistered(f"workflow {run.workflow!r} is not registered here")

    return Workflow(run.workflow, run.version, run.prompt_version, not_here, False)


def version_key(version: str | None) -> tuple[tuple[int, int | str], ...]:
    """Natural sort key of a version: "10" after "9", "1.10" after "1.9"; None (no
    version) sorts first."""
    if version is None:
        return ()
    return tuple(
        # isdecimal, not isdigit: "²" is a digit that int() refuses (and \d does not match)
        (0, int(part)) if part.isdecimal() else (1, part)
        for part in re.split(r"(\d+)", version)
        if part
    )


def newest(versions: dict[str | None, Workflow]) -> Workflow:
    """The registration a new run takes: the highest version by natural sort (versions
    that sort alike, "01" and "1", by their text: never by the order they registered)."""
    return versions[max(versions, key=lambda v: (version_key(v), v or ""))]


def _check_version(version: object, what: str) -> None:
    """A workflow's ``version``/``prompt_version``: None, or a non-empty storable str (""
    would sort, route and print like no version at all, yet be another one)."""
    if version is None:
        return
    if not isinstance(version, str) or not version:
        raise ConfigError(
            f"@engine.workflow({what}=...) takes a non-empty str such as '2' (or None for"
            f" none), got {version!r:.100}"
        )
    check_name(version, f"the workflow {what}")


def _version_text(version: str | None) -> str:
    return "(no version)" if version is None else repr(version)
