"""The pieces of a streamed step: now :mod:`durably.replay.streamops`; this module keeps
the older names working (``durably.streamops.STREAM_CHUNKS_MAX``, ...)."""

from __future__ import annotations

from .replay.streamops import END as END
from .replay.streamops import STOP as STOP
from .replay.streamops import STREAM_CHUNKS_MAX as STREAM_CHUNKS_MAX
from .replay.streamops import Begun as Begun
from .replay.streamops import Deliver as Deliver
from .replay.streamops import Owner as Owner
from .replay.streamops import aclose_chunks as aclose_chunks
from .replay.streamops import anext_chunk as anext_chunk
from .replay.streamops import close_chunks as close_chunks
from .replay.streamops import next_chunk as next_chunk
