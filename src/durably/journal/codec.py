"""The journal's JSON codec: canonical encoding, typed decoding, input digests.

Nothing in the journal is pickled: loading a journal must never execute code. Values that
JSON lacks (bytes, tuples, datetimes, ...) are written as one-key tagged objects such as
``{"$bytes": "..."}``. Dataclasses and pydantic models are written as plain objects and
rebuilt only from a *type hint the code supplies* (a step function's return annotation),
never from a class name stored in the journal.

The encoding is canonical (sorted keys, no whitespace, UTF-8), so equal inputs always give
the same digest; :data:`CODEC_VERSION` is recorded on each run and prefixes every digest,
so a future change of encoding can never silently mismatch an old history.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import hashlib
import json
import math
import sys
import types
import typing
import weakref
from collections.abc import Callable
from typing import Any, Final

from ..errors import SerializationError

CODEC_VERSION = 2
"""The digest rule new runs record. 1: sha256 of ``1:`` and the canonical JSON of ``[name,
args, kwargs]``. 2: the same, except that an argument that is a list (a conversation) is
written as ``{"$items": sha256 of its items' sha256s}``, so a replay hashes each message
once (:class:`ItemHashes`), not the whole conversation at every turn; arguments without a
list digest as under 1. A run keeps the rule it recorded."""
CODEC_VERSIONS = (1, 2)

_TAG_DECODERS: dict[str, Callable[[Any], Any]] = {
    "$bytes": lambda v: _module("base64").b64decode(v),
    "$tuple": lambda v: tuple(v),
    "$set": lambda v: set(v),
    "$frozenset": lambda v: frozenset(v),
    "$datetime": lambda v: dt.datetime.fromisoformat(v),
    "$date": lambda v: dt.date.fromisoformat(v),
    "$time": lambda v: dt.time.fromisoformat(v),
    "$timedelta": lambda v: dt.timedelta(microseconds=v),
    "$decimal": lambda v: _module("decimal").Decimal(v),
    "$uuid": lambda v: _module("uuid").UUID(v),
    "$float": lambda v: float(v),
    "$map": lambda v: {_hashable(k): val for k, val in v},
    "$dict": lambda v: dict(v),
}


def _module(name: str) -> Any:
    import importlib

    return importlib.import_module(name)


def _hashable(key: Any) -> Any:
    """Turn decoded list keys back into tuples so they can key a dict."""
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    return key


def _sort_key(item: Any) -> str:
    return json.dumps(item, sort_keys=True, separators=(",", ":"))


def to_json(value: Any, where: str = "value") -> Any:
    """Convert ``value`` to plain JSON data (dicts with str keys, lists, scalars).

    Raises :class:`SerializationError` naming ``where`` and the offending type.
    """
    # Exact types first: the common cases cost one type() call, not a chain of isinstance.
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return value
    if t is dict:
        return _dict_to_json(value, where)
    if t is list:
        return [to_json(v, where) for v in value]
    if isinstance(value, bool | int | str):
        if isinstance(value, enum.Enum):
            return to_json(value.value, where)
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"$float": repr(value)}
    if isinstance(value, enum.Enum):
        return to_json(value.value, where)
    if isinstance(value, dict):
        return _dict_to_json(value, where)
    if isinstance(value, list):
        return [to_json(v, where) for v in value]
    if isinstance(value, tuple):
        return {"$tuple": [to_json(v, where) for v in value]}
    if isinstance(value, set | frozenset):
        tag = "$set" if isinstance(value, set) else "$frozenset"
        return {tag: sorted((to_json(v, where) for v in value), key=_sort_key)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": _module("base64").b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, dt.time):
        return {"$time": value.isoformat()}
    if isinstance(value, dt.timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        return {"$timedelta": micros}
    # decimal and uuid are imported only when used: a value of their types can exist only
    # once its module is loaded, so looking in sys.modules is exact and keeps import fast.
    dec = sys.modules.get("decimal")
    if dec is not None and isinstance(value, dec.Decimal):
        return {"$decimal": str(value)}
    uid = sys.modules.get("uuid")
    if uid is not None and isinstance(value, uid.UUID):
        return {"$uuid": str(value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name), where) for f in dataclasses.fields(value)}
    dump = getattr(value, "model_dump", None)
    if callable(dump) and hasattr(type(value), "model_validate"):  # a pydantic v2 model
        # Through to_json again: model_dump knows nothing of this codec's tags, so a field
        # or dict key such as "$bytes" must be escaped here or it would decode as a tag.
        return to_json(dump(mode="json"), where)
    raise SerializationError(
        f"{where}: cannot encode a value of type {type(value).__module__}."
        f"{type(value).__qualname__} to JSON. Return and pass plain data (dict, list, str,"
        " numbers, dataclasses, pydantic models, datetimes, bytes); pass clients and"
        " connections through a closure, not as step arguments."
    )


def _dict_to_json(value: dict[Any, Any], where: str) -> Any:
    if all(isinstance(k, str) for k in value):
        if len(value) == 1 and next(iter(value)).startswith("$"):
            # A user key that looks like a tag: written as pairs, so the decoder never
            # sees it as a one-key object.
            return {"$dict": [[k, to_json(v, where)] for k, v in value.items()]}
        return {k: to_json(v, where) for k, v in value.items()}
    items = [[to_json(k, where), to_json(v, where)] for k, v in value.items()]
    items.sort(key=lambda kv: _sort_key(kv[0]))
    return {"$map": items}


def _object_hook(obj: dict[str, Any]) -> Any:
    if len(obj) == 1:
        key = next(iter(obj))
        decoder = _TAG_DECODERS.get(key)
        if decoder is not None:
            return decoder(obj[key])
    return obj


# Built once: json.dumps/json.loads with options build a new encoder/decoder per call,
# which is most of the cost of replaying a small step.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_DECODER = json.JSONDecoder(object_hook=_object_hook)
_PLAIN_DECODER = json.JSONDecoder()
# _ENCODER's C encoder, made once, without cycle detection (markers None): see canonical.
_C_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)
_FLAT_ENCODE: Any = (
    None
    if _C_ENCODER is None  # an interpreter without the C accelerator: _ENCODER as it is
    else _C_ENCODER(
        None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", True, False, True
    )
)


def dumps(value: Any, where: str = "value", bytes_max: int | None = None) -> str:
    """Encode ``value`` as canonical JSON text.

    Every failure is a :class:`SerializationError` naming ``where``: a type JSON lacks, an
    int beyond Python's digit limit, nesting deeper than the recursion limit, a lone UTF-16
    surrogate (a model stream cut mid-character: the text cannot be stored as UTF-8), or
    text longer than ``bytes_max`` UTF-8 bytes.
    """
    try:
        if type(value) is dict and _flat(value):
            # The common case (a step's small dict result, an event's data): to_json
            # would return it unchanged, so the walk is skipped (several us a step).
            text = canonical(value)
        else:
            text = canonical(to_json(value, where))
    except SerializationError:
        raise
    except (ValueError, TypeError, RecursionError, OverflowError) as exc:
        raise SerializationError(
            f"{where}: cannot encode it to JSON ({type(exc).__name__}: {str(exc)[:200]});"
            " return plain data of bounded size and depth (a huge int as a str)"
        ) from None
    if not text.isascii():
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise SerializationError(
                f"{where}: the text holds a lone UTF-16 surrogate at character {exc.start}"
                " (a model stream cut mid-character?), which cannot be stored; clean it,"
                " e.g. text.encode('utf-8', 'replace').decode()"
            ) from None
    else:
        size = len(text)
    if bytes_max is not None and size > bytes_max:
        raise SerializationError(
            f"{where}: {size:,} bytes of JSON, more than the {bytes_max:,} a journal record"
            " holds; keep large data outside the journal (a file or blob store) and return a"
            " reference to it (its path, URL or hash)"
        )
    return text


_FLAT_TYPES = frozenset({str, int, bool, type(None)})


def _flat(value: dict[Any, Any]) -> bool:
    """True when ``to_json(value)`` is ``value`` itself: str keys (not a lone "$" key,
    which to_json escapes) and only plain scalars of exact types (finite floats)."""
    for k, v in value.items():
        if type(k) is not str:
            return False
        t = type(v)
        if t not in _FLAT_TYPES and not (t is float and math.isfinite(v)):
            return False
    return len(value) != 1 or not next(iter(value)).startswith("$")


def canonical(data: Any) -> str:
    """Canonical JSON text of already-plain ``data``: sorted keys, no whitespace."""
    # Plain data is a fresh tree (to_json's, or decoded JSON): no cycle to detect, so
    # the C encoder made once serves (JSONEncoder.encode builds one per call, a few us
    # for every digest, manifest and record); the text is the same.
    if _FLAT_ENCODE is None:
        return _ENCODER.encode(data)
    return "".join(_FLAT_ENCODE(data, 0))


def loads(text: str, hint: Any = None) -> Any:
    """Decode JSON text written by :func:`dumps`, rebuilding types from ``hint``.

    Every failure is a :class:`SerializationError`: text that is not JSON, a bad tagged
    value, an int beyond the digit limit, nesting past the recursion limit, or data that
    does not fit ``hint``. A journal row is data from outside, so none of these may escape
    as an ordinary exception (a workflow would take it for its own).
    """
    try:
        # Tags always start with '"$'; text without it needs no object hook (much faster).
        value = _DECODER.decode(text) if '"$' in text else _plain_decode(text)
        if hint is None or hint is Any:
            return value
        return coerce(value, hint)
    except SerializationError:
        raise
    except (ValueError, TypeError, KeyError, RecursionError, OverflowError, AttributeError) as exc:
        raise SerializationError(f"cannot decode a recorded value ({error_text(exc)})") from exc


_SCAN: Callable[[str, int], tuple[Any, int]] = _PLAIN_DECODER.scan_once  # type: ignore[attr-defined]


def _plain_decode(text: str) -> Any:
    """``_PLAIN_DECODER.decode(text)``: its scanner called directly for text that is one
    value with nothing around it (what dumps writes); anything else (whitespace, extra
    data, no value at all) goes through ``decode``, which says what is wrong."""
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return _PLAIN_DECODER.decode(text)
    if end != len(text):
        return _PLAIN_DECODER.decode(text)
    return value


# Errors whose text names positions, limits, keys or types, never a decoded value.
_VALUE_FREE_ERRORS: Final = (json.JSONDecodeError, RecursionError, OverflowError, KeyError)
_ERRORS_SHOWN_MAX: Final = 5


def error_text(exc: BaseException) -> str:
    """``exc`` as "Type: message" for a message that leaves the process (a blocked run's
    reason, its event, a span), without the value that failed to decode: a pydantic
    ``ValidationError`` is listed by field, message and error type (its text would quote
    ``input_value=...``), and an error whose text may quote the value (an enum's "'x' is
    not a valid Color", a model validator's own message) is named by its type only."""
    name = type(exc).__name__
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            items = errors(include_input=False, include_url=False, include_context=False)
            shown = [
                f"{'.'.join(map(str, e.get('loc', ()))) or '(value)'}: {e.get('type', '?')}"
                for e in items[:_ERRORS_SHOWN_MAX]
            ]
            more = f"; {len(items) - len(shown)} more" if len(items) > len(shown) else ""
            return f"{name}: {len(items)} error(s): {'; '.join(shown)}{more}"
        except Exception:
            pass  # not pydantic's: fall through
    if isinstance(exc, _VALUE_FREE_ERRORS) or (
        isinstance(exc, ValueError) and "integer string conversion" in str(exc)
    ):
        return f"{name}: {str(exc)[:200]}"
    return f"{name} (its text may quote the value, so it is not shown)"


def roundtrip(value: Any, hint: Any = None, where: str = "value") -> Any:
    """Return ``loads(dumps(value), hint)``: what replay would return for ``value``."""
    return loads(dumps(value, where), hint)


def digest(
    name: str,
    args: tuple[Any, ...] | list[Any],
    kwargs: dict[str, Any],
    version: int = 1,
    items: ItemHashes | None = None,
) -> str:
    """The input digest of a step: sha256 over the codec version and canonical JSON, by
    the rule of codec ``version`` (see :data:`CODEC_VERSION`); ``items`` caches the
    hashes of list items between calls (version 2)."""
    if version not in CODEC_VERSIONS:
        raise SerializationError(
            f"step {name!r}: this run was recorded with codec version {version}, which this"
            f" durably does not know (it knows {CODEC_VERSIONS}); upgrade durably"
        )
    has_list = version >= 2 and _any_list(args, kwargs)
    cache = items if items is not None else ItemHashes()
    arg = cache.argument if has_list else to_json
    try:
        data = [name, [arg(a) for a in args], {k: arg(v) for k, v in kwargs.items()}]
    except SerializationError:
        _name_bad_argument(name, args, kwargs)  # the slow path says which argument
        raise
    except RecursionError as exc:  # nesting deeper than Python's recursion limit
        raise SerializationError(
            f"step {name!r}: an argument is nested too deeply to encode ({exc}); pass flatter data"
        ) from None
    try:
        text = f"{2 if has_list else 1}:{canonical(data)}"
        return hashlib.sha256(text.encode("utf-8")).hexdigest()
    except (ValueError, TypeError, RecursionError, OverflowError) as exc:
        raise SerializationError(
            f"step {name!r}: cannot encode its arguments to JSON ({type(exc).__name__}:"
            f" {str(exc)[:200]}); pass plain data of bounded size and depth, valid UTF-8"
        ) from None


def _any_list(args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]) -> bool:
    """Whether an argument is a list (a loop: generator expressions cost every step)."""
    for a in args:
        if isinstance(a, list):
            return True
    if kwargs:
        for v in kwargs.values():
            if isinstance(v, list):
                return True
    return False


class _NotPlain(Exception):
    """A value that is not plain JSON data (its hash is not cached)."""


def _snapshot(value: Any) -> Any:
    """A copy of plain JSON data sharing its (immutable) scalars; raises _NotPlain."""
    t = type(value)
    if t is dict:
        if not all(type(k) is str for k in value):
            raise _NotPlain
        return {k: _snapshot(v) for k, v in value.items()}
    if t is list:
        return [_snapshot(v) for v in value]
    if t in (str, int, float, bool) or value is None:
        return value
    raise _NotPlain


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types throughout (1, 1.0 and True encode differently)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return len(a) == len(b) and all(k in b and _same(v, b[k]) for k, v in a.items())
    if type(a) is list:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a is b or bool(a == b)


class ItemHashes:
    """The sha256 of list items' canonical JSON, remembered per item object.

    A conversation passed to a step every turn holds the same message objects: hashing
    each once keeps a replay's digest work per turn flat. An entry is used only while
    the object still equals (types included) the snapshot taken when it was hashed, so
    a message changed in place is hashed again; only plain JSON data (dicts, lists,
    scalars) is remembered. The entry keeps the object alive, so its id is not reused.
    """

    __slots__ = ("_by_id",)

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Any, Any, str]] = {}

    def item(self, value: Any) -> tuple[str, str | None]:
        """``(hash, text)`` of ``value``'s canonical JSON; text is None when the hash
        came from the cache (the caller already had it)."""
        entry = self._by_id.get(id(value))
        if entry is not None and entry[0] is value and _same(entry[1], value):
            return entry[2], None
        text = canonical(to_json(value))
        h = hashlib.sha256(text.encode("utf-8")).hexdigest()
        try:
            self._by_id[id(value)] = (value, _snapshot(value), h)
        except (_NotPlain, RecursionError):
            pass
        return h, text

    def argument(self, value: Any) -> Any:
        """An argument as version 2 writes it: a list by its items' hashes."""
        if not isinstance(value, list):
            return to_json(value)
        joined = "".join(self.item(v)[0] for v in value)
        return {"$items": hashlib.sha256(joined.encode("ascii")).hexdigest()}


