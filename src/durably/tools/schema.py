"""A tool's argument schema, from its signature, type hints and docstring (pydantic),
and the check of a model's arguments against it.

pydantic is imported here only (extra ``durably[tools]``), so ``import durably`` and a
tool that is never shown to a model do without it.
"""

from __future__ import annotations

import inspect
import re
import typing
import weakref
from collections.abc import Callable
from typing import Any, Final, Protocol

from ..errors import ConfigError

DURABLY_PARAMS: Final = frozenset({"idempotency_key", "fencing_token"})
"""Parameters durably fills in itself: never part of a tool's schema or arguments."""


class SchemaSource(Protocol):
    """What a schema is built from: a durably tool's name, function and given schema
    (:class:`durably.tools.Tool` is one; a protocol here, so that this module does not
    import the tool module that imports it)."""

    @property
    def name(self) -> str:
        """The tool's name."""
        ...

    @property
    def fn(self) -> Callable[..., Any]:
        """The tool's function."""
        ...

    @property
    def input_schema(self) -> dict[str, Any] | None:
        """A JSON schema given with the tool, else None (built from ``fn``)."""
        ...


_MODELS: weakref.WeakKeyDictionary[SchemaSource, Any] = weakref.WeakKeyDictionary()
_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params):$", re.IGNORECASE)
_OTHER_SECTION = re.compile(
    r"^(Returns?|Raises?|Yields?|Examples?|Notes?|See Also|Warnings?):$", re.IGNORECASE
)
_GOOGLE_ARG = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_ARG = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+):\s*(.*)$")


def _pydantic() -> Any:
    try:
        import pydantic
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ConfigError("tool schemas need pydantic: pip install 'durably[tools]'") from exc
    return pydantic


def split_doc(doc: str) -> tuple[str, dict[str, str]]:
    """A docstring's description (the text before its first section) and the
    description of each argument, from a Google-style ``Args:`` section or Sphinx-style
    ``:param name:`` lines."""
    head: list[str] = []
    params: dict[str, str] = {}
    current: str | None = None
    section: str | None = None
    arg_indent = -1
    for line in doc.splitlines():
        text = line.strip()
        indent = len(line) - len(line.lstrip())
        sphinx = _SPHINX_ARG.match(text)
        if sphinx:
            section, current = "sphinx", sphinx.group(1)
            params[current] = sphinx.group(2).strip()
            continue
        if _SECTION.match(text):
            section, current, arg_indent = "args", None, -1
            continue
        if _OTHER_SECTION.match(text) or text.startswith(":"):
            section, current = "other", None
            continue
        if section is None:
            head.append(line)
            continue
        if section == "args" and text:
            entry = _GOOGLE_ARG.match(text)
            if entry and (arg_indent < 0 or indent <= arg_indent):
                arg_indent = indent
                current = entry.group(1).lstrip("*")
                params[current] = entry.group(2).strip()
                continue
        if current is not None and text and section in ("args", "sphinx"):
            params[current] = f"{params[current]} {text}".strip()
    return "\n".join(head).strip(), params


def arguments_model(tool: SchemaSource) -> Any:
    """The pydantic model of ``tool``'s arguments (cached per tool): one field per
    parameter, typed by its hint (``Any`` without one), required unless it has a
    default, described by the docstring; extra arguments are refused. The parameters
    durably passes (``idempotency_key``, ``fencing_token``) are left out."""
    cached = _MODELS.get(tool)
    if cached is not None:
        return cached
    pydantic = _pydantic()
    fn = tool.fn
    try:
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
    except (TypeError, ValueError, NameError) as exc:
        raise ConfigError(
            f"tool {tool.name!r}: cannot read its signature's type hints ({exc}); make"
            " every annotation importable at module level"
        ) from exc
    _, described = split_doc(inspect.getdoc(fn) or "")
    fields: dict[str, Any] = {}
    for pname, p in sig.parameters.items():
        if pname in DURABLY_PARAMS or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.kind is p.POSITIONAL_ONLY:
            raise ConfigError(
                f"tool {tool.name!r}: parameter {pname!r} is positional-only; a model"
                " passes arguments by name, so make it an ordinary parameter"
            )
        default = ... if p.default is p.empty else p.default
        hint = hints.get(pname, Any)
        desc = described.get(pname) or None
        fields[pname] = (hint, pydantic.Field(default, description=desc))
    model = pydantic.create_model(
        f"{tool.name}_arguments",
        __config__=pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=False),
        **fields,
    )
    _MODELS[tool] = model
    return model


def json_schema(tool: SchemaSource) -> dict[str, Any]:
    """The JSON Schema (an object) of ``tool``'s arguments, without pydantic's titles."""
    if tool.input_schema is not None:
        return dict(tool.input_schema)
    schema: dict[str, Any] = arguments_model(tool).model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    schema.setdefault("properties", {})
    schema["additionalProperties"] = False
    return schema


def validate(tool: SchemaSource, arguments: Any) -> dict[str, Any]:
    """The keyword arguments for a call of ``tool`` from the model's ``arguments`` (a
    dict), checked against its schema; a ``ValueError`` whose text says which argument
    is wrong and how (never the value) otherwise."""
    if not isinstance(arguments, dict):
        raise ValueError(f"arguments must be a JSON object, got {type(arguments).__name__}")
    if tool.input_schema is not None:
        return _validate_json_schema(tool.input_schema, arguments)
    pydantic = _pydantic()
    model = arguments_model(tool)
    try:
        checked = model.model_validate(arguments)
    except pydantic.ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)
        ]
        raise ValueError("; ".join(problems)) from None
    return {name: getattr(checked, name) for name in checked.model_fields_set}


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def _validate_json_schema(schema: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """A minimal check of the top level of an outside schema (an MCP server's): required
    names, no unknown names when ``additionalProperties`` is false, and each named
    property's JSON type. The server checks the rest."""
    props: dict[str, Any] = schema.get("properties") or {}
    problems = [f"{r}: Field required" for r in schema.get("required", []) if r not in arguments]
    for name, value in arguments.items():
        spec = props.get(name)
        if spec is None:
            if schema.get("additionalProperties") is False:
                problems.append(f"{name}: Extra inputs are not permitted")
            continue
        types = spec.get("type") if isinstance(spec, dict) else None
        names = [types] if isinstance(types, str) else list(types or [])
        allowed = tuple(t for n in names for t in _JSON_TYPES.get(n, (object,)))
        wrong_bool = isinstance(value, bool) and bool not in allowed
        if allowed and (not isinstance(value, allowed) or wrong_bool):
            problems.append(f"{name}: Input should be of type {'/'.join(names)}")
    if problems:
        raise ValueError("; ".join(problems))
    return dict(arguments)
