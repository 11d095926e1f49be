"""The HTTP endpoint every Slipstream process serves (workers, the join worker, the tuner, the planner
service), on one address ``HOST:PORT`` (``--metrics-addr`` / ``SLIPSTREAM_METRICS_ADDR``):

- ``/metrics``: the process's own Prometheus registry (text format; OpenMetrics when asked);
- ``/healthz``: 200 while the process is live, else 503 with the reason as the body: the process's
  ``alive`` check (``slipstream.streams.heartbeat``: a stalled event loop, a model run past its deadline), or
  200 whenever the HTTP thread answers for a process without one;
- ``/readyz``: 200 once the process says it is ready, else 503 with the reason as the body.

The default address is ``127.0.0.1:0`` (loopback, a free port: several workers share a host);
containers set ``0.0.0.0:9100``. Every registry also gets the process and platform collectors and
``slipstream_build_info{version}``.
"""
from __future__ import annotations

import importlib.metadata
import socket
import threading
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Callable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Gauge, PlatformCollector, ProcessCollector, make_wsgi_app

Ready = Callable[[], "str | None"]  # None when ready, else why not


@dataclass(frozen=True)
class MetricsAddr:
    host: str
    port: int

    def __post_init__(self) -> None:
        if not self.host or not 0 <= self.port <= 65535:
            raise ValueError(f"metrics address {self}: want HOST:PORT with a port in 0..65535")

    @classmethod
    def parse(cls, text: str) -> "MetricsAddr":
        """``HOST:PORT``, ``[v6]:PORT``; port 0 picks a free one."""
        host, sep, port = text.strip().rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"metrics address {text!r}: want HOST:PORT, e.g. 0.0.0.0:9100 or 127.0.0.1:0")
        return cls(host.strip("[]"), int(port))

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


LOCAL = MetricsAddr("127.0.0.1", 0)  # the default: loopback, any free port


def version() -> str:
    try:
        return importlib.metadata.version("slipstream")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def standard_collectors(registry: CollectorRegistry) -> None:
    """Process (CPU, memory, fds, start time) and platform (python_info) collectors, and the build."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    Gauge("slipstream_build_info", "Slipstream build (always 1)", ["version"],
          registry=registry).labels(version()).set(1)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's name
        pass


def wsgi_app(registry: CollectorRegistry, ready: Ready, alive: Ready = lambda: None):
    metrics = make_wsgi_app(registry)

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics(environ, start_response)
        if path == "/healthz":
            why = alive()
            status, body = ("200 OK", "ok\n") if why is None else ("503 Service Unavailable", f"{why}\n")
        elif path == "/readyz":
            why = ready()
            status, body = ("200 OK", "ready\n") if why is None else ("503 Service Unavailable", f"{why}\n")
        else:
            status, body = "404 Not Found", "not found: /metrics, /healthz, /readyz\n"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
        return [body.encode()]

    return app


@dataclass
class Endpoint:
    addr: MetricsAddr  # as bound: the real port when 0 was asked for
    server: WSGIServer

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve(addr: MetricsAddr, registry: CollectorRegistry, ready: Ready = lambda: None,
          alive: Ready = lambda: None) -> Endpoint:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``addr`` from a daemon thread (``ready``
    and ``alive``: None when so, else why not)."""
    family = socket.getaddrinfo(addr.host, addr.port, type=socket.SOCK_STREAM)[0][0]

    class Server(_Server):
        address_family = family

    httpd = make_server(addr.host, addr.port, wsgi_app(registry, ready, alive), Server, handler_class=_Quiet)
    threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True).start()
    return Endpoint(MetricsAddr(addr.host, httpd.server_port), httpd)
