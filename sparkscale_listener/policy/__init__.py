"""The scaling policy: from an :class:`Evaluation` to a :class:`Decision`.

The evaluator says how many executors the load needs; the policy decides whether to act on it:
a scale-up once utilization is above ``utilization.max``, a scale-down once fewer executors were
recommended continuously for ``scaleDownInterval`` (the largest recommendation seen is applied, and
neither in backlog mode nor while the load rises), the scale-up / scale-down factors, min / max
executors, and the blocks after an ineffective scale-up. It keeps that
memory between ticks. Recommend mode and excluded periods are the control loop's business: the
policy always says what it would do (``Decision.applied`` stays False).

Every branch of the decision (hold, scale up, delayed scale-down, reactive mode, blocks) is in
:meth:`ScalingPolicy.decide`'s one chain of cases (:mod:`.scaling_policy`), so which case wins is
read in one place; each rule it applies is in :mod:`.rules`, once. For the executor,
:mod:`.changes`: :func:`scaling_record` (what a change is expected to do) and
:func:`in_excluded_period`.
"""

from .changes import in_excluded_period, scaling_record
from .rules import UNBLOCK_LOAD_CHANGE, ScaleDownWindow, ScaleUpBlocks, held_while_learning, within_bounds
from .scaling_policy import ScalingPolicy

__all__ = ["UNBLOCK_LOAD_CHANGE", "ScaleDownWindow", "ScaleUpBlocks", "ScalingPolicy", "held_while_learning",
           "in_excluded_period", "scaling_record", "within_bounds"]
