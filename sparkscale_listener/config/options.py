"""Configuration keys, declared once: value types, :class:`Option`, and :class:`ModuleConfig` through
which a pluggable module reads its own keys.

Every value is parsed and checked at startup: a bad one raises :class:`ConfigError` naming the key,
the value and what is accepted. Keys follow Spark's style (camelCase after the prefix, durations such
as ``30s`` / ``2min`` / ``1h``).
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from .spelling import did_you_mean

PREFIX = "spark.sparkscale."
# The version every key of today first ships in: the project's first release, not yet made. A fixed
# string, not __version__: a key's `since` must not move when the version does (see Option.since).
FIRST_VERSION = "0.1.0"
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
_NEGATIVE_DURATION_RE = re.compile(r"^\s*-\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")
DURATION_UNITS_TEXT = "units ms, s, min, h, d; a bare number is seconds"
# A bare number this large is refused, whatever the key: it is most likely a milliseconds habit
# (Spark's own time keys differ in the unit a bare number takes), and the mistake is silent and
# costly (scaleDownInterval=300000 would wait 83 hours), while writing the unit costs nothing.
BARE_SECONDS_LIMIT = 1000


def human_duration(seconds: float) -> str:
    """``300000`` -> ``"83.3 h"``: a duration in the unit that reads best, for messages."""
    # Hours up to a week: "83.3 h" shows a scaleDownInterval=300000 mistake better than "3.47 d".
    for unit, size, from_size in (("d", 86400.0, 7 * 86400.0), ("h", 3600.0, 7200.0), ("min", 60.0, 120.0),
                                  ("s", 1.0, 0.0)):
        if seconds >= from_size:
            return f"{seconds / size:.3g} {unit}"
    raise AssertionError("unreachable")


def render_duration(seconds: float) -> str:
    """``300`` -> ``"5min"``: a duration as a user writes it, in the largest exact unit."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds * 1000:g}ms"


def _as_milliseconds(number: float) -> str:
    """How to write ``number`` milliseconds: ``300000`` -> ``"300s or 5min"``."""
    seconds = number / 1000
    plain = f"{seconds:g}s" if seconds >= 1 else f"{number:g}ms"
    best = render_duration(seconds)
    return plain if best == plain else f"{plain} or {best}"


def parse_duration(key: str, value: str, at_most: float | None = None) -> float:
    """Parse a Spark-style duration into seconds. A bare number is seconds; one of
    :data:`BARE_SECONDS_LIMIT` or more is refused (see there), naming how it was read and how to
    write what was probably meant. ``at_most``, the key's bound, only improves that message."""
    match = _DURATION_RE.match(str(value).lower())
    expected = f"expected a duration such as 500ms, 30s, 2min or 1h ({DURATION_UNITS_TEXT})"
    if _is_negative_duration(value):
        raise ConfigError(f"{key}={value!r} is negative, and a duration must be 0 or more; {expected}")
    if not match or match.group(2) not in ("", *_DURATION_UNITS):
        raise ConfigError(f"{key}={value!r} is not a valid duration; {expected}")
    number = float(match.group(1))
    if not match.group(2) and number >= BARE_SECONDS_LIMIT:
        read = (f"{key}={value!r} was read as {number:g} s ({human_duration(number)}): a bare number is "
                "seconds")
        if at_most is not None and number > at_most:
            raise ConfigError(f"{read}, and the longest accepted is {render_duration(at_most)}. If you meant "
                              f"milliseconds, write {_as_milliseconds(number)}")
        raise ConfigError(f"{read}, and one of {BARE_SECONDS_LIMIT} or more is refused as a likely "
                          f"milliseconds habit. Write the unit: {_as_milliseconds(number)} if you meant "
                          f"{number:g} ms, {number:g}s if you meant seconds")
    return number * _DURATION_UNITS[match.group(2) or "s"]


def _is_negative_duration(value: Any) -> bool:
    """``-5s``: a duration but for its sign (a bad unit after the sign stays "not a valid duration")."""
    match = _NEGATIVE_DURATION_RE.match(str(value).lower())
    return bool(match) and match.group(2) in ("", *_DURATION_UNITS) and float(match.group(1)) > 0


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
    if not math.isfinite(number):  # NaN, or inf: "unlimited" is not a value any key takes
        raise ConfigError(f"{key}={value!r} is not a finite number; expected {accepted}")
    too_low = low is not None and (number <= low if low_open else number < low)
    too_high = high is not None and (number >= high if high_open else number > high)
    if too_low or too_high:
        raise ConfigError(f"{key}={value!r} is out of range; expected {accepted}")
    return number


def parse_list(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in str(value).split(",") if item.strip())


def parse_choice(key: str, value: str, choices: tuple[str, ...]) -> str:
    if value in choices:
        return value
    hint = did_you_mean(value, choices)
    raise ConfigError(f"{key}={value!r} is not accepted{f' ({hint})' if hint else ''}; expected one of: "
                      f"{', '.join(choices)}")


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


class Description(NamedTuple):
    """What the configuration reference says of a value type, from the type's own checks."""

    kind: str  # what kind of value: "duration", "integer", "choice"...
    accepted: str  # the range or the choices: "at least 500ms, at most 10min", "0 < x <= 1"


def _number_range(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    """``(0, 1, True, False)`` -> ``"0 < x <= 1"``: the bounds as the reference shows them."""
    if low is None and high is None:
        return "any"
    if high is None:
        return f"x {'>' if low_open else '>='} {low:g}"
    if low is None:
        return f"x {'<' if high_open else '<='} {high:g}"
    return f"{low:g} {'<' if low_open else '<='} x {'<' if high_open else '<='} {high:g}"


def _range_text(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    """What an error message says is accepted: ``"a number, 0 < x <= 1"``, the reference's range."""
    bounds = _number_range(low, high, low_open, high_open)
    return "a number" if bounds == "any" else f"a number, {bounds}"


class ValueType:
    """Parses a key's text and checks a typed value; ``accepts`` says in words what is accepted (for
    error messages), :meth:`describe` the same for the reference's type and accepted columns."""

    accepts = "a value"

    def describe(self) -> Description:
        """The kind and the accepted values, for the reference. A type that leaves them empty cannot
        be documented: tests/unit/project/test_readme.py refuses every key of such a type."""
        return Description("", "")

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

    def describe(self) -> Description:
        return Description("text", "any")

    def convert(self, key: str, text: str) -> str:
        return str(text).strip()


class Boolean(ValueType):
    accepts = "true or false"

    def describe(self) -> Description:
        return Description("boolean", "true, false")

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

    def describe(self) -> Description:
        accepted = f"x >= {self.minimum}" if self.minimum is not None else "any"
        return Description("integer", accepted + (", or empty" if self.optional else ""))

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

    def describe(self) -> Description:
        return Description("number", _number_range(*self.bounds))

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
    "no end" (None), e.g. ``untilRestart``.

    ``at_most`` is the key's sane upper bound: far above any useful value, so a value beyond it is a
    mistake (a wrong unit, an extra zero) and is refused, with the value read back in a unit that
    shows the mistake. The configuration reference shows it in the key's accepted column."""

    def __init__(self, *, at_most: float, positive: bool = False, until: str | None = None,
                 at_least: float = 0.0) -> None:
        self.at_most = at_most
        self.at_least = at_least
        self.positive = positive or at_least > 0
        self.until = until
        low = (f"of at least {render_duration(at_least)} and" if at_least > 0
               else "above zero and" if positive else "")
        self.accepts = (f"a duration {low} at most {render_duration(at_most)} ({DURATION_UNITS_TEXT})"
                        .replace("  ", " ") + (f", or {until}" if until else ""))

    def parse(self, key: str, text: str) -> Any:
        value = self.convert(key, text)
        bare = str(text).strip().replace(".", "", 1).isdigit()
        self._check_range(key, repr(str(text)), value, read_as_seconds=bare)
        return value

    def convert(self, key: str, text: str) -> float | None:
        if self.until is not None and str(text).strip() == self.until:
            return None
        if _is_negative_duration(text):
            raise self._negative(key, repr(str(text)))
        if not _DURATION_RE.match(str(text).lower()):
            raise ConfigError(f"{key}={text!r} is not a valid duration; expected {self.accepts}")
        return parse_duration(key, text, self.at_most)

    def check(self, key: str, value: Any) -> None:
        if value is None and self.until is not None:
            return
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
            raise self._reject(key, value, "is not a duration")
        if value < 0:
            raise self._negative(key, repr(value))
        self._check_range(key, repr(value), value)

    def _negative(self, key: str, shown: str) -> ConfigError:
        least = (f"this key's duration must be at least {render_duration(self.at_least)}" if self.at_least
                 else "this key's duration must be greater than zero" if self.positive
                 else "a duration must be 0 or more")
        return ConfigError(f"{key}={shown} is negative, and {least}; expected {self.accepts}")

    def _check_range(self, key: str, shown: str, value: float | None, read_as_seconds: bool = False) -> None:
        if value is None:
            return
        if self.positive and value <= 0 and not self.at_least:
            raise ConfigError(f"{key}={shown} must be greater than zero; expected {self.accepts}")
        if value < self.at_least:
            raise ConfigError(f"{key}={shown} is shorter than the shortest accepted, "
                              f"{render_duration(self.at_least)}; expected {self.accepts}")
        if value > self.at_most:
            read = (f"was read as {value:g} s ({human_duration(value)})" if read_as_seconds
                    else f"is {human_duration(value)}")
            raise ConfigError(f"{key}={shown} {read}, more than the longest accepted, "
                              f"{render_duration(self.at_most)}; expected {self.accepts}")

    def describe(self) -> Description:
        low = (f"at least {render_duration(self.at_least)}, " if self.at_least > 0
               else "more than 0, " if self.positive else "")
        until = f", or {self.until}" if self.until else ""
        return Description("duration", f"{low}at most {render_duration(self.at_most)}{until}")

    def render(self, value: Any) -> str:
        return (self.until or "") if value is None else render_duration(value)


class Choice(ValueType):
    def __init__(self, *choices: str) -> None:
        self.choices = choices
        self.accepts = "one of: " + ", ".join(choices)

    def describe(self) -> Description:
        return Description("choice", ", ".join(self.choices))

    def convert(self, key: str, text: str) -> str:
        return parse_choice(key, str(text).strip(), self.choices)

    def check(self, key: str, value: Any) -> None:
        if value not in self.choices:
            raise self._reject(key, value)


class Names(ValueType):
    """A comma-separated list of names or class paths."""

    accepts = "a comma-separated list"

    def describe(self) -> Description:
        return Description("comma-separated names", "any, or empty")

    def convert(self, key: str, text: str) -> tuple[str, ...]:
        return parse_list(text)

    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
            raise self._reject(key, value, "is not a tuple of names")

    def render(self, value: Any) -> str:
        return ",".join(value)


class DailyWindows(ValueType):
    accepts = "comma-separated HH:MM-HH:MM windows in local time"

    def describe(self) -> Description:
        return Description("HH:MM windows", "HH:MM-HH:MM in local time, 00:00 to 23:59 (a window may wrap "
                                            "midnight), or empty")

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
    default, the line the configuration reference shows, and the version it first shipped in.
    Parsing, validation, the defaults of :class:`AutoscalerConfig` and the reference tables all come
    from these declarations.

    ``since`` defaults to :data:`FIRST_VERSION`, the version of every key of today; a key added after
    that release states the version it first ships in (a fixed string: it must not follow the
    version as it moves on)."""

    key: str
    type: ValueType
    default: Any
    doc: str
    since: str = FIRST_VERSION

    def parse(self, text: str, prefix: str = "") -> Any:
        return self.type.parse(PREFIX + prefix + self.key, text)

    def check(self, value: Any, prefix: str = "") -> None:
        self.type.check(PREFIX + prefix + self.key, value)

    def default_text(self) -> str:
        return self.type.render(self.default)


def option(key: str, type_: ValueType, default: Any, doc: str, since: str = FIRST_VERSION) -> Any:
    """A field of :class:`AutoscalerConfig` declared by its key (see :class:`Option`)."""
    return field(default=default, metadata={"option": Option(key, type_, default, doc, since)})


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
        """Every declared option's value (its default when the key is not set), by key. Every bad
        value is refused in one ConfigError, a line each: a user fixes them in one go."""
        values, problems = {}, []
        for opt in options:
            self._read.add(opt.key)
            try:
                values[opt.key] = (opt.parse(self.values[opt.key], self.prefix) if opt.key in self.values
                                   else opt.default)
            except ConfigError as e:
                problems.append(str(e))
        if problems:
            raise ConfigError("\n".join(problems))
        return values

    def _get(self, name: str, default: T, parse: Callable[[str, str], T]) -> T:
        self._read.add(name)
        if name not in self.values:
            return default
        return parse(PREFIX + self.prefix + name, self.values[name])

    def duration(self, name: str, default: float, at_most: float | None = None) -> float:
        """A duration in seconds; ``at_most`` (seconds) refuses longer values."""
        return self._get(name, default, lambda k, v: Duration(at_most=at_most).parse(k, v)
                         if at_most is not None else parse_duration(k, v))

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
        """Refuse the keys under the prefix that the module did not read: one line per key, with
        the key it most likely misspells, else the module's keys (a handful)."""
        unknown = sorted(set(self.values) - self._read)
        if not unknown:
            return
        where = f"{PREFIX}{self.prefix}"
        known = (f"the keys under {where} are {', '.join(sorted(self._read))}" if self._read
                 else f"nothing is read under {where}")
        problems = [f"{where}{key}={self.values[key]!r} is not a known key; "
                    f"{did_you_mean(key, self._read, where) or known}" for key in unknown]
        raise ConfigError("\n".join(problems))
