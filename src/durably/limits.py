"""Every documented bound of durably, in one public module (STYLE habit 8).

A limit here bounds something a user can make grow: a name, a payload, a timeout, a count
of retries, threads or records. Each is a plain constant with a docstring saying what it
bounds and why; going past one is a clear error (``ConfigError`` or
``SerializationError``, the run ``blocked`` where a workflow crossed it) or, where noted,
a cut. The modules that enforce a bound import it from here, and its older home keeps
the name (``durably.core.SIGNAL_TIMEOUT_S_MAX``, ``durably.history.NAME_BYTES_MAX``, ...
still work), so code written against either spelling goes on working.

Internal tuning knobs that no user is pointed at (how many rows one claim scans, how
much of a value a CLI line shows) stay beside the code that uses them. The receiving
side (``durably.idempotency``) takes its bounds as parameters with defaults of its own:
it is usable without the engine, so it depends on nothing here.

This module imports nothing from durably, so every other module can import it.
"""

from __future__ import annotations

from typing import Final

# --- Names, run ids and idempotency keys --------------------------------------------------
# An idempotency key is ``{run_id}:{incarnation}:{position}`` and never longer than
# KEY_CHARS_MAX, the receiving side's limit (durably.idempotency, Stripe, the IETF draft).
# The limits below are chosen so that this holds for every run: a run id of at most
# RUN_ID_CHARS_MAX characters, and a position of at most 1 + 2 * GATHER_DEPTH_MAX numbers,
# each below SCOPE_POSITIONS_MAX, joined by dots (a test checks the arithmetic).

NAME_BYTES_MAX: Final = 200
"""Longest step, workflow, signal or approval-action name, in UTF-8 bytes: names are
stored in every record and printed on one line, so they stay short."""

KEY_CHARS_MAX: Final = 255
"""Longest idempotency key durably hands a step: the receiving side's limit (Stripe, the
IETF Idempotency-Key draft, ``durably.idempotency``), so every key is one it accepts."""

INCARNATION_CHARS: Final = 12
"""Length of a run's incarnation (lowercase hex) inside its keys: 48 random bits tell a
re-created run id apart from the old one, and the key budget below counts them."""

RUN_ID_CHARS_MAX: Final = 128
"""Longest run id, in characters: with the incarnation and the longest position, every
key of the run still fits KEY_CHARS_MAX."""

GATHER_DEPTH_MAX: Final = 7
"""Deepest nesting of ``ctx.gather``: each level adds two numbers to a position, and the
longest position must leave a key within KEY_CHARS_MAX (deeper is a ``ConfigError``)."""

SCOPE_POSITIONS_MAX: Final = 1_000_000
"""Recording calls one scope (the top level, or one gather branch) may hold: a position's
numbers stay at most six digits, so keys stay within KEY_CHARS_MAX."""

POSITION_CHARS_MAX: Final = (1 + 2 * GATHER_DEPTH_MAX) * len(str(SCOPE_POSITIONS_MAX - 1)) + (
    2 * GATHER_DEPTH_MAX
)
"""Longest position text (``4.1.0`` at depth one), following from GATHER_DEPTH_MAX and
SCOPE_POSITIONS_MAX; a stored position longer than this is not one durably wrote."""

assert RUN_ID_CHARS_MAX + INCARNATION_CHARS + POSITION_CHARS_MAX + 2 <= KEY_CHARS_MAX

GENERATIONS_MAX: Final = 1_000_000
"""Generations one run may have (``ctx.continue_as_new`` starts the next): a key of
generation N >= 1 is ``{run_id}:{incarnation}:g{N}.{position}``, and N below this keeps
``g{N}.`` within eight characters, so every key stays under KEY_CHARS_MAX. A run that
would start generation GENERATIONS_MAX is blocked (``ConfigError``)."""

GENERATION_PREFIX_CHARS_MAX: Final = len(f"g{GENERATIONS_MAX - 1}.")
"""Longest ``g{N}.`` a key's position part carries (following from GENERATIONS_MAX)."""

assert (
    RUN_ID_CHARS_MAX + INCARNATION_CHARS + GENERATION_PREFIX_CHARS_MAX + POSITION_CHARS_MAX + 2
    < KEY_CHARS_MAX
)

# --- Payloads ----------------------------------------------------------------------------
# A record is one row read whole on every replay, so the journal holds results, not bulk
# data: keep documents, images and transcripts outside it (a file or blob store) and
# record their reference.

STEP_OUTPUT_BYTES_MAX: Final = 4 * 1024 * 1024
"""Largest step output (and recorded now/random/uuid value), as canonical JSON: a record
is read whole on every replay (past it: ``SerializationError``, the run ``blocked``)."""

