"""The type hints as a typed test suite uses them: checked with ``mypy --strict`` against the
installed package by scripts/test-packages, never run (pytest collects only ``test_*.py``)."""

from typing import Any, Dict, List, Optional

import pytest

from pgoutput_codec import (
    ControlError,
    FindingsError,
    Proxy,
    TestServer,
    WaitTimeout,
    find_binary,
    lsn_to_int,
    lsn_to_text,
)
from pgoutput_codec import factories

orders_server = factories.server(script=[{"type": "begin"}, {"type": "commit"}], probe=1, scope="module")
orders_proxy = factories.proxy(upstream="host=127.0.0.1 dbname=app", scope="session")


def uses_the_server(pgoutput_server: TestServer) -> None:
    dsn: str = pgoutput_server.dsn
    url: str = pgoutput_server.url
    end: str = pgoutput_server.append([{"type": "begin"}, '{"type": "commit"}'])
    assert lsn_to_int(end) >= lsn_to_int(pgoutput_server.wal_end())
    armed: int = pgoutput_server.add_faults({"when": {"on": "commit", "transaction": 2}, "then": {"do": "reset"}})
    fired: List[int] = [rule["fired"] for rule in pgoutput_server.faults()]
    confirmed: str = pgoutput_server.wait_for_flush("app", end, timeout=5.0)
    findings: List[Dict[str, Any]] = pgoutput_server.findings("app")
    probe: Optional[Dict[str, Any]] = pgoutput_server.probe()
    pgoutput_server.set_probe(every=1, after=1, wait_ms=500)
    pgoutput_server.clear_probe()
    pgoutput_server.checkpoint()
    pgoutput_server.crash()
    pgoutput_server.hold_slot("app", 100)
    pgoutput_server.invalidate_slot("app")
    pgoutput_server.drop_slot("app")
    pgoutput_server.clear_faults()
    pgoutput_server.slot("app")["confirmed_flush_lsn"]
    pgoutput_server.clients()
    pgoutput_server.facts()
    try:
        pgoutput_server.assert_no_findings()
    except FindingsError as error:
        assert error.findings
    except WaitTimeout as timeout:
        print(timeout.confirmed_flush_lsn)
    except ControlError as error:
        print(error.status + 1, error.reason)
    pgoutput_server.shutdown()
    print(dsn, url, armed, fired, confirmed, findings, probe, lsn_to_text(0), find_binary())


def uses_the_context_managers() -> None:
    with TestServer(faults=['{"when": {"on": "begin"}, "then": {"do": "close"}}'], wal_sender_timeout="2s") as server:
        port: int = server.port
        log: str = server.log
        code: Optional[int] = server.returncode
        print(port, log, code, server.running)
    with Proxy("postgresql://postgres@127.0.0.1/app", probe={"every": 1}) as proxy:
        proxy_dsn: str = proxy.conninfo(user="app", application_name="test")
        notes: List[str] = proxy.notes()
        connections: List[Dict[str, Any]] = proxy.connections()
        print(proxy_dsn, notes, connections, proxy.upstream)
    started: TestServer = TestServer().start()
    started.stop()


def test_uses_a_factory(request: pytest.FixtureRequest) -> None:
    server: TestServer = factories.start_server(request, probe=0)
    proxy: Proxy = factories.start_proxy(request, "host=127.0.0.1 dbname=app")
    print(server, proxy)


def uses_the_trial(upstream: str) -> None:
    from pgoutput_codec import ScenarioResult, TrialFailed, TrialReport, trial

    report: TrialReport = trial(["python3", "consumer.py"], upstream=upstream, scenarios=["baseline"], seed=7)
    worst: str = report.verdict
    code: int = report.exit_code
    baseline: ScenarioResult = report.scenario("baseline")
    kinds: List[str] = baseline.kinds
    replay: str = baseline.replay
    try:
        report.assert_passed(allow_warn=False)
    except TrialFailed as failed:
        again: TrialReport = failed.report
