"""Test and demo support that ships with the package: the controllable streaming source
(:mod:`.source`; executors import it, so it must be in the wheel), the demo job's helpers
(:mod:`.demo`) and the jobs the real-Spark tests submit. Nothing here runs in a user's job; the
simulator is :mod:`sparkscale_listener.sim` (the replay uses it too)."""
