"""pgoutput-codec for Python test suites: ``TestServer`` (``pgoutput serve``, a test
walsender with faults at exact protocol events and a judge of what the consumer
confirmed) and ``Proxy`` (``pgoutput proxy``, the same in front of a real PostgreSQL),
each a process on free loopback ports driven through its control API; and a pytest
plugin with fixtures for both (see ``pgoutput_codec.pytest_plugin``)."""

from importlib.metadata import PackageNotFoundError, version

from ._binary import find_binary
from .errors import ControlError, FindingsError, PgoutputError, StartError, WaitTimeout
from .lsn import lsn_to_int, lsn_to_text
from .proxy import Proxy
from .server import TestServer

try:
    __version__ = version("pgoutput-codec")
except PackageNotFoundError:  # pragma: no cover - run from a source tree
    __version__ = "0+unknown"

__all__ = [
    "ControlError",
    "FindingsError",
    "PgoutputError",
    "Proxy",
    "StartError",
    "TestServer",
    "WaitTimeout",
    "find_binary",
    "lsn_to_int",
    "lsn_to_text",
]
