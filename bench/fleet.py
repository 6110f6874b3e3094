"""Fleet figures on PostgreSQL: worker throughput and failover time after a SIGKILL.

- Throughput of 1 and 2 worker processes on 1,000 runs x 10 trivial steps (each step is
  one fenced, committed append). This machine has 2 cores: the database server, the
  workers and this script share them, so 2 workers cannot double 1.
- Failover: a worker drives a run whose steps tick every 50 ms; it is SIGKILLed; the time
  until the run's next live step on another worker is measured twice: with the victim on
  this host (its pid is provably gone: taken over at once) and posing as another host
  (``DURABLY_MACHINE_ID``: only the lease's expiry frees the run, so the figure is bounded
  by ``lease_s``).

Run: ``python bench/fleet.py [--db URL] [--runs N] [--lease-s S]``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_fleet_app as fleet_app  # noqa: E402
from pg_step_overhead import throwaway_schema  # noqa: E402


def spawn(url: str, lease_s: float, host: str | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DURABLY_URL": url, "FLEET_LEASE_S": str(lease_s), "PYTHONPATH": str(HERE)}
    if host:
        env["DURABLY_MACHINE_ID"] = host
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "durably.cli",
            "worker",
            "bench_fleet_app:engine",
            "--concurrency",
            "4",
            "--poll-interval-s",
            "0.05",
            "--drain-s",
            "1",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=HERE,
    )


def throughput(server_url: str, workers: int, runs: int) -> float:
    """Seconds for ``workers`` processes to finish ``runs`` ten-step runs."""
    with throwaway_schema(server_url) as url:
        os.environ["DURABLY_URL"] = url
        engine = fleet_app.make_engine()
        for i in range(runs):
            engine.start("ten", i, run_id=f"t{i}")
        procs = [spawn(url, 30) for _ in range(workers)]
        t0 = time.perf_counter()
        while len(engine.store.list_runs(status="completed", limit=runs + 1)) < runs:
            time.sleep(0.05)
        elapsed = time.perf_counter() - t0
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(30)
        engine.close()
    return elapsed


def failover(server_url: str, lease_s: float, other_host: bool) -> float:
    """Seconds from SIGKILL of the driving worker to the run's next live step elsewhere."""
    with throwaway_schema(server_url) as url, tempfile.TemporaryDirectory() as d:
        stamps = Path(d) / "stamps"
        stamps.touch()
        os.environ["DURABLY_URL"] = url
        engine = fleet_app.make_engine()
        victim = spawn(url, lease_s, host="elsewhere" if other_host else None)
        engine.start("ticker", str(stamps), 400, run_id="tick")
        while len(stamps.read_text().splitlines()) < 5:
            time.sleep(0.01)
        rescuer = spawn(url, lease_s)
        time.sleep(0.5)  # the rescuer is up and polling
        victim.kill()
        killed_at = time.time()
        victim.wait()
        while True:
            lines = [ln.split() for ln in stamps.read_text().splitlines()]
            after = [float(t) for pid, _, t in lines if int(pid) == rescuer.pid]
            if after:
                break
            time.sleep(0.005)
        rescuer.kill()
        rescuer.wait()
        engine.close()
    return after[0] - killed_at


def main() -> None:
    """Print the fleet figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--db",
        default=os.environ.get("DURABLY_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--lease-s", type=float, default=5.0)
    args = p.parse_args()
    print(
        f"fleet on PostgreSQL, {os.cpu_count()} cores shared by the server, the workers"
        " and this script"
    )
    for n in (1, 2):
        s = throughput(args.db, n, args.runs)
        print(
            f"  {n} worker(s): {args.runs} runs x {fleet_app.STEPS} steps in {s:.2f} s ="
            f" {args.runs / s:,.0f} runs/s, {args.runs * fleet_app.STEPS / s:,.0f} steps/s"
        )
    same = failover(args.db, args.lease_s, other_host=False)
    other = failover(args.db, args.lease_s, other_host=True)
    print(f"  SIGKILL to next live step elsewhere, same host (dead pid seen): {same:.2f} s")
    print(
        f"  SIGKILL to next live step elsewhere, other host (lease {args.lease_s:g} s):"
        f" {other:.2f} s (bound: lease_s + poll interval)"
    )


if __name__ == "__main__":
    main()
