"""Variants of the guide's psycopg2 trial consumer, each with one bug of the field's
reports, for the trial's own tests: ``buggy_consumer.py BUG``.

Each variant overrides one method of ``docs/examples/python/trial_consumer.py``'s
``Consumer``; ``pgoutput trial`` must fail (or warn, where the harm is latent) in the
scenario that shows the bug, with the anomaly it causes named.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "docs", "examples", "python"))

import psycopg2  # noqa: E402
import psycopg2.errors  # noqa: E402
import psycopg2.extras  # noqa: E402

from trial_consumer import Consumer, Reader, Silent  # noqa: E402


class Unstreamed(Consumer):
    """Streaming off (protocol 1), as pglogrepl's and pg-logical-replication's examples
    stream: every transaction comes whole, from its Begin to its Commit."""

    def options(self):
        return {"proto_version": "1", "publication_names": self.publication}


class ConfirmsAtBegin(Unstreamed):
    """jackc/pglogrepl#40, debezium#7531: one past the commit position a Begin announces,
    confirmed before the rest of the transaction came."""

    def message(self, data):
        if data[:1] == b"B":
            final_lsn = Reader(data[1:]).u64()
            self.confirm(final_lsn + 1)
        super().message(data)


class AcknowledgesBeforeWriting(Consumer):
    """pgjdbc#3138, feldera#6121: the end confirmed first, the rows written after (here,
    a little later: a kill in between loses them)."""

    def apply(self, lines, end):
        if end > self.applied:
            self.confirm(end)
            time.sleep(0.3)
            self.write(lines, end)


class NeverConfirmsIdle(Consumer):
    """supabase/etl#429, epgsql#306: keepalives answered, their WAL end never confirmed."""

    def idle(self):
        pass


class DropsStreamOnSubAbort(Consumer):
    """Trendyol/go-pq-cdc#166: a subtransaction's Stream Abort drops the whole streamed
    transaction."""

    def stream_abort(self, xid, subxid):
        self.streams.pop(xid, None)


class ExitsOnType(Consumer):
    """wal-listener#57, outboxx#89: a message kind it does not know (Type) is fatal."""

    def message(self, data):
        if data[:1] == b"Y":
            raise SystemExit("unexpected message type Y")
        super().message(data)


class ConfirmsPlusOne(Unstreamed):
    """pg-logical-replication and others: a transaction's end plus one confirmed."""

    def confirm(self, lsn):
        super().confirm(lsn + 1)


class AppliesResent(Consumer):
    """supabase/etl#731: what the server sends again after a crash applied again."""

    def apply(self, lines, end):
        self.applied = 0
        super().apply(lines, end)


class SkipsByChangeLsn(Unstreamed):
    """debezium#7531 (DBZ-1554), debezium#7760: after a restart, a change at or before
    the last change position applied is taken for one applied already, and skipped. A
    transaction that began before another committed has its first changes there."""

    def __init__(self):
        super().__init__()
        self.marks = self.sink_path + ".last-change"
        self.skip_to = int(open(self.marks).read()) if os.path.exists(self.marks) else 0
        self.last_change = self.skip_to

    def receive(self, msg):
        if msg.payload[:1] in (b"I", b"U", b"D"):
            if msg.data_start <= self.skip_to:
                return
            self.last_change = max(self.last_change, msg.data_start)
        super().receive(msg)

    def write(self, lines, end):
        super().write(lines, end)
        # Replaced whole, so that a kill leaves the old mark or the new one.
        with open(self.marks + ".new", "w") as f:
            f.write(str(self.last_change))
            f.flush()
            os.fsync(f.fileno())
        os.replace(self.marks + ".new", self.marks)


class RecreatesMissingSlot(Consumer):
    """xtdb#6076, estuary#1705: a slot that does not exist is made again, and streaming
    goes on from there (past everything committed while it was gone)."""

    def start(self):
        try:
            super().start()
        except psycopg2.errors.UndefinedObject:
            self.cur.connection.close()
            conn = psycopg2.connect(self.dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
            conn.cursor().create_replication_slot(self.slot, output_plugin="pgoutput")
            conn.close()
            super().start()


BUGS = {
    "confirms-at-begin": ConfirmsAtBegin,
    "acknowledges-before-writing": AcknowledgesBeforeWriting,
    "never-confirms-idle": NeverConfirmsIdle,
    "drops-stream-on-subabort": DropsStreamOnSubAbort,
    "exits-on-type": ExitsOnType,
    "confirms-plus-one": ConfirmsPlusOne,
    "applies-resent": AppliesResent,
    "skips-by-change-lsn": SkipsByChangeLsn,
    "recreates-missing-slot": RecreatesMissingSlot,
}

if __name__ == "__main__":
    try:
        BUGS[sys.argv[1]]().run()
    except (psycopg2.Error, Silent) as err:
        print("buggy consumer: %s" % err, file=sys.stderr)
        sys.exit(1)
