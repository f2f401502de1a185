"""The pytest plugin (loaded through the ``pytest11`` entry point once the package is
installed).

Fixtures:

- ``pgoutput_server``: a ``TestServer`` serving the demo, the probe armed;
- ``pgoutput_proxy``: a ``Proxy`` in front of ``pgoutput_upstream``;
- ``pgoutput_upstream``: the PostgreSQL the proxy stands in front of, from
  ``--pgoutput-upstream`` or ``pgoutput_upstream`` in the ini file, else a throwaway
  cluster for the session (``pgoutput cluster``, from ``--pgoutput-postgres DIR`` or the
  PostgreSQL on ``PATH``); override it in a ``conftest.py`` to return the connection
  string of a PostgreSQL your setup starts.

Custom ones come from ``pgoutput_codec.factories``. Options: ``--pgoutput-exec``,
``--pgoutput-probe``, ``--pgoutput-server-version``, ``--pgoutput-wal-sender-timeout``,
``--pgoutput-startup-timeout``, ``--pgoutput-upstream``, ``--pgoutput-postgres``, each also an ini key with
``_`` (``pgoutput_probe = 0``). A failing test's report carries the log of every server
and proxy its fixtures started.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generator

import pytest

from . import factories
from ._cluster import Cluster
from .errors import StartError
from .proxy import Proxy
from .server import TestServer

if TYPE_CHECKING:
    from pluggy import Result


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pgoutput", "pgoutput-codec's test server and proxy")
    for name, help_text in factories.OPTIONS:
        group.addoption(f"--pgoutput-{name.replace('_', '-')}", dest=f"pgoutput_{name}", default=None, help=help_text)
        parser.addini(f"pgoutput_{name}", help_text, default=None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: "pytest.CallInfo[None]"
) -> Generator[None, "Result[pytest.TestReport]", None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        # A fixture's services are kept on the node of its scope (the test, its module, ...).
        services = [s for node in item.listchain() for s in node.stash.get(factories.SERVICES, [])]
        for service in services:
            report.sections.append((f"pgoutput {service.kind} log ({service!r})", service.log))


@pytest.fixture
def pgoutput_server(request: pytest.FixtureRequest) -> TestServer:
    """A test walsender serving the demo (publication ``demo``), the judge's probe armed;
    connect the consumer under test to ``pgoutput_server.dsn``."""
    return factories.start_server(request)


@pytest.fixture(scope="session")
def pgoutput_upstream(request: pytest.FixtureRequest) -> str:
    """The connection string of the PostgreSQL ``pgoutput_proxy`` stands in front of:
    ``--pgoutput-upstream`` (or the ini's ``pgoutput_upstream``), else a throwaway cluster
    for the session, from ``--pgoutput-postgres DIR`` or the PostgreSQL on ``PATH``."""
    upstream = factories.option(request.config, "upstream")
    if upstream:
        return upstream
    cluster = Cluster(factories.option(request.config, "postgres"),
                      binary=factories.option(request.config, "exec"))
    request.addfinalizer(cluster.stop)
    try:
        cluster.start()
    except StartError as err:
        raise pytest.UsageError(
            f"the pgoutput_proxy fixture needs a PostgreSQL and could not start one ({err}): pass "
            "--pgoutput-upstream DSN or --pgoutput-postgres DIR, or override the pgoutput_upstream fixture"
        ) from err
    assert cluster.dsn is not None
    return cluster.dsn


@pytest.fixture
def pgoutput_proxy(request: pytest.FixtureRequest, pgoutput_upstream: str) -> Proxy:
    """A proxy in front of ``pgoutput_upstream``, the judge's probe armed; connect the
    consumer under test to ``pgoutput_proxy.dsn``."""
    return factories.start_proxy(request, pgoutput_upstream)
