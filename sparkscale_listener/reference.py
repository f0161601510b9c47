"""The configuration and metrics reference (``docs/configuration.md``, ``docs/observability.md``),
generated from the key and gauge declarations so it cannot drift. A tool, not part of the running
autoscaler: it reads the declarations of every layer (checkers, event handlers, state stores,
gauges), so it sits above them all, beside the package's entry points, and nothing imports it.

``python -m sparkscale_listener.reference`` rewrites the tables between the
``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` markers of those pages; a test checks they are
current.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from .check.builtin import BUILTIN_CHECKER_CLASSES
from .check.loading import KEYS_PREFIX as CHECKER_KEYS
from .config.core import CORE_OPTIONS
from .config.options import PREFIX, Option
from .observe.events import KEYS_PREFIX as EVENT_HANDLER_KEYS
from .observe.events import JsonLinesEventHandler
from .observe.gauges import metrics_table
from .state.loading import STATE_STORE_OPTIONS

# Spark's configuration page (Property Name | Default | Meaning | Since Version), with the type and the
# accepted values in columns of their own: the doc cell is the declaration's own sentences, nothing
# appended to them.
TABLE_HEADER = ("| key | type | accepted | default | since | what it does |\n"
                "|---|---|---|---|---|---|")


def markdown_rows(options: Sequence[Option], prefix: str = "") -> list[str]:
    """A row of the reference per option (keys under ``prefix``)."""
    rows = []
    for opt in options:
        described = opt.type.describe()
        default = opt.default_text()
        rows.append(f"| `{PREFIX}{prefix}{opt.key}` | {described.kind} | {described.accepted} "
                    f"| {f'`{default}`' if default else '(empty)'} | {opt.since} | {opt.doc} |")
    return rows


def markdown_table(options: Sequence[Option] = CORE_OPTIONS, prefix: str = "") -> str:
    """A markdown table of ``options`` (keys under ``prefix``), generated so it cannot drift."""
    return "\n".join([TABLE_HEADER, *markdown_rows(options, prefix)])


def module_options() -> list[tuple[str, tuple]]:
    """(prefix, options) of every built-in module that has keys of its own."""
    modules: list[tuple[str, tuple]] = [(f"{CHECKER_KEYS}{name}.", cls.options)
                                        for name, cls in BUILTIN_CHECKER_CLASSES.items()]
    modules.append((f"{EVENT_HANDLER_KEYS}jsonl.", JsonLinesEventHandler.options))
    modules.append(("stateStore.", STATE_STORE_OPTIONS))
    return modules


def tables() -> dict[str, str]:
    """Marker name -> the table that belongs between its markers."""
    module_rows = [row for prefix, options in module_options() for row in markdown_rows(options, prefix)]
    return {"config-table": markdown_table(CORE_OPTIONS),
            "module-keys-table": "\n".join([TABLE_HEADER, *module_rows]),
            "metrics-table": metrics_table()}


# The page each generated table lives on.
PAGES = {"config-table": "docs/configuration.md", "module-keys-table": "docs/configuration.md",
         "metrics-table": "docs/observability.md"}


def rewrite(text: str) -> str:
    """``text`` with every generated table whose markers it holds made current."""
    for name, table in tables().items():
        if f"<!-- {name}:start" not in text:
            continue
        start = text.index(f"<!-- {name}:start")
        start = text.index("-->", start) + 3
        end = text.index(f"<!-- {name}:end -->")
        text = text[:start] + "\n" + table + "\n" + text[end:]
    return text


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")
    for page in sorted(set(PAGES.values())):
        path = root / page
        path.write_text(rewrite(path.read_text(encoding="utf-8")), encoding="utf-8")
