"""Record classes that behave as dataclasses, without compiling anything at import.

``@dataclass`` writes each class's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__``
and frozen ``__setattr__`` as source text and compiles it when the module is imported
(about half a millisecond a class on this project's machines), and importing
``dataclasses`` brings ``inspect``, ``ast``, ``dis`` and ``tokenize``. A resume imported
some fifty such classes: that was the largest single cost of a restart (issue 28). The
classes on a resume's path subclass :class:`Record` instead, with their ``__init__``
(and ``__slots__``, where the dataclass had ``slots=True``) written out by hand, and
:class:`Record` gives them the rest without compiling anything:

- ``__eq__`` over the compared fields, true only between instances of the same class
  (``NotImplemented`` otherwise, as a dataclass); ``__hash__`` over the same fields when
  frozen; unhashable when not frozen (a dataclass with ``eq=True``); ``eq=False`` keeps
  identity for both;
- ``__repr__`` as ``Name(field=value, ...)`` over the shown fields (``...`` on recursion);
- ``frozen=True``: assigning or deleting an attribute raises
  ``dataclasses.FrozenInstanceError`` (an ``AttributeError``), imported then: a bug's path;
- ``__match_args__``; for frozen slotted classes, the ``__getstate__``/``__setstate__``
  dataclasses add so that ``copy`` and ``pickle`` can rebuild them;
- ``__dataclass_fields__``, made on first access from the class's declarations: every
  introspecting caller (``dataclasses.is_dataclass``, ``fields``, ``asdict``, ``replace``,
  the journal's codec, a user's own code) starts by reading it, so the classes remain
  dataclasses to all of them, and only such a caller pays for importing ``dataclasses``.

A class declares its fields as a dataclass does (annotations in order; ``ClassVar`` ones
are not fields), and its ``__init__`` takes exactly those fields, in that order, with the
dataclass's defaults (a ``default_factory`` becomes ``None``, replaced in the body). That
agreement is checked when the class is made, so a field added to one and not the other
fails at import; ``tests/unit/test_records.py`` checks each class against the dataclass it
replaced (equality, hash, repr, frozenness, defaults, copying).
"""

from __future__ import annotations

import reprlib
from operator import attrgetter
from typing import Any, ClassVar, TypeVar, dataclass_transform

R = TypeVar("R", bound="Record")

set_field = object.__setattr__
"""How a frozen record's ``__init__`` sets a field (as a dataclass's generated one does)."""


def _getter(names: tuple[str, ...]) -> Any:
    """A C-level function from an instance to the tuple of its ``names``' values."""
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    if not names:
        return lambda obj: ()
    return attrgetter(*names)


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    from dataclasses import FrozenInstanceError

    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    from dataclasses import FrozenInstanceError

    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _getstate(self: Any) -> list[Any]:
    return [getattr(self, name) for name in self._fields]


def _setstate(self: Any, state: list[Any]) -> None:
    for name, value in zip(self._fields, state, strict=True):
        set_field(self, name, value)


class _LazyFields:
    """``__dataclass_fields__``: the dataclass field objects, made at the first read by a
    shadow ``dataclasses.make_dataclass`` of the same declarations, then kept on the
    class. The base class itself has none (it is not a dataclass)."""

    def __get__(self, obj: Any, cls: type[Record]) -> Any:
        if cls is Record:
            raise AttributeError("__dataclass_fields__")
        import dataclasses

        specs: list[Any] = []
        defaults = _init_defaults(cls)
        for name in cls._fields:
            options: dict[str, Any] = {
                "compare": name in cls._compared,
                "repr": name in cls._shown,
            }
            if name in defaults:
                options["default"] = defaults[name]
            specs.append((name, cls.__annotations__[name], dataclasses.field(**options)))
        shadow: Any = dataclasses.make_dataclass(
            cls.__name__, specs, eq=cls._eq, frozen=cls._frozen
        )
        type.__setattr__(cls, "__dataclass_params__", shadow.__dataclass_params__)
        type.__setattr__(cls, "__dataclass_fields__", shadow.__dataclass_fields__)
        return shadow.__dataclass_fields__


def _init_params(cls: type) -> tuple[str, ...]:
    """The names ``cls.__init__`` takes after ``self``, positional then keyword-only."""
    code = cls.__init__.__code__  # type: ignore[misc]
    names: tuple[str, ...] = code.co_varnames[1 : code.co_argcount + code.co_kwonlyargcount]
    return names


def _init_defaults(cls: type) -> dict[str, Any]:
    init: Any = cls.__init__  # type: ignore[misc]
    code = init.__code__
    positional = code.co_varnames[1 : code.co_argcount]
    values = init.__defaults__ or ()
    out = dict(zip(positional[len(positional) - len(values) :], values, strict=True))
    out.update(init.__kwdefaults__ or {})
    return out


@dataclass_transform(eq_default=True)
class Record:
    """The base of durably's record classes (see the module's docstring).

    ``class Name(Record, frozen=True, uncompared=(...), unshown=(...))``: ``frozen`` and
    ``eq`` as a dataclass's; ``uncompared``/``unshown`` name the fields a dataclass had
    with ``compare=False``/``repr=False``.
    """

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _compared: ClassVar[tuple[str, ...]] = ()
    _shown: ClassVar[tuple[str, ...]] = ()
    _frozen: ClassVar[bool] = False
    _eq: ClassVar[bool] = True
    __dataclass_fields__: ClassVar[Any] = _LazyFields()

    def __init_subclass__(
        cls,
        *,
        frozen: bool = False,
        eq: bool = True,
        uncompared: tuple[str, ...] = (),
        unshown: tuple[str, ...] = (),
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        # Not inspect.get_annotations: importing inspect is what this module avoids.
        declared = cls.__dict__.get("__annotations__", {})  # noqa: RUF063
        fields = tuple(
            name
            for name, hint in declared.items()
            if not (isinstance(hint, str) and hint.startswith(("ClassVar", "typing.ClassVar")))
        )
        # The hand-written parts agree with the declarations, or the import fails here.
        if _init_params(cls) != fields:
            raise TypeError(f"{cls.__qualname__}.__init__ takes {_init_params(cls)}, not {fields}")
        slots = cls.__dict__.get("__slots__")
        if slots is not None and sorted(slots) != sorted(fields):
            raise TypeError(f"{cls.__qualname__}.__slots__ is {slots}, not {fields}")
        cls._fields, cls._frozen, cls._eq = fields, frozen, eq
        cls._compared = tuple(name for name in fields if name not in uncompared)
        cls._shown = tuple(name for name in fields if name not in unshown)
        made: dict[str, Any] = {"__match_args__": fields}
        if eq:
            key = _getter(cls._compared)

            def __eq__(self: Any, other: Any) -> Any:
                if other.__class__ is self.__class__:
                    return key(self) == key(other)
                return NotImplemented

            made["__eq__"] = __eq__
            made["__hash__"] = (lambda self: hash(key(self))) if frozen else None
        if frozen:
            made["__setattr__"], made["__delattr__"] = _frozen_setattr, _frozen_delattr
            if slots is not None:
                made["__getstate__"], made["__setstate__"] = _getstate, _setstate
        for name, value in made.items():
            setattr(cls, name, value)

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._shown)
        return f"{self.__class__.__qualname__}({shown})"


def replace(obj: R, /, **changes: Any) -> R:
    """A copy of ``obj`` with ``changes`` applied (``dataclasses.replace`` for records)."""
    for name in obj._fields:
        if name not in changes:
            changes[name] = getattr(obj, name)
    return obj.__class__(**changes)
