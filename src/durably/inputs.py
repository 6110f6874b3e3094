"""Step inputs kept by content hash.

A step record names what the step was called with as a small *manifest*; the payloads
go to the store's blob table keyed by their sha256, each distinct value once. A list
argument (a conversation) is a chain of nodes, one per item, each node naming the
previous node and its item's hash, so the manifest of an n-message conversation is one
digest and a turn that adds one message adds one message blob and one node blob, never
the conversation again. The step's input digest is unchanged: it stays the digest of the
canonical values (storing inputs never changes a step's identity).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from . import codec
from .errors import SerializationError
from .limits import HASH_SHOWN_CHARS_MIN as HASH_SHOWN_CHARS_MIN
from .limits import INLINE_CHARS_MAX as INLINE_CHARS_MAX

# A blob fetcher: the stored texts among the digests (the store's ``get_blobs``).
Fetch = Callable[[Sequence[str]], Mapping[str, str]]

# What a NonDeterminism message (and so every event, span, exception text and
# `replay --check` line made from it) may say about a differing value: where it differs
# (argument, message index, field path), lengths and short sha256 prefixes, never the value
# (an Authorization header's key once appeared in CI output). `durably runs why RUN
# --show-values` shows the recorded values, on the journal's host.
FIELDS_SHOWN_MAX: Final = 3
"""How many differing fields of one value a message names."""
FIELD_DEPTH_MAX: Final = 4
"""How deep into nested objects a message looks for the differing field."""
KEY_SHOWN_CHARS_MAX: Final = 40
"""The longest dict key a diff names; longer ones are named by their length."""
# The dict keys a diff names (see _key): shaped like a field name, not like data.
_NAMED_KEY: Final = re.compile(r"\$?[A-Za-z_][A-Za-z0-9_-]*")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Manifest:
    """The manifest of one call's arguments and the blobs it needs written."""

    __slots__ = ("blobs", "item_hashes", "refs", "text")

    def __init__(
        self,
        refs: dict[str, dict[str, Any]],
        text: str,
        blobs: list[tuple[str, str]],
        item_hashes: dict[str, Any],
    ):
        self.refs = refs  # by argument: positional ones by index as a string
        self.text = text
        self.blobs = blobs
        # Per argument: the item hashes of a list, or the hash of a single value.
        self.item_hashes = item_hashes


def build(
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    known: set[str],
    items: codec.ItemHashes | None = None,
) -> Manifest:
    """The manifest of ``args`` / ``kwargs``; blobs whose digest is in ``known`` (already
    written by this process) are left out, and new ones are added to it. ``items``
    remembers list items' hashes between calls (a conversation's messages)."""
    blobs: list[tuple[str, str]] = []
    hashes: dict[str, Any] = {}
    refs: dict[str, dict[str, Any]] = {}
    # Loops and module functions, no closures: every live step builds one (the closures
    # cost a small step's manifest about a third of its time).
    positional = []
    for i, a in enumerate(args):
        key = str(i)
        positional.append(r := _ref(key, a, known, blobs, hashes, items))
        refs[key] = r
    named = {}
    for k, v in kwargs.items():
        named[k] = refs[k] = _ref(k, v, known, blobs, hashes, items)
    text = codec.canonical({"args": positional, "kwargs": named})
    return Manifest(refs, text, blobs, hashes)


def _ref(
    key: str,
    value: Any,
    known: set[str],
    blobs: list[tuple[str, str]],
    hashes: dict[str, Any],
    items: codec.ItemHashes | None,
) -> dict[str, Any]:
    """The reference of argument ``key`` (see :func:`build`): a list as a chain of
    nodes (one per item, by its hash), any other value inline or as one blob; its hash
    or item hashes go to ``hashes``, new blobs to ``blobs`` (and ``known``)."""
    if isinstance(value, list):
        cache = items if items is not None else codec.ItemHashes()
        item_hashes = []
        for v in value:
            h, item_text = cache.item(v)
            if h not in known:
                known.add(h)
                shown = item_text if item_text is not None else codec.canonical(codec.to_json(v))
                blobs.append((h, shown))
            item_hashes.append(h)
        hashes[key] = item_hashes
        node: str | None = None
        for h in item_hashes:
            node = _keep(codec.canonical({"i": h, "p": node}), known, blobs)
        return {"l": node, "n": len(value)}
    data = codec.to_json(value)
    text = codec.canonical(data)
    if len(text) <= INLINE_CHARS_MAX:
        hashes[key] = _sha(text)
        return {"v": data}
    hashes[key] = d = _keep(text, known, blobs)
    return {"b": d}