def _name_bad_argument(
    name: str, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]
) -> None:
    for i, a in enumerate(args):
        to_json(a, f"step {name!r} argument {i}")
    for k, v in kwargs.items():
        to_json(v, f"step {name!r} argument {k!r}")


def coerce(value: Any, hint: Any) -> Any:
    """Rebuild typed values (dataclasses, pydantic models, enums, containers) from plain
    decoded data, guided only by ``hint``. Data that does not fit the hint is returned as
    it is rather than guessed at."""
    if hint is None or hint is Any or value is None:
        return value
    if type(hint) is type and hint in _SCALAR_HINTS and isinstance(value, hint):
        return value  # what _coerce_class returns for it, without its checks
    if isinstance(hint, str):
        return value  # an unresolved forward reference: keep plain data
    origin, args = _shape(hint)
    if origin is typing.Union or origin is types.UnionType:
        return _coerce_union(value, args)
    if origin is typing.Annotated:
        return coerce(value, args[0])
    if origin is not None:
        return _coerce_generic(value, origin, args)
    if isinstance(hint, type):
        return _coerce_class(value, hint)
    return value


# Hints a value of their own type needs nothing for (not dataclasses, models or enums).
_SCALAR_HINTS: Final = frozenset({str, int, float, bool, dict, list})
# typing.get_origin / get_args of each hint object met (two Python calls apiece, on every
# step result decoded with an annotation). By the object, never by equality: Union[int,
# str] equals Union[str, int], and their members' order decides a coercion. The entry
# keeps its hint alive, so its id is not reused; hints are few, and the cache bounded.
_SHAPES: dict[int, tuple[Any, Any, tuple[Any, ...]]] = {}
_SHAPES_MAX: Final = 1024


