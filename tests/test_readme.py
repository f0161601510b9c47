"""The README documents every configuration key, with the defaults the code uses."""

from pathlib import Path

from sparkscale_listener.config import CORE_OPTIONS, DEPRECATED_KEYS, PREFIX
from sparkscale_listener.reference import module_options, rewrite

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def test_configuration_tables_are_current() -> None:
    assert rewrite(README) == README, \
        "README configuration tables are stale: run `python -m sparkscale_listener.reference README.md`"


def test_every_key_is_documented() -> None:
    for opt in CORE_OPTIONS:
        assert f"`{PREFIX}{opt.key}`" in README
    for prefix, options in module_options():
        for opt in options:
            assert f"`{PREFIX}{prefix}{opt.key}`" in README


def test_deprecated_keys_are_listed_with_their_new_names() -> None:
    for old, new in DEPRECATED_KEYS.items():
        assert f"`{old}`" in README and f"`{new}`" in README


def test_readme_names_the_two_commands() -> None:
    assert "make demo" in README and "make test" in README
