"""The simulator's one tolerance on times, rows and slots.

Simulated time advances by float sums of steps, so a trigger, a delay or a batch's end lands a hair
off where it is due; every comparison of the simulator allows this much, the same everywhere, so
the modules agree on what is due."""

EPS = 1e-9
