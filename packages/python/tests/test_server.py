"""The test server from pytest: a psycopg2 consumer through a fault, a buggy one caught by
the judge, and what the package says when something goes wrong."""

import os
import shutil
import sys
import textwrap

import psycopg2
import pytest

from conftest import CONFIG, transactions
from consumers import Consumer, ids
from pgoutput_codec import (ControlError, FindingsError, StartError, TestServer, WaitTimeout, factories,
                            find_binary, lsn_to_int, lsn_to_text)

#: The connection is closed after the first change of transaction 2.
CLOSE_IN_TRANSACTION_2 = {"when": {"on": "change", "transaction": 2, "after": 1}, "then": {"do": "close"}, "slot": "py"}

scripted = factories.server(config=CONFIG, script=transactions(4), faults=[CLOSE_IN_TRANSACTION_2])


def test_installed_without_rust():
    # The wheel carries the program: this environment has no Rust toolchain.
    assert shutil.which("cargo") is None and shutil.which("rustc") is None
    assert os.path.realpath(find_binary()).startswith(os.path.realpath(sys.prefix))


def test_a_psycopg2_consumer_through_a_fault_inside_a_transaction(scripted):
    assert scripted.probe() == {"every": 1, "after": 1, "wait_ms": 1000}  # the plugin's default
    consumer = Consumer(scripted.dsn, "py").connect(create=True)
    try:
        consumer.run_until(lambda: len(consumer.applied) == 4)
        assert ids(consumer) == [[1, 2], [3, 4], [5, 6], [7, 8]]
        assert consumer.disconnects == 1
        end = lsn_to_text(consumer.last_end())
        assert end == scripted.wal_end()
        assert scripted.wait_for_flush("py", end) == end
        assert [f["fired"] for f in scripted.faults()] == [1]

        # Appended while it streams: applied and confirmed too.
        wal_end = scripted.append(transactions(1, first_id=9))
        consumer.run_until(lambda: len(consumer.applied) == 5)
        assert ids(consumer)[-1] == [9, 10] and lsn_to_text(consumer.last_end()) == wal_end
        assert scripted.wait_for_flush("py") == wal_end

        assert scripted.slot("py")["confirmed_flush_lsn"] == wal_end
        ended = [f["how"] for f in scripted.facts("py") if f["fact"] == "ended"]
        assert ended == ["fault"]
        scripted.assert_no_findings()
        assert scripted.findings() == []
    finally:
        consumer.close()


def test_a_consumer_confirming_at_begin_fails_assert_no_findings(pytester):
    # The test run that must fail, as a user's suite would hold it.
    pytester.makepyfile(consumers=open(os.path.join(os.path.dirname(__file__), "consumers.py")).read())
    pytester.makepyfile(test_buggy=textwrap.dedent(f"""
        from consumers import ConfirmsAtBegin
        from pgoutput_codec import factories

        server = factories.server(config={CONFIG!r}, script={transactions(3)!r})

        def test_confirms_at_begin(server):
            consumer = ConfirmsAtBegin(server.dsn, "bug").connect(create=True)
            consumer.run_until(lambda: len(consumer.applied) == 3)
            server.wait_for_flush("bug")
            consumer.close()
            server.assert_no_findings()
    """))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*FindingsError: * finding* of pgoutput serve:",
        "*- confirmed_unsent (slot bug): *",
        "*pgoutput serve log*",
    ])


def test_control_errors_carry_the_servers_reason(pgoutput_server):
    with pytest.raises(ControlError) as refused:
        pgoutput_server.hold_slot("nope", 10)
    assert refused.value.status == 404
    assert refused.value.reason == 'replication slot "nope" does not exist'
    with pytest.raises(ControlError) as malformed:
        pgoutput_server.add_faults({"when": {"on": "sometime"}, "then": {"do": "close"}})
    assert malformed.value.status == 400 and "not a fault rule" in malformed.value.reason
    with pytest.raises(WaitTimeout) as waited:
        pgoutput_server.wait_for_flush("nobody", timeout=0.1)
    assert isinstance(waited.value, TimeoutError) and "before the slot existed" in waited.value.reason


def test_a_script_the_server_refuses_is_a_start_error_with_its_log(tmp_path):
    script = tmp_path / "bad.jsonl"
    script.write_text('{"type":"begin"}\n{"type":"insert","relation_oid":999,"new_tuple":[]}\n{"type":"commit"}\n')
    with pytest.raises(StartError) as failed:
        TestServer(script=script).start()
    assert "exited with status" in str(failed.value)
    assert "bad.jsonl" in failed.value.log and "999" in failed.value.log


