"""Test and demo support that ships with the package: the simulator (:mod:`.sim`), the
controllable streaming source (:mod:`.source`; executors import it, so it must be in the wheel)
and the demo job's helpers (:mod:`.demo`). Nothing here runs in a user's job."""
