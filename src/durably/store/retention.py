"""The retention role, written once: prune finished runs, delete or redact one run,
tombstones, the blob sweep, and the lease of a background job.

Over the :mod:`.tx` protocol. Every write is a bounded batch in a transaction of its own
(never one long transaction): a batch of runs is re-read under its locks, tombstoned and
deleted; then the blobs those runs cited are swept by mark and sweep.

The sweep, and why it cannot delete a blob another write is citing:

1. *Candidates* are the blobs the removed runs' records cited, followed through
   conversation nodes (a node cites its item and its parent), with each candidate's touch
   count read now.
2. *Mark*: every remaining record of the journal is read in pages (reads only, outside any
   write transaction) and every blob it reaches, through nodes, is marked.
3. *Sweep*, in batches, citers before what they cite: under the candidates' row locks
   (``FOR UPDATE`` on PostgreSQL; SQLite's one writer lock), a candidate whose touch count
   changed since step 1 was cited meanwhile; it, and everything it reaches, is kept, as is
   everything marked; the rest is deleted, each only while its count is still the one
   read (``delete_blob``).

A citation written after step 1 either stores the blob (``put_blob``: its ``ON CONFLICT DO
UPDATE`` counts a touch under the row's lock, so it waits for the sweep's lock, and after
the sweep deleted the row it inserts it again, with its data), or cites one its run has
already cited in a committed record (the run's own known blobs), which the mark sees.
Nothing is added to a step's path beyond that count, on a blob already stored.

The candidates a removal's commit leaves behind are written down in that transaction
(``sweep_pending``) and dropped once swept, so a sweep that never ran (a crash after the
commit) is made up by the next prune or delete.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

from ..errors import RunNotFinished, RunNotFound
from ..shell import command
from .retained import (
    MARKER,
    MARKER_DIGEST,
    MARKER_EVENT,
    MARKER_JSON,
    PRUNABLE,
    Freed,
    Redaction,
    Tombstone,
    cited,
    node_citations,
    tombstone_from_row,
)
from .tx import Backend, Tx

RUNS_PER_BATCH: Final = 50
"""Runs deleted per transaction."""
BLOBS_PER_BATCH: Final = 500
"""Blobs swept per transaction."""
RECORDS_PER_PAGE: Final = 2_000
"""Records read per page of the mark."""
NODE_BYTES_MAX: Final = 300
"""Blobs at most this large are read as text by the sweep: a conversation node (its item's
hash and its parent's) is about 140 bytes; any other blob cites nothing."""


def redacted_inputs(inputs: str | None) -> str | None:
    """A manifest with the same arguments, each holding the marker instead of its value."""
    if inputs is None:
        return None
    manifest = json.loads(inputs)
    marker = {"v": MARKER}
    args = [marker for _ in manifest.get("args", [])]
    kwargs = {k: marker for k in manifest.get("kwargs", {})}
    return json.dumps({"args": args, "kwargs": kwargs}, sort_keys=True, separators=(",", ":"))


# Step names that carry a value: an approval's action (and the on_timeout step named
# after it). Every other step name is the code's, part of the shape.
_NAMED_BY_VALUE: Final = ("request_approval:", "on_timeout:")


def redacted_name(name: str) -> str:
    """A step's name with the value some names carry (an approval's action) replaced."""
    for prefix in _NAMED_BY_VALUE:
        if name.startswith(prefix):
            return prefix + MARKER
    return name


def _text(data: Any) -> str | None:
    if data is None:
        return None
    raw = bytes(data)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _batches(items: Sequence[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield list(items[i : i + size])


class Retention(Backend):
    """Store methods of the retention role (see :class:`~durably.store.base.Store`)."""

    # -- tombstones and redactions ---------------------------------------------------

    def get_tombstone(self, run_id: str) -> Tombstone | None:
        """The tombstone of ``run_id``, or None."""
        row = self._reading(lambda tx: tx.one("get_tombstone", run_id=run_id))
        return None if row is None else tombstone_from_row(row)

    def list_tombstones(
        self, limit: int = 100, after: tuple[float, str] | None = None
    ) -> list[Tombstone]:
        """Tombstones, newest first, keyset-paged after ``after`` (removed_at, run_id)."""
        rows = self._reading(
            lambda tx: tx.q(
                "list_tombstones",
                limit=limit,
                after_at=None if after is None else after[0],
                after_id=None if after is None else after[1],
            ).fetchall()
        )
        return [tombstone_from_row(r) for r in rows]

    def drop_tombstones(self, before: float, dry_run: bool = False) -> int:
        """Remove the tombstones of runs removed before ``before``, in batches; returns
        how many went (``dry_run``: how many would, counted, nothing removed). Their run
        ids can then be used again for fresh runs."""
        if dry_run:
            return int(self._reading(lambda tx: tx.scalar("count_tombstones", before=before)))
        total = 0
        while True:
            n = self._writing(
                lambda tx: (
                    tx.q("delete_tombstones", before=before, limit=RUNS_PER_BATCH * 10).rowcount
                )
            )
            total += max(n, 0)
            if n < RUNS_PER_BATCH * 10:
                return total

    def get_redaction(self, run_id: str) -> Redaction | None:
        """When and by whom ``run_id`` was redacted, or None."""
        row = self._reading(lambda tx: tx.one("get_redaction", run_id=run_id))
        return None if row is None else Redaction(str(row[0]), float(row[1]), str(row[2]))

    # -- prune -------------------------------------------------------------------------

    def prune(
        self,
        before: float,
        statuses: Sequence[str] = PRUNABLE,
        dry_run: bool = False,
        runs_max: int | None = None,
    ) -> Freed:
        """Delete the runs with one of ``statuses`` that finished before ``before`` (at
        most ``runs_max``), leaving tombstones, then sweep the blobs only they cited.
        ``dry_run`` reads the same and writes nothing."""
        bad = [s for s in statuses if s not in PRUNABLE]
        if bad:
            raise ValueError(f"not a finished status: {bad}")
        freed = Freed()
        candidates: set[str] = set()
        after: tuple[float, str] | None = None
        while runs_max is None or freed.runs < runs_max:
            limit = (
                RUNS_PER_BATCH if runs_max is None else min(RUNS_PER_BATCH, runs_max - freed.runs)
            )
            page = self._reading(
                lambda tx, a=after, n=limit: tx.q(  # type: ignore[misc]
                    "prunable",
                    before=before,
                    statuses=tx.array(list(statuses)),
                    after_at=None if a is None else a[0],
                    after_id=None if a is None else a[1],
                    limit=n,
                ).fetchall()
            )
            if not page:
                break
            ids = [str(r[0]) for r in page]
            if dry_run:
                after = (float(page[-1][1]), ids[-1])
                removed, cites = self._removable(ids, statuses, before)
            else:
                removed, cites = self._remove(ids, statuses, before, "pruned")
            for run_id, status in removed:
                freed.runs += 1
                freed.by_status[status] = freed.by_status.get(status, 0) + 1
                freed.run_ids.append(run_id)
            candidates |= cites
            if len(page) < limit:
                break
        excluded = set(freed.run_ids) if dry_run else set()
        self._sweep(candidates, freed, dry_run, excluded)
        return freed

    def _removable(
        self, ids: Sequence[str], statuses: Sequence[str], before: float | None
    ) -> tuple[list[tuple[str, str]], set[str]]:
        """What :meth:`_remove` would remove, read without writing (a dry run)."""

        def op(tx: Tx) -> tuple[list[tuple[str, str]], set[str]]:
            rows = tx.q(
                "lock_removable",
                run_ids=tx.array(list(ids)),
                statuses=tx.array(list(statuses)),
                before=before,
            ).fetchall()
            found = [str(r[0]) for r in rows]
            return [(str(r[0]), str(r[3])) for r in rows], self._citations(tx, found)

        return self._reading(op, snapshot=True)

    def _citations(self, tx: Tx, run_ids: Sequence[str]) -> set[str]:
        """The blobs the records of ``run_ids`` cite directly (values and heads)."""
        out: set[str] = set()
        if not run_ids:
            return out
        for inputs, output in tx.q("run_citations", run_ids=tx.array(list(run_ids))).fetchall():
            values, heads = cited(inputs, output)
            out |= values | heads
        return out

    def _remove(
        self, ids: Sequence[str], statuses: Sequence[str], before: float | None, how: str
    ) -> tuple[list[tuple[str, str]], set[str]]:
        """Delete those of ``ids`` still finished (re-read under their locks), each with a
        tombstone, in one transaction; returns them (id, status) and what they cited."""
        now = self.clock.time()

        def op(tx: Tx) -> tuple[list[tuple[str, str]], set[str]]:
            rows = tx.q(
                "lock_removable",
                run_ids=tx.array(list(ids)),
                statuses=tx.array(list(statuses)),
                before=before,
            ).fetchall()
            found = [str(r[0]) for r in rows]
            if not found:
                return [], set()
            cites = self._citations(tx, found)
            _pend(tx, cites)
            tx.many(
                "insert_tombstone",
                [
                    {
                        "run_id": r[0],
                        "workflow": r[1],
                        "input_digest": r[2],
                        "status": r[3],
                        "incarnation": r[4],
                        "finished_at": r[5],
                        "now": now,
                        "how": how,
                    }
                    for r in rows
                ],
            )
            tx.q("delete_runs", run_ids=tx.array(found))
            return [(str(r[0]), str(r[3])) for r in rows], cites

        return self._writing(op)

    # -- delete and redact one run ----------------------------------------------------

    def delete_run(self, run_id: str, redact: bool = False, by: str = "") -> Freed:
        """Delete the finished run ``run_id`` now (leaving its tombstone), or with
        ``redact`` replace every value it holds by a marker, keeping its shape; then sweep
        the blobs no other run cites. Raises ``RunNotFound``, and ``RunNotFinished`` for a
        run that is not completed, failed or cancelled (it is left unchanged)."""
        freed = Freed()
        if redact:
            cites = self._redact(run_id, by)
        else:
            self._check_deletable(run_id)
            removed, cites = self._remove([run_id], PRUNABLE, None, "deleted")
            if not removed:
                self._check_deletable(run_id)  # it changed between the two reads
            for rid, status in removed:
                freed.runs += 1
                freed.by_status[status] = 1
                freed.run_ids.append(rid)
        self._sweep(cites, freed, False, set())
        return freed

    def _check_deletable(self, run_id: str) -> None:
        row = self._reading(lambda tx: tx.one("lock_run_for_delete", run_id=run_id))
        self._refuse_unless_finished(run_id, row)

    def _refuse_unless_finished(self, run_id: str, row: Any) -> None:
        if row is None:
            raise RunNotFound(f"no run {run_id!r} in {self._where}")
        if str(row[3]) not in PRUNABLE:
            raise RunNotFinished(
                f"run {run_id!r} is {row[3]}, not finished: only a completed, failed or"
                f" cancelled run can be deleted or redacted; `{command('cancel', run_id)}` first"
                " and wait until it is cancelled"
            )

    def _redact(self, run_id: str, by: str) -> set[str]:
        now = self.clock.time()
        marks = {
            "marker": MARKER,
            "marker_json": MARKER_JSON,
            "marker_digest": MARKER_DIGEST,
            "marker_event": MARKER_EVENT,
        }

        def op(tx: Tx) -> set[str]:
            row = tx.one("lock_run_for_delete", run_id=run_id)
            self._refuse_unless_finished(run_id, row)
            cites = self._citations(tx, [run_id])
            _pend(tx, cites)
            tx.q("redact_run_row", run_id=run_id, now=now, **marks)
            steps = tx.q("redactable_steps", run_id=run_id).fetchall()
            tx.many(
                "redact_step",
                [
                    {
                        "run_id": run_id,
                        "generation": gen,
                        "position": pos,
                        "inputs": redacted_inputs(inputs),
                        "name": redacted_name(name),
                        **marks,
                    }
                    for gen, pos, inputs, name in steps
                ],
            )
            for name in (
                "redact_events",
                "redact_signals",
                "redact_approvals",
                "redact_generations",
            ):
                tx.q(name, run_id=run_id, **marks)
            tx.q("insert_redaction", run_id=run_id, now=now, by=by)
            return cites

        return self._writing(op)

    # -- the blob sweep -----------------------------------------------------------------

    def _sweep(self, roots: set[str], freed: Freed, dry_run: bool, excluded: set[str]) -> None:
        """Mark and sweep the blobs reachable from ``roots`` (see the module docstring)
        and from those an earlier removal left waiting (its sweep never ran: a crash
        after its commit); ``excluded`` runs' records do not mark (a dry run's runs,
        still stored). Once swept, the waiting ones are dropped."""
        roots = roots | self._pending()
        if not roots:
            return
        state, edges = self._candidates(roots)
        if state:
            marked = self._mark(set(state), edges, excluded)
            order = _citers_first(list(state), edges)
            if dry_run:
                for d in order:
                    if d not in marked:
                        freed.blobs += 1
                        freed.blob_bytes += state[d][1]
                return
            kept = set(marked)
            for batch in _batches(order, BLOBS_PER_BATCH):
                n, size = self._writing(
                    lambda tx, b=batch: self._sweep_batch(tx, b, state, edges, kept)  # type: ignore[misc]
                )
                freed.blobs += n
                freed.blob_bytes += size
        if dry_run:
            return
        # Swept (or kept: cited by a remaining record, a candidate again once that
        # record's run goes): no longer waiting.
        for part in _batches(sorted(roots), BLOBS_PER_BATCH):
            self._writing(
                lambda tx, b=part: tx.q("drop_sweep_pending", digests=tx.array(b))  # type: ignore[misc]
            )

    def _pending(self) -> set[str]:
        """The blobs removals stopped citing whose sweep has not run yet."""
        out: set[str] = set()
        after = ""
        while True:
            rows = self._reading(
                lambda tx, a=after: tx.q(  # type: ignore[misc]
                    "sweep_pending", after=a, limit=BLOBS_PER_BATCH
                ).fetchall()
            )
            out.update(str(r[0]) for r in rows)
            if len(rows) < BLOBS_PER_BATCH:
                return out
            after = str(rows[-1][0])

    def _candidates(
        self, roots: set[str]
    ) -> tuple[dict[str, tuple[int, int]], dict[str, list[str]]]:
        """Every stored blob reachable from ``roots``: its (touches, size), and what each
        node cites."""
        state: dict[str, tuple[int, int]] = {}
        edges: dict[str, list[str]] = {}
        todo = set(roots)
        while todo:
            batch = sorted(todo)[:BLOBS_PER_BATCH]
            todo.difference_update(batch)
            rows = self._reading(
                lambda tx, b=batch: tx.q(  # type: ignore[misc]
                    "blob_state", digests=tx.array(b), small=NODE_BYTES_MAX
                ).fetchall()
            )
            for digest, touches, size, data in rows:
                d = str(digest)
                state[d] = (int(touches), int(size))
                out = node_citations(_text(data))
                if out:
                    edges[d] = out
                    todo.update(x for x in out if x not in state)
        return state, edges

    def _mark(
        self, candidates: set[str], edges: dict[str, list[str]], excluded: set[str]
    ) -> set[str]:
        """The candidates some remaining record reaches (read in pages: no write lock)."""
        marked: set[str] = set()
        seen_nodes: set[str] = set()
        after = ("", -1, "")
        while True:
            rows = self._reading(
                lambda tx, a=after: tx.q(  # type: ignore[misc]
                    "citing_page",
                    after_run=a[0],
                    after_gen=a[1],
                    after_pos=a[2],
                    limit=RECORDS_PER_PAGE,
                ).fetchall()
            )
            heads: set[str] = set()
            for run_id, _gen, _pos, inputs, output in rows:
                if str(run_id) in excluded:
                    continue
                values, h = cited(inputs, output)
                marked |= values & candidates
                heads |= h
            self._walk(heads, candidates, edges, marked, seen_nodes)
            if len(rows) < RECORDS_PER_PAGE:
                return marked
            last = rows[-1]
            after = (str(last[0]), int(last[1]), str(last[2]))

    def _walk(
        self,
        heads: Iterable[str],
        candidates: set[str],
        edges: dict[str, list[str]],
        marked: set[str],
        seen: set[str],
    ) -> None:
        """Mark the candidates reachable from conversation ``heads`` (each node once)."""
        todo = {h for h in heads if h not in seen}
        while todo:
            seen |= todo
            marked |= todo & candidates
            # A candidate's citations are known from collecting the candidates; only the
            # remaining runs' own nodes are read.
            unknown = sorted(d for d in todo if d not in candidates)
            todo = {c for d in todo if d in candidates for c in edges.get(d, ()) if c not in seen}
            for part in _batches(unknown, BLOBS_PER_BATCH):
                rows = self._reading(
                    lambda tx, b=part: tx.q(  # type: ignore[misc]
                        "blob_state", digests=tx.array(b), small=NODE_BYTES_MAX
                    ).fetchall()
                )
                for _digest, _touches, _size, data in rows:
                    for d in node_citations(_text(data)):
                        if d not in seen:
                            todo.add(d)

    def _sweep_batch(
        self,
        tx: Tx,
        batch: list[str],
        state: dict[str, tuple[int, int]],
        edges: dict[str, list[str]],
        kept: set[str],
    ) -> tuple[int, int]:
        """Delete the unmarked, untouched blobs of ``batch`` under their row locks; a
        touched one is kept with everything it reaches (``kept`` grows)."""
        locked = {str(d): int(t) for d, t in tx.q("lock_blobs", digests=tx.array(batch)).fetchall()}
        for d, touches in locked.items():
            if touches != state[d][0]:
                _keep_reachable(d, edges, kept)
        n = size = 0
        for d in batch:
            if d in kept or d not in locked:
                continue
            for got in tx.q("delete_blob", digest=d, touches=locked[d]).fetchall():
                n += 1
                size += int(got[0])
        return n, size

    # -- maintenance leases ----------------------------------------------------------

    def take_maintenance(self, name: str, owner: str, ttl_s: float) -> bool:
        """Take or renew the lease of background job ``name`` for ``ttl_s``; False when
        another live owner holds it."""
        now = self.clock.time()
        rows = self._writing(
            lambda tx: tx.q(
                "take_maintenance", name=name, owner=owner, expires_at=now + ttl_s, now=now
            ).fetchall()
        )
        return bool(rows)


def _pend(tx: Tx, cites: set[str]) -> None:
    """Write down, in the removing transaction, the blobs it stops citing: the sweep
    that follows its commit may never run (a crash), and the next one takes them."""
    if cites:
        tx.many("add_sweep_pending", [{"digest": d} for d in sorted(cites)])


def _keep_reachable(start: str, edges: dict[str, list[str]], kept: set[str]) -> None:
    todo = [start]
    while todo:
        d = todo.pop()
        if d in kept:
            continue
        kept.add(d)
        todo.extend(edges.get(d, ()))


def _citers_first(digests: list[str], edges: dict[str, list[str]]) -> list[str]:
    """``digests`` ordered so that a node comes before what it cites (a sweep batch that
    keeps a node then keeps what it cites, in a later batch)."""
    indeg = dict.fromkeys(digests, 0)
    for d in digests:
        for c in edges.get(d, ()):
            if c in indeg:
                indeg[c] += 1
    ready = sorted(d for d, n in indeg.items() if n == 0)
    out: list[str] = []
    while ready:
        d = ready.pop()
        out.append(d)
        for c in edges.get(d, ()):
            if c in indeg:
                indeg[c] -= 1
                if indeg[c] == 0:
                    ready.append(c)
    # A cycle cannot happen (a node's digest is the hash of its parent's); any left over
    # goes last rather than being lost.
    seen = set(out)
    return out + [d for d in digests if d not in seen]
