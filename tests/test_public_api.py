"""The user's imports keep working once every submodule has been loaded."""

import importlib
import pkgutil

import sparkscale_listener


def test_autoscale_and_autoscaler_stay_functions_after_all_submodules_load() -> None:
    for module in pkgutil.iter_modules(sparkscale_listener.__path__):
        importlib.import_module(f"sparkscale_listener.{module.name}")
    from sparkscale_listener import autoscale, autoscaler

    assert callable(autoscale) and callable(autoscaler)
    assert autoscaler.__module__ == "sparkscale_listener"
