"""``import durably`` imports none of its rooms (issue 28): each public name is imported
on first use, so a bare import costs about an interpreter start."""

from __future__ import annotations

import subprocess
import sys

import durably


def _modules_after(code: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}; import sys; print(' '.join(sorted(sys.modules)))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return out


def test_import_durably_loads_no_room_nor_heavy_stdlib() -> None:
    loaded = _modules_after("import durably")
    assert [m for m in loaded if m.startswith("durably.")] == []
    for heavy in ("sqlite3", "typing", "json", "asyncio", "inspect", "dataclasses"):
        assert heavy not in loaded, heavy


def test_a_public_name_imports_its_module_on_first_use() -> None:
    loaded = _modules_after("import durably; durably.ConfigError")
    assert "durably.errors" in loaded
    assert "durably.engine.facade" not in loaded


def test_every_public_name_resolves_and_is_kept() -> None:
    for name in durably.__all__:
        value = getattr(durably, name)
        assert vars(durably)[name] is value
    assert set(durably.__all__) <= set(dir(durably))


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        durably.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("durably.no_such_name resolved")
