"""What the journal holds: runs and the records of their positions.

The data now lives in :mod:`durably.journal` (``records``, ``keys``, ``text``); this
module keeps the older names working (``durably.history.StepRecord``, the bounds under
their old names, ...).
"""

from __future__ import annotations

from .errors import CorruptRecord as CorruptRecord
from .journal.keys import idempotency_key as idempotency_key
from .journal.keys import new_incarnation as new_incarnation
from .journal.keys import position_key as position_key
from .journal.keys import top_level as top_level
from .journal.keys import valid_incarnation as valid_incarnation
from .journal.keys import valid_position as valid_position
from .journal.records import APPROVAL as APPROVAL
from .journal.records import BLOCKED as BLOCKED
from .journal.records import CANCELLED as CANCELLED
from .journal.records import COMPENSATE as COMPENSATE
from .journal.records import COMPLETED as COMPLETED
from .journal.records import CONTINUED as CONTINUED
from .journal.records import FAILED as FAILED
from .journal.records import FAILED_RUN as FAILED_RUN
from .journal.records import GATHER as GATHER
from .journal.records import HALT as HALT
from .journal.records import IN_DOUBT as IN_DOUBT
from .journal.records import INTENT as INTENT
from .journal.records import KINDS as KINDS
from .journal.records import NOW as NOW
from .journal.records import OK as OK
from .journal.records import PARKED as PARKED
from .journal.records import PATCHED as PATCHED
from .journal.records import QUARANTINED as QUARANTINED
from .journal.records import QUEUED as QUEUED
from .journal.records import RANDOM as RANDOM
from .journal.records import RECORD_STATUSES as RECORD_STATUSES
from .journal.records import RUN_STATUSES as RUN_STATUSES
from .journal.records import RUNNING as RUNNING
from .journal.records import SIGNAL as SIGNAL
from .journal.records import SLEEP as SLEEP
from .journal.records import STEP as STEP
from .journal.records import TERMINAL as TERMINAL
from .journal.records import UUID as UUID
from .journal.records import WAITING as WAITING
from .journal.records import RunRecord as RunRecord
from .journal.records import StepRecord as StepRecord
from .journal.text import check_name as check_name
from .journal.text import check_text as check_text
from .journal.text import describe_error as describe_error
from .journal.text import storable_text as storable_text
from .journal.text import unstorable as unstorable
from .limits import CANCEL_REASON_CHARS_MAX as CANCEL_REASON_CHARS_MAX
from .limits import ERROR_MESSAGE_CHARS_MAX as ERROR_MESSAGE_CHARS_MAX
from .limits import GATHER_DEPTH_MAX as GATHER_DEPTH_MAX
from .limits import INCARNATION_CHARS as INCARNATION_CHARS
from .limits import KEY_CHARS_MAX as KEY_CHARS_MAX
from .limits import NAME_BYTES_MAX as NAME_BYTES_MAX
from .limits import OUTPUT_INLINE_BYTES_MAX as OUTPUT_INLINE_BYTES_MAX
from .limits import PARK_REASON_CHARS_MAX as PARK_REASON_CHARS_MAX
from .limits import POSITION_CHARS_MAX as POSITION_CHARS_MAX
from .limits import RUN_ID_CHARS_MAX as RUN_ID_CHARS_MAX
from .limits import RUN_INPUT_BYTES_MAX as RUN_INPUT_BYTES_MAX
from .limits import RUN_RESULT_BYTES_MAX as RUN_RESULT_BYTES_MAX
from .limits import SCOPE_POSITIONS_MAX as SCOPE_POSITIONS_MAX
from .limits import SIGNAL_DATA_BYTES_MAX as SIGNAL_DATA_BYTES_MAX
from .limits import STEP_OUTPUT_BYTES_MAX as STEP_OUTPUT_BYTES_MAX
