"""Where the ``sparkscale`` logger's lines go: every scaling action, rollback, pause and problem is
one line on it.

As a Python library should, the package gives the logger nothing but a ``NullHandler`` (in the
package's ``__init__``) and lets it propagate: the application's logging configuration decides where
the lines go and from which level. To see every decision::

    logging.basicConfig(level=logging.INFO)                  # everything at INFO, or
    logging.getLogger("sparkscale").setLevel(logging.INFO)   # sparkscale's lines, your handlers

One exception, made when the autoscaler starts (:func:`show_lines_until_configured`): a Spark
driver's log is where its users look, and most PySpark jobs configure no Python logging at all, so
Python would drop every INFO line there. If at that moment the application has configured no
logging (no handler on the root logger nor of its own on ``sparkscale``), the ``sparkscale`` logger
gets a stderr handler (the driver log) at INFO, with Spark's line layout. That handler steps aside
the moment the application configures logging, whenever that happens: at the next line it removes
itself and the level it set, the line goes where the application's configuration sends it, and so
do all later ones. It never sets ``propagate=False``, so no configuration made later misses a line
or gets one twice.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

LOGGER_NAME = "sparkscale"
# Spark's own driver log layout (log4j2 "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m"), so our lines read
# like the lines around them: "25/01/31 12:00:00 INFO sparkscale: scale_up 1 -> 3: ...".
LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%y/%m/%d %H:%M:%S"


class _UntilConfigured(logging.StreamHandler):
    """Writes to the current ``sys.stderr`` (as ``logging.lastResort`` does) until the root logger
    has a handler, then removes itself (and the level it set) from the logger."""

    def __init__(self, logger: logging.Logger, set_level: bool) -> None:
        super().__init__()
        self.logger = logger
        self.set_level = set_level
        self.gate = _StepAside(self)
        self.setFormatter(logging.Formatter(LINE_FORMAT, DATE_FORMAT))

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:  # StreamHandler.__init__ assigns it; the property wins
        pass

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:  # configured since (a child logger's line skips the gate)
            self.step_aside()
            return
        super().emit(record)

    def step_aside(self) -> None:
        self.logger.removeHandler(self)
        self.logger.removeFilter(self.gate)
        if self.set_level and self.logger.level == logging.INFO:
            self.logger.setLevel(logging.NOTSET)


class _StepAside(logging.Filter):
    """On the logger, so it runs before any handler: the first line after the application has
    configured logging removes the fallback, and goes on only if the application's levels let it
    (the INFO level the fallback set must not let one line through that they would drop)."""

    def __init__(self, handler: _UntilConfigured) -> None:
        super().__init__()
        self.handler = handler

    def filter(self, record: logging.LogRecord) -> bool:
        if not logging.getLogger().handlers:
            return True
        self.handler.step_aside()
        return record.levelno >= self.handler.logger.getEffectiveLevel()


def configured_by_application(logger: logging.Logger) -> bool:
    """True when the application has set up logging that would show (or deliberately hide) our lines."""
    own = [h for h in logger.handlers if not isinstance(h, (logging.NullHandler, _UntilConfigured))]
    return bool(logging.getLogger().handlers or own)


def show_lines_until_configured() -> None:
    """Called when the autoscaler starts: show the ``sparkscale`` lines at INFO on stderr if, and
    only while, the application has configured no logging (see the module's docstring)."""
    logger = logging.getLogger(LOGGER_NAME)
    if configured_by_application(logger) or any(isinstance(h, _UntilConfigured) for h in logger.handlers):
        return
    set_level = logger.level == logging.NOTSET  # a level the application chose is kept
    handler = _UntilConfigured(logger, set_level)
    logger.addFilter(handler.gate)
    logger.addHandler(handler)
    if set_level:
        logger.setLevel(logging.INFO)