def _keep(text: str, known: set[str], blobs: list[tuple[str, str]]) -> str:
    d = _sha(text)
    if d not in known:
        known.add(d)
        blobs.append((d, text))
    return d


def _fetch_one(fetch: Fetch, digest: str) -> str:
    found = fetch([digest]).get(digest)
    if found is None:
        raise LookupError(f"blob {digest[:12]} is missing from the store")
    return found


def item_hashes(ref: Mapping[str, Any], fetch: Fetch) -> Any:
    """The item hashes of a list reference (walking its chain), or a value's hash."""
    if "v" in ref:
        return _sha(codec.canonical(ref["v"]))
    if "b" in ref:
        return ref["b"]
    out: list[str] = []
    node = ref["l"]
    while node is not None:
        data = json.loads(_fetch_one(fetch, node))
        out.append(data["i"])
        node = data["p"]
    out.reverse()
    return out


def _refs(text: str) -> dict[str, Mapping[str, Any]]:
    m = json.loads(text)
    refs: dict[str, Mapping[str, Any]] = {str(i): r for i, r in enumerate(m["args"])}
    refs.update(m["kwargs"])
    return refs


def load(text: str, fetch: Fetch) -> dict[str, Any]:
    """The recorded arguments of a manifest as plain JSON data, by argument (positional
    ones by index as a string, keyword ones by name)."""
    out: dict[str, Any] = {}
    for key, r in _refs(text).items():
        if "v" in r:
            out[key] = r["v"]
            continue
        hashes = item_hashes(r, fetch)
        if isinstance(hashes, str):
            out[key] = json.loads(_fetch_one(fetch, hashes))
        else:
            texts = fetch(hashes) if hashes else {}
            out[key] = [json.loads(texts[h]) for h in hashes]
    return out


def _arg_name(fn: Any, key: str) -> str:
    """``key`` named for a person ("argument 'messages' (0)"): a positional index becomes
    its parameter's name."""
    if not key.isdigit():
        return f"argument {key!r}"
    try:
        params = list(inspect.signature(fn).parameters.values())
        p = params[int(key)]
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            return f"argument {p.name!r} ({key})"
    except (TypeError, ValueError, IndexError):
        pass
    return f"argument {key}"


def _pretty(data: Any, indent: str = "") -> str:
    """``data`` as indented JSON text, for a person on the journal's host: a string that
    holds line breaks (a prompt, a message) is written as a block between triple quotes
    with its real line breaks, not as one line of ``\\n`` escapes."""
    inner = indent + "  "
    if isinstance(data, str) and "\n" in data:
        body = "\n".join(inner + line if line else "" for line in data.split("\n"))
        return f'"""\n{body}\n{inner}"""'
    if isinstance(data, dict) and data:
        items = [
            f"{inner}{json.dumps(k, ensure_ascii=False)}: {_pretty(data[k], inner)}"
            for k in sorted(data)
        ]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    if isinstance(data, list) and data:
        items = [inner + _pretty(v, inner) for v in data]
        return "[\n" + ",\n".join(items) + f"\n{indent}]"
    return json.dumps(data, ensure_ascii=False)


def _measure(data: Any) -> tuple[int, str]:
    """A value's length (a string's characters, else its canonical JSON's) and the
    sha256 of its canonical JSON text (what the blob table keys it by)."""
    text = codec.canonical(data)
    return (len(data) if isinstance(data, str) else len(text)), _sha(text)


