"""Building the checkers named in ``spark.sparkscale.checkers``: built-in names or Python class
paths, each constructed by the plugin convention with its keys under ``checkers.<name>.``."""

from __future__ import annotations

from typing import Any

from ..config.core import BUILTIN_CHECKERS, AutoscalerConfig
from ..config.options import PREFIX, ConfigError
from ..config.plugins import PluginContext, construct, load_class
from ..config.spelling import closest, did_you_mean
from .builtin import BUILTIN_CHECKER_CLASSES
from .checker import CheckContext, CheckResult, ScalingChecker

CHECKERS_KEY = PREFIX + "checkers"
KEYS_PREFIX = "checkers."  # each checker's keys: checkers.<name>.<key>


class _DuckChecker(ScalingChecker):
    """Adapts an object that only has a ``check`` method to the ScalingChecker interface."""

    def __init__(self, context: PluginContext, target: Any, name: str) -> None:
        super().__init__(context)
        self.target = target
        self.name = name
        self.window_s = float(getattr(target, "window_s", 0.0) or 0.0)

    def check(self, context: CheckContext) -> CheckResult:
        return self.target.check(context)


def build_checkers(config: AutoscalerConfig) -> list[ScalingChecker]:
    """The checkers named in ``spark.sparkscale.checkers``, constructed and validated.

    Each entry is a built-in name or the Python path of a class (``package.module.Class``) that
    subclasses :class:`ScalingChecker` or has a callable ``check``. Its keys under
    ``spark.sparkscale.checkers.<name>.`` must all be known to it. Raises :class:`ConfigError`.
    """
    value = config.raw.get("checkers", ",".join(config.checkers))
    accepted = (f"expected comma-separated built-in checker names ({', '.join(BUILTIN_CHECKERS)}) "
                "or importable Python class paths such as mypackage.checks.MyChecker")
    checkers: list[ScalingChecker] = []
    for entry in config.checkers:
        cls = BUILTIN_CHECKER_CLASSES.get(entry) or _import_class(entry, value, accepted)
        # Keys live under checkers.<name>.: the class's `name`, else the class name as written.
        name = getattr(cls, "name", "")
        if not isinstance(name, str) or not name or "." in name:
            name = entry.rpartition(".")[2]
        if any(c.name == name for c in checkers):
            raise ConfigError(f"{CHECKERS_KEY}={value!r} names checker {name!r} twice; {accepted}, "
                              "each once")
        checkers.append(_construct(cls, name, config, value))
    _check_orphan_keys(config, {c.name for c in checkers})
    return checkers


def _import_class(entry: str, value: str, accepted: str) -> type:
    if "." not in entry and ":" not in entry:
        hint = did_you_mean(entry, BUILTIN_CHECKERS)
        raise ConfigError(f"{CHECKERS_KEY}={value!r}: {entry!r} is not a built-in checker nor a "
                          f"class path; {hint or accepted}")
    # The shared loader: nested classes, abstract classes, a missing module told apart from a
    # module that fails to import. Its message names the key and the entry.
    return load_class(CHECKERS_KEY, entry, ScalingChecker, ("check",),
                      accepted_names=BUILTIN_CHECKERS)


def _construct(cls: type, name: str, config: AutoscalerConfig, value: str) -> ScalingChecker:
    context = PluginContext(config, config.module(f"{KEYS_PREFIX}{name}."))
    try:
        plugin = construct(cls, context, CHECKERS_KEY)  # typos under checkers.<name>. fail here
    except ConfigError as e:
        if str(e).startswith(f"{PREFIX}{KEYS_PREFIX}"):
            raise  # a bad checkers.<name>.* value: the message already names the key
        cause = e.__cause__ or e
        raise ConfigError(f"{CHECKERS_KEY}={value!r}: checker {name!r} ({cls.__module__}."
                          f"{cls.__qualname__}) could not be constructed: {type(cause).__name__}: "
                          f"{cause}") from e
    if isinstance(plugin, ScalingChecker):
        if not getattr(plugin, "name", ""):
            plugin.name = name
        return plugin
    return _DuckChecker(context, plugin, name)


def _check_orphan_keys(config: AutoscalerConfig, enabled: set[str]) -> None:
    """Keys under checkers.<name>. for a name that is not enabled: validate a disabled built-in's
    keys (so a typo still fails), reject keys of unknown checkers (a misspelt name)."""
    names = set()
    for key in sorted(config.raw):
        if not key.startswith(KEYS_PREFIX):
            continue
        name, dot, rest = key[len(KEYS_PREFIX):].partition(".")
        if not (name and dot and rest):
            raise ConfigError(f"{PREFIX}{key}={config.raw[key]!r} is not a checker key; expected "
                              f"{PREFIX}{KEYS_PREFIX}<checker name>.<key>")
        names.add(name)
    for name in sorted(names - enabled):
        if name in BUILTIN_CHECKER_CLASSES:
            construct(BUILTIN_CHECKER_CLASSES[name],
                      PluginContext(config, config.module(f"{KEYS_PREFIX}{name}.")))
            continue
        key = next(k for k in sorted(config.raw) if k.startswith(f"{KEYS_PREFIX}{name}."))
        meant = closest(name, [*enabled, *BUILTIN_CHECKERS])
        if meant is not None:
            rest = key[len(KEYS_PREFIX + name):]
            raise ConfigError(f"{PREFIX}{key}={config.raw[key]!r} configures checker {name!r}, which does "
                              f"not exist; did you mean {PREFIX}{KEYS_PREFIX}{meant}{rest}?")
        raise ConfigError(f"{PREFIX}{key}={config.raw[key]!r} configures checker {name!r}, which is "
                          f"neither enabled in {CHECKERS_KEY} ({', '.join(sorted(enabled)) or 'none'})"
                          f" nor built in ({', '.join(BUILTIN_CHECKERS)})")
