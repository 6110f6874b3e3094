"""Journal files are 0600: a SQLite journal (``.db``, ``-wal``, ``-shm``) and the
receiving side's SQLite database are created readable by their owner only, under the
usual umask 022, because they hold prompts, tool outputs and secrets. An existing one
readable by others gets one warning naming the chmod to run."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import durably
from durably.idempotency import IdempotencyStore, migrate

pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX file modes")

# Run in a child with umask 022 (the usual default; a test runner's own may differ):
# open a journal and the receiving side's database, write to both so their -wal and -shm
# exist, and print each file's mode while they are open.
CHILD = """
import json, os, sys
os.umask(0o022)
import durably
from durably.idempotency import IdempotencyStore, migrate

journal, idem = sys.argv[1], sys.argv[2]
engine = durably.Engine(f"sqlite:///{journal}")

@engine.workflow(name="w")
def w(ctx):
    return ctx.step("secret", lambda: "sk-live-123")

engine.run(w, run_id="r")
migrate(f"sqlite:///{idem}")
store = IdempotencyStore(f"sqlite:///{idem}", heartbeat=False)
store.execute("k", "fp", lambda: {"ok": True})
modes = {}
for path in (journal, idem):
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            modes[os.path.basename(path + suffix)] = oct(os.stat(path + suffix).st_mode & 0o777)
print(json.dumps(modes))
store.close()
engine.close()
"""


def test_journal_files_are_created_0600_under_umask_022(tmp_path: Path) -> None:
    journal, idem = tmp_path / "agent.db", tmp_path / "idem.db"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(journal), str(idem)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    modes = json.loads(out.stdout)
    expected = {
        f"{name}{suffix}": "0o600"
        for name in ("agent.db", "idem.db")
        for suffix in ("", "-wal", "-shm")
    }
    assert modes == expected, out.stderr


def shared_journal(path: Path) -> None:
    """A journal as an older durably left it: 0644 (plain sqlite3 under umask 022)."""
    durably.Engine(f"sqlite:///{path}").close()
    os.chmod(path, 0o644)


def test_a_journal_readable_by_others_is_warned_about_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "old journal.db"
    shared_journal(path)
    caplog.set_level(logging.WARNING, logger="durably")
    durably.Engine(f"sqlite:///{path}").close()
    durably.Engine(f"sqlite:///{path}").close()
    warned = [r.getMessage() for r in caplog.records if "other local users" in r.getMessage()]
    assert len(warned) == 1, warned
    assert f"chmod 600 '{path}'" in warned[0] and "0644" in warned[0]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644  # left as it is: the owner decides
    # After the chmod it names, nothing more is said, and the journal works as before.
    os.chmod(path, 0o600)
    caplog.clear()
    with durably.Engine(f"sqlite:///{path}") as engine:
        assert engine.store.list_runs() == []
    assert not [r for r in caplog.records if "other local users" in r.getMessage()]


def test_a_shared_idempotency_database_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "idem.db"
    sqlite3.connect(path).close()
    os.chmod(path, 0o664)
    migrate(f"sqlite:///{path}")
    caplog.set_level(logging.WARNING, logger="durably")
    IdempotencyStore(f"sqlite:///{path}", heartbeat=False).close()
    [msg] = [r.getMessage() for r in caplog.records if "other local users" in r.getMessage()]
    assert "idempotency database" in msg and f"chmod 600 {path}" in msg


def test_a_missing_folder_is_still_reported_by_the_store(tmp_path: Path) -> None:
    with pytest.raises(durably.StoreError, match="check that the folder exists"):
        durably.Engine(f"sqlite:///{tmp_path / 'nowhere' / 'j.db'}")


def test_a_journal_path_that_is_a_symlink_to_no_file_yet_creates_its_target_0600(
    tmp_path: Path,
) -> None:
    # journal.db -> data/agent.db, where agent.db does not exist yet (a deploy links the
    # journal onto a volume; or another local user planted the link in a shared folder).
    # Once, the exclusive create refused the link, nothing warned (the target could not
    # be stat'ed) and SQLite created the target with the umask's 0644.
    (tmp_path / "data").mkdir()
    for name in ("journal.db", "idem.db"):
        (tmp_path / name).symlink_to(tmp_path / "data" / f"target-{name}")
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            str(tmp_path / "journal.db"),
            str(tmp_path / "idem.db"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    modes = json.loads(out.stdout)
    assert set(modes.values()) == {"0o600"}, modes
    for name in ("journal.db", "idem.db"):
        target = tmp_path / "data" / f"target-{name}"
        assert (tmp_path / name).is_symlink() and target.exists()
        assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