def _kind(data: Any) -> str:
    if isinstance(data, dict):
        return "an object"
    if isinstance(data, list):
        return "a list"
    if isinstance(data, str):
        return "a string"
    return "null" if data is None else ("a boolean" if isinstance(data, bool) else "a number")


def _change(old: Any, new: Any) -> str:
    """How a value changed without showing it: "2,311 -> 2,340 chars, sha256 ab12.. ->
    cd34..", with types when they differ; hashes only of values long enough not to be
    guessed from them."""
    (n_old, h_old), (n_new, h_new) = _measure(old), _measure(new)
    unit = "chars" if isinstance(old, str) and isinstance(new, str) else "chars of JSON"
    kinds = "" if _kind(old) == _kind(new) else f"{_kind(old)} -> {_kind(new)}, "
    text = f"{kinds}{n_old:,} -> {n_new:,} {unit}"
    if min(n_old, n_new) >= HASH_SHOWN_CHARS_MIN:
        text += f", sha256 {h_old[:12]}.. -> {h_new[:12]}.."
    return text


def _key(k: Any) -> str:
    """A dict key as a diff may name it: a key shaped like a field name ("role",
    "Authorization", "X-Request-Id", a codec tag such as "$map") as it is, any other key
    by its length only, since it is data (an e-mail address, a phone number, an account
    id keying a map)."""
    text = str(k)
    if len(text) <= KEY_SHOWN_CHARS_MAX and _NAMED_KEY.fullmatch(text):
        return text
    return f"<a key of {len(text):,} chars>"


def _fields(old: Any, new: Any, path: str, out: list[str], depth: int = 0) -> None:
    """Append to ``out`` where ``old`` and ``new`` (plain JSON data) differ, as field
    paths with :func:`_change`; objects are looked into up to FIELD_DEPTH_MAX deep."""
    if len(out) > FIELDS_SHOWN_MAX or old == new:
        return
    if isinstance(old, dict) and isinstance(new, dict) and depth < FIELD_DEPTH_MAX:
        for k in sorted(set(old) | set(new), key=str):
            where = f"{path}.{_key(k)}" if path else _key(k)
            if k not in new:
                out.append(f"field {where!r} removed")
            elif k not in old:
                out.append(f"field {where!r} added ({_measure(new[k])[0]:,} chars)")
            else:
                _fields(old[k], new[k], where, out, depth + 1)
        return
    out.append(f"field {path!r} differs: {_change(old, new)}" if path else _change(old, new))


def describe(old: Any, new: Any) -> str:
    """How ``new`` differs from ``old`` (plain JSON data), naming fields, lengths and
    short hashes and never a value: what may leave the process."""
    out: list[str] = []
    _fields(old, new, "", out)
    more = len(out) - FIELDS_SHOWN_MAX
    shown = out[:FIELDS_SHOWN_MAX] + ([f"{more} more field(s)"] if more > 0 else [])
    return "; ".join(shown) if shown else "the same value under another encoding"


def _role(old: Any, new: Any) -> str:
    """ " (role 'system')" for a chat message whose role both sides share: a role is a
    word of the protocol, not data."""
    role = old.get("role") if isinstance(old, dict) else None
    if isinstance(new, dict) and role == new.get("role") and isinstance(role, str):
        if role.isascii() and role.replace("_", "").isalpha() and len(role) <= 20:
            return f" (role {role!r})"
    return ""


