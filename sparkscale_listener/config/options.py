"""Configuration keys, declared once: value types, :class:`Option`, and :class:`ModuleConfig` through
which a pluggable module reads its own keys.

Every value is parsed and checked at startup: a bad one raises :class:`ConfigError` naming the key,
the value and what is accepted. Keys follow Spark's style (camelCase after the prefix, durations such
as ``30s`` / ``2min`` / ``1h``).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

PREFIX = "spark.sparkscale."
T = TypeVar("T")


class ConfigError(ValueError):
    """A `spark.sparkscale.*` value the autoscaler cannot accept."""


_DURATION_UNITS = {
    "ms": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")
DURATION_ACCEPTS = "a non-negative duration such as 500ms, 30s, 2min, 1h or 1d (a bare number is seconds)"


def parse_duration(key: str, value: str) -> float:
    """Parse a Spark-style duration into seconds."""
    match = _DURATION_RE.match(str(value).lower())
    if not match or match.group(2) not in ("", *_DURATION_UNITS):
        raise ConfigError(f"{key}={value!r} is not a valid duration; expected {DURATION_ACCEPTS}")
    unit = match.group(2) or "s"
    return float(match.group(1)) * _DURATION_UNITS[unit]


def parse_bool(key: str, value: str) -> bool:
    lowered = str(value).strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ConfigError(f"{key}={value!r} is not a boolean; expected true or false")


def parse_int(key: str, value: str, minimum: int | None = None) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{key}={value!r} is not an integer; expected a whole number"
                          + (f" >= {minimum}" if minimum is not None else "")) from None
    if minimum is not None and number < minimum:
        raise ConfigError(f"{key}={value!r} is out of range; expected an integer >= {minimum}")
    return number


def parse_float(key: str, value: str, low: float | None = None, high: float | None = None,
                low_open: bool = False, high_open: bool = False) -> float:
    accepted = _range_text(low, high, low_open, high_open)
    try:
        number = float(str(value).strip())
    except ValueError:
        raise ConfigError(f"{key}={value!r} is not a number; expected {accepted}") from None
    if number != number:  # NaN
        raise ConfigError(f"{key}={value!r} is not a number; expected {accepted}")
    too_low = low is not None and (number <= low if low_open else number < low)
    too_high = high is not None and (number >= high if high_open else number > high)
    if too_low or too_high:
        raise ConfigError(f"{key}={value!r} is out of range; expected {accepted}")
    return number


def _range_text(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is None and high is None:
        return "a number"
    if high is None:
        return f"a number {'>' if low_open else '>='} {low:g}"
    if low is None:
        return f"a number {'<' if high_open else '<='} {high:g}"
    return f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


def parse_list(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in str(value).split(",") if item.strip())


def parse_choice(key: str, value: str, choices: tuple[str, ...]) -> str:
    if value in choices:
        return value
    raise ConfigError(f"{key}={value!r} is not accepted; expected one of: {', '.join(choices)}")


_DAILY_WINDOW_RE = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)-([01]?\d|2[0-3]):([0-5]\d)$")


def parse_excluded_periods(key: str, value: str) -> tuple[tuple[int, int], ...]:
    """Daily windows ``HH:MM-HH:MM`` (local time), comma-separated; a window may wrap midnight.

    Returned as (start, end) minutes after midnight.
    """
    windows = []
    for item in parse_list(value):
        match = _DAILY_WINDOW_RE.match(item)
        if not match:
            raise ConfigError(
                f"{key}={value!r}: {item!r} is not a daily window; expected comma-separated "
                "HH:MM-HH:MM windows in local time, e.g. 22:00-06:00,12:00-12:30")
        h1, m1, h2, m2 = (int(g) for g in match.groups())
        windows.append((h1 * 60 + m1, h2 * 60 + m2))
    return tuple(windows)


# ---------------------------------------------------------------------------------------------
# Value types: how a key's text is parsed, and what a typed value may be
# ---------------------------------------------------------------------------------------------


class ValueType:
    """Parses a key's text and checks a typed value; ``accepts`` says in words what is accepted."""

    accepts = "a value"

    def parse(self, key: str, text: str) -> Any:
        value = self.convert(key, text)
        self.check(key, value)
        return value

    def convert(self, key: str, text: str) -> Any:
        return text

    def check(self, key: str, value: Any) -> None:
        """Raise ConfigError when ``value`` (already typed) is out of range."""

    def render(self, value: Any) -> str:
        """The value as a user writes it (for the docs)."""
        return "" if value is None else str(value)

    def _reject(self, key: str, value: Any, problem: str = "is not accepted") -> ConfigError:
        return ConfigError(f"{key}={value!r} {problem}; expected {self.accepts}")


