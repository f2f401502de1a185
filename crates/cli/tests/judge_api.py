"""The judge of `pgoutput serve`, driven from Python (psycopg2 and urllib alone) through its
control API: with the probe armed in one line (`POST /probe {"every": 1}`) and the server
at full speed, a consumer that confirms a transaction's commit position at its Begin is
caught in each of 20 runs and a correct one has no finding in each of 20; a correct
consumer recovering from a close before its first status update, a mid-frame reset and a
crash that sends confirmed transactions again has none either; a consumer that confirms
only transactions leaves its slot behind while idle, one that stops reading past
wal_sender_timeout leaves a reply request unanswered; a START_REPLICATION behind what was
confirmed is a fact. Prints a JSON summary.

    python3 judge_api.py DSN CONTROL_URL
"""

import json
import select
import struct
import sys
import time

import psycopg2
import psycopg2.extras

from control_client import Control, lsn_text, lsn_value

DSN, api = sys.argv[1], Control(sys.argv[2])
TRANSACTIONS = 3


def findings(slot):
    status, all_findings = api("GET", "/findings")
    assert status == 200, all_findings
    return [f for f in all_findings if f["slot"] == slot]


def facts(slot):
    status, all_facts = api("GET", "/facts")
    assert status == 200, all_facts
    return [f for f in all_facts if f["slot"] == slot]


def wait_until(check, what, seconds=20):
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class Consumer:
    """Applies each transaction at its Commit and confirms its end; skips one sent again
    (by its end LSN); while nothing is open, confirms the WAL end the server reports
    (`cursor.wal_end`). The subclasses each do one thing wrong."""

    def __init__(self, slot, start_lsn=0):
        self.slot = slot
        self.start_lsn = start_lsn
        self.applied = []
        self.skipped = []
        self.open = False
        self.confirmed = 0
        self.disconnects = 0
        self.dropped = None  # what psycopg2 raised when the server last dropped it
        self.conn = None
        self.cur = None

    def connect(self, create=False):
        self.conn = psycopg2.connect(DSN, connection_factory=psycopg2.extras.LogicalReplicationConnection)
        self.cur = self.conn.cursor()
        if create:
            self.cur.create_replication_slot(self.slot, output_plugin="pgoutput")
        self.cur.start_replication(slot_name=self.slot, decode=False, start_lsn=self.start_lsn,
                                   options={"proto_version": "1", "publication_names": "p"})
        self.open = False
        return self

    def close(self):
        self.conn.close()

    def confirm(self, lsn):
        self.confirmed = max(self.confirmed, lsn)
        self.cur.send_feedback(write_lsn=self.confirmed, flush_lsn=self.confirmed, force=True)

    def begin(self, final_lsn):
        pass

    def commit(self, end):
        self.confirm(end)

    def idle(self):
        if self.cur.wal_end > self.confirmed:
            self.confirm(self.cur.wal_end)

    def handle(self, msg):
        tag = msg.payload[:1]
        if tag == b"B":
            self.open = True
            (final_lsn,) = struct.unpack(">Q", msg.payload[1:9])
            self.begin(final_lsn)
        elif tag == b"C":
            self.open = False
            (end,) = struct.unpack(">Q", msg.payload[10:18])
            if self.applied and end <= self.applied[-1]:
                self.skipped.append(end)
            else:
                self.applied.append(end)
            self.commit(end)

    def run_until(self, done, seconds=30, reconnect=False):
        """Reads until done(); reconnects when the server drops it, or (without
        `reconnect`) returns True then."""
        deadline = time.monotonic() + seconds
        while not done():
            assert time.monotonic() < deadline, f"{self.slot}: timed out, applied {self.applied}"
            try:
                msg = self.cur.read_message()
                if msg is not None:
                    self.handle(msg)
                    continue
                if not self.open:
                    self.idle()
                select.select([self.cur], [], [], 0.02)
            except psycopg2.Error as e:
                self.dropped = str(e)
                if not reconnect:
                    return True
                self.disconnects += 1
                self.reconnect(deadline)
        return False

    def reconnect(self, deadline):
        while True:
            time.sleep(0.05)
            try:
                self.connect()
                return
            except psycopg2.OperationalError:
                assert time.monotonic() < deadline, f"{self.slot}: cannot reconnect"


