"""A reconcile loop on a thread: what each controller stand-in on the local plane runs.

A controller reconciles until it is stopped; API errors (conflicts, a kind not served yet) and
connection errors are polled through, as a controller retries them. Anything else ends the loop
and is kept in `error`, which the test reports.

A stand-in that names the collections it reads (`watched`) is woken by a watch on each, as an
informer wakes a controller, and reconciles at once, at most every `interval` seconds; with
nothing changing it reconciles every `idle` seconds, for what no watch shows (time passing). So
its reaction time is the watch's, and a quiet cluster costs the API server almost nothing.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from typing import Any

from tests import control_plane as cp

WATCH_SECONDS = 30  # each watch is ended by the server after this and opened again


class Poller:
    name = "stand-in"
    watched: tuple[str, ...] = ()  # collection paths whose changes wake the loop (see above)
    idle = 1.0  # seconds between two reconciles when no watched collection changes

    def __init__(self, plane: cp.ControlPlane, *, interval: float = 0.2) -> None:
        self.plane = plane
        self.interval = interval
        self.error: BaseException | None = None
        self.last_api_error: cp.ApiError | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._watches = [
            threading.Thread(target=self._watch, args=(path,), name=f"{self.name} watch", daemon=True)
            for path in self.watched
        ]

    def start(self) -> None:
        for watch in self._watches:
            watch.start()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(10)

    def check(self) -> None:
        if self.error is not None:
            raise cp.ControlPlaneError(f"{self.name} failed: {self.error!r}")

    def reconcile(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self._wake.clear()  # a change from here on wakes the next pass
            try:
                self.reconcile()
            except cp.ApiError as err:
                self.last_api_error = err
            except (OSError, cp.ControlPlaneError):
                pass  # the plane is going away, or a transient connection error: poll again
            except BaseException as err:  # reported to the test through `error`
                self.error = err
                return
            if self._watches:
                self._wake.wait(self.idle)
                self._stop.wait(max(0.0, started + self.interval - time.monotonic()))
            else:
                self._stop.wait(self.interval)

    def _watch(self, path: str) -> None:
        """Set `_wake` on every event of a watch on `path`, opening it again until stopped. Opened
        without a resourceVersion, a watch starts with an ADDED event per existing object, so what
        changed between two watches wakes the loop too."""
        while not self._stop.is_set():
            try:
                for _event in self.plane.watch(path, WATCH_SECONDS, self._stop):
                    self._wake.set()
            except (OSError, cp.ControlPlaneError):
                pass  # not served yet, or the plane restarting or going away: open it again
            self._stop.wait(self.interval)


class ServingPoller(Poller):
    """A reconcile loop with an HTTP server beside it (a webhook, a gateway), started and stopped together."""

    server: http.server.HTTPServer

    def start(self) -> None:
        threading.Thread(target=self.server.serve_forever, name=self.name + "-server", daemon=True).start()
        super().start()

    def stop(self) -> None:
        super().stop()
        self.server.shutdown()
        self.server.server_close()


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """A request handler for a stand-in's server: answers JSON, logs nothing."""

    def send_json(self, status: int, document: Any) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass
