"""The consumers under test: psycopg2 logical replication consumers of publication ``p``
(table ``t (id int, v text)``), as a Python CDC pipeline would be written.

``Consumer`` is correct: it applies a transaction at its Commit and confirms its end,
skips a transaction sent again (by its end LSN), confirms the WAL end of a keepalive
while no transaction is open, and reconnects after a lost connection, resuming where the
slot stands. ``ConfirmsAtBegin`` has the bug of jackc/pglogrepl#40 and debezium#7531: it
confirms a transaction's commit position as soon as its Begin says where it will end."""

import select
import struct
import time

import psycopg2
import psycopg2.extras


class Consumer:
    def __init__(self, dsn, slot, publication="p"):
        self.dsn = dsn
        self.slot = slot
        self.publication = publication
        self.applied = []  # (end_lsn, ids), in order
        self.skipped = []  # end LSNs sent again
        self.pending = None
        self.confirmed = 0
        self.disconnects = 0
        self.conn = None
        self.cur = None

    def connect(self, create=False):
        self.conn = psycopg2.connect(self.dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
        self.cur = self.conn.cursor()
        if create:
            self.cur.create_replication_slot(self.slot, output_plugin="pgoutput")
        # start_lsn 0: where the slot stands, as pg_recvlogical resumes.
        self.cur.start_replication(slot_name=self.slot, decode=False, start_lsn=0,
                                   options={"proto_version": "1", "publication_names": self.publication})
        self.pending = None
        return self

    def close(self):
        if self.conn is not None:
            self.conn.close()

    def confirm(self, lsn):
        self.confirmed = max(self.confirmed, lsn)
        self.cur.send_feedback(write_lsn=self.confirmed, flush_lsn=self.confirmed, force=True)

    def last_end(self):
        return self.applied[-1][0] if self.applied else 0

    def begin(self, final_lsn):
        pass

    def handle(self, msg):
        payload = msg.payload
        tag = payload[:1]
        if tag == b"B":
            self.pending = []
            (final_lsn,) = struct.unpack(">Q", payload[1:9])
            self.begin(final_lsn)
        elif tag == b"I" and self.pending is not None:
            # relation oid, 'N', column count, then the first column: 't', length, text
            pos = 1 + 4 + 1 + 2
            (length,) = struct.unpack(">i", payload[pos + 1:pos + 5])
            self.pending.append(int(payload[pos + 5:pos + 5 + length]))
        elif tag == b"C":
            (end,) = struct.unpack(">Q", payload[10:18])
            if end <= self.last_end():
                self.skipped.append(end)
            else:
                self.applied.append((end, self.pending))
            self.pending = None
            self.confirm(end)

    def run_until(self, done, seconds=60):
        """Reads and applies until ``done()``, reconnecting when the connection is lost
        (a partial transaction is dropped; the server sends it again)."""
        deadline = time.monotonic() + seconds
        while not done():
            assert time.monotonic() < deadline, f"{self.slot}: timed out; applied {self.applied}"
            try:
                msg = self.cur.read_message()
                if msg is not None:
                    self.handle(msg)
                    continue
                if self.pending is None and self.cur.wal_end > self.confirmed:
                    self.confirm(self.cur.wal_end)
                select.select([self.cur], [], [], 0.05)
            except psycopg2.Error:
                self.disconnects += 1
                self.reconnect(deadline)

    def reconnect(self, deadline):
        while True:
            try:
                self.close()
            except psycopg2.Error:
                pass
            time.sleep(0.05)
            try:
                self.connect()
                return
            except psycopg2.OperationalError:
                assert time.monotonic() < deadline, f"{self.slot}: cannot reconnect"


class ConfirmsAtBegin(Consumer):
    # The bug: one past the commit position the Begin announces, confirmed before the
    # rest came (a restart there skips the transaction).
    def begin(self, final_lsn):
        self.confirm(final_lsn + 1)


def ids(consumer):
    return [ids for _, ids in consumer.applied]