class ConfirmsAtBegin(Consumer):
    """The bug of pglogrepl#40 and debezium#7531: a position past a transaction's commit
    (one past the commit position its Begin announces), confirmed before the rest came: a
    restart there skips the transaction."""

    def begin(self, final_lsn):
        self.confirm(final_lsn + 1)


class ConfirmsOnlyTransactions(Consumer):
    """Never confirms a keepalive's WAL end itself; psycopg2 does it for a consumer that
    has confirmed the last message it got (its flush position follows the keepalive's
    WAL end then), so this one is correct."""

    def idle(self):
        pass


class ConfirmsOnNextBegin(ConfirmsOnlyTransactions):
    """The bug of supabase/etl#429, debezium#6881, epgsql#306 in a batching consumer: a
    transaction is confirmed when the next one begins, so the last one never is while
    nothing more is published, and the slot stays behind the moving WAL end."""

    def begin(self, final_lsn):
        if self.applied:
            self.confirm(self.applied[-1])

    def commit(self, end):
        pass


class ConfirmsCommitLsn(ConfirmsOnlyTransactions):
    """Confirms the Commit's commit_lsn (where the commit record starts) instead of its
    end_lsn (stasvo on jackc/pglogrepl#40): the slot stays inside the last transaction,
    which PostgreSQL sends again after any restart."""

    def commit(self, end):
        pass

    def handle(self, msg):
        super().handle(msg)
        if msg.payload[:1] == b"C":
            (commit_lsn,) = struct.unpack(">Q", msg.payload[2:10])
            self.confirm(commit_lsn)


class StopsReading(Consumer):
    """Busy in its own work for longer than wal_sender_timeout, reading nothing."""

    def begin(self, final_lsn):
        time.sleep(4)


def commits_of(consumer, n):
    return lambda: len(consumer.applied) >= n


