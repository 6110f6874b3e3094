"""The record classes on a resume's path behave as the dataclasses they replaced (issue 28).

``durably._record.Record`` stands in for ``@dataclass`` on the classes a resume imports
(compiling their methods at import was the largest cost of a restart). ``DATACLASSES``
below is what each class was as a dataclass, read from its ``dataclasses.fields`` before
the change: its flags and its fields in order, with defaults (``<list>``: a default
factory) and ``compare=False``/``repr=False``. Each class is checked against a dataclass
made from that pin (``dataclasses.make_dataclass``): its ``__init__``'s parameters and
defaults, repr, equality (field by field), hash, frozenness, slots, copying and
pickling, and the ``dataclasses`` functions callers use on it. A field added, dropped or
reordered, a default changed or a flag lost fails here, and so does a Record class that
is not pinned.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import pickle
from typing import Any

import pytest

from durably._record import Record, replace

# What each class was, as a dataclass (flags; fields in order).
DATACLASSES: dict[str, tuple[str, tuple[str, ...]]] = {
    "durably.budget.Budget": ("frozen slots", ("tokens=None", "cost_usd=None")),
    "durably.budget.SpendEntry": (
        "frozen slots",
        (
            "entry",
            "generation",
            "position",
            "attempt",
            "token",
            "tokens",
            "input_tokens",
            "output_tokens",
            "cost_usd",
        ),
    ),
    "durably.budget.Spend": (
        "frozen slots",
        (
            "tokens=0",
            "input_tokens=0",
            "output_tokens=0",
            "cost_usd=0.0",
            "entries=0",
            "budget=None",
        ),
    ),
    "durably.current.StepInfo": (
        "frozen slots",
        ("run_id", "position", "idempotency_key", "attempt", "fencing_token"),
    ),
    "durably.engine.attempt.Attempt": (
        "",
        ("workflow", "run", "core", "executor", "heartbeat", "args", "kwargs"),
    ),
    "durably.engine.attempt.Final": ("", ("value",)),
    "durably.engine.leases.Heartbeat": ("", ("keeper", "core")),
    "durably.engine.options.Options": (
        "frozen",
        (
            "url",
            "clock",
            "lease_s",
            "heartbeat_s",
            "max_starts",
            "fault_hook",
            "wait_for_lease",
            "store_retry_s",
            "park_wait_s",
            "history_warn=(10000, 10485760)",
            "history_max=(50000, 52428800)",
        ),
    ),
    "durably.engine.queues.QueueLimits": (
        "frozen",
        ("concurrency=None", "worker_concurrency=None"),
    ),
    "durably.engine.registry.Workflow": (
        "frozen",
        (
            "name",
            "version",
            "prompt_version",
            "fn",
            "is_async",
            "return_hint=None",
            "param_hints=<dict>",
            "pinned=False nocmp",
            "budget=None",
        ),
    ),
    "durably.engine.retention.PruneReport": (
        "frozen",
        ("runs", "by_status", "blobs", "blob_bytes", "dry_run", "run_ids"),
    ),
    "durably.journal.events.EventKind": (
        "frozen",
        ("kind", "meaning", "fields=<dict>", "stream_only=False"),
    ),
    "durably.journal.events.Event": (
        "frozen",
        ("run_id", "cursor", "kind", "position", "at", "data"),
    ),
    "durably.journal.events.EventPage": ("frozen", ("events", "cursor", "finished")),
    "durably.journal.events.NewEvent": (
        "frozen slots",
        ("kind", "position", "data", "at", "dedupe"),
    ),
    "durably.journal.records.StepRecord": (
        "frozen slots",
        (
            "position",
            "kind",
            "name",
            "digest",
            "status",
            "output=None",
            "error_type=None",
            "error_message=None",
            "attempts=1",
            "started_at=0.0",
            "finished_at=None",
            "usage_tokens=None",
            "usage_cost_usd=None",
            "inputs=None",
            "blobs=() nocmp norepr",
        ),
    ),
    "durably.journal.records.RunRecord": (
        "frozen slots",
        (
            "run_id",
            "workflow",
            "version",
            "prompt_version",
            "queue",
            "input",
            "input_digest",
            "codec_version",
            "status",
            "generation=0",
            "fencing_token=0",
            "owner=None",
            "lease_expires_at=None",
            "starts=0",
            "starts_without_progress=0",
            "outcome=None",
            "error_type=None",
            "error_message=None",
            "park_reason=None",
            "wake_at=None",
            "created_at=0.0",
            "updated_at=0.0",
            "finished_at=None",
            "incarnation=None",
            "cancel_requested_at=None",
            "cancel_reason=None",
        ),
    ),
    "durably.ownership.LeaseWait": ("frozen", ("run_id", "owner", "token", "until")),
    "durably.replay.kernel.FaultStepInfo": (
        "frozen slots",
        ("key", "takes_key", "effect", "has_reconcile"),
    ),
    "durably.replay.ops.Call": (
        "slots",
        ("fn", "args", "kwargs", "timeout_s", "is_async", "info=None", "spend_call=None"),
    ),
    "durably.replay.ops.Write": ("slots", ("records", "events=<list>")),
    "durably.replay.ops.Wait": ("slots", ("seconds",)),
    "durably.replay.ops.ReadDecision": ("slots", ("request_id",)),
    "durably.replay.ops.TakeSignal": ("slots", ("name", "consumer")),
    "durably.replay.ops.Charge": ("slots", ("entry",)),
    "durably.replay.ops.ReadSpend": ("slots", ()),
    "durably.replay.ops.SetBudget": ("slots", ("budget",)),
    "durably.replay.ops.Outcome": (
        "slots",
        ("value=None", "error=None", "usage=<Usage>", "misuse=None"),
    ),
    "durably.replay.setup.RunSetup": (
        "frozen slots",
        (
            "run_id",
            "history",
            "clock",
            "fault_hook=None",
            "token=0",
            "incarnation=None",
            "generation=0",
            "codec_version=2",
            "prompt_versions=(None, None)",
            "lease_deadline=None",
            "checking=False",
            "fetch_blobs=None",
            "history_warn=None",
            "history_max=None",
        ),
    ),
    "durably.replay.slots.GatherState": (
        "slots",
        (
            "failed=<list>",
            "parks=<dict>",
            "went_live=<set>",
            "entered=0",
            "approvals_waiting=0",
            "legacy=None",
        ),
    ),
    "durably.replay.slots.BudgetState": (
        "slots",
        ("generation", "limit=None", "spend=None", "arrived=None", "arrived_taken=None"),
    ),
    "durably.replay.slots.BlobState": ("slots", ("fetch", "known=<set>")),
    "durably.replay.slots.EmitState": ("slots", ("counts=<dict>",)),
    "durably.replay.slots.HistorySize": (
        "slots",
        ("records", "bytes", "warn", "max", "warned=False", "counted=<set>"),
    ),
    "durably.replay.streamops.Begun": ("frozen slots", ("position",)),
    "durably.replay.streamops.Deliver": ("frozen slots", ("chunk", "index", "info")),
    "durably.runlist.LiveWorker": ("frozen slots", ("owner", "host", "pid", "queues")),
    "durably.runlist.RunPage": ("frozen slots", ("runs", "next")),
    "durably.runtime.drive.GatherTasks": ("slots", ("tasks=<dict>", "settling=<set>")),
    "durably.steps.StepOptions": (
        "frozen slots",
        (
            "retries=0",
            "backoff_s=1.0",
            "backoff_max_s=60.0",
            "timeout_s=None",
            "retry_on=(<class 'Exception'>,)",
            "no_retry=()",
            "effect=False",
            "reconcile=None",
            "on_doubt='park'",
            "dedupe_window_s=None",
        ),
    ),
    "durably.steps.StepSignature": (
        "frozen slots",
        ("options", "takes_key", "takes_token", "is_async", "return_hint=None"),
    ),
    "durably.steps.Usage": (
        "slots",
        (
            "tokens=0",
            "cost_usd=0.0",
            "reported=False",
            "input_tokens=0",
            "output_tokens=0",
            "split=False",
            "late=None nocmp norepr",
        ),
    ),
    "durably.store.base.NewRun": (
        "frozen slots",
        (
            "run_id",
            "workflow",
            "version",
            "prompt_version",
            "queue",
            "input",
            "input_digest",
            "codec_version",
            "incarnation=<new_incarnation>",
        ),
    ),
    "durably.store.base.Generation": (
        "frozen slots",
        ("generation", "input", "input_digest", "status", "records", "finished_at"),
    ),
    "durably.store.groupcommit.Append": (
        "slots noeq",
        (
            "run_id",
            "token",
            "records",
            "events",
            "durable",
            "result=False",
            "error=None",
            "done=False",
            "waiter=None",
            "write=None",
            "value=None",
        ),
    ),
    "durably.store.owner.Owner": ("frozen slots", ("host", "pid", "started", "host_id=''")),
    "durably.store.retained.Tombstone": (
        "frozen",
        (
            "run_id",
            "workflow",
            "input_digest",
            "status",
            "incarnation",
            "finished_at",
            "removed_at",
            "how",
        ),
    ),
    "durably.store.retained.Redaction": ("frozen", ("run_id", "redacted_at", "redacted_by")),
    "durably.store.retained.Freed": (
        "",
        ("runs=0", "by_status=<dict>", "blobs=0", "blob_bytes=0", "run_ids=<list>"),
    ),
    "durably.store.sqlfiles.Migration": ("frozen", ("version", "name", "sql")),
    "durably.store.streamwriter.Pending": ("frozen slots", ("run_id", "token", "events")),
}

# Values a class's __init__ checks (the rest get distinct strings).
SAMPLES: dict[str, dict[str, Any]] = {"durably.budget.Budget": {"tokens": 7, "cost_usd": 1.5}}


def _cls(path: str) -> type[Any]:
    module, _, name = path.rpartition(".")
    cls: type[Any] = getattr(importlib.import_module(module), name)
    return cls


def _parse(spec: str) -> tuple[str, str | None, bool, bool]:
    """(name, the default's repr or None, compare, repr) of one pinned field."""
    words = spec.split(" ")
    head, flags = words[0], set(words[1:])
    name, _, default = head.partition("=")
    if default:
        default = spec[len(name) + 1 :].removesuffix(" norepr").removesuffix(" nocmp")
        default = default.removesuffix(" norepr").removesuffix(" nocmp")
    return name, default or None, "nocmp" not in flags, "norepr" not in flags


_FACTORIES = {"<list>": list, "<dict>": dict, "<set>": set}


def _reference(path: str) -> Any:
    """The pinned dataclass, made again (defaults evaluated from the class's own)."""
    flags, fields = DATACLASSES[path]
    cls = _cls(path)
    ours = inspect.signature(cls).parameters
    specs = []
    for spec in fields:
        name, default, compare, shown = _parse(spec)
        options: dict[str, Any] = {"compare": compare, "repr": shown}
        if default is not None and default.startswith("<"):
            factory = _FACTORIES.get(default) or type(cls(**_required(path)).__getattribute__(name))
            options["default_factory"] = factory
        elif default is not None:
            options["default"] = ours[name].default
        specs.append((name, Any, dataclasses.field(**options)))
    return dataclasses.make_dataclass(
        cls.__name__,
        specs,
        frozen="frozen" in flags,
        eq="noeq" not in flags,
        slots="slots" in flags,
    )


def _required(path: str) -> dict[str, Any]:
    sample = SAMPLES.get(path, {})
    return {
        name: sample.get(name, f"{name}-value")
        for name, default, _, _ in map(_parse, DATACLASSES[path][1])
        if default is None
    }


def _values(path: str) -> dict[str, Any]:
    sample = SAMPLES.get(path, {})
    return {
        name: sample.get(name, f"{name}-{i}")
        for i, (name, *_) in enumerate(map(_parse, DATACLASSES[path][1]))
    }


def test_every_record_class_is_pinned() -> None:
    for path in DATACLASSES:
        _cls(path)
    made = {f"{c.__module__}.{c.__qualname__}" for c in Record.__subclasses__()}
    assert sorted(made - set(DATACLASSES)) == []
    assert sorted(set(DATACLASSES) - made) == []


@pytest.mark.parametrize("path", sorted(DATACLASSES))
def test_init_takes_the_dataclass_fields_with_its_defaults(path: str) -> None:
    cls = _cls(path)
    params = inspect.signature(cls).parameters
    pinned = [_parse(spec) for spec in DATACLASSES[path][1]]
    assert list(params) == [name for name, *_ in pinned]
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params.values())
    for name, default, _, _ in pinned:
        if default is None:
            assert params[name].default is inspect.Parameter.empty, name
        elif default.startswith("<"):
            # A default factory: None in the signature, a fresh value in each instance.
            assert params[name].default is None, name
            a, b = cls(**_required(path)), cls(**_required(path))
            made = getattr(a, name)
            assert type(made).__name__ == default.strip("<>") or default not in _FACTORIES
            assert made is not getattr(b, name)
        else:
            assert repr(params[name].default) == default, name
    ref = _reference(path)
    ours, theirs = cls(**_required(path)), ref(**_required(path))
    for name, default, _, _ in pinned:
        if default is not None and default.startswith("<") and default not in _FACTORIES:
            # Another factory (a fresh incarnation id): a value of the same type.
            assert type(getattr(ours, name)) is type(getattr(theirs, name)), name
        else:
            assert getattr(ours, name) == getattr(theirs, name), name


