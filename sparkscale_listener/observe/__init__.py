"""Observation: what the autoscaler reports: events and their handlers (:mod:`.events`), driver
gauges and the Prometheus endpoint (:mod:`.gauges`), and the tick summaries behind the Autoscaler
tab of the Spark UI and the History Server (:mod:`.ui`)."""