def main():
    summary = {}
    status, index = api("GET", "/")
    assert status == 200 and {"GET /findings", "GET /facts", "POST /probe"} <= set(index["endpoints"]), index

    # The one line the docs lead with.
    status, probe = api("POST", "/probe", {"every": 1})
    assert status == 200 and probe == {"every": 1, "after": 1, "wait_ms": 1000}, probe

    caught = 0
    for run in range(20):
        consumer = ConfirmsAtBegin(f"early_{run}").connect(create=True)
        consumer.run_until(commits_of(consumer, TRANSACTIONS))
        consumer.close()
        kinds = [f["finding"] for f in findings(consumer.slot)]
        caught += "confirmed_unsent" in kinds
    summary["confirm_at_begin_caught"] = caught

    clean = 0
    for run in range(20):
        consumer = Consumer(f"good_{run}").connect(create=True)
        consumer.run_until(commits_of(consumer, TRANSACTIONS))
        # Without an lsn, /wait waits for the WAL end.
        status, waited = api("POST", "/wait", {"slot": consumer.slot, "timeout_ms": 10000})
        assert status == 200, waited
        consumer.close()
        clean += findings(consumer.slot) == []
    summary["correct_clean"] = clean
    status, slots = api("GET", "/slots")
    good = next(s for s in slots if s["name"] == "good_0")
    assert good["wal_end"] == good["confirmed_flush_lsn"] == good["sent_lsn"], good
    assert good["probes"] >= TRANSACTIONS and good["probes_answered"] >= TRANSACTIONS, good

    # A START_REPLICATION behind what the consumer confirmed: a fact, no finding.
    first_start = next(f for f in facts("good_0") if f["fact"] == "started")
    behind = Consumer("good_0", start_lsn=0x10).connect()
    behind.run_until(lambda: behind.cur.wal_end >= 1 and behind.confirmed >= behind.cur.wal_end)
    behind.close()
    wait_until(lambda: [f for f in facts("good_0") if f["fact"] == "started" and f["behind"]], "the start behind")
    assert findings("good_0") == [], findings("good_0")
    assert first_start["behind"] is False

    # A correct consumer through a close before its first status update, a reset in the
    # middle of a frame, and a crash that sends again what it had confirmed.
    for rule in [
        {"when": {"on": "message", "n": 2}, "then": {"do": "close"}, "slot": "faulty", "connection": 1},
        {"when": {"on": "message", "n": 5, "byte": 7}, "then": {"do": "reset"}, "slot": "faulty", "connection": 2},
    ]:
        assert api("POST", "/faults", rule)[0] == 201
    consumer = Consumer("faulty").connect(create=True)
    consumer.run_until(commits_of(consumer, TRANSACTIONS), reconnect=True)
    assert api("POST", "/wait", {"slot": "faulty", "timeout_ms": 10000})[0] == 200
    assert api("POST", "/crash")[0] == 200
    consumer.run_until(lambda: len(consumer.skipped) >= TRANSACTIONS, reconnect=True)
    assert api("POST", "/wait", {"slot": "faulty", "timeout_ms": 10000})[0] == 200
    consumer.close()
    assert consumer.disconnects == 3, consumer.disconnects
    wait_until(lambda: any(f["fact"] == "ended" and f["how"] == "client" for f in facts("faulty")), "the end")
    assert findings("faulty") == [], findings("faulty")
    endings = [f["how"] for f in facts("faulty") if f["fact"] == "ended"]
    assert endings == ["fault", "fault", "crash", "client"], endings
    resent = [f for f in facts("faulty") if f["fact"] == "resent"]
    assert len(resent) == 1 and resent[0]["count"] == TRANSACTIONS, resent
    summary["faulty_clean"] = True

    # Idle: the WAL end moves with nothing to send (a keepalive line, as a recording
    # holds one); the probe asks at the new end, twice.
    status, slots = api("GET", "/slots")
    moved = lsn_text(lsn_value(slots[0]["wal_end"]) + 0x1000)
    status, appended = api("POST", "/events", lines=[{"type": "keepalive", "wal_end": moved}])
    assert status == 200 and appended["wal_end"] == moved, appended
    idle = {}
    for kind, want in [(ConfirmsOnNextBegin, "not_advanced_while_idle"),
                       (ConfirmsCommitLsn, "stuck_inside_transaction"),
                       (ConfirmsOnlyTransactions, None), (Consumer, None)]:
        consumer = kind(kind.__name__.lower()).connect(create=True)
        consumer.run_until(commits_of(consumer, TRANSACTIONS))
        if want is None:
            consumer.run_until(lambda: api("POST", "/wait", {"slot": consumer.slot, "timeout_ms": 100})[0] == 200)
        else:
            consumer.run_until(lambda: findings(consumer.slot))
            assert consumer.dropped is None, (kind.__name__, "dropped before a finding", consumer.dropped,
                                              facts(consumer.slot))
        consumer.close()
        wait_until(lambda: any(f["fact"] == "ended" for f in facts(consumer.slot)), "the end")
        got = findings(consumer.slot)
        if want is None:
            assert got == [], (kind.__name__, got)
        else:
            assert [f["finding"] for f in got] == [want], (kind.__name__, got, facts(consumer.slot))
        idle[kind.__name__] = got[0]["text"] if got else "clean"
    summary["idle"] = idle

    # Reading nothing past wal_sender_timeout: the reply request goes unanswered.
    stuck = StopsReading("stuck").connect(create=True)
    assert stuck.run_until(lambda: False, seconds=30), "the server dropped it"
    stuck.close()
    late = wait_until(lambda: [f for f in findings("stuck") if f["finding"] == "no_timely_reply"], "no_timely_reply")
    assert late[0]["waited_ms"] >= 1000, late
    assert any(f["fact"] == "ended" and f["how"] == "timeout" for f in facts("stuck")), facts("stuck")
    summary["stuck"] = late[0]["finding"]

    print(json.dumps(summary))


main()
