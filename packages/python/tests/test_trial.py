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
