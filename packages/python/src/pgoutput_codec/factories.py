"""Fixture factories, as pytest-postgresql has them: a fixture of your own with a script,
faults or settings, in a ``conftest.py`` or a test module::

    from pgoutput_codec import factories

    orders_server = factories.server(script="tests/orders.jsonl", probe=1,
                                     faults=[{"when": {"on": "commit", "transaction": 2},
                                              "then": {"do": "reset"}}])
    orders_proxy = factories.proxy(faults=[...])   # upstream: the pgoutput_upstream fixture

Each keyword left out comes from the command line (``--pgoutput-probe``, ...), then the
ini file (``pgoutput_probe = 1``), then the default, as the plugin's own fixtures take them.
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional

import pytest

from ._service import _Service
from .proxy import Proxy
from .server import TestServer

#: A fixture's scope, as ``pytest.fixture`` takes it.
Scope = Literal["session", "package", "module", "class", "function"]

#: The plugin's options: (name, help). ``--pgoutput-NAME`` on the command line,
#: ``pgoutput_NAME`` in the ini file.
OPTIONS = (
    ("exec", "the pgoutput program (default: the one this package installed, or PGOUTPUT_BINARY)"),
    ("probe", "arm the judge's probe: hold one transaction in N (default: 1; 0 leaves it off)"),
    ("server_version", "the server_version the test server announces (default: 18.6)"),
    ("wal_sender_timeout", "the test server's wal_sender_timeout (default: 60s)"),
    ("startup_timeout", "seconds to wait for a server or proxy to listen (default: 30)"),
    ("upstream", "the PostgreSQL the proxy fixture stands in front of (a connection string; "
                 "default: a throwaway cluster)"),
    ("postgres", "the PostgreSQL installation (bin directory) of that throwaway cluster "
                 "(default: the one on PATH)"),
)


def option(config: pytest.Config, name: str) -> Optional[str]:
    """An option's value: the command line's, else the ini file's, else ``None``."""
    value = config.getoption(f"pgoutput_{name}", default=None)
    if value is None:
        value = config.getini(f"pgoutput_{name}") or None
    return None if value is None else str(value)


def _common(config: pytest.Config, chosen: Dict[str, Any]) -> Dict[str, Any]:
    probe = chosen.pop("probe", None)
    if probe is None:
        probe = int(option(config, "probe") or 1)
    if probe == 0:
        probe = None
    binary = chosen.pop("binary", None) or option(config, "exec")
    startup = chosen.pop("startup_timeout", None) or float(option(config, "startup_timeout") or 30)
    return dict(chosen, probe=probe, binary=binary, startup_timeout=startup)


#: The servers and proxies a node's fixtures started, for the report of a failing test.
SERVICES = pytest.StashKey[List[_Service]]()


def _reporting(request: pytest.FixtureRequest, service: _Service) -> None:
    """Registers the service so a failing test's report carries its log."""
    request.node.stash.setdefault(SERVICES, []).append(service)


def start_server(request: pytest.FixtureRequest, **chosen: Any) -> TestServer:
    """A started ``TestServer`` with ``chosen`` keywords over the plugin's options,
    stopped when the fixture's scope ends."""
    config = request.config
    for name in ("server_version", "wal_sender_timeout"):
        if chosen.get(name) is None and option(config, name) is not None:
            chosen[name] = option(config, name)
    server = TestServer(**_common(config, chosen))
    request.addfinalizer(server.stop)
    _reporting(request, server)
    return server.start()


def start_proxy(request: pytest.FixtureRequest, upstream: Optional[str] = None, **chosen: Any) -> Proxy:
    """A started ``Proxy`` in front of ``upstream`` (default: the ``pgoutput_upstream``
    fixture), stopped when the fixture's scope ends."""
    if upstream is None:
        upstream = request.getfixturevalue("pgoutput_upstream")
    proxy = Proxy(upstream, **_common(request.config, chosen))
    request.addfinalizer(proxy.stop)
    _reporting(request, proxy)
    return proxy.start()


def server(*, scope: Scope = "function", **keywords: Any) -> Any:
    """A fixture (assign it to a module-level name) giving a started
    ``TestServer(**keywords)`` (see its documentation)."""

    @pytest.fixture(scope=scope)
    def fixture(request: pytest.FixtureRequest) -> TestServer:
        return start_server(request, **keywords)

    return fixture


def proxy(*, upstream: Optional[str] = None, scope: Scope = "function", **keywords: Any) -> Any:
    """A fixture (assign it to a module-level name) giving a started ``Proxy(upstream,
    **keywords)``; without ``upstream``, in front of the ``pgoutput_upstream`` fixture's
    PostgreSQL."""

    @pytest.fixture(scope=scope)
    def fixture(request: pytest.FixtureRequest) -> Proxy:
        return start_proxy(request, upstream, **keywords)

    return fixture
