"""pgoutput-codec for Python test suites: ``TestServer`` (``pgoutput serve``, a test
walsender with faults at exact protocol events and a judge of what the consumer
confirmed) and ``Proxy`` (``pgoutput proxy``, the same in front of a real PostgreSQL),
each a process on free loopback ports driven through its control API; a pytest plugin
with fixtures for both (see ``pgoutput_codec.pytest_plugin``); and ``trial``
(``pgoutput trial``: a consumer run through the catalogue of the field's replication
failures, graded by what it applied)."""

from importlib.metadata import PackageNotFoundError, version

from ._binary import find_binary
from ._cluster import Cluster
from .errors import ControlError, FindingsError, PgoutputError, StartError, WaitTimeout
from .lsn import lsn_to_int, lsn_to_text
from .proxy import Proxy
from .server import TestServer
from ._trial import ScenarioResult, TrialFailed, TrialReport, trial

try:
    __version__ = version("pgoutput-codec")
except PackageNotFoundError:  # pragma: no cover - run from a source tree
    __version__ = "0+unknown"

__all__ = [
    "Cluster",
    "ControlError",
    "FindingsError",
    "PgoutputError",
    "Proxy",
    "ScenarioResult",
    "StartError",
    "TestServer",
    "TrialFailed",
    "TrialReport",
    "WaitTimeout",
    "find_binary",
    "lsn_to_int",
    "lsn_to_text",
    "trial",
]
