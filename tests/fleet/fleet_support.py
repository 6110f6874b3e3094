"""Helpers shared by the fleet tests."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
Spawn = Callable[..., subprocess.Popen[str]]


def wait_until(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


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