OUTPUT_INLINE_BYTES_MAX: Final = 64 * 1024
"""A step output longer than this (UTF-8 bytes of its JSON) goes to the blob table; the
record keeps a reference, read only when a replay reaches the step, so loading a history
stays cheap."""

INLINE_CHARS_MAX: Final = 64
"""A step argument whose canonical JSON is at most this long stays in the step's input
manifest itself; a longer one is stored once as a blob by its digest (a digest would be as
long as a short value, and a blob row would cost the step a write)."""

SIGNAL_DATA_BYTES_MAX: Final = 64 * 1024
"""Largest signal data (``engine.signal(run_id, name, data)``), as canonical JSON: a
signal carries a decision or a reference, never bulk data."""

EVENT_DATA_BYTES_MAX: Final = 64 * 1024
"""Most UTF-8 bytes of one event's JSON data (``ctx.emit``'s data past it is refused): the
stream is for progress and references, read by every follower."""

APPROVAL_ARGS_BYTES_MAX: Final = 64 * 1024
"""Largest ``args`` of one approval request, as JSON: a person reads them before deciding
(``durably.approvals.ARGS_BYTES_MAX``)."""

RUN_INPUT_BYTES_MAX: Final = 4 * 1024 * 1024
"""Largest run input (the workflow's arguments), as canonical JSON: past it no run is
created (``SerializationError``)."""

RUN_RESULT_BYTES_MAX: Final = 4 * 1024 * 1024
"""Largest workflow result, as canonical JSON (past it: the run ``blocked``)."""

# --- Recorded text -----------------------------------------------------------------------

HASH_SHOWN_CHARS_MIN: Final = 16
"""A differing value shorter than this gets no hash in a ``NonDeterminism`` message (or
anything else that leaves the process), only its length: a few characters could be
guessed from their sha256 offline."""

ERROR_MESSAGE_CHARS_MAX: Final = 10_000
"""Longest recorded error message; longer ones are cut, so a failure is always recorded
whatever the exception's text."""

PARK_REASON_CHARS_MAX: Final = 2_000
"""Longest recorded reason a run is blocked or in doubt; longer ones are cut."""

CANCEL_REASON_CHARS_MAX: Final = 2_000
"""Longest reason ``engine.cancel`` records; longer ones are cut."""

APPROVAL_NOTE_CHARS_MAX: Final = 2_000
"""Longest note (or rejection reason) and ``by`` name kept with an approval decision
(``durably.approvals.NOTE_CHARS_MAX``); longer ones are refused."""

APPROVAL_DIGEST_PREFIX_MIN: Final = 4
"""Shortest digest prefix ``durably approve``/``reject`` accept (the API takes the full
digest): the CLI never approves blind, so a person types part of what they approve."""

# --- Time --------------------------------------------------------------------------------

TIMER_S_MAX: Final = 100 * 365.25 * 86_400
"""Longest timer (``ctx.sleep``, ``ctx.sleep_until``): 100 years; further out is a bug,
and past year 9999 a wake time is unprintable."""

SIGNAL_TIMEOUT_S_MAX: Final = 10 * 365 * 86400.0
"""Longest ``wait_for_signal`` timeout (ten years): a deadline always fits a float time."""

APPROVAL_TIMEOUT_S_MAX: Final = 10 * 365 * 86_400.0
"""Longest ``timeout_s`` of an approval request (ten years): a deadline always fits a
float time."""

BACKOFF_MAX_S: Final = 3600.0
"""Largest ``backoff_max_s`` of ``@durably.step``: one hour between retries; a longer
wait belongs in a durable timer (``ctx.sleep``), not in a process holding a lease."""

LEASE_WAIT_MAX_S: Final = 3600.0
"""Longest lease of a dead-looking owner ``engine.run`` waits out (past any ``lease_s`` in
use) before claiming the run; a lease further out than that is a broken clock or row."""

CLOCK_SKEW_WARN_S: Final = 2.0
"""A host whose clock differs from the database's by more than this is warned about
(leases last 30 s by default and are renewed every 10 s, so a larger skew makes them expire
visibly early or late). NTP keeps real hosts within milliseconds, so it only trips on a
broken clock."""

# --- Counts ------------------------------------------------------------------------------

RETRIES_MAX: Final = 100
"""Most ``retries`` of ``@durably.step`` (101 attempts in all): a step that needs more is
better parked for a person than retried forever under one key."""

SYNC_STEP_THREADS_MAX: Final = 32
"""Threads per process that run the sync step functions of async workflows. More sync
steps in flight than this wait for a free thread; an attempt that ran past its
``timeout_s`` keeps its thread until it returns (Python cannot stop a thread)."""

SETTLE_TURNS_MAX: Final = 64
"""Turns of the event loop a wait that parked before gives its sibling gather branches to
replay first: a replay of recorded records takes a few (one per nested gather); a branch
still busy after that awaits something that is not recorded, and does not hold the wait
back."""

