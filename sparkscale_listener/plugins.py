"""Everything a plugin author imports, from one module that stays where it is when the package's
inside moves: the interfaces a module implements, what it is constructed with, the keys it may
declare and the data it receives and returns::

    from sparkscale_listener.plugins import MetricEvaluator, MicroBatchEvaluator, Evaluation

Each name here is the class the autoscaler itself uses (re-exported, not copied): a plugin that
subclasses it fits the configuration's checks (``spark.sparkscale.collector``, ``evaluator``,
``realizer``, ``stateStore``, ``checkers``, ``eventHandlers``; docs/plugins.md).
"""

from .check.checker import CheckContext, CheckResult, ScalingChecker
from .collect.collector import MetricCollector, SparkMetricCollector
from .config.core import AutoscalerConfig
from .config.options import (
    Boolean,
    Choice,
    ConfigError,
    DailyWindows,
    Duration,
    Integer,
    ModuleConfig,
    Names,
    Number,
    Option,
    Text,
)
from .config.plugins import PluginContext
from .decisions import (
    Decision,
    Evaluation,
    Outcome,
    Prediction,
    QueryEvaluation,
    ScalingContext,
    ScalingRecord,
    not_ready,
)
from .evaluator import MetricEvaluator, MicroBatchEvaluator
from .metrics import (
    BatchRecord,
    ClusterMetrics,
    ExecutorInfo,
    InFlightBatch,
    LatestOffsets,
    MetricSample,
    QueryMetrics,
    SourceBacklog,
)
from .observe.events import AutoscalerEvent, EventHandler
from .realize.realizer import ClusterBackend, ExecutorRealizer, RealizationResult, ScalingRealizer
from .state.store import InMemoryStateStore, StateStore

__all__ = [
    "AutoscalerConfig", "AutoscalerEvent", "BatchRecord", "Boolean", "CheckContext", "CheckResult",
    "Choice", "ClusterBackend", "ClusterMetrics", "ConfigError", "DailyWindows", "Decision", "Duration",
    "Evaluation", "EventHandler", "ExecutorInfo", "ExecutorRealizer", "InFlightBatch",
    "InMemoryStateStore", "Integer", "LatestOffsets", "MetricCollector", "MetricEvaluator", "MetricSample",
    "MicroBatchEvaluator", "ModuleConfig", "Names", "Number", "Option", "Outcome", "PluginContext",
    "Prediction", "QueryEvaluation", "QueryMetrics", "RealizationResult", "ScalingChecker",
    "ScalingContext", "ScalingRealizer", "ScalingRecord", "SourceBacklog", "SparkMetricCollector",
    "StateStore", "Text", "not_ready",
]
