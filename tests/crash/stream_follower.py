"""A follower in its own process: ``stream_follower.py URL RUN_ID AFTER MAX``.

Prints each event after cursor ``AFTER`` as one JSON line, then disconnects (exits) after
``MAX`` events, or prints ``{"end": true}`` once the run is finished and every event is
out. The test restarts it with the last cursor it printed.
"""

from __future__ import annotations

import json
import sys

import durably


def main() -> None:
    url, run_id, after, most = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    engine = durably.Engine(url)
    try:
        follow = engine.follow(run_id, after=after, poll_s=0.02)
        for n, event in enumerate(follow, start=1):
            line = {"cursor": event.cursor, "kind": event.kind, "position": event.position}
            print(json.dumps(line), flush=True)
            if n == most:
                return
        print(json.dumps({"end": True}), flush=True)
    finally:
        engine.close()


if __name__ == "__main__":
    main()
