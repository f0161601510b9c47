"""Realization: carrying an executor target out on the cluster (:mod:`.realizer`), following the
executors a change asked for until they arrive (:mod:`.provisioning`)."""