class Text(ValueType):
    accepts = "a string"

    def convert(self, key: str, text: str) -> str:
        return str(text).strip()


class Boolean(ValueType):
    accepts = "true or false"

    def convert(self, key: str, text: str) -> bool:
        return parse_bool(key, text)

    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, bool):
            raise self._reject(key, value, "is not a boolean")

    def render(self, value: Any) -> str:
        return "true" if value else "false"


class Integer(ValueType):
    def __init__(self, minimum: int | None = None, optional: bool = False) -> None:
        self.minimum = minimum
        self.optional = optional  # empty text -> None
        self.accepts = "a whole number" + (f" >= {minimum}" if minimum is not None else "") \
            + (", or empty" if optional else "")

    def convert(self, key: str, text: str) -> int | None:
        if self.optional and not str(text).strip():
            return None
        return parse_int(key, text, self.minimum)

    def check(self, key: str, value: Any) -> None:
        if value is None and self.optional:
            return
        if not isinstance(value, int) or isinstance(value, bool):
            raise self._reject(key, value, "is not an integer")
        if self.minimum is not None and value < self.minimum:
            raise self._reject(key, value, "is out of range")


class Number(ValueType):
    def __init__(self, low: float | None = None, high: float | None = None, low_open: bool = False,
                 high_open: bool = False) -> None:
        self.bounds = (low, high, low_open, high_open)
        self.accepts = _range_text(low, high, low_open, high_open)

    def convert(self, key: str, text: str) -> float:
        return parse_float(key, text, *self.bounds)

    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
            raise self._reject(key, value, "is not a number")
        parse_float(key, str(value), *self.bounds)

    def render(self, value: Any) -> str:
        return f"{value:g}" if isinstance(value, float) and not value.is_integer() else str(value)


class Duration(ValueType):
    """Seconds, written as ``500ms``, ``30s``, ``2min``, ``1h``; ``until`` names a word that means
    "no end" (None), e.g. ``untilRestart``."""

    def __init__(self, positive: bool = False, until: str | None = None) -> None:
        self.positive = positive
        self.until = until
        self.accepts = DURATION_ACCEPTS + (", above zero" if positive else "") \
            + (f", or {until}" if until else "")

    def convert(self, key: str, text: str) -> float | None:
        if self.until is not None and str(text).strip() == self.until:
            return None
        if self.until is not None and not _DURATION_RE.match(str(text).lower()):
            raise ConfigError(f"{key}={text!r} is not accepted; expected {self.accepts}")
        return parse_duration(key, text)

    def check(self, key: str, value: Any) -> None:
        if value is None and self.until is not None:
            return
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
            raise self._reject(key, value, "is not a duration")
        if self.positive and value <= 0:
            raise self._reject(key, value, "must be greater than zero")

    def render(self, value: Any) -> str:
        if value is None:
            return self.until or ""
        for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
            if value >= size and value % size == 0:
                return f"{value / size:g}{unit}"
        return f"{value * 1000:g}ms"


class Choice(ValueType):
    def __init__(self, *choices: str) -> None:
        self.choices = choices
        self.accepts = "one of: " + ", ".join(choices)

    def convert(self, key: str, text: str) -> str:
        return parse_choice(key, str(text).strip(), self.choices)

    def check(self, key: str, value: Any) -> None:
        if value not in self.choices:
            raise self._reject(key, value)


