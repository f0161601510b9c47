"""The README documents every configuration key, with the defaults the code uses."""

from pathlib import Path

from sparkscale_listener.config import CORE_KEYS, PREFIX, markdown_table

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def test_configuration_table_is_current() -> None:
    start = README.index("<!-- config-table:start")
    start = README.index("-->", start) + 3
    end = README.index("<!-- config-table:end -->")
    assert README[start:end].strip() == markdown_table(), \
        "README config table is stale: regenerate with `python -m sparkscale_listener.config`"


def test_every_key_is_documented() -> None:
    for key in CORE_KEYS:
        assert f"`{PREFIX}{key.name}`" in README


def test_readme_names_the_two_commands() -> None:
    assert "make demo" in README and "make test" in README
