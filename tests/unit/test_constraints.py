"""Reproducible installs: pyproject.toml keeps lower bounds (an upper bound below the next
major release for extras likely to break there), and every install the Makefile makes, the
one CI runs included, takes exact versions from the committed constraints.txt, which
``make constraints`` writes from a throwaway venv."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DEV_EXTRAS = ("dev", "plot", "otel")


def pins() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and version, f"constraints.txt: {line!r} is not an exact pin (name==version)"
        out[canonicalize_name(name)] = version
    return out


def needed(name: str, extras: tuple[str, ...]) -> dict[str, str]:
    """Every distribution ``name[extras]`` installs, with its installed version."""
    seen: dict[str, str] = {}
    # Visited (distribution, extras) pairs: an extra reached through a self-reference
    # (durably[dev] naming durably[ui]) brings its own requirements, even though durably
    # itself was seen before (a check by distribution alone skipped jinja2 this way).
    visited: set[tuple[str, tuple[str, ...]]] = set()
    todo = [(name, extras)]
    while todo:
        dist_name, wanted = todo.pop()
        dist = metadata.distribution(dist_name)
        key = canonicalize_name(dist.metadata["Name"])
        if (key, tuple(sorted(wanted))) in visited:
            continue
        visited.add((key, tuple(sorted(wanted))))
        seen[key] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            envs = [{"extra": e} for e in wanted] or [{"extra": ""}]
            if req.marker is not None and not any(req.marker.evaluate(env) for env in envs):
                continue
            todo.append((req.name, tuple(req.extras)))
    seen.pop("durably")
    return seen


def test_the_makefile_installs_exact_versions_from_the_constraints_file() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^CONSTRAINTS := constraints\.txt$", makefile, re.M)
    installs = [
        line
        for line in makefile.splitlines()
        if re.search(r"-m pip install .*-e '\.", line) and "echo" not in line
    ]
    assert installs, "the Makefile installs durably with pip install -e"
    for line in installs:
        if "$$tmp/venv" in line:  # make constraints: the one install that must not use it
            assert "-c" not in line.split("pip install", 1)[1]
            continue
        assert "-c $(CONSTRAINTS)" in line, line


def test_the_constraints_pin_every_package_of_the_dev_install() -> None:
    pinned = pins()
    installed = needed("durably", DEV_EXTRAS)
    missing = sorted(set(installed) - set(pinned))
    assert not missing, (
        f"constraints.txt does not pin {missing}: an extra gained a dependency; run"
        " `make constraints` and commit the file"
    )
    drift = {n: (v, pinned[n]) for n, v in installed.items() if v != pinned[n]}
    assert not drift, (
        f"installed (version, pinned): {drift}; reinstall with `make .venv/.installed-dev`"
        " (touch pyproject.toml first), or refresh the pins with `make constraints`"
    )


def test_dependencies_are_lower_bounds_and_breaking_majors_are_capped() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for text in project["dependencies"]:
        req = Requirement(text)
        assert all(s.operator == ">=" for s in req.specifier), f"{text}: lower bounds only"
    extras = project["optional-dependencies"]
    reqs = {
        canonicalize_name(Requirement(t).name): Requirement(t)
        for group in extras.values()
        for t in group
        if not t.startswith("durably")
    }
    capped = {
        "psycopg": "4",
        "psycopg-pool": "4",
        "pydantic": "3",
        "opentelemetry-api": "2",
        "opentelemetry-sdk": "2",
        "matplotlib": "4",
        "starlette": "2",
        "uvicorn": "1",
    }
    for name, major in capped.items():
        uppers = [s.version for s in reqs[name].specifier if s.operator == "<"]
        assert uppers == [major], f"{reqs[name]}: cap it below its next major, <{major}"


def test_the_license_is_an_spdx_string_that_the_build_backend_reads_without_warning() -> None:
    """setuptools warned three times in every install that ``project.license`` as a TOML
    table is deprecated: the license is an SPDX expression, and the build backend is a
    setuptools that reads one (77 and later)."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert data["project"]["license"] == "Apache-2.0"
    [backend] = [
        Requirement(r)
        for r in data["build-system"]["requires"]
        if canonicalize_name(Requirement(r).name) == "setuptools"
    ]
    assert not backend.specifier.contains("76.9") and backend.specifier.contains("77.0")
