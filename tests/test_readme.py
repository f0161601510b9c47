"""The documentation holds every configuration key and gauge, with the defaults the code uses."""

from pathlib import Path

from sparkscale_listener.config.core import CORE_OPTIONS
from sparkscale_listener.config.options import PREFIX
from sparkscale_listener.config.reference import PAGES, module_options, rewrite

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")
CONFIGURATION = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")


def test_generated_tables_are_current() -> None:
    for name, page in PAGES.items():
        text = (REPO / page).read_text(encoding="utf-8")
        assert f"<!-- {name}:start" in text, f"{page} lacks the {name} table"
        assert rewrite(text) == text, \
            f"{page}: its tables are stale: run `python -m sparkscale_listener.config.reference`"


def test_every_key_is_documented() -> None:
    for opt in CORE_OPTIONS:
        assert f"`{PREFIX}{opt.key}`" in CONFIGURATION
    for prefix, options in module_options():
        for opt in options:
            assert f"`{PREFIX}{prefix}{opt.key}`" in CONFIGURATION


def test_readme_names_the_two_commands_and_links_pages_that_exist() -> None:
    assert "make demo" in README and "make test" in README
    import re

    for link in re.findall(r"\]\((docs/[^)#]+)", README):
        assert (REPO / link).is_file(), link
