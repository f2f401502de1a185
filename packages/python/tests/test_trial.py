"""``pgoutput_codec.trial`` against the PostgreSQL 15 the setup started: the guide's
psycopg2 consumer passes, a variant that applies what is sent again fails with the
duplicates named, and the report is what a test asserts on."""

import os
import sys

import pytest

from pgoutput_codec import PgoutputError, TrialFailed, trial

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")
GUIDE = os.path.join(ROOT, "docs", "examples", "python", "trial_consumer.py")
BUGGY = os.path.join(ROOT, "tests", "trial", "buggy_consumer.py")


def test_the_guides_consumer_passes(postgres15, tmp_path):
    junit = tmp_path / "trial.xml"
    report = trial([sys.executable, GUIDE], upstream=postgres15,
                   scenarios=["baseline", "cut-inside-transaction", "crash-resends-confirmed"],
                   junit=str(junit))
    report.assert_passed(allow_warn=False)
    assert [s.name for s in report.scenarios] == ["baseline", "cut-inside-transaction", "crash-resends-confirmed"]
    assert report.verdict == "pass" and report.exit_code == 0
    assert report.scenario("baseline").summary.endswith("applied once each, in order")
    assert 'tests="3" failures="0" errors="0"' in junit.read_text()
    assert "[3/3] crash-resends-confirmed" in report.progress


def test_a_consumer_that_applies_what_is_sent_again_fails_with_the_duplicates(postgres15):
    report = trial([sys.executable, BUGGY, "applies-resent"], upstream=postgres15,
                   scenarios=["baseline", "crash-resends-confirmed"])
    assert report.exit_code == 1 and report.verdict == "fail"
    assert report.scenario("baseline").verdict == "pass"
    crash = report.scenario("crash-resends-confirmed")
    assert crash.verdict == "fail"
    assert set(crash.kinds) == {"duplicated"}, crash.kinds
    duplicate = crash.anomalies[0]
    assert duplicate["transaction"]["number"] == 1 and len(duplicate["lines"]) == 2
    assert "--scenario crash-resends-confirmed" in crash.replay
    with pytest.raises(TrialFailed) as failed:
        report.assert_passed()
    assert "crash-resends-confirmed  fail" in str(failed.value)


def test_a_trial_that_cannot_run_says_why(postgres15):
    with pytest.raises(PgoutputError, match='no scenario "nope"'):
        trial([sys.executable, GUIDE], upstream=postgres15, scenarios=["nope"])


def test_a_postgresql_subscriber_is_graded_by_its_tables(postgres15):
    import psycopg2

    conn = psycopg2.connect(postgres15)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SELECT 1 FROM pg_database WHERE datname = 'pgoutput_trial_py_sink'")
    if cur.fetchone() is None:
        cur.execute("CREATE DATABASE pgoutput_trial_py_sink")
    conn.close()
    sink = postgres15.replace("dbname=postgres", "dbname=pgoutput_trial_py_sink")
    subscriber = os.path.join(ROOT, "docs", "examples", "python", "trial_subscriber.py")
    report = trial([sys.executable, subscriber], upstream=postgres15, sink_database=sink,
                   scenarios=["baseline", "unchanged-toast"])
    report.assert_passed(allow_warn=False)
    assert "the tables of pgoutput_trial_py_sink" in report.scenario("baseline").raw["sink"]
    # The guide's JSON-lines consumer writes nothing to those tables: every row is missing.
    report = trial([sys.executable, GUIDE], upstream=postgres15, sink_database=sink, scenarios=["baseline"])
    assert report.verdict == "fail" and set(report.scenario("baseline").kinds) == {"missing"}


def test_a_consumer_already_running_is_attached_to(postgres15, tmp_path):
    """The guide's consumer under a supervisor of its own (started again whenever it
    exits, as systemd's Restart=always does), started before the trial: attached to, it
    passes, and the scenario that kills it is skipped, with why."""
    import socket
    import subprocess
    import threading

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    user = dict(word.split("=", 1) for word in postgres15.split())["user"]
    sink = str(tmp_path / "sink.jsonl")
    env = dict(os.environ,
               PGOUTPUT_TRIAL_DSN=f"host=127.0.0.1 port={port} user={user} dbname=postgres sslmode=disable",
               PGOUTPUT_TRIAL_SLOT="pgoutput_trial_py", PGOUTPUT_TRIAL_PUBLICATION="pgoutput_trial",
               PGOUTPUT_TRIAL_SINK=sink)
    stop = threading.Event()
    lock = threading.Lock()
    running = []

    def supervise():
        while True:
            with lock:
                if stop.is_set():
                    return
                child = subprocess.Popen([sys.executable, GUIDE], env=env, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
                running[:] = [child]
            child.wait()
            stop.wait(0.1)

    supervisor = threading.Thread(target=supervise)
    supervisor.start()
    try:
        report = trial(None, attach=f"127.0.0.1:{port}", slot="pgoutput_trial_py", sink=sink,
                       upstream=postgres15,
                       scenarios=["baseline", "killed-after-acknowledging", "cut-inside-transaction"])
    finally:
        with lock:
            stop.set()
            for child in running:
                child.kill()
        supervisor.join()
    report.assert_passed(allow_warn=False)
    assert [s.name for s in report.scenarios] == ["baseline", "cut-inside-transaction"]
    assert list(report.skipped) == ["killed-after-acknowledging"]
    assert "attached" in report.skipped["killed-after-acknowledging"]
    with pytest.raises(ValueError, match="not both"):
        trial([sys.executable, GUIDE], attach=f"127.0.0.1:{port}", upstream=postgres15)
