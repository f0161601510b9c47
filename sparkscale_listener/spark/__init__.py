"""Spark wiring: the user's one line (:mod:`.session`), the JVM bridge (:mod:`.bridge`), the bridge
jar that fits the running Spark (:mod:`.jars`) and the executor API (:mod:`.backend`)."""
