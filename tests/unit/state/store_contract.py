"""What every state store does, whatever keeps its state: a test class that each store's tests
subclass with a ``store`` fixture (``max_records=5``), as Flink's ``AbstractAutoScalerStateStoreTest``
runs once per store. ``commit()`` comes where the control loop calls it, at the end of a tick: a
store may write then, and must read the same before and after."""

from __future__ import annotations

import threading

import pytest

from sparkscale_listener.state.store import APP_SCOPE, StateStore


class StateStoreContract:
    def test_values_round_trip(self, store: StateStore) -> None:
        assert store.get("app", APP_SCOPE, "target") is None
        store.put("app", APP_SCOPE, "target", 4)
        store.put("app", "q1", "guard", {"blocked": True, "rates": [1.5, 2], "pair": (1, 2), "none": None})
        assert store.get("app", APP_SCOPE, "target") == 4
        store.commit()
        # Same JSON semantics in every store: tuples come back as lists.
        assert store.get("app", "q1", "guard") == {"blocked": True, "rates": [1.5, 2], "pair": [1, 2],
                                                   "none": None}
        store.put("app", APP_SCOPE, "target", 6)  # overwrite
        assert store.get("app", APP_SCOPE, "target") == 6
        store.commit()
        assert store.get("app", APP_SCOPE, "target") == 6
        # Applications and scopes are separate namespaces.
        assert store.get("other", APP_SCOPE, "target") is None
        assert store.get("app", "q2", "guard") is None

    def test_returned_values_are_copies(self, store: StateStore) -> None:
        store.put("app", APP_SCOPE, "k", {"a": [1]})
        got = store.get("app", APP_SCOPE, "k")
        got["a"].append(2)
        assert store.get("app", APP_SCOPE, "k") == {"a": [1]}

    def test_records_newest_last_limited_and_bounded(self, store: StateStore) -> None:
        assert store.records("app", APP_SCOPE, "scaling") == []
        for i in range(4):
            store.append("app", APP_SCOPE, "scaling", {"i": i})
        store.commit()
        for i in range(4, 8):  # max_records=5: the oldest three are dropped
            store.append("app", APP_SCOPE, "scaling", {"i": i})
        store.append("app", APP_SCOPE, "rollback", {"i": 100})
        store.append("app", "q1", "scaling", {"i": 200})
        store.commit()
        assert store.records("app", APP_SCOPE, "scaling") == [{"i": i} for i in range(3, 8)]
        assert store.records("app", APP_SCOPE, "scaling", limit=2) == [{"i": 6}, {"i": 7}]
        assert store.records("app", APP_SCOPE, "scaling", limit=0) == []
        assert store.records("app", APP_SCOPE, "rollback") == [{"i": 100}]
        assert store.records("app", "q1", "scaling") == [{"i": 200}]

    def test_rejects_non_json_values(self, store: StateStore) -> None:
        with pytest.raises(TypeError, match="JSON-able"):
            store.put("app", APP_SCOPE, "k", object())
        with pytest.raises(TypeError, match="dicts"):
            store.append("app", APP_SCOPE, "scaling", [1, 2])  # type: ignore[arg-type]
        assert store.fell_back is None  # a caller's mistake is not a store failure

    def test_closed_store_raises(self, store: StateStore) -> None:
        store.close()
        store.close()  # idempotent
        with pytest.raises(RuntimeError, match="closed"):
            store.get("app", APP_SCOPE, "k")

    def test_threads_share_one_store(self, store: StateStore) -> None:
        def work(n: int) -> None:
            for i in range(50):
                store.put("app", f"q{n}", "i", i)
                store.append("app", f"q{n}", "rows", {"i": i})

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        store.commit()
        for n in range(4):
            assert store.get("app", f"q{n}", "i") == 49
            assert store.records("app", f"q{n}", "rows") == [{"i": i} for i in range(45, 50)]
