"""Loading user-supplied modules (collector, evaluator, realizer, checkers, state store, event
handlers) from a `spark.sparkscale.*` class path, in the spirit of FLIP-514's pluggable modules.

Everything here runs at startup: any problem becomes a :class:`ConfigError` that names the key,
the value and what is accepted, so a typo in a class path fails the session before the autoscaler
touches the cluster instead of surfacing later as an AttributeError in the control loop.
"""

from __future__ import annotations

import importlib
import inspect
import weakref
from dataclasses import dataclass
from typing import Any

from .core import AutoscalerConfig
from .options import PREFIX, ConfigError, ModuleConfig

# Which key each loaded class came from, so that construct() can name it without the caller
# passing it again (weak: a class that nobody uses any more must not be kept alive by us).
_LOADED_FROM: weakref.WeakKeyDictionary[type, tuple[str, str]] = weakref.WeakKeyDictionary()


def full_key(key: str) -> str:
    """``realizer`` -> ``spark.sparkscale.realizer`` (idempotent)."""
    return key if key.startswith(PREFIX) else PREFIX + key


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def accepted_text(base: type, required_methods: tuple[str, ...] = (),
                  accepted_names: tuple[str, ...] = ()) -> str:
    """What a key accepts, in words, for error messages."""
    example = f"mypkg.module.My{base.__name__}" if base is not object else "mypkg.module.MyClass"
    text = f"an importable Python class path like {example}"
    requirements = []
    if base is not object:
        requirements.append(f"subclasses {_qualname(base)}")
    if required_methods:
        requirements.append(f"defines method{'s' if len(required_methods) > 1 else ''} "
                            f"{', '.join(required_methods)}")
    if requirements:
        text += " that " + " or ".join(requirements)
    if accepted_names:
        text = f"one of {', '.join(accepted_names)}, or {text}"
    return text


def _import_path(path: str) -> tuple[Any | None, str | None, BaseException | None]:
    """Import the longest importable module prefix of ``path`` and walk the rest as attributes.

    Returns (object, None, None) on success, (None, problem, cause) otherwise. Walking attributes
    after the longest module prefix also accepts nested classes (``pkg.mod.Outer.Inner``).
    """
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            # Only "this prefix does not exist" means "try a shorter prefix"; a module that exists
            # but imports something missing is a real error in the user's module.
            if err.name is not None and (module_name == err.name
                                         or module_name.startswith(err.name + ".")):
                continue
            return None, f"importing module {module_name!r} failed: {err!r}", err
        except Exception as err:  # SyntaxError, ImportError, an exception at import time...
            return None, f"importing module {module_name!r} failed: {err!r}", err
        obj: Any = module
        walked = module_name
        for attr in parts[split:]:
            if not hasattr(obj, attr):
                owner = f"module {walked!r}" if walked == module_name else repr(walked)
                return None, f"{owner} has no attribute {attr!r}", None
            obj = getattr(obj, attr)
            walked += "." + attr
        return obj, None, None
    return None, f"no module named {parts[0]!r} could be imported", None


def load_class(key: str, value: str, base: type, required_methods: tuple[str, ...] = (), *,
               accepted_names: tuple[str, ...] = ()) -> type:
    """Import the class named by ``value`` (``package.module.ClassName``) for config key ``key``.

    The class must subclass ``base`` or, duck-typed, define every method in ``required_methods``
    (so user code need not import ours). ``accepted_names`` (e.g. built-in names the caller also
    accepts under that key) only enrich the error message.
    """
    key = full_key(key)
    accepted = accepted_text(base, required_methods, accepted_names)

    def fail(problem: str, cause: BaseException | None = None) -> ConfigError:
        error = ConfigError(f"{key}={value!r}: {problem}; expected {accepted}")
        error.__cause__ = cause
        return error

    path = str(value).strip().replace(":", ".")  # also accept the entry-point style pkg.mod:Class
    parts = path.split(".")
    if len(parts) < 2 or not all(part.isidentifier() for part in parts):
        raise fail("is not a Python class path")
    obj, problem, cause = _import_path(path)
    if problem is not None:
        raise fail(problem, cause)
    if not inspect.isclass(obj):
        raise fail(f"{path!r} is a {type(obj).__name__}, not a class")
    if base is not object and issubclass(obj, base):
        pass
    elif required_methods:
        missing = [m for m in required_methods if not callable(getattr(obj, m, None))]
        if missing:
            subclass = f"does not subclass {_qualname(base)} and " if base is not object else ""
            raise fail(f"{_qualname(obj)} {subclass}is missing method{'s' if len(missing) > 1 else ''} "
                       f"{', '.join(missing)}")
    elif base is not object:
        raise fail(f"{_qualname(obj)} does not subclass {_qualname(base)}")
    if inspect.isabstract(obj):
        abstract = ", ".join(sorted(getattr(obj, "__abstractmethods__", ())))
        raise fail(f"{_qualname(obj)} is abstract (does not implement {abstract})")
    try:
        _LOADED_FROM[obj] = (key, str(value))
    except TypeError:  # a class that cannot be weakly referenced: only the message suffers
        pass
    return obj


@dataclass(frozen=True)
class PluginContext:
    """What every pluggable module is constructed with: ``cls(context)``, or ``cls()`` when its
    constructor takes no argument. That is the one convention for collectors, evaluators,
    realizers, checkers, state stores and event handlers.

    ``options`` holds the module's own keys (under its prefix, e.g. ``checkers.<name>.``); keys
    there that the module does not read fail at startup. The rest is what a module may need:
    the session and the JVM bridge (None in the simulator), the cluster backend (for a
    realizer) and the progress recorder (for a collector).
    """

    config: AutoscalerConfig
    options: ModuleConfig
    spark: Any = None
    bridge: Any = None
    backend: Any = None
    recorder: Any = None


def _takes_context(cls: type) -> bool | None:
    """True: ``cls(context)`` binds; False: only ``cls()`` does; None: neither binds."""
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):  # some C-implemented classes expose no signature: assume ()
        return False
    for takes, args in ((True, (object(),)), (False, ())):
        try:
            signature.bind(*args)
        except TypeError:
            continue
        return takes
    return None


def construct(cls: type, context: PluginContext, key: str | None = None) -> Any:
    """Construct a plugin class by the one convention (see :class:`PluginContext`), then reject
    keys under its prefix that it did not read. Any exception from the constructor becomes a
    :class:`ConfigError` naming the key (``key``, or the one ``cls`` was loaded for by
    :func:`load_class`) and the underlying error."""
    try:
        loaded_key, value = _LOADED_FROM.get(cls, (None, _qualname(cls)))
    except TypeError:  # not weakly referenceable, so never recorded
        loaded_key, value = None, _qualname(cls)
    name = full_key(key) if key else loaded_key or "(plugin)"
    takes = _takes_context(cls)
    if takes is None:
        raise ConfigError(f"{name}={value!r}: the constructor of {_qualname(cls)} accepts neither "
                          "(context) nor (); expected __init__(self, context) or __init__(self)")
    try:
        plugin = cls(context) if takes else cls()
    except ConfigError:
        raise  # a bad value of the module's own key: the message already names it
    except Exception as err:
        raise ConfigError(f"{name}={value!r}: constructing {_qualname(cls)} failed: "
                          f"{type(err).__name__}: {err}") from err
    context.options.check_all_read()
    return plugin
