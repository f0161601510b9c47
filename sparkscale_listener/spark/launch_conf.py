"""The Spark conf a driver JVM that pyspark has not launched yet will start with, read before it starts.

``getOrCreate()`` launches the driver JVM through ``spark-submit``, which adds to the builder's
settings the properties file and ``--conf`` values of ``PYSPARK_SUBMIT_ARGS`` and
``spark-defaults.conf`` (from ``SPARK_CONF_DIR``, else ``SPARK_HOME/conf``). Reading them here lets
every refusal (``spark.dynamicAllocation.enabled=true`` in ``spark-defaults.conf``, a bad
``spark.sparkscale.*`` value) come before any SparkContext or executor exists. When the JVM already
runs (spark-submit, the pyspark shell), its system properties hold all of this instead
(:meth:`~sparkscale_listener.spark.bridge.JvmBridge.submitted_conf`).

Precedence, as spark-submit applies it (later wins): ``spark-defaults.conf`` (skipped when
``--properties-file`` is given, unless ``--load-spark-defaults``), the ``--properties-file``, the
``--conf`` values; the builder's own settings win over all of them (the caller merges those).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

DEFAULTS_FILE = "spark-defaults.conf"


def spark_home(env: Mapping[str, str]) -> str | None:
    """The Spark installation pyspark launches (``SPARK_HOME``, else pyspark's own directory)."""
    if env.get("SPARK_HOME"):
        return env["SPARK_HOME"]
    try:
        from pyspark.find_spark_home import _find_spark_home
    except ImportError:
        return None
    try:
        return _find_spark_home()
    except BaseException:  # it calls sys.exit when it finds nothing
        return None


def defaults_file(env: Mapping[str, str]) -> Path | None:
    """``spark-defaults.conf`` as spark-submit locates it: in ``SPARK_CONF_DIR``, else ``SPARK_HOME/conf``."""
    conf_dir = env.get("SPARK_CONF_DIR")
    if not conf_dir:
        home = spark_home(env)
        if home is None:
            return None
        conf_dir = os.path.join(home, "conf")
    return Path(conf_dir) / DEFAULTS_FILE


def launch_conf(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``spark.*`` settings spark-submit will give the driver JVM pyspark launches next,
    before the builder's own (which the caller lets win)."""
    env = os.environ if env is None else env
    properties_file, load_defaults, conf = _submit_args(env.get("PYSPARK_SUBMIT_ARGS", ""))
    merged: dict[str, str] = {}
    if properties_file is None or load_defaults:
        path = defaults_file(env)
        if path is not None and path.is_file():
            merged.update(read_properties(path))
    if properties_file is not None:
        merged.update(read_properties(Path(properties_file)))
    merged.update(conf)
    return {k: v for k, v in merged.items() if k.startswith("spark.")}  # spark-submit drops the rest


def _submit_args(text: str) -> tuple[str | None, bool, dict[str, str]]:
    """(``--properties-file``, ``--load-spark-defaults``, ``--conf`` values) from PYSPARK_SUBMIT_ARGS,
    with spark-submit's forms: ``--conf k=v``, ``--conf=k=v``, ``-c k=v``."""
    try:
        args = shlex.split(text)
    except ValueError:  # unbalanced quotes: spark-submit will fail on them itself
        return None, False, {}
    properties_file = None
    load_defaults = False
    conf: dict[str, str] = {}
    i = 0
    while i < len(args):
        name, value = args[i], None
        if name.startswith("--") and "=" in name:
            name, value = name.split("=", 1)
        if name in ("--conf", "-c", "--properties-file"):
            if value is None:
                i += 1
                value = args[i] if i < len(args) else ""
            if name == "--properties-file":
                properties_file = value
            else:
                key, sep, setting = value.partition("=")
                if sep:
                    conf[key] = setting
        load_defaults = load_defaults or name == "--load-spark-defaults"
        i += 1
    return properties_file, load_defaults, conf


# java.util.Properties syntax, which Spark reads these files with: a key ends at the first unescaped
# '=', ':' or whitespace; lines starting with '#' or '!' are comments; a line ending in an odd
# number of backslashes continues on the next one. Spark trims the values.
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_SEPARATOR = re.compile(r"(?<!\\)(?:\\\\)*[=:\s]")


def _unescape(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2:i + 6]):
                out.append(chr(int(text[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip()  # leading whitespace is dropped, on continuation lines too
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        lines.append(pending + line)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def parse_properties(text: str) -> dict[str, str]:
    """The entries of a properties file's text (java.util.Properties syntax), values trimmed."""
    entries = {}
    for line in _logical_lines(text):
        match = _SEPARATOR.search(line)
        if match is None:
            key, value = line, ""
        else:
            end = match.end()
            key = line[:end - 1]
            rest = line[end:].lstrip(" \t\f")
            if line[end - 1].isspace() and rest[:1] in ("=", ":"):
                rest = rest[1:].lstrip(" \t\f")
            value = rest
        entries[_unescape(key)] = _unescape(value).strip()
    return entries


def read_properties(path: Path) -> dict[str, str]:
    """A properties file's entries; an unreadable file is left for spark-submit to report."""
    try:
        return parse_properties(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return {}
