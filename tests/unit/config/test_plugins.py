"""Plugin loader: class paths from configuration, with errors that say what to fix."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import pytest

from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.config.options import ConfigError
from sparkscale_listener.config.plugins import PluginContext, construct, load_class
from sparkscale_listener.observe.events import EventHandler

# A base class the generated plugin module can import whatever the test-module import mode is.
Base = EventHandler
BASE_NAME = "sparkscale_listener.observe.events.EventHandler"

_counter = itertools.count()

def context(config: AutoscalerConfig) -> PluginContext:
    return PluginContext(config, config.module("evaluator."))


PLUGIN_SOURCE = textwrap.dedent("""
    from sparkscale_listener.observe.events import EventHandler as Base

    class Good(Base):
        def __init__(self, context):
            self.config = context.config
        def handle(self, event=None):
            return "good"

    class NoArgs(Base):
        def handle(self, event=None):
            return "noargs"

    class Duck:
        def handle(self, event=None):
            return "duck"

    class Unrelated:
        pass

    class StillAbstract(Base):
        pass

    class Exploding(Base):
        def __init__(self, context):
            raise RuntimeError("no broker at localhost:9092")
        def handle(self, event=None):
            return ""

    class TwoArgs(Base):
        def __init__(self, context, other):
            pass
        def handle(self, event=None):
            return ""

    class Outer:
        class Inner(Base):
            def handle(self, event=None):
                return "inner"

    def a_function():
        pass

    NOT_A_CLASS = 42
