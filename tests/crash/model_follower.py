"""A follower of a run's stream in its own process: ``model_follower.py URL RUN_ID
POLL_S``. Prints each event as one JSON line (cursor, kind, position, data, and the
wall-clock time it was read), then ``{"end": true}`` once the run is finished."""

from __future__ import annotations

import json
import sys
import time

import durably


def main() -> None:
    url, run_id, poll_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
    engine = durably.Engine(url)
    try:
        # The run may not exist yet: wait for it to be created.
        deadline = time.monotonic() + 60
        while True:
            try:
                engine.events(run_id)
                break
            except durably.RunNotFound:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        print(json.dumps({"ready": True}), flush=True)
        for event in engine.follow(run_id, poll_s=poll_s):
            line = {
                "cursor": event.cursor,
                "kind": event.kind,
                "position": event.position,
                "data": event.data,
                "read_at": time.time(),
            }
            print(json.dumps(line), flush=True)
        print(json.dumps({"end": True}), flush=True)
    finally:
        engine.close()


if __name__ == "__main__":
    main()
