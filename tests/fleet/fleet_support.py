"""Helpers shared by the fleet tests."""

from __future__ import annotations

import contextlib
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
Spawn = Callable[..., subprocess.Popen[str]]


def wait_until(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@contextlib.contextmanager
def run_row_locked(journal_url: str, run_id: str) -> Iterator[None]:
    """Hold the lock a lease renewal needs (SQLite: the write lock; PostgreSQL: the run's
    row), so a woken worker's heartbeat cannot learn of the takeover first."""
    if journal_url.startswith("sqlite"):
        db = sqlite3.connect(journal_url[len("sqlite:///") :], isolation_level=None, timeout=60)
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            db.execute("ROLLBACK")
            db.close()
        return
    import psycopg

    with psycopg.connect(journal_url) as conn:  # a transaction until the block ends
        conn.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (run_id,))
        yield


def stop_between_writes(proc: subprocess.Popen[str], journal_url: str) -> None:
    """SIGSTOP a worker process outside any write of its own, and return once it is
    stopped.

    On SQLite a worker's writes (a heartbeat's renewal too, fsync included) hold the
    database's one write lock in the worker's own process: stopped inside one, it keeps
    the lock until it is woken, and a rescuer's claim waits for it rather than for the
    lease (the test timed out on a loaded machine, where the slower fsyncs made the
    window wider). So the test holds the write lock itself while it stops the worker: the
    worker is then at most waiting for the lock, holding none. On PostgreSQL the lease
    renewal is one autocommit statement, which the server finishes whether or not its
    client is stopped (and holding the run's row here would hand it to a stopped client
    that was waiting for it)."""
    if journal_url.startswith("sqlite"):
        db = sqlite3.connect(journal_url[len("sqlite:///") :], isolation_level=None, timeout=60)
        try:
            db.execute("BEGIN IMMEDIATE")
            proc.send_signal(signal.SIGSTOP)
            wait_until(lambda: stopped(proc.pid), 30, "the worker to stop")
            db.execute("ROLLBACK")
        finally:
            db.close()
        return
    proc.send_signal(signal.SIGSTOP)
    wait_until(lambda: stopped(proc.pid), 30, "the worker to stop")


def stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (Linux: state T in /proc/PID/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


class Forwarder:
    """A TCP port that refuses connections until :meth:`open`, then forwards them to the
    PostgreSQL server: a database that is not up yet when the worker starts."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()  # nothing listens here until open()
        self.sock: socket.socket | None = None
        self.conns: list[socket.socket] = []
        # The accept thread may take a connection while close() runs: the lock and the
        # flag make sure every socket it opens is either closed by close() or by itself.
        self._lock = threading.Lock()
        self._closed = False

    def open(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            socks, self.conns = [self.sock, *self.conns], []
        for s in socks:
            if s is not None:
                s.close()

    def drop(self) -> int:
        """Cut every connection open now (both ends, mid-query or mid-reply, as a dying
        network would); new connections are still forwarded. Returns how many it cut."""
        with self._lock:
            cut, self.conns = self.conns, []
        for s in cut:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        return len(cut) // 2

    def _accept(self) -> None:
        assert self.sock is not None
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    server.close()
                    return
                self.conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
