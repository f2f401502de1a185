"""``TestServer``: ``pgoutput serve``, the test walsender, as a Python object."""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union, cast

from ._conninfo import conninfo_words, join_conninfo
from ._service import Json, Rule, _fault_arguments, _probe_arguments, _Service

Events = Union[str, "os.PathLike[str]", Sequence[Union[Dict[str, Any], str]], None]

#: The settings given as flags, under their ``pgoutput serve`` names (values in
#: PostgreSQL's units: ``"2s"``, ``"1min"``; a bare number is what postgresql.conf reads).
SETTINGS = (
    "server_version",
    "publication",
    "wal_sender_timeout",
    "authentication_timeout",
    "max_wal_senders",
    "max_replication_slots",
    "checkpoint_interval",
)


class TestServer(_Service):
    """A test walsender: replication clients (psycopg2, pgjdbc, pg_recvlogical, Debezium's
    engine, a PostgreSQL subscriber) connect to ``dsn`` and stream exactly the scripted
    transactions, with the fault rules acting at exact protocol events and the judge
    watching what the consumer confirms.

    ``script`` is a JSON-lines file (as ``pgoutput tail`` records and ``pgoutput decode``
    prints), a list of events (dicts, or JSON strings), or ``None`` for the demo
    (publication ``demo``: inserts, updates, deletes, a truncate, a streamed and a two-phase
    transaction, then one transaction a second). ``config`` is the ``--config`` file's
    content (publications with their tables and columns, settings, ``auth``, faults).
    ``faults`` are rules as ``pgoutput serve --help`` shows them; ``probe`` arms the judge's
    probe (``1``, or ``{"every": 1, "after": 1, "wait_ms": 1000}``). ``user`` and
    ``password`` require SCRAM instead of trusting everyone. The other keywords are
    ``pgoutput serve``'s flags of the same names.

    Use it as a context manager, which always stops the program (and adds its log to an
    exception that leaves the block), or call ``start()`` and ``stop()``::

        with TestServer(script=events, faults=[rule], probe=1) as server:
            run_consumer(server.dsn)
            server.wait_for_flush("app_slot")
            server.assert_no_findings()
    """

    __test__ = False  # not a pytest test class, whatever its name
    kind = "serve"
    _listening = re.compile(r"^pgoutput serve: listening on (\S+); connect with '([^']*)'$", re.M)

    def __init__(
        self,
        script: Events = None,
        *,
        faults: Iterable[Union[Rule, str]] = (),
        probe: Union[None, int, Dict[str, Any]] = None,
        config: Optional[Dict[str, Any]] = None,
        user: Optional[str] = None,
        password: Optional[str] = None,
        server_version: Optional[str] = None,
        publication: Optional[str] = None,
        wal_sender_timeout: Union[None, str, int] = None,
        authentication_timeout: Union[None, str, int] = None,
        max_wal_senders: Optional[int] = None,
        max_replication_slots: Optional[int] = None,
        checkpoint_interval: Union[None, str, int] = None,
        args: Sequence[str] = (),
        binary: Optional[str] = None,
        startup_timeout: float = 30.0,
        env: Optional[Dict[str, str]] = None,
    ) -> None:
        if password is not None and user is None:
            raise ValueError("a password needs a user")
        if user is not None and not password:
            raise ValueError("a user needs a non-empty password (PostgreSQL stores no empty one)")
        env = dict(env or {})
        if password is not None:
            env["PGOUTPUT_SERVE_PASSWORD"] = password  # not on the command line, which ps shows
        super().__init__(binary=binary, startup_timeout=startup_timeout, env=env)
        self._script = script
        self._faults = list(faults)
        self._probe = probe
        self._config = config
        self._user = user
        self._password = password
        self._settings = {
            "server_version": server_version,
            "publication": publication,
            "wal_sender_timeout": wal_sender_timeout,
            "authentication_timeout": authentication_timeout,
            "max_wal_senders": max_wal_senders,
            "max_replication_slots": max_replication_slots,
            "checkpoint_interval": checkpoint_interval,
        }
        self._args = list(args)
        self.dsn = ""

    def _arguments(self, directory: str) -> List[str]:
        arguments: List[str] = []
        script = self._script
        if isinstance(script, (str, os.PathLike)):
            arguments += ["--script", os.fspath(script)]
        elif script is not None:
            path = os.path.join(directory, "script.jsonl")
            with open(path, "w", encoding="utf-8") as out:
                out.write(_json_lines(script))
            arguments += ["--script", path]
        if self._config is not None:
            path = os.path.join(directory, "config.json")
            with open(path, "w", encoding="utf-8") as out:
                json.dump(self._config, out)
            arguments += ["--config", path]
        for name, value in self._settings.items():
            if value is not None:
                arguments += ["--" + name.replace("_", "-"), str(value)]
        if self._user is not None:
            arguments += ["--user", self._user]
        arguments += _fault_arguments(self._faults)
        arguments += _probe_arguments(self._probe)
        return arguments + self._args

    def _started(self, match: "re.Match[str]") -> None:
        words = conninfo_words(match.group(2))
        if self._password is not None:
            words["password"] = self._password
        self.dsn = join_conninfo(words)

    @property
    def url(self) -> str:
        """The connection as a URI (``postgresql://user@127.0.0.1:PORT/postgres``)."""
        words = conninfo_words(self.dsn)
        password = f":{urllib.parse.quote(words['password'], safe='')}" if "password" in words else ""
        user = urllib.parse.quote(words["user"], safe="")
        return f"postgresql://{user}{password}@{self.host}:{self.port}/{urllib.parse.quote(words['dbname'], safe='')}"

    def append(self, events: Union[str, Iterable[Union[Dict[str, Any], str]]]) -> str:
        """Appends events (dicts, JSON strings, or JSON-lines text) to the stream while it
        runs; returns the new WAL end."""
        lines = [events] if isinstance(events, str) else [_json_lines(events)]
        return str(self._request("POST", "/events", lines=lines)["wal_end"])

    def wal_end(self) -> str:
        """The end of the script so far: where a consumer that has everything confirms."""
        # Appending nothing answers the WAL end as it stands.
        return str(self._request("POST", "/events", lines=[""])["wal_end"])

    def clients(self) -> List[Dict[str, Any]]:
        """Each client connection: its commands, START_REPLICATION options, status
        updates (with when each was read), messages sent, reply delays, how it ended."""
        return cast(List[Dict[str, Any]], self._request("GET", "/clients"))

    def shutdown(self) -> None:
        """PostgreSQL's fast shutdown: each walsender sends the rest, waits until its
        client confirmed it, ends the stream; then the program exits."""
        self._request("POST", "/shutdown")


def _json_lines(events: Iterable[Json]) -> str:
    lines = []
    for event in events:
        text = event if isinstance(event, str) else json.dumps(event)
        lines.append(text.rstrip("\n") + "\n")
    return "".join(lines)
