"""``durably ui --open`` hands the browser a private file that forwards to the URL, not
the URL itself: a browser's command line (``xdg-open URL``, the browser process) can be
read by every local user (``ps``), and the URL carries the token. As Jupyter does. The
real command in a subprocess, with ``$BROWSER`` a script that records what it got."""

from __future__ import annotations

import html
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

from .conftest import make_engine
from .test_security import _cli_env


def test_open_gives_the_browser_a_private_file_not_the_token(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'j.db'}"
    make_engine(db).close()
    seen = tmp_path / "argv.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {seen}\n')
    browser.chmod(0o755)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "durably.cli", "ui", "--db", db, "--port", str(port), "--open"],
        stderr=subprocess.PIPE,
        text=True,
        env=_cli_env(BROWSER=str(browser)),
    )
    try:
        assert proc.stderr is not None
        m = re.search(r"open (http://\S+)", proc.stderr.readline())
        assert m
        url = m.group(1)
        token = url.split("token=")[1]
        deadline = time.monotonic() + 20
        while not seen.exists() or not seen.read_text().strip():
            assert time.monotonic() < deadline, "the browser was not opened"
            time.sleep(0.05)
        argv = seen.read_text()
        assert token not in argv
        target = argv.strip().splitlines()[-1]
        path = Path(unquote(urlparse(target).path)) if target.startswith("file:") else Path(target)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert html.escape(url) in path.read_text()  # it forwards to the URL
        assert path.stat().st_uid == os.getuid()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    assert not path.exists()  # removed when the server stops
