"""The canonical JSON codec: now :mod:`durably.journal.codec`; this module keeps the older
name working (``durably.codec.dumps``, ``durably.codec.CODEC_VERSION``, ...)."""

from __future__ import annotations

from .journal.codec import CODEC_VERSION as CODEC_VERSION
from .journal.codec import CODEC_VERSIONS as CODEC_VERSIONS
from .journal.codec import ItemHashes as ItemHashes
from .journal.codec import canonical as canonical
from .journal.codec import coerce as coerce
from .journal.codec import digest as digest
from .journal.codec import dumps as dumps
from .journal.codec import error_text as error_text
from .journal.codec import loads as loads
from .journal.codec import param_hints as param_hints
from .journal.codec import return_hint as return_hint
from .journal.codec import roundtrip as roundtrip
from .journal.codec import to_json as to_json
