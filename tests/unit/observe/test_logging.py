"""The ``sparkscale`` logger follows Python's library conventions (a NullHandler, nothing else, lines
propagate) and still shows the scaling lines in the driver log while the application configures no
logging, stepping aside as soon as it does. Each case runs in a fresh interpreter: pytest itself
configures the root logger, and these are about what happens when nobody has."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PRELUDE = """
import logging, sys
import sparkscale_listener
from sparkscale_listener.observe.events import AutoscalerEvent, LoggingEventHandler
from sparkscale_listener.observe.logs import show_lines_until_configured
logger = logging.getLogger("sparkscale")

def scaling(n):
    LoggingEventHandler().handle(AutoscalerEvent(0, "scaling", f"line {n}", action="scale_up",
                                                 from_executors=1, to_executors=3))
"""


def run(body: str) -> subprocess.CompletedProcess[str]:
    script = PRELUDE + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def test_the_library_adds_only_a_null_handler_and_lets_lines_propagate() -> None:
    done = run("""
        print([type(h).__name__ for h in logger.handlers], logger.propagate, logger.level,
              logging.getLogger().handlers)
        scaling(1)  # nothing configured and the autoscaler not started: Python's rules, nothing shown
    """)
    assert done.stdout.strip() == "['NullHandler'] True 0 []"
    assert done.stderr == ""


def test_driver_log_shows_each_line_once_until_the_application_configures_logging() -> None:
    done = run("""
        show_lines_until_configured()
        show_lines_until_configured()  # idempotent
        scaling(1)
        # The application configures logging after the autoscaler started: from now on its
        # configuration alone decides, and every line reaches it once.
        logging.basicConfig(level=logging.INFO, format="APP %(levelname)s %(name)s: %(message)s",
                            stream=sys.stdout)
        scaling(2)
        scaling(3)
        print("handlers", [type(h).__name__ for h in logger.handlers], "level", logger.level)
    """)
    err = done.stderr.splitlines()
    assert len(err) == 1 and err[0].endswith(" INFO sparkscale: scale_up 1 -> 3: line 1"), done.stderr
    assert done.stdout.splitlines() == ["APP INFO sparkscale: scale_up 1 -> 3: line 2",
                                        "APP INFO sparkscale: scale_up 1 -> 3: line 3",
                                        "handlers ['NullHandler'] level 0"]


def test_the_applications_levels_decide_once_it_configures_logging() -> None:
    done = run("""
        show_lines_until_configured()
        logging.basicConfig(format="APP %(message)s", stream=sys.stdout)  # WARNING, Python's default
        scaling(1)
        logger.warning("a warning")
    """)
    assert done.stdout.splitlines() == ["APP a warning"] and done.stderr == ""


def test_logging_configured_before_the_autoscaler_starts_is_left_alone() -> None:
    done = run("""
        logging.basicConfig(level=logging.INFO, format="APP %(name)s: %(message)s", stream=sys.stdout)
        show_lines_until_configured()
        scaling(1)
        print([type(h).__name__ for h in logger.handlers], logger.level)
    """)
    assert done.stdout.splitlines() == ["APP sparkscale: scale_up 1 -> 3: line 1", "['NullHandler'] 0"]
    assert done.stderr == ""


def test_a_level_the_application_set_is_kept() -> None:
    done = run("""
        logger.setLevel(logging.WARNING)  # no handler anywhere, but a level
        show_lines_until_configured()
        scaling(1)
        logger.warning("a warning")
        print(logger.level)
    """)
    assert done.stdout.strip() == str(30)
    assert done.stderr.rstrip().endswith("WARNING sparkscale: a warning")
    assert "line 1" not in done.stderr


def test_the_documented_one_liner_shows_the_decisions() -> None:
    done = run("""
        logging.basicConfig(level=logging.INFO, stream=sys.stdout)
        scaling(1)
    """)
    assert done.stdout.strip() == "INFO:sparkscale:scale_up 1 -> 3: line 1"
