"""Configuration: the ``spark.sparkscale.*`` keys (:mod:`.core`), how every key is declared and
parsed (:mod:`.options`), how pluggable modules are loaded (:mod:`.plugins`), and the generated
reference tables (:mod:`.reference`)."""

from .core import AutoscalerConfig
from .options import PREFIX, ConfigError, ModuleConfig, Option

__all__ = ["PREFIX", "AutoscalerConfig", "ConfigError", "ModuleConfig", "Option"]
