"""The documentation holds every configuration key and gauge, with the defaults the code uses."""

import re
from collections.abc import Sequence
from pathlib import Path

from sparkscale_listener import __version__
from sparkscale_listener.config.core import CORE_OPTIONS
from sparkscale_listener.config.options import PREFIX, Boolean, Option, ValueType
from sparkscale_listener.reference import PAGES, markdown_rows, module_options, rewrite

REPO = Path(__file__).resolve().parents[3]
README = (REPO / "README.md").read_text(encoding="utf-8")
CONFIGURATION = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")


def test_generated_tables_are_current() -> None:
    for name, page in PAGES.items():
        text = (REPO / page).read_text(encoding="utf-8")
        assert f"<!-- {name}:start" in text, f"{page} lacks the {name} table"
        assert rewrite(text) == text, \
            f"{page}: its tables are stale: run `python -m sparkscale_listener.reference`"


def test_every_key_is_documented() -> None:
    for opt in CORE_OPTIONS:
        assert f"`{PREFIX}{opt.key}`" in CONFIGURATION
    for prefix, options in module_options():
        for opt in options:
            assert f"`{PREFIX}{prefix}{opt.key}`" in CONFIGURATION


def _release(version: str) -> tuple[int, ...]:
    """``"0.2.0.dev1"`` -> ``(0, 2, 0)``."""
    match = re.match(r"\d+(\.\d+)*", version)
    assert match, version
    return tuple(int(part) for part in match.group().split("."))


def undescribed(options: Sequence[Option], prefix: str = "") -> list[str]:
    """A line per key the reference cannot fully describe: no type, no accepted values, or no
    released version it first appeared in (at most the package's own)."""
    problems = []
    for opt in options:
        key = PREFIX + prefix + opt.key
        described = opt.type.describe()
        if not described.kind or not described.accepted:
            problems.append(f"{key}: its {type(opt.type).__name__} describes no type or accepted values")
        if not re.fullmatch(r"\d+\.\d+\.\d+", opt.since) or _release(opt.since) > _release(__version__):
            problems.append(f"{key}: since={opt.since!r} is not a version up to {__version__}")
    return problems


def test_every_key_has_a_type_accepted_values_and_since() -> None:
    problems = undescribed(CORE_OPTIONS)
    for prefix, options in module_options():
        problems += undescribed(options, prefix)
    assert not problems, "\n".join(problems)


def test_a_key_of_a_type_that_describes_nothing_or_with_no_release_is_refused() -> None:
    assert undescribed([Option("plain", ValueType(), "", "A key of the bare base type.")]) == [
        "spark.sparkscale.plain: its ValueType describes no type or accepted values"]
    assert undescribed([Option("later", Boolean(), True, "Not released yet.", since="99.0.0"),
                        Option("vague", Boolean(), True, "No version.", since="soon")]) == [
        f"spark.sparkscale.later: since='99.0.0' is not a version up to {__version__}",
        f"spark.sparkscale.vague: since='soon' is not a version up to {__version__}"]


def test_a_row_gives_type_accepted_default_and_since_each_in_its_column() -> None:
    interval = next(opt for opt in CORE_OPTIONS if opt.key == "interval")
    assert markdown_rows([interval]) == [
        "| `spark.sparkscale.interval` | duration | at least 500ms, at most 10min | `10s` | 0.1.0 "
        f"| {interval.doc} |"]


def test_the_doc_cell_is_the_declared_doc_with_nothing_appended() -> None:
    # The reference once appended a duration's bound to the doc ("trailing window At most 1h."); the
    # bound has its own column now, and the doc cell stays the sentences as declared.
    options = [(opt, "") for opt in CORE_OPTIONS] + [(opt, prefix) for prefix, module in module_options()
                                                      for opt in module]
    for opt, prefix in options:
        (row,) = markdown_rows([opt], prefix)
        assert row.endswith(f"| {opt.since} | {opt.doc} |"), row


def test_readme_names_the_two_commands_and_links_pages_that_exist() -> None:
    assert "make demo" in README and "make test" in README
    for link in re.findall(r"\]\((docs/[^)#]+)", README):
        assert (REPO / link).is_file(), link
