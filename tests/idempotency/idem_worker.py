"""A child process for the cross-process tests: hammers a key, or hangs holding one.

Usage:
  python idem_worker.py execute URL KEY START_AT EFFECT_FILE SLEEP_S
      waits until START_AT (epoch seconds), runs store.execute with a function that appends
      a line to EFFECT_FILE and sleeps SLEEP_S, and prints the outcome as one JSON line.
  python idem_worker.py hang URL KEY READY_FILE LEASE_S MODE
      MODE "two-phase": claims KEY (heartbeat on) and hangs inside the function;
      MODE "in-transaction": writes a row to table ``effects`` in the store's transaction
      and hangs. Either way READY_FILE is created once it hangs; the parent SIGKILLs it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from durably.errors import IdempotencyKeyInFlight, IdempotencyKeyReused
from durably.idempotency import IdempotencyStore


def execute(url: str, key: str, start_at: float, effect_file: str, sleep_s: float) -> None:
    store = IdempotencyStore(url, lease_s=10)
    time.sleep(max(0.0, start_at - time.time()))

    def effect() -> int:
        with open(effect_file, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(sleep_s)
        return os.getpid()

    try:
        record = store.execute(key, "fp", effect)
        outcome = "replayed" if record.replayed else "ran"
    except IdempotencyKeyInFlight:
        outcome = "in_flight"
    except IdempotencyKeyReused:
        outcome = "reused"
    store.close()
    print(json.dumps({"outcome": outcome}), flush=True)


def hang(url: str, key: str, ready_file: str, lease_s: float, mode: str) -> None:
    store = IdempotencyStore(url, lease_s=lease_s)

    def stuck(*conn: Any) -> None:
        if conn:
            conn[0].execute("INSERT INTO effects (what) VALUES ('from the killed process')")
        Path(ready_file).write_text("ready")
        time.sleep(600)

    store.execute(key, "fp", stuck, in_transaction=(mode == "in-transaction"))


if __name__ == "__main__":
    if sys.argv[1] == "execute":
        execute(sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5], float(sys.argv[6]))
    else:
        hang(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), sys.argv[6])
