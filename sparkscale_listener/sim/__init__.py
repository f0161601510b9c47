"""A fluid simulator of micro-batch streaming queries on a pool of executors.

It drives the real control loop (:class:`~sparkscale_listener.control_loop.Autoscaler`: collector,
checkers and rollback guard, evaluator, policy, realizer, events, state store) with simulated time
(a day runs in seconds), so scaling and rollback behaviour can be tested against load traces and
injected faults: steps, noise, backlogs, partition caps, limits, failing executors and queries.

Model, per query: rows arrive at ``load(t)`` (times a noise factor held for ``noise_period_s``)
into the source. A batch starts at the trigger (at once for the default trigger), reads
``min(available, read limit)`` rows, spends ``batch_overhead_s`` on the driver, then runs
``rows x cost_per_row`` slot-seconds of tasks on ``min(its share of the slots, partitions)``
slots. Concurrent queries share the slots max-min fairly; the scheduler fills executors oldest
first. Metrics are produced the way the Spark collector produces them: cumulative counters updated
when a batch completes, the backlog gauge as planned by the latest completed batch
(``latestOffset - endOffset``), busy time including running tasks, executors with their add and
remove times and reasons (``Executor killed by driver.`` for the autoscaler's kills).

Optionally (``SimQuery.task_overhead_s`` / ``executor_overhead_s``) each batch also pays a fixed
task time per task and per executor its tasks land on, whatever its rows: small batches then cost
far more per row than big ones, as on real Spark.

Executors come from :class:`SimCluster` (:mod:`.cluster`), with a provisioning delay and Spark's
target semantics.

Policies other than the control loop can act on the cluster at their own pace through
``Simulation(on_step=...)`` (called after every step) and :meth:`Simulation.running_batches`.

Fault injection (for the checkers and the rollback guard), each from ``faults_from`` on:

* ``fail_tasks_on_new_executors``: executors launched after ``faults_from`` are bad; every task
  placed on them fails (about one failed attempt per slot-second) and does no useful work. Their
  tasks fail fast, so they look idle when sampled.
* ``executor_start_failure``: executors launched after ``faults_from`` never register, or, with
  ``executor_start_failure_reason``, die right after registering with that reason (the cluster
  manager then launches replacements, which die too).
* ``SimQuery.query_fails_below_executors=n``: the query terminates with an exception as soon as
  fewer than ``n`` executors are live (and stays terminated).
* ``slow_new_executors=f``: executors launched after ``faults_from`` run tasks at ``f`` of the
  speed of the others (a bad host, a throttled container): a scale-up onto them does not deliver
  what the model predicts.

The modules, each importing only those before it: :mod:`.tolerance` (the one float tolerance),
:mod:`.workload` (:class:`SimQuery`, load shapes), :mod:`.results` (what a run records),
:mod:`.slots` (how queries share and use slots), :mod:`.oracle` (the fewest sufficient
executors), :mod:`.cluster` (:class:`SimCluster`), :mod:`.query_state` (a query's source and
batches), :mod:`.simulation` (:class:`Simulation`: the clock that steps the cluster and the
queries together and runs the control loop). The cluster and the queries meet only in
:class:`Simulation`, which places the queries' tasks on the cluster's executors. It is test
support (tests, benchmarks, ``replay``), outside the pipeline's packages.
"""

from .cluster import DECOMMISSIONED, KILLED_BY_DRIVER, SimCluster
from .oracle import aligned_batch_times, smallest_sufficient_executors
from .query_state import IDLE_POLL_S, RECENT_BATCHES
from .results import BatchView, QueryPoint, SimResult, TimelinePoint
from .simulation import (
    FAILED_TASK_S,
    MIN_SUBSTEP_S,
    RecordingEventHandler,
    SimCollector,
    Simulation,
    SimulationError,
)
from .workload import SimQuery, loads_at, step_load

# Every public name the single module sim.py defined, so `from sparkscale_listener.sim import X`
# keeps working for all of them.
__all__ = [
    "DECOMMISSIONED",
    "FAILED_TASK_S",
    "IDLE_POLL_S",
    "KILLED_BY_DRIVER",
    "MIN_SUBSTEP_S",
    "RECENT_BATCHES",
    "BatchView",
    "QueryPoint",
    "RecordingEventHandler",
    "SimCluster",
    "SimCollector",
    "SimQuery",
    "SimResult",
    "Simulation",
    "SimulationError",
    "TimelinePoint",
    "aligned_batch_times",
    "loads_at",
    "smallest_sufficient_executors",
    "step_load",
]
