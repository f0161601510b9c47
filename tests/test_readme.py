"""The README documents every configuration key, with the defaults the code uses."""

from pathlib import Path

from sparkscale_listener.config.core import CORE_OPTIONS
from sparkscale_listener.config.options import PREFIX
from sparkscale_listener.config.reference import module_options, rewrite

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def test_configuration_tables_are_current() -> None:
    assert rewrite(README) == README, \
        "README tables are stale: run `python -m sparkscale_listener.config.reference README.md`"


def test_every_key_is_documented() -> None:
    for opt in CORE_OPTIONS:
        assert f"`{PREFIX}{opt.key}`" in README
    for prefix, options in module_options():
        for opt in options:
            assert f"`{PREFIX}{prefix}{opt.key}`" in README


def test_readme_names_the_two_commands() -> None:
    assert "make demo" in README and "make test" in README
