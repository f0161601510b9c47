"""Collection: one metric sample per control tick (:mod:`.collector`), from the JVM bridge's
snapshot and the streaming progress the :mod:`.progress` recorder keeps, with each source's backlog
parsed by :mod:`.backlog`."""
