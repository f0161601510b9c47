"""Package metadata: one version, the Python versions it claims are the ones tested, PEP 561 typing."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import sparkscale_listener

REPO = Path(__file__).resolve().parents[3]
tomllib = pytest.importorskip("tomllib")  # Python 3.11+; on 3.10 the rest of the suite still runs


def project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_version_is_written_once() -> None:
    config = project()
    assert "version" not in config["project"] and config["project"]["dynamic"] == ["version"]
    assert config["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "sparkscale_listener.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", sparkscale_listener.__version__)
    # The JVM bridge's Maven build has its own; it must say the same.
    pom = (REPO / "jvm-bridge" / "pom.xml").read_text(encoding="utf-8")
    project_version = re.search(r"<artifactId>[^<]+</artifactId>\s*<version>([^<]+)</version>", pom)
    assert project_version is not None and project_version.group(1) == sparkscale_listener.__version__


def test_the_python_versions_claimed_agree() -> None:
    meta = project()["project"]
    lowest = re.fullmatch(r">=3\.(\d+)", meta["requires-python"])
    assert lowest is not None
    minors = sorted(int(c.rsplit(".", 1)[1]) for c in meta["classifiers"]
                    if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c))
    assert minors[0] == int(lowest.group(1)) and minors == list(range(minors[0], minors[-1] + 1))
    assert sys.version_info[:2] >= (3, minors[0])
    assert "Typing :: Typed" in meta["classifiers"]


def test_the_package_is_marked_typed() -> None:
    assert (Path(sparkscale_listener.__file__).parent / "py.typed").is_file()
    assert project()["tool"]["setuptools"]["package-data"]["sparkscale_listener"] == ["py.typed"]
