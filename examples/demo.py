"""`make demo`: a real Structured Streaming job on a local-cluster that scales up and down.

Prints a timeline (load, backlog, executors, the autoscaler's reason) and a summary. The job itself
is in :mod:`sparkscale_listener.testing.demo`; the line a user adds to their own job is simply::

    spark = autoscale(SparkSession.builder.appName("my-job"))
"""

from sparkscale_listener.testing.demo import run_demo

if __name__ == "__main__":
    raise SystemExit(run_demo())
