"""Journal text shown so that what a person reads is what is stored.

Step names, run ids, approval actions and arguments come from workflow code, its inputs and
model output. Some characters in them draw nothing at all (zero-width spaces U+200B, word
joiners U+2060, byte-order marks U+FEFF, soft hyphens U+00AD, Unicode tag characters
U+E0000-U+E007F, which can spell whole hidden sentences), some reorder what is drawn (bidi
overrides and isolates), some break the line (U+2028/U+2029), and C0/C1 controls drive the
terminal (ESC starts escape sequences, CR rewrites the line). Printed raw, two different
accounts look identical to the person approving, and hidden text can carry instructions.

:func:`visible` is the one rule for every view of journal text (the CLI, the dashboard):

- C0 controls, DEL and C1 controls are shown as Python escapes (``\\x1b``, ``\\n``,
  ``\\x85``), as the CLI always has;
- every other invisible or format character is shown as ``<U+200B>``: Unicode category Cf
  (format: zero-width characters, bidi controls, the soft hyphen, tag characters,
  interlinear annotation), Zl/Zp (line and paragraph separators) and the rest of Unicode's
  Default_Ignorable_Code_Point set (variation selectors U+FE00-U+FE0F and U+E0100-U+E01EF,
  the combining grapheme joiner, Hangul fillers, and all of U+E0000-U+E0FFF).

:func:`invisible_chars` lists what :func:`visible` would rewrite (as ``U+XXXX``), so a view
can flag a request that holds any ("contains invisible characters: U+200B"). Both are pure
and need only the standard library; the character set is a fixed table (a test checks it
covers every Cf character of the running Python's Unicode database).
"""

from __future__ import annotations

import functools
import re
from typing import Final

__all__ = ["flag", "invisible_chars", "visible"]

# C0 controls, DEL and the C1 controls: escaped the way Python writes them (``\x1b``).
_CONTROL_RANGES: Final = ((0x00, 0x1F), (0x7F, 0x9F))

# Unicode category Cf (through Unicode 16), Zl and Zp, and Default_Ignorable_Code_Point
# (DerivedCoreProperties.txt): each shown as <U+XXXX>. Overlaps are harmless.
_FORMAT_RANGES: Final = (
    (0x00AD, 0x00AD),  # soft hyphen
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x0600, 0x0605),  # Arabic number signs
    (0x061C, 0x061C),  # Arabic letter mark
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x115F, 0x1160),  # Hangul choseong/jungseong fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels
    (0x180B, 0x180F),  # Mongolian variation selectors and vowel separator
    (0x200B, 0x200F),  # zero-width space/non-joiner/joiner, LRM, RLM
    (0x2028, 0x202E),  # line and paragraph separators, bidi embeddings and overrides
    (0x2060, 0x206F),  # word joiner, invisible operators, bidi isolates, deprecated formats
    (0x3164, 0x3164),  # Hangul filler
    (0xFE00, 0xFE0F),  # variation selectors
    (0xFEFF, 0xFEFF),  # zero-width no-break space / byte-order mark
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0xFFF0, 0xFFFB),  # unassigned specials, interlinear annotation
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),  # Egyptian hieroglyph format controls
    (0x1BCA0, 0x1BCA3),  # shorthand format controls
    (0x1D173, 0x1D17A),  # musical symbol formatting
    (0xE0000, 0xE0FFF),  # tag characters, variation selectors supplement, reserved
)


def _char_class(ranges: tuple[tuple[int, int], ...]) -> str:
    return "".join(
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
        for a, b in ranges
    )


@functools.cache
def _pattern() -> re.Pattern[str]:
    return re.compile(f"[{_char_class(_CONTROL_RANGES)}{_char_class(_FORMAT_RANGES)}]")


def _is_control(ch: str) -> bool:
    return ord(ch) <= 0x1F or 0x7F <= ord(ch) <= 0x9F


def _shown(ch: str) -> str:
    if _is_control(ch):
        return ascii(ch)[1:-1]  # "\x1b", "\n", "\x85"
    return f"<U+{ord(ch):04X}>"


def visible(text: str, *, keep: str = "") -> str:
    """``text`` with every invisible, format and control character shown visibly.

    C0/C1 controls become Python escapes (``"\\x1b"``), every other invisible or format
    character becomes ``<U+XXXX>`` (``"ana\\u200b"`` -> ``"ana<U+200B>"``). Characters in
    ``keep`` (e.g. ``"\\n"`` for multi-line text) are left as they are. Everything else,
    including ordinary non-ASCII letters, is unchanged. The result cannot drive a terminal
    and shows every character a reader would otherwise not see.
    """
    return _pattern().sub(lambda m: m.group() if m.group() in keep else _shown(m.group()), text)


def invisible_chars(text: str, *, keep: str = "") -> list[str]:
    """The code points :func:`visible` would rewrite in ``text`` (but those in ``keep``),
    as ``"U+XXXX"`` strings in order of first appearance, each once: what a view names
    when it flags text that holds characters a reader cannot see."""
    found: dict[str, None] = {}
    for m in _pattern().finditer(text):
        if m.group() not in keep:
            found.setdefault(f"U+{ord(m.group()):04X}", None)
    return list(found)


def flag(text: str, *, keep: str = "") -> str | None:
    """A warning naming the invisible characters in ``text`` ("contains invisible
    characters: U+200B U+2060"), or None when it has none."""
    found = invisible_chars(text, keep=keep)
    return f"contains invisible characters: {' '.join(found)}" if found else None