""")


@pytest.fixture
def plugin_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh importable module (unique name: importlib caches modules) holding test plugins."""
    name = f"sparkscale_test_plugins_{next(_counter)}"
    (tmp_path / f"{name}.py").write_text(PLUGIN_SOURCE)
    (tmp_path / f"{name}_broken.py").write_text("raise ImportError('needs libfoo')\n")
    (tmp_path / f"{name}_missing_dep.py").write_text("import no_such_dependency_xyz\nclass C: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def assert_names(err: pytest.ExceptionInfo[ConfigError], key: str, value: str, *accepted: str) -> None:
    message = str(err.value)
    assert f"spark.sparkscale.{key}" in message
    assert repr(value) in message
    assert "expected an importable Python class path like" in message
    for text in accepted:
        assert text in message, message


def test_loads_subclass_and_constructs_it_with_the_context(plugin_module: str) -> None:
    cls = load_class("evaluator", f"{plugin_module}.Good", Base)
    config = AutoscalerConfig()
    obj = construct(cls, context(config))
    assert obj.handle() == "good" and obj.config is config


def test_no_arg_constructor_called_without_the_context(plugin_module: str) -> None:
    cls = load_class("realizer", f"{plugin_module}.NoArgs", Base)
    assert construct(cls, context(AutoscalerConfig())).handle() == "noargs"


def test_duck_typed_class_accepted_when_it_has_required_methods(plugin_module: str) -> None:
    cls = load_class("realizer", f"{plugin_module}.Duck", Base, ("handle",))
    assert construct(cls, context(AutoscalerConfig())).handle() == "duck"


def test_nested_class_and_colon_form(plugin_module: str) -> None:
    assert load_class("x.class", f"{plugin_module}.Outer.Inner", Base)().handle() == "inner"
    assert load_class("x.class", f"{plugin_module}:Good", Base).__name__ == "Good"


@pytest.mark.parametrize("value", ["Good", "", "my-pkg.Thing", "pkg..Thing"])
def test_not_a_class_path(value: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_class("realizer", value, Base)
    assert_names(err, "realizer", value, "is not a Python class path", f"subclasses {BASE_NAME}")


def test_module_not_found() -> None:
    value = "no_such_package_xyz.module.Thing"
    with pytest.raises(ConfigError) as err:
        load_class("collector", value, Base)
    assert_names(err, "collector", value, "no module named 'no_such_package_xyz'")


def test_module_that_fails_to_import(plugin_module: str) -> None:
    value = f"{plugin_module}_broken.Thing"
    with pytest.raises(ConfigError) as err:
        load_class("realizer", value, Base)
    assert_names(err, "realizer", value, "importing module", "needs libfoo")


def test_module_with_missing_dependency_is_not_reported_as_missing_module(plugin_module: str) -> None:
    value = f"{plugin_module}_missing_dep.C"
    with pytest.raises(ConfigError) as err:
        load_class("realizer", value, Base)
    assert_names(err, "realizer", value, "importing module", "no_such_dependency_xyz")


def test_attribute_missing(plugin_module: str) -> None:
    value = f"{plugin_module}.Nope"
    with pytest.raises(ConfigError) as err:
        load_class("realizer", value, Base)
    assert_names(err, "realizer", value, f"module {plugin_module!r} has no attribute 'Nope'")


@pytest.mark.parametrize(("attr", "kind"), [("a_function", "function"), ("NOT_A_CLASS", "int")])
def test_not_a_class(plugin_module: str, attr: str, kind: str) -> None:
    value = f"{plugin_module}.{attr}"
    with pytest.raises(ConfigError) as err:
        load_class("checkers", value, Base)
    assert_names(err, "checkers", value, f"is a {kind}, not a class")


def test_not_a_subclass(plugin_module: str) -> None:
    value = f"{plugin_module}.Unrelated"
    with pytest.raises(ConfigError) as err:
        load_class("realizer", value, Base)
    assert_names(err, "realizer", value, f"does not subclass {BASE_NAME}")


def test_not_a_subclass_and_missing_methods(plugin_module: str) -> None:
    value = f"{plugin_module}.Unrelated"
    with pytest.raises(ConfigError) as err:
        load_class("realizer", value, Base, ("handle", "flush"))
    assert_names(err, "realizer", value, "is missing methods handle, flush",
                 f"subclasses {BASE_NAME} or defines methods handle, flush")


def test_abstract_class_rejected(plugin_module: str) -> None:
    value = f"{plugin_module}.StillAbstract"
    with pytest.raises(ConfigError) as err:
        load_class("realizer", value, Base)
    assert_names(err, "realizer", value, "is abstract", "handle")


def test_accepted_names_listed(plugin_module: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_class("stateStore", "no_such_pkg_q.Store", Base, accepted_names=("memory", "sqlite"))
    assert "expected one of memory, sqlite, or an importable Python class path" in str(err.value)


def test_constructor_that_raises(plugin_module: str) -> None:
    value = f"{plugin_module}.Exploding"
    cls = load_class("collector", value, Base)
    with pytest.raises(ConfigError) as err:
        construct(cls, context(AutoscalerConfig()))
    message = str(err.value)
    assert "spark.sparkscale.collector" in message and repr(value) in message
    assert "RuntimeError: no broker at localhost:9092" in message
    assert isinstance(err.value.__cause__, RuntimeError)


def test_constructor_with_wrong_arity(plugin_module: str) -> None:
    cls = load_class("realizer", f"{plugin_module}.TwoArgs", Base)
    with pytest.raises(ConfigError, match=r"spark\.sparkscale\.realizer=.*accepts neither"):
        construct(cls, context(AutoscalerConfig()))


def test_construct_explicit_key_for_class_not_loaded_here() -> None:
    class Local:
        def __init__(self) -> None:
            raise ValueError("bad")

    with pytest.raises(ConfigError, match=r"spark\.sparkscale\.checkers=.*ValueError: bad"):
        construct(Local, context(AutoscalerConfig()), "checkers")


def test_duck_class_missing_one_method(plugin_module: str) -> None:
    value = f"{plugin_module}.Duck"
    with pytest.raises(ConfigError) as err:
        load_class("realizer", value, Base, ("handle", "flush"))
    assert_names(err, "realizer", value, "is missing method flush;")
