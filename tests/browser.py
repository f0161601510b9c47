"""Headless Chromium for the UI tests: one-shot DOM dumps, and a page driven over the DevTools
protocol (to watch the live tab refresh itself, and to take screenshots of a chosen size).

The protocol runs over ``--remote-debugging-pipe`` (NUL-separated JSON on the browser's file
descriptors 3 and 4), so no WebSocket client and no extra package are needed. Every wait is a
condition polled until a deadline.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars")


def require_chromium() -> str:
    """The chromium executable, or skip the test saying how to install it."""
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("chromium is not on PATH: `make browser` (or apt-get install chromium) installs it")
    return path


def run(profile: Path, *args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    """One chromium run (e.g. ``--dump-dom URL``) with its own profile directory."""
    return subprocess.run([require_chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=timeout, check=True)


def dump_dom(profile: Path, url: str) -> str:
    """The DOM after the page loaded and ran its scripts."""
    return run(profile, "--dump-dom", url).stdout


class DevToolsPage:
    """One browser tab driven over the DevTools protocol. Use as a context manager."""

    def __init__(self, profile: Path, width: int = 1280, height: int = 900) -> None:
        chromium = require_chromium()
        pipe_read, self._commands = os.pipe()  # we write commands, the browser reads its fd 3
        self._events, pipe_write = os.pipe()  # the browser writes its fd 4, we read
        # The browser wants the pipe on fds 3 and 4 exactly: bash moves them there, from numbers far
        # enough above (>= 20) that the moves cannot overwrite each other.
        commands_read = fcntl.fcntl(pipe_read, fcntl.F_DUPFD_CLOEXEC, 20)
        events_write = fcntl.fcntl(pipe_write, fcntl.F_DUPFD_CLOEXEC, commands_read + 1)
        os.close(pipe_read)
        os.close(pipe_write)
        self._log = tempfile.TemporaryFile()
        script = f'exec "$0" "$@" 3<&{commands_read} 4>&{events_write} {commands_read}<&- {events_write}>&-'
        try:
            self._proc = subprocess.Popen(
                ["bash", "-c", script, chromium, *FLAGS, f"--user-data-dir={profile}",
                 f"--window-size={width},{height}", "--remote-debugging-pipe", "about:blank"],
                pass_fds=(commands_read, events_write), stdin=subprocess.DEVNULL,
                stdout=self._log, stderr=self._log)
        finally:
            os.close(commands_read)
            os.close(events_write)
        self._buffer = b""
        self._next_id = 0
        self._session: str | None = None
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)

    def __enter__(self) -> DevToolsPage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, method: str, timeout: float = 60.0, **params: Any) -> dict[str, Any]:
        """Call a protocol method (on the page once attached); its result, or raise its error."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self._session is not None and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline, method)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _receive(self, deadline: float, waiting_for: str) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or self._proc.poll() is not None:
                self._log.seek(0)
                tail = self._log.read()[-2000:].decode(errors="replace")
                raise TimeoutError(f"no DevTools answer to {waiting_for} (browser exit code "
                                   f"{self._proc.poll()}): {tail}")
            ready, _, _ = select.select([self._events], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self._events, 1 << 16)
                if not chunk:
                    raise RuntimeError(f"the browser closed its DevTools pipe (waiting for {waiting_for})")
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def open(self, url: str, timeout: float = 60.0) -> None:
        """Navigate and wait until the document has loaded."""
        self.send("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'", timeout,
                      f"{url} to load")

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float, what: str, poll: float = 0.25) -> Any:
        """Poll a JavaScript expression until it is truthy; its value, or TimeoutError naming ``what``."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} ({expression})")
            time.sleep(poll)

    def screenshot(self, path: Path, width: int, height: int) -> bytes:
        """A PNG of the page's top ``width`` x ``height`` CSS pixels."""
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)
        data = base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])
        path.write_bytes(data)
        return data

    def close(self) -> None:
        try:
            if self._proc.poll() is None:
                self.send("Browser.close", timeout=10)
        except (OSError, RuntimeError, TimeoutError):
            pass
        finally:
            for fd in (self._commands, self._events):
                try:
                    os.close(fd)
                except OSError:
                    pass
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=30)
            self._log.close()
