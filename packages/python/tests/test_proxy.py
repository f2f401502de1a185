"""The proxy fixture in front of the PostgreSQL 15 the setup started: a psycopg2 consumer
through it, its connection reset inside a transaction."""

import psycopg2
import pytest

from consumers import Consumer, ids
from pgoutput_codec import lsn_to_int, lsn_to_text


def test_a_psycopg2_consumer_through_the_proxy_with_a_fault(pgoutput_proxy, postgres15):
    pgoutput_proxy.add_faults({"when": {"on": "change", "transaction": 2, "after": 1},
                               "then": {"do": "reset"}, "slot": "through"})
    consumer = Consumer(pgoutput_proxy.dsn, "through").connect(create=True)
    try:
        with psycopg2.connect(postgres15) as conn, conn.cursor() as cur:
            for t in range(4):
                cur.execute("INSERT INTO t VALUES (%s, 'a'), (%s, 'b')", (100 + 2 * t, 101 + 2 * t))
                conn.commit()
        consumer.run_until(lambda: len(consumer.applied) == 4)
        assert ids(consumer) == [[100, 101], [102, 103], [104, 105], [106, 107]]
        assert consumer.disconnects == 1
        end = lsn_to_text(consumer.last_end())
        assert lsn_to_int(pgoutput_proxy.wait_for_flush("through", end)) >= lsn_to_int(end)
        assert [f["fired"] for f in pgoutput_proxy.faults()] == [1]
        assert any(c["ended"] == "a rule reset it" for c in pgoutput_proxy.connections())
        pgoutput_proxy.assert_no_findings()
    finally:
        consumer.close()
        with psycopg2.connect(postgres15) as conn, conn.cursor() as cur:
            cur.execute("SELECT pg_drop_replication_slot('through') FROM pg_replication_slots "
                        "WHERE slot_name = 'through' AND NOT active")


def test_the_upstream_password_is_in_no_argument_log_or_error(postgres15):
    """The proxy relays each client's login: the upstream's password is not passed to the
    program, so neither ``ps``, its log, the object's repr nor an error shows it."""
    import pathlib

    from pgoutput_codec import ControlError, Proxy

    secret = "hunter2-upstream-secret"
    upstream = postgres15 + f" password={secret}"
    with Proxy(upstream) as proxy:
        pid = proxy._process.pid
        cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().decode()
        assert secret not in cmdline, cmdline
        assert "--upstream" in cmdline
        assert secret in proxy.dsn, "the consumer's connection string keeps it"
        with pytest.raises(ControlError) as error:
            proxy.wait_for_flush("nothing-streams-this", "0/1", timeout=0.1)
        assert secret not in str(error.value), error.value
        assert secret not in repr(proxy)
        assert secret not in proxy.log


def test_without_an_upstream_the_fixture_starts_a_throwaway_cluster(pytester):
    import importlib.metadata
    import os
    import textwrap

    pytester.makepyfile(test_default=textwrap.dedent("""
        import psycopg2

        def test_upstream(pgoutput_upstream, pgoutput_proxy):
            with psycopg2.connect(pgoutput_upstream) as conn, conn.cursor() as cur:
                cur.execute("SHOW wal_level")
                assert cur.fetchone()[0] == "logical"
            with psycopg2.connect(pgoutput_proxy.dsn) as conn, conn.cursor() as cur:
                cur.execute("SELECT 1")
                assert cur.fetchone()[0] == 1
    """))
    # The plugin from the installed package's entry point, or from the source tree.
    installed = any(e.value.startswith("pgoutput_codec") for e in importlib.metadata.entry_points(group="pytest11"))
    plugin = [] if installed else ["-p", "pgoutput_codec.pytest_plugin"]
    result = pytester.runpytest_subprocess(*plugin, "-p", "no:cacheprovider",
                                           "--pgoutput-postgres", os.environ["PGOUTPUT_PG15_BIN"])
    result.assert_outcomes(passed=1)
