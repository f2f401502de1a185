"""The suite's setup: a PostgreSQL 15 for the proxy fixture to stand in front of (from
``PGOUTPUT_PG15_BIN``, as the Rust suite's live tests take it), and the scripted stream
the test server serves."""

import os
import pwd
import shutil
import socket
import subprocess
import tempfile

import psycopg2
import pytest

pytest_plugins = ["pytester"]

#: Table t (id int4 key, v text) in publication p, as the server's --config declares it.
CONFIG = {
    "publications": [{"name": "p", "tables": [{
        "oid": 16385, "name": "t",
        "columns": [{"name": "id", "type_oid": 23, "key": True}, {"name": "v", "type_oid": 25}],
    }]}],
}


def transactions(count, first_id=1):
    """``count`` scripted transactions of two inserts each, ids from ``first_id``."""
    events = []
    for t in range(count):
        events.append({"type": "begin"})
        for r in range(2):
            id_ = first_id + 2 * t + r
            events.append({"type": "insert", "relation_oid": 16385,
                           "new_tuple": [{"text": str(id_)}, {"text": f"v{id_}"}]})
        events.append({"type": "commit"})
    return events


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def postgres15():
    """A PostgreSQL 15 with logical replication on 127.0.0.1, table ``t`` and publication
    ``p``; its connection string. PostgreSQL refuses to run as root: as root, it runs as
    the ``postgres`` user Debian's package made."""
    bin_dir = os.environ.get("PGOUTPUT_PG15_BIN")
    if not bin_dir:
        pytest.fail("PGOUTPUT_PG15_BIN must name PostgreSQL 15's bin directory (scripts/install-postgres prints it)")
    user = "postgres" if os.geteuid() == 0 else None
    root = tempfile.mkdtemp(prefix="pgoutput-py-pg15-")
    data = os.path.join(root, "data")
    if user:
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)

    def run(*command):
        subprocess.run(command, check=True, user=user, cwd=root, capture_output=True)

    port = _free_port()
    run(os.path.join(bin_dir, "initdb"), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "-N", "-D", data)
    with open(os.path.join(data, "postgresql.conf"), "a") as conf:
        conf.write(f"listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{root}'\n"
                   "wal_level = logical\nmax_replication_slots = 20\nmax_wal_senders = 20\n"
                   "fsync = off\nsynchronous_commit = off\nshared_buffers = 16MB\n")
    run(os.path.join(bin_dir, "pg_ctl"), "-D", data, "-l", os.path.join(root, "log"), "-w", "start")
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    try:
        with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id int PRIMARY KEY, v text); CREATE PUBLICATION p FOR TABLE t")
        yield dsn
    finally:
        run(os.path.join(bin_dir, "pg_ctl"), "-D", data, "-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pgoutput_upstream(postgres15):
    """The plugin's proxy fixture stands in front of the PostgreSQL 15 above."""
    return postgres15
