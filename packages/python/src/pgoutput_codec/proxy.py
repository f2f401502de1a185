"""``Proxy``: ``pgoutput proxy``, the fault-injecting proxy in front of a real PostgreSQL,
as a Python object."""

from __future__ import annotations

import os
import re
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union, cast

from ._conninfo import conninfo_words, join_conninfo
from ._service import Rule, _fault_arguments, _probe_arguments, _Service


class Proxy(_Service):
    """A proxy between the consumer under test and the PostgreSQL at ``upstream`` (a libpq
    connection string or URI; its host, port, sslmode and TLS settings are used, and each
    client logs in as itself). Everything passes through byte for byte; on replication
    connections the fault rules act at exact protocol events of the real stream and the
    judge watches what the consumer confirms.

    ``dsn`` is ``upstream`` with the proxy's host and port, for the consumer under test;
    ``conninfo(**words)`` the same with other words (``user``, ``dbname``, ...).
    ``checkpoint_interval`` models slot persistence (a crash then makes PostgreSQL send
    again what was confirmed since); ``crash_refusal`` how long new connections get FATAL
    57P03 after a crash.
    """

    kind = "proxy"
    _listening = re.compile(r"^pgoutput proxy: listening on (\S+), upstream ", re.M)

    def __init__(
        self,
        upstream: str,
        *,
        faults: Iterable[Union[Rule, str]] = (),
        probe: Union[None, int, Dict[str, Any]] = None,
        checkpoint_interval: Union[None, str, int] = None,
        crash_refusal: Union[None, str, int] = None,
        tls_cert: Optional[str] = None,
        tls_key: Optional[str] = None,
        args: Sequence[str] = (),
        binary: Optional[str] = None,
        startup_timeout: float = 30.0,
        env: Optional[Dict[str, str]] = None,
    ) -> None:
        if not upstream:
            raise ValueError("the proxy needs an upstream PostgreSQL (a connection string)")
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        super().__init__(binary=binary, startup_timeout=startup_timeout, env=env)
        self.upstream = upstream
        self._faults = list(faults)
        self._probe = probe
        self._options = {"checkpoint_interval": checkpoint_interval, "crash_refusal": crash_refusal,
                         "tls_cert": tls_cert, "tls_key": tls_key}
        self._args = list(args)

    def _arguments(self, directory: str) -> List[str]:
        # The proxy relays each client's own login and needs no password: none goes into
        # its arguments, where `ps` would show it.
        words = {k: v for k, v in conninfo_words(self.upstream).items() if k != "password"}
        arguments = ["--upstream", join_conninfo(words)]
        for name, value in self._options.items():
            if value is not None:
                arguments += ["--" + name.replace("_", "-"), os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
        arguments += _fault_arguments(self._faults)
        arguments += _probe_arguments(self._probe)
        return arguments + self._args

    def conninfo(self, **words: Any) -> str:
        """The upstream's connection words with the proxy's host and port, and ``words``
        on top (``conninfo(user="app", application_name="test")``)."""
        merged = {k: v for k, v in conninfo_words(self.upstream).items()
                  if k not in ("host", "hostaddr", "port")}
        merged.update(host=self.host, port=str(self.port))
        merged.update({k: str(v) for k, v in words.items()})
        return join_conninfo(merged)

    @property
    def dsn(self) -> str:
        """The connection string of the proxy, for the consumer under test."""
        return self.conninfo()

    def connections(self) -> List[Dict[str, Any]]:
        """Each client connection: its peer, user, database, application_name, slot,
        frames, status updates, flush position, and how it ended."""
        return cast(List[Dict[str, Any]], self._request("GET", "/connections"))

    def notes(self) -> List[str]:
        """What the proxy noted (``GET /log``): faults fired, connections ended."""
        return cast(List[str], self._request("GET", "/log"))