def diff(recorded: str, current: Manifest, fn: Any, fetch: Fetch) -> str:
    """A short account of how the current inputs differ from the recorded manifest:
    which argument and, for a conversation, which message, and which field of it, with
    lengths and short sha256 prefixes of the two values and never the values themselves
    (the account goes into events, spans, exception text and CI output). ``current`` is
    built with no blob left out: its new values are not in the store."""
    refs = _refs(recorded)
    now = current.item_hashes
    texts = dict(current.blobs)

    def now_fetch(digests: Sequence[str]) -> Mapping[str, str]:
        found = {d: texts[d] for d in digests if d in texts}
        missing = [d for d in digests if d not in found]
        return {**fetch(missing), **found} if missing else found

    for key in sorted(set(refs) | set(now), key=lambda k: (not k.isdigit(), k.zfill(9))):
        where = _arg_name(fn, key)
        if key not in now:
            return f"{where} was passed when recorded and is not passed now"
        if key not in refs:
            return f"{where} is passed now and was not when recorded"
        old = item_hashes(refs[key], fetch)
        new = now[key]
        if old == new:
            continue
        if isinstance(old, list) and isinstance(new, list):
            return _list_diff(where, old, new, fetch, now_fetch)
        if isinstance(old, str) and isinstance(new, str):
            before, after = _value(refs[key], fetch), _value(current.refs[key], now_fetch)
            return f"{where} differs: {describe(before, after)}"
        return f"{where} was a {_shape(old)} when recorded and is a {_shape(new)} now"
    return "the recorded inputs match the arguments: the step name or codec version differs"


def _shape(h: Any) -> str:
    return "list" if isinstance(h, list) else "single value"


def _value(ref: Mapping[str, Any], fetch: Fetch) -> Any:
    """The value of a single-value reference (inline, or a blob)."""
    if "v" in ref:
        return ref["v"]
    return json.loads(_fetch_one(fetch, ref["b"]))


def _list_diff(where: str, old: list[str], new: list[str], fetch: Fetch, now_fetch: Fetch) -> str:
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            before = json.loads(_fetch_one(fetch, a))
            after = json.loads(_fetch_one(now_fetch, b))
            return (
                f"{where}: message {i} of {len(old)} recorded / {len(new)} now differs"
                f"{_role(before, after)}: {describe(before, after)}"
            )
    if len(new) > len(old):
        return f"{where}: {len(new) - len(old)} message(s) added after message {len(old) - 1}"
    return f"{where}: {len(old) - len(new)} message(s) fewer than recorded ({len(old)})"


def show(recorded: str, fetch: Fetch) -> str:
    """The recorded arguments of a manifest in full, as indented JSON with real line
    breaks, one block per argument: for a person on the journal's host (``durably runs
    why RUN --show-values``), never for events, spans or CI output."""
    blocks = []
    for key, value in load(recorded, fetch).items():
        name = f"argument {key}" if key.isdigit() else f"argument {key!r}"
        body = _pretty(value)
        blocks.append(f"{name}:\n" + "\n".join("  " + line for line in body.splitlines()))
    return "\n".join(blocks) if blocks else "(no arguments)"


# A step output kept in the blob table is recorded as this one-key object. No stored
# value can look like it: the codec writes a user dict whose only key starts with "$" as
# {"$dict": ...}.
_OUTPUT_REF_PREFIX: Final = '{"$blob":"'


def output_ref(text: str, inline_max: int) -> tuple[str, tuple[str, str] | None]:
    """What a step record stores for output ``text``: the text itself, or, above
    ``inline_max`` UTF-8 bytes, a reference plus the ``(digest, text)`` blob to write."""
    if len(text) * 4 <= inline_max or len(text.encode("utf-8")) <= inline_max:
        return text, None
    d = _sha(text)
    return f'{_OUTPUT_REF_PREFIX}{d}"}}', (d, text)


def resolve_output(text: str | None, fetch: Fetch | None) -> str | None:
    """A recorded output's JSON text, read from the blob table when it was kept there
    (only now, when the workflow reaches the step: replay reads blobs lazily)."""
    if text is None or not text.startswith(_OUTPUT_REF_PREFIX):
        return text
    if fetch is None:
        raise SerializationError("a step output is kept in the blob table, unreadable here")
    d = json.loads(text)["$blob"]
    found = fetch([d]).get(d)
    if found is None:
        raise SerializationError(f"the step output blob {d[:12]} is missing from the store")
    return found