@pytest.mark.parametrize("path", sorted(DATACLASSES))
def test_repr_eq_hash_as_the_dataclass(path: str) -> None:
    cls, ref = _cls(path), _reference(path)
    values = _values(path)
    ours, theirs = cls(**values), ref(**values)
    if "__repr__" not in cls.__dict__:  # a class's own repr was kept by @dataclass too
        assert repr(ours) == repr(theirs)
    assert (ours == cls(**values)) == (theirs == ref(**values))
    assert ours != theirs  # another class: never equal, as a dataclass
    assert (cls.__hash__ is None) == (ref.__hash__ is None)
    if cls.__hash__ is not None and "noeq" not in DATACLASSES[path][0]:
        assert hash(ours) == hash(cls(**values))
    for name in values:
        if name in SAMPLES.get(path, {}):
            continue
        changed = {**values, name: f"{name}-other"}
        assert (ours == cls(**changed)) == (theirs == ref(**changed)), name
    assert cls.__match_args__ == ref.__match_args__


@pytest.mark.parametrize("path", sorted(DATACLASSES))
def test_frozen_and_slots_as_the_dataclass(path: str) -> None:
    cls, ref = _cls(path), _reference(path)
    values = _values(path)
    ours, theirs = cls(**values), ref(**values)
    assert hasattr(ours, "__dict__") == hasattr(theirs, "__dict__")
    for name in values:
        refused = []
        for obj in (ours, theirs):
            try:
                setattr(obj, name, getattr(obj, name))
                refused.append(None)
            except dataclasses.FrozenInstanceError as e:
                refused.append(str(e))
        assert refused[0] == refused[1], name
    if "frozen" in DATACLASSES[path][0]:
        with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field"):
            delattr(ours, next(iter(values), "x"))