def test_the_context_manager_always_stops_the_server():
    with pytest.raises(RuntimeError) as raised:
        with TestServer() as server:
            assert server.running and server.dsn.startswith("host=127.0.0.1 port=")
            raise RuntimeError("the consumer broke")
    assert not server.running and server.returncode is not None
    # The log rides along with the exception.
    assert any("pgoutput serve: listening on" in note for note in raised.value.__notes__)
    server.stop()  # twice is fine


def test_scram_and_settings_reach_the_server():
    with TestServer(user="rep", password="s3cret", wal_sender_timeout="2s", server_version="15.8") as server:
        assert server.dsn.endswith(" user=rep password=s3cret")
        assert server.url == f"postgresql://rep:s3cret@127.0.0.1:{server.port}/postgres"
        import psycopg2
        import psycopg2.extras

        conn = psycopg2.connect(server.dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
        try:
            cur = conn.cursor()
            cur.execute("SHOW wal_sender_timeout")
            assert cur.fetchone() == ("2s",)
            assert conn.server_version == 150008
        finally:
            conn.close()
        with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
            psycopg2.connect(
                server.dsn.replace("s3cret", "wrong"),
                connection_factory=psycopg2.extras.LogicalReplicationConnection,
            )


def test_a_password_with_spaces_and_quotes_is_quoted_in_the_dsn_and_url():
    import psycopg2
    import psycopg2.extras

    password = "it's a s\\ecret"
    with TestServer(user="rep", password=password) as server:
        assert server.dsn.endswith(" user=rep password='it\\'s a s\\\\ecret'")
        assert server.url == f"postgresql://rep:it%27s%20a%20s%5Cecret@127.0.0.1:{server.port}/postgres"
        for target in (server.dsn, server.url):
            conn = psycopg2.connect(target, connection_factory=psycopg2.extras.LogicalReplicationConnection)
            try:
                cur = conn.cursor()
                cur.execute("IDENTIFY_SYSTEM")
                assert len(cur.fetchone()) == 4
            finally:
                conn.close()

def test_lsns():
    assert lsn_to_int("16/B374D848") == 0x16B374D848
    assert lsn_to_text(0x16B374D848) == "16/B374D848"
    with pytest.raises(ValueError):
        lsn_to_int("nonsense")


def test_a_crash_takes_the_slot_back_to_its_last_checkpoint():
    with TestServer(config=CONFIG, script=transactions(3)) as server:
        consumer = Consumer(server.dsn, "c").connect(create=True)
        try:
            consumer.run_until(lambda: len(consumer.applied) == 1)
            checkpointed = server.wait_for_flush("c", lsn_to_text(consumer.last_end()))
            server.checkpoint()
            assert server.slot("c")["persisted_lsn"] == checkpointed
            consumer.run_until(lambda: len(consumer.applied) == 3)
            server.wait_for_flush("c", server.wal_end())

            server.crash()
            assert server.slot("c")["confirmed_flush_lsn"] == checkpointed
            # Transactions 2 and 3 come again: the consumer knows them by their end.
            consumer.run_until(lambda: len(consumer.skipped) == 2)
            assert consumer.skipped == [end for end, _ in consumer.applied[1:]]
            assert server.wait_for_flush("c", server.wal_end()) == server.wal_end()
            server.assert_no_findings()
        finally:
            consumer.close()


def test_slot_states_answer_as_postgresql_does():
    with TestServer(config=CONFIG, script=transactions(1)) as server:
        Consumer(server.dsn, "gone").connect(create=True).close()
        server.invalidate_slot("gone")
        with pytest.raises(psycopg2.Error, match='can no longer access replication slot "gone"'):
            Consumer(server.dsn, "gone").connect()
        server.drop_slot("gone")
        assert [slot["name"] for slot in server.slots()] == []


def test_the_readme_example_passes(pytester):
    # The package README's complete test, as a user would paste it.
    readme = open(os.path.join(os.path.dirname(__file__), "..", "README.md")).read()
    example = readme.split("```python\n# test_consumer.py\n", 1)[1].split("```", 1)[0]
    pytester.makepyfile(test_consumer=example)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