def _shape(hint: Any) -> tuple[Any, tuple[Any, ...]]:
    entry = _SHAPES.get(id(hint))
    if entry is not None and entry[0] is hint:
        return entry[1], entry[2]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if len(_SHAPES) < _SHAPES_MAX:
        _SHAPES[id(hint)] = (hint, origin, args)
    return origin, args


def _coerce_union(value: Any, options: tuple[Any, ...]) -> Any:
    for option in options:
        if option is type(None):
            continue
        if isinstance(option, type) and isinstance(value, option):
            return value
    for option in options:
        if option is type(None):
            continue
        try:
            return coerce(value, option)
        except (TypeError, ValueError, KeyError):
            continue
    return value


def _coerce_generic(value: Any, origin: Any, args: tuple[Any, ...]) -> Any:
    if origin in (list, set, frozenset) and isinstance(value, list | tuple | set | frozenset):
        item = args[0] if args else None
        return origin(coerce(v, item) for v in value)
    if origin is tuple and isinstance(value, list | tuple):
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(coerce(v, args[0]) for v in value)
        if args and len(args) == len(value):
            return tuple(coerce(v, a) for v, a in zip(value, args, strict=True))
        return tuple(value)
    if origin is dict and isinstance(value, dict):
        kt, vt = args if len(args) == 2 else (None, None)
        return {coerce(k, kt): coerce(v, vt) for k, v in value.items()}
    if origin is typing.Literal:
        return value
    if isinstance(origin, type) and issubclass(origin, list | tuple | set | frozenset | dict):
        return value
    return value