@pytest.mark.parametrize("path", sorted(DATACLASSES))
def test_dataclass_functions_and_copies_work_on_it(path: str) -> None:
    cls, ref = _cls(path), _reference(path)
    values = _values(path)
    ours, theirs = cls(**values), ref(**values)
    assert dataclasses.is_dataclass(cls) and dataclasses.is_dataclass(ours)
    fields = [(f.name, f.compare, f.repr) for f in dataclasses.fields(cls)]
    assert fields == [(f.name, f.compare, f.repr) for f in dataclasses.fields(ref)]
    assert dataclasses.asdict(ours) == dataclasses.asdict(theirs)
    fields_of = [name for name, *_ in fields]
    if fields_of and fields_of[0] not in SAMPLES.get(path, {}):
        first = fields_of[0]
        for made in (replace(ours, **{first: "new"}), dataclasses.replace(ours, **{first: "new"})):
            assert type(made) is cls
            assert getattr(made, first) == "new"
            assert [getattr(made, n) for n in fields_of[1:]] == [
                getattr(ours, n) for n in fields_of[1:]
            ]
    for made in (copy.copy(ours), copy.deepcopy(ours), pickle.loads(pickle.dumps(ours))):
        assert type(made) is cls
        assert [getattr(made, n) for n in fields_of] == [getattr(ours, n) for n in fields_of]


def test_a_record_whose_init_and_fields_disagree_fails_when_made() -> None:
    with pytest.raises(TypeError, match="__init__ takes"):

        class Drifted(Record):
            a: int
            b: int

            def __init__(self, a: int) -> None:
                self.a = a

    with pytest.raises(TypeError, match="__slots__"):

        class Unslotted(Record):
            __slots__ = ("a",)
            a: int
            b: int

            def __init__(self, a: int, b: int) -> None:
                self.a, self.b = a, b
