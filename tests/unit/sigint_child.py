"""Child of test_group_commit_signals.py: the main thread appends and creates runs among
worker threads doing the same on one SQLite store while SIGINTs arrive at random
(every 0.2-3 ms); it catches each KeyboardInterrupt and goes on. Prints one JSON line:
interrupts taken, calls made, worker errors, and whether the writer was found stuck (no
call finished for 5 s) or a transaction left open."""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from durably.clock import SystemClock
from durably.store.open import open_store
from tests.contract.test_store_contract import ME, alive, new_run, rec


def main() -> None:
    path, seconds, workers = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    store: object = open_store(f"sqlite:///{path}", SystemClock(), durability="process")
    s: object = store
    tokens: dict[str, int] = {}
    for i in range(workers + 1):
        s.create_run(new_run(f"r{i}"))  # type: ignore[attr-defined]
        tokens[f"r{i}"] = s.claim(f"r{i}", ME, 3000, 10, alive).fencing_token  # type: ignore[attr-defined]
    stop = threading.Event()
    progress = [0]
    errors: list[str] = []
    report: dict[str, object] = {"stuck": False, "leaked": 0}

    def worker(i: int) -> None:
        run_id, pos = f"r{i}", 0
        while not stop.is_set():
            try:
                if pos % 5 == 4:
                    s.create_run(new_run(f"x{i}-{pos}"))  # type: ignore[attr-defined]
                else:
                    s.append(run_id, tokens[run_id], [rec(str(pos))])  # type: ignore[attr-defined]
            except Exception as exc:
                errors.append(repr(exc)[:200])
            pos += 1
            progress[0] += 1

    threads = [
        threading.Thread(target=worker, args=(i,), daemon=True) for i in range(1, workers + 1)
    ]
    for t in threads:
        t.start()
    main_id = threading.main_thread().ident
    assert main_id is not None

    go = threading.Event()

    def signaller() -> None:
        go.wait()  # only once the main thread is inside its loops, which catch them
        while not stop.is_set():
            time.sleep(random.uniform(0.0002, 0.003))
            signal.pthread_kill(main_id, signal.SIGINT)

    def watchdog() -> None:
        last = -1
        while not stop.is_set():
            time.sleep(5)
            if progress[0] == last and not stop.is_set():
                report["stuck"] = True
                print(json.dumps({**report, "progress": progress[0]}), flush=True)
                os._exit(3)
            last = progress[0]

    threading.Thread(target=watchdog, daemon=True).start()
    threading.Thread(target=signaller, daemon=True).start()
    interrupts, pos = 0, 0
    deadline = time.monotonic() + seconds
    finished = False
    # Two loops, each catching the interrupt: one raised at the inner loop's own
    # condition or back edge (outside its try) is caught by the outer one.
    while not finished:
        try:
            go.set()
            while time.monotonic() < deadline:
                try:
                    if pos % 3 == 2:
                        s.create_run(new_run(f"m{pos}"))  # type: ignore[attr-defined]
                    else:
                        s.append("r0", tokens["r0"], [rec(str(pos))])  # type: ignore[attr-defined]
                    pos += 1
                    progress[0] += 1
                except KeyboardInterrupt:
                    interrupts += 1
                    with s._lock:  # type: ignore[attr-defined]
                        if s._conn.in_transaction:  # type: ignore[attr-defined]
                            report["leaked"] = int(report["leaked"]) + 1  # type: ignore[call-overload]
                            s._conn.execute("ROLLBACK")  # type: ignore[attr-defined]
            stop.set()
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            finished = True
        except KeyboardInterrupt:
            interrupts += 1
    # Nothing arrives now: one more call from the main thread must go through.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    time.sleep(0.05)
    s.append("r0", tokens["r0"], [rec("900000")])  # type: ignore[attr-defined]
    group = s._group  # type: ignore[attr-defined]
    report.update(
        interrupts=interrupts,
        progress=progress[0],
        errors=errors[:5],
        error_count=len(errors),
        busy_after=group._busy,
        queued_after=len(group._queue),
    )
    print(json.dumps(report), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