def _coerce_class(value: Any, cls: type) -> Any:
    if isinstance(value, cls) and not dataclasses.is_dataclass(cls):
        return value
    if dataclasses.is_dataclass(cls) and isinstance(value, dict):
        hints = _type_hints(cls)
        kwargs = {
            f.name: coerce(value[f.name], hints.get(f.name))
            for f in dataclasses.fields(cls)
            if f.name in value
        }
        init = {k: v for k, v in kwargs.items() if _field_in_init(cls, k)}
        obj = cls(**init)
        for k, v in kwargs.items():
            if k not in init:
                object.__setattr__(obj, k, v)
        return obj
    validate = getattr(cls, "model_validate", None)
    if callable(validate) and isinstance(value, dict):
        return validate(value)
    if issubclass(cls, enum.Enum):
        return cls(value)
    if cls is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if cls in (tuple, list, set, frozenset) and isinstance(value, list | tuple | set | frozenset):
        return cls(value)
    return value


def _field_in_init(cls: type, name: str) -> bool:
    return any(f.name == name and f.init for f in dataclasses.fields(cls))


# Weak keys: step functions may be fresh closures on every call, and a long-lived worker
# must not keep each one alive through this cache.
_HINTS_CACHE: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def _type_hints(obj: Any) -> dict[str, Any]:
    try:
        cached = _HINTS_CACHE.get(obj)
    except TypeError:  # not weakly referenceable: resolve every time
        return _resolve_hints(obj)
    if cached is None:
        cached = _resolve_hints(obj)
        _HINTS_CACHE[obj] = cached
    return cached


def _resolve_hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except Exception:  # unresolvable annotations: fall back to plain data
        return {}


def return_hint(fn: Callable[..., Any]) -> Any:
    """The return annotation of ``fn`` if it can be resolved, else None."""
    target = getattr(fn, "__wrapped__", fn)
    try:
        hint = _type_hints(target).get("return")
    except TypeError:
        return None
    if hint is type(None):
        return None
    return _unwrap_awaitable(hint)


def _unwrap_awaitable(hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin is not None and getattr(origin, "__name__", "") in ("Coroutine", "Awaitable"):
        args = typing.get_args(hint)
        return args[-1] if args else None
    return hint


def param_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """Annotations of ``fn``'s parameters that could be resolved."""
    hints = dict(_type_hints(getattr(fn, "__wrapped__", fn)))
    hints.pop("return", None)
    return hints