MIB: Final = 1024 * 1024
"""A mebibyte, for the byte bounds below (``history_max=(50_000, 50 * MIB)``)."""

HISTORY_WARN_RECORDS: Final = 10_000
"""Records of a run's current generation past which it is warned (the first half of
``history_warn``'s default)."""

HISTORY_WARN_BYTES: Final = 10 * MIB
"""``Engine(history_warn=...)`` default, ``(HISTORY_WARN_RECORDS, HISTORY_WARN_BYTES)``:
the records and bytes of a run's current generation past which it gets one
``run.history_warning`` event (and a log line) per generation."""

HISTORY_MAX_RECORDS: Final = 50_000
"""Records of a run's current generation at which recording stops (the first half of
``history_max``'s default)."""

HISTORY_MAX_BYTES: Final = 50 * MIB
"""``Engine(history_max=...)`` default, ``(HISTORY_MAX_RECORDS, HISTORY_MAX_BYTES)``: at
this size of a run's current generation the next recording call raises
``durably.HistoryTooLarge`` instead of writing (``ctx.continue_as_new`` is the way
through). Temporal caps a history at 51,200 events and 50 MB; durably's records are a
step each, so the same order of size."""

EMITS_PER_POSITION_MAX: Final = 1_000
"""``ctx.emit`` events at one position (between two recording calls), at most: with
EVENT_DATA_BYTES_MAX each, one position adds at most ~64 MiB to the event stream."""

SIGNALS_PENDING_MAX: Final = 10_000
"""Signals sent to one run and not yet consumed, at most: ``engine.signal`` refuses
another (``durably.SignalQueueFull``) until the run consumes some."""

APPROVALS_PENDING_MAX: Final = 1_000
"""Approval requests one run may have pending (undecided) at once: a run whose gather
branches ask for more is blocked (``ConfigError``) at the request past the limit."""

EVENTS_BUFFERED_MAX: Final = 10_000
"""Stream-only events (``ctx.emit``) waiting for a durable write, at most: a workflow that
emits this many without a step in between is refused rather than growing memory."""

STREAM_CHUNKS_MAX: Final = 100_000
"""Chunks one attempt of a streamed step (``ctx.step_stream``) may yield: every chunk is
held until the assembled result is recorded, so past it the run is ``blocked``
(``ConfigError``) rather than growing memory."""

MODEL_DELTAS_MAX: Final = 20_000
"""``model.delta`` events one attempt of a streamed model call writes, at most: past it
followers see no more of that attempt (the step still records the whole message), so a
long generation cannot flood the event stream. Deltas are not counted in a run's history
size (they are stream-only events, not records)."""

STREAM_QUEUE_MAX: Final = 50_000
"""Stream-only events waiting for the store's stream writer, at most: when the database
cannot keep up, newer deltas are dropped (and counted) rather than slowing the caller's
stream or growing memory."""

STREAM_BATCH_MAX: Final = 2_000
"""Stream-only events the stream writer puts in one transaction, at most."""

STREAM_FLUSH_S: Final = 2.0
"""Longest wait, at the end of a streamed call, for its deltas to be written before its
result is recorded (so a follower reads a call's deltas before its ``step.completed``);
past it the result is recorded anyway and late deltas follow it."""

EVENTS_PAGE_MAX: Final = 10_000
"""Most events one ``engine.events`` call returns (its ``limit``): a follower pages on with
the cursor instead of loading a long stream at once."""

LIST_RUNS_LIMIT_MAX: Final = 1000
"""Most runs one ``engine.list_runs`` page holds (its ``limit``): a reader walks the pages
with the cursor for more."""

LIST_RUNS_SEARCH_CHARS_MAX: Final = RUN_ID_CHARS_MAX
"""Longest ``search`` text of ``engine.list_runs``: a run id is at most this long, so
nothing longer matches."""

APPROVALS_LIST_MAX: Final = 1000
"""Most pending approval requests one listing returns (``engine.pending_approvals``)."""

RECOVER_SCAN_MAX: Final = 10_000
"""Running runs one query of ``engine.recover()``'s scan reads: it pages through every
running run, this many at a time."""

RECOVER_WAIT_S: Final = 10.0
"""How far ahead ``engine.recover()`` waits for a resumed run's wake-up (a short timer)
and resumes it again, instead of leaving it parked; later wake-ups stay parked."""

WORKER_CONCURRENCY_MAX: Final = 256
"""Largest ``concurrency`` of a worker (runs driven at once by one process)
(``durably.worker.CONCURRENCY_MAX``)."""

# --- Spend -------------------------------------------------------------------------------

TOKENS_MAX: Final = 10**15
"""Largest token count one usage report or one budget may hold (fits every store's
integer)."""

COST_USD_MAX: Final = 1e12
"""Largest cost in US dollars one usage report or one budget may hold."""
