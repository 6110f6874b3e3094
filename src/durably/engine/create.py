"""Creating runs: the run id checked, the arguments checked against the workflow before
anything is stored, the input encoded, and the run created (or found, and checked to be
the same workflow and input)."""

from __future__ import annotations

import hashlib
from typing import Any

from .. import codec
from .._callables import binds
from ..errors import ConfigError, RunConflict
from ..history import KEY_CHARS_MAX, RUN_ID_CHARS_MAX, RUN_INPUT_BYTES_MAX, RunRecord, unstorable
from ..store.base import NewRun
from ..store.retained import Tombstoned
from .base import Base
from .registry import Registry, Workflow
from .retention import refuse_redacted
from .tombstones import check_recreate


class Creator:
    """Creates (or finds) runs for ``engine.run``, ``engine.start`` and ``engine.fork``."""

    def __init__(self, base: Base, registry: Registry) -> None:
        self._base = base
        self._registry = registry

    def prepare_resolved(
        self,
        wf: Workflow | str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        run_id: str | None,
        queue: str = "default",
    ) -> tuple[Workflow, RunRecord]:
        """Create the run (or find it) and the registration that drives it: a new run's
        chosen version, an existing run's recorded one."""
        w = self._registry.resolve(wf)
        self._check_arguments(w, args, kwargs, run_id)
        run = self.prepare(w, args, kwargs, run_id, queue)
        if run.version != w.version:
            w = self._registry.for_run(run)
        return w, run

    def _check_arguments(
        self, w: Workflow, args: tuple[Any, ...], kwargs: dict[str, Any], run_id: str | None
    ) -> None:
        """Refuse, before a run is created, arguments the workflow function cannot take:
        created, the run would fail at once with a TypeError, and its run id would stay
        bound to the wrong input (a corrected call is a ``RunConflict``). A run that
        exists already is left to the usual checks (its recorded input decides)."""
        if binds(w.fn, (None, *args), kwargs):  # None stands for the context
            return  # certain from a plain function's code; inspect for the rest
        import inspect

        try:
            sig = inspect.signature(w.fn)
        except (TypeError, ValueError):
            return  # a callable without a readable signature: nothing to check
        try:
            sig.bind(None, *args, **kwargs)  # None stands for the context
        except TypeError as exc:
            if run_id is not None and self._base.store.get_run(run_id) is not None:
                return
            raise ConfigError(
                f"workflow {w.name!r} cannot take these arguments: {exc}; no run was"
                f" created. Pass what {w.fn.__name__}({', '.join(sig.parameters)}) takes after"
                " its context:"
                f" engine.run(wf, *args, run_id=..., **kwargs)"
            ) from None

    def prepare(
        self,
        w: Workflow,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        run_id: str | None,
        queue: str = "default",
    ) -> RunRecord:
        """Create the run of ``w`` with this input, or find it (``RunConflict`` when the
        id belongs to another workflow or other input)."""
        run_id = self.new_run_id(run_id)
        text = codec.dumps(
            {"args": list(args), "kwargs": kwargs}, "workflow input", RUN_INPUT_BYTES_MAX
        )
        digest = hashlib.sha256(text.encode()).hexdigest()
        new = NewRun(
            run_id, w.name, w.version, w.prompt_version, queue, text, digest, codec.CODEC_VERSION
        )
        try:
            run, created = self._base.store.create_run(new)
        except Tombstoned as exc:
            # The id of a pruned or deleted run: a fresh run would repeat its effects.
            raise check_recreate(exc.tomb, new) from None
        if not created:
            refuse_redacted(self._base, run, "run again")
            if run.workflow != w.name:
                raise RunConflict(
                    f"run_id {run_id!r} belongs to workflow {run.workflow!r}, not {w.name!r};"
                    " choose another run_id"
                )
            # Generation 0's input is the run's identity: after a continue_as_new the row
            # holds the current generation's, and the first one's digest is kept aside.
            first = run.input_digest
            if run.generation > 0:
                first = self._base.store.origin_digest(run_id) or first
            if first != digest:
                raise RunConflict(
                    # No digests: a short input is found again from its sha256.
                    f"run_id {run_id!r} was started with other input; use a new run_id for"
                    " new input, or"
                    " engine.resume(run_id) to continue it with its recorded input"
                )
        return run

    def new_run_id(self, run_id: str | None) -> str:
        """``run_id`` checked (a fresh UUID when None): a non-empty str of at most
        RUN_ID_CHARS_MAX characters without control characters, so that every key of the
        run fits KEY_CHARS_MAX and is one a receiving side accepts."""
        if run_id is None:
            import uuid  # imported on first use: it pulls in platform (slow)

            return uuid.uuid4().hex
        if not isinstance(run_id, str) or not run_id:
            raise ConfigError(f"run_id must be a non-empty str, got {run_id!r:.300}")
        if len(run_id) <= RUN_ID_CHARS_MAX and run_id.isprintable():
            return run_id
        # NUL or a lone surrogate first: no database can even look such an id up.
        if unstorable(run_id) is None and self._base.store.get_run(run_id) is not None:
            return run_id  # created before these limits: it may still be driven
        if not run_id.isprintable():
            raise ConfigError(
                f"run_id {run_id!r:.300} contains control or other unprintable characters;"
                " every idempotency key of the run starts with it and a receiving side"
                " (an Idempotency-Key header) refuses them: use letters, digits and"
                " punctuation such as '-', '_', ':' or '/'"
            )
        raise ConfigError(
            f"run_id must be a non-empty str of at most {RUN_ID_CHARS_MAX} characters (its"
            f" idempotency keys must fit the receiving side's {KEY_CHARS_MAX}), got"
            f" {run_id!r:.300}"
        )