class Names(ValueType):
    """A comma-separated list of names or class paths."""

    accepts = "a comma-separated list"

    def convert(self, key: str, text: str) -> tuple[str, ...]:
        return parse_list(text)

    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
            raise self._reject(key, value, "is not a tuple of names")

    def render(self, value: Any) -> str:
        return ",".join(value)


class DailyWindows(ValueType):
    accepts = "comma-separated HH:MM-HH:MM windows in local time"

    def convert(self, key: str, text: str) -> tuple[tuple[int, int], ...]:
        return parse_excluded_periods(key, text)

    def check(self, key: str, value: Any) -> None:
        ok = isinstance(value, tuple) and all(
            isinstance(w, tuple) and len(w) == 2 and all(isinstance(m, int) and 0 <= m < 1440 for m in w)
            for w in value)
        if not ok:
            raise self._reject(key, value, "is not a tuple of (start, end) minutes")

    def render(self, value: Any) -> str:
        return ",".join(f"{a // 60:02d}:{a % 60:02d}-{b // 60:02d}:{b % 60:02d}" for a, b in value)


@dataclass(frozen=True)
class Option:
    """One configuration key, declared once: name (after the prefix), value type and range,
    default, and the line the README shows. Parsing, validation, the defaults of
    :class:`AutoscalerConfig` and the README tables all come from these declarations."""

    key: str
    type: ValueType
    default: Any
    doc: str

    def parse(self, text: str, prefix: str = "") -> Any:
        return self.type.parse(PREFIX + prefix + self.key, text)

    def check(self, value: Any, prefix: str = "") -> None:
        self.type.check(PREFIX + prefix + self.key, value)

    def default_text(self) -> str:
        return self.type.render(self.default)


def option(key: str, type_: ValueType, default: Any, doc: str) -> Any:
    """A field of :class:`AutoscalerConfig` declared by its key (see :class:`Option`)."""
    return field(default=default, metadata={"option": Option(key, type_, default, doc)})



class ModuleConfig:
    """The keys of one pluggable module (prefix stripped), read with validation.

    A built-in module declares its keys as :class:`Option` s (a class attribute ``options``) and
    reads them all with :meth:`read`; a custom one may do the same or call the typed getters for
    each key it knows. :meth:`check_all_read` then rejects any key under its prefix that it did
    not read, so typos fail at startup.
    """

    def __init__(self, prefix: str, values: Mapping[str, str]) -> None:
        self.prefix = prefix
        self.values = dict(values)
        self._read: set[str] = set()

    def read(self, options: Sequence[Option]) -> dict[str, Any]:
        """Every declared option's value (its default when the key is not set), by key."""
        values = {}
        for opt in options:
            self._read.add(opt.key)
            values[opt.key] = (opt.parse(self.values[opt.key], self.prefix) if opt.key in self.values
                               else opt.default)
        return values

    def _get(self, name: str, default: T, parse: Callable[[str, str], T]) -> T:
        self._read.add(name)
        if name not in self.values:
            return default
        return parse(PREFIX + self.prefix + name, self.values[name])

    def duration(self, name: str, default: float) -> float:
        return self._get(name, default, parse_duration)

    def integer(self, name: str, default: int, minimum: int | None = None) -> int:
        return self._get(name, default, lambda k, v: parse_int(k, v, minimum))

    def number(self, name: str, default: float, low: float | None = None,
               high: float | None = None) -> float:
        return self._get(name, default, lambda k, v: parse_float(k, v, low, high))

    def boolean(self, name: str, default: bool) -> bool:
        return self._get(name, default, parse_bool)

    def string(self, name: str, default: str) -> str:
        return self._get(name, default, lambda k, v: v)

    def parsed(self, name: str, default: T, parse: Callable[[str, str], T]) -> T:
        """A value with a parser of the module's own: ``parse(full_key, text)`` raises ConfigError."""
        return self._get(name, default, parse)

    def check_all_read(self) -> None:
        unknown = sorted(set(self.values) - self._read)
        if unknown:
            key = unknown[0]
            raise ConfigError(
                f"{PREFIX}{self.prefix}{key}={self.values[key]!r} is not a known key; accepted "
                f"keys under {PREFIX}{self.prefix}: {', '.join(sorted(self._read)) or '(none)'}")
