"""Configuration: the ``spark.sparkscale.*`` keys (:mod:`.core`), how every key is declared and
parsed (:mod:`.options`), and how pluggable modules are loaded (:mod:`.plugins`): the ground floor,
importing no other layer. The reference tables generated from these declarations are built by
:mod:`sparkscale_listener.reference`, above every layer whose keys they list."""

from .core import AutoscalerConfig
from .options import PREFIX, ConfigError, ModuleConfig, Option

__all__ = ["PREFIX", "AutoscalerConfig", "ConfigError", "ModuleConfig", "Option"]
