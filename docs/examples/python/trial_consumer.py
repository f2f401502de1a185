"""A psycopg2 logical replication consumer, written to pass ``pgoutput trial``.

    pgoutput trial -- python3 docs/examples/python/trial_consumer.py

It streams the slot and publication the trial names (``PGOUTPUT_TRIAL_*``), applies each
transaction at its Commit by appending its row changes to the JSON-lines sink, makes
them durable, and only then confirms the transaction's end. What makes it exact:

- a transaction is applied whole, at its Commit (or Stream Commit), never change by
  change; a Stream Abort drops the subtransaction it names, or the whole transaction;
- each line carries its transaction's end position and the last one says
  ``"commit": true``: at start the sink is cut back to its last whole transaction, and a
  transaction ending at or before that position (sent again after a crash or a kill) is
  skipped, not applied twice;
- the confirmed position is a transaction's end, never a change's position or one more;
- while no transaction is open and everything is applied, the WAL end a keepalive
  reports is confirmed, so the slot advances while only unpublished tables change;
- a connection that falls silent (nothing, not even a keepalive) is asked for a reply
  after half of ``RECEIVE_TIMEOUT`` seconds and given up after all of it, as
  PostgreSQL's walreceiver does with ``wal_receiver_timeout``: a half-open connection
  does not stall it for good;
- a connection lost is left to the caller: it exits non-zero, and the trial (or
  systemd, or Kubernetes) starts it again; a slot still held by the walsender that
  served the lost connection (55006) is tried again for a while.

The ``Consumer`` class has one method per decision, so that a variant with one bug is
a subclass overriding one method (the trial's tests do that).
"""

import json
import os
import select
import struct
import sys
import time

import psycopg2
import psycopg2.errors
import psycopg2.extras


def lsn_text(lsn):
    return "%X/%X" % (lsn >> 32, lsn & 0xFFFFFFFF)


def lsn_value(text):
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


class Reader:
    """The fields of one pgoutput message, read in order."""

    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, n):
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def u8(self):
        return self.take(1)[0]

    def i16(self):
        return struct.unpack(">h", self.take(2))[0]

    def i32(self):
        return struct.unpack(">i", self.take(4))[0]

    def u64(self):
        return struct.unpack(">Q", self.take(8))[0]

    def string(self):
        end = self.data.index(b"\0", self.pos)
        text = self.data[self.pos:end].decode()
        self.pos = end + 1
        return text

    def tuple(self):
        """A TupleData: a value per column; None for NULL, ``UNCHANGED`` for an
        unchanged TOASTed value."""
        values = []
        for _ in range(self.i16()):
            kind = self.take(1)
            if kind == b"n":
                values.append(None)
            elif kind == b"u":
                values.append(UNCHANGED)
            else:
                values.append(self.take(self.i32()).decode())
        return values


UNCHANGED = object()

# Seconds of silence after which the connection is taken for dead (PostgreSQL's
# walreceiver waits wal_receiver_timeout, 60 s by default; a server asked for a reply
# answers at once, so a quiet one is never taken for dead).
RECEIVE_TIMEOUT = 5.0


class Consumer:
    def __init__(self, env=os.environ):
        self.dsn = env["PGOUTPUT_TRIAL_DSN"]
        self.slot = env["PGOUTPUT_TRIAL_SLOT"]
        self.publication = env["PGOUTPUT_TRIAL_PUBLICATION"]
        self.sink_path = env["PGOUTPUT_TRIAL_SINK"]
        self.relations = {}  # oid -> (name, [(column, is_key)])
        self.open = None  # the transaction being read: [(subxid, line)]
        self.streams = {}  # a streamed transaction's xid -> [(subxid, line)]
        self.streaming = None  # the xid of the stream block being read
        self.cur = None
        self.applied = self.recover()

    # -- the sink -----------------------------------------------------------------

    def recover(self):
        """Cuts the sink back to its last whole transaction; returns that one's end."""
        keep, applied = 0, 0
        if os.path.exists(self.sink_path):
            with open(self.sink_path, "rb") as f:
                offset = 0
                for line in f:
                    offset += len(line)
                    if not line.endswith(b"\n"):
                        break
                    record = json.loads(line)
                    if record.get("commit"):
                        keep, applied = offset, lsn_value(record["lsn"])
            with open(self.sink_path, "r+b") as f:
                f.truncate(keep)
        self.sink = open(self.sink_path, "ab")
        return applied

    def apply(self, lines, end):
        """Applies a transaction at its end: durably, then confirmed."""
        if end > self.applied:
            self.write(lines, end)
        # Or sent again (a crash, a restart before the server heard the confirmation):
        # applied already, confirmed again.
        self.confirm(end)

    def write(self, lines, end):
        """Appends a transaction's lines and makes them durable."""
        if lines:
            text = b""
            for i, line in enumerate(lines):
                record = dict(line, lsn=lsn_text(end))
                if i == len(lines) - 1:
                    record["commit"] = True
                text += json.dumps(record).encode() + b"\n"
            self.sink.write(text)
            self.sink.flush()
            os.fsync(self.sink.fileno())
        self.applied = end

    # -- positions ----------------------------------------------------------------

    def confirm(self, lsn):
        self.cur.send_feedback(write_lsn=lsn, flush_lsn=lsn, force=True)

    def idle(self):
        """Nothing came for a while: with no transaction open and all applied, the WAL
        end the server reported is confirmed (the slot advances while idle)."""
        if self.open is None and not self.streams and self.cur.wal_end > self.applied:
            self.applied = self.cur.wal_end
            self.confirm(self.cur.wal_end)

    # -- the messages -------------------------------------------------------------

    def row(self, oid, values):
        name, columns = self.relations[oid]
        key = {c: v for (c, is_key), v in zip(columns, values) if is_key}
        written = {c: v for (c, _), v in zip(columns, values) if v is not UNCHANGED}
        return name, key, written

    def change(self, xid, line):
        if self.streaming is not None:
            self.streams.setdefault(self.streaming, []).append((xid, line))
        else:
            self.open.append((xid, line))

    def receive(self, msg):
        """One message of the stream (``msg.data_start``: the position the server gave
        it)."""
        self.message(msg.payload)

    def message(self, data):
        r = Reader(data)
        tag = r.take(1)
        in_stream = self.streaming is not None
        if tag == b"B":
            r.u64()  # final LSN
            r.u64()  # commit time
            self.open = []
        elif tag == b"C":
            r.u8()
            r.u64()  # commit LSN
            end = r.u64()
            self.apply([line for _, line in self.open], end)
            self.open = None
        elif tag == b"S":  # Stream Start
            self.streaming = r.i32()
        elif tag == b"E":  # Stream Stop
            self.streaming = None
        elif tag == b"c":  # Stream Commit
            xid = r.i32()
            r.u8()
            r.u64()
            end = r.u64()
            self.apply([line for _, line in self.streams.pop(xid, [])], end)
        elif tag == b"A":  # Stream Abort: a subtransaction, or the whole transaction
            self.stream_abort(r.i32(), r.i32())
        elif tag == b"R":
            xid = r.i32() if in_stream else None
            oid = r.i32()
            r.string()  # namespace
            name = r.string()
            r.u8()  # replica identity
            columns = []
            for _ in range(r.i16()):
                flags = r.u8()
                column = r.string()
                r.i32()
                r.i32()
                columns.append((column, bool(flags & 1)))
            self.relations[oid] = (name, columns)
        elif tag in (b"I", b"U", b"D"):
            xid = r.i32() if in_stream else None
            oid = r.i32()
            kind = r.take(1)
            if tag == b"I":
                name, key, written = self.row(oid, r.tuple())
                self.change(xid, {"table": name, "op": "insert", "key": key, "values": written})
            elif tag == b"U":
                if kind in (b"K", b"O"):
                    r.tuple()  # the old key or row
                    r.take(1)  # 'N'
                name, key, written = self.row(oid, r.tuple())
                self.change(xid, {"table": name, "op": "update", "key": key, "values": written})
            else:
                name, key, _ = self.row(oid, r.tuple())
                key = {c: v for c, v in key.items() if v is not None}
                self.change(xid, {"table": name, "op": "delete", "key": key})
        elif tag == b"T":
            xid = r.i32() if in_stream else None
            count = r.i32()
            r.u8()  # options
            for _ in range(count):
                name = self.relations[r.i32()][0]
                self.change(xid, {"table": name, "op": "truncate", "key": {}})
        # Type (Y), Origin (O), logical messages (M): nothing to apply.

    def stream_abort(self, xid, subxid):
        if subxid == xid:
            self.streams.pop(xid, None)
        else:
            self.streams[xid] = [(x, line) for x, line in self.streams.get(xid, []) if x != subxid]

    # -- the stream ---------------------------------------------------------------

    def options(self):
        """pgoutput's options: large transactions streamed as they go (protocol 2,
        PostgreSQL 14+)."""
        return {"proto_version": "2", "publication_names": self.publication, "streaming": "on"}

    def start(self):
        deadline = time.monotonic() + 30
        while True:
            conn = psycopg2.connect(self.dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
            self.cur = conn.cursor()
            try:
                # start_lsn 0: where the slot stands.
                self.cur.start_replication(slot_name=self.slot, decode=False, start_lsn=0, options=self.options())
                return
            except psycopg2.errors.ObjectInUse:
                # The walsender of a lost connection still holds the slot.
                conn.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def run(self):
        self.start()
        heard, asked = time.monotonic(), False
        while True:
            msg = self.cur.read_message()
            if msg is not None:
                self.receive(msg)
                continue
            # Nothing buffered: wait for the server (psycopg2 answers its keepalives).
            ready, _, _ = select.select([self.cur], [], [], 0.5)
            if ready:
                heard, asked = time.monotonic(), False
                continue
            self.idle()
            quiet = time.monotonic() - heard
            if quiet >= RECEIVE_TIMEOUT:
                raise Silent("the server sent nothing for %.0f s: the connection is taken for dead" % quiet)
            if quiet >= RECEIVE_TIMEOUT / 2 and not asked:
                self.cur.send_feedback(reply=True)
                asked = True


class Silent(Exception):
    pass


if __name__ == "__main__":
    try:
        Consumer().run()
    except (psycopg2.Error, Silent) as err:
        print("trial consumer: %s" % err, file=sys.stderr)
        sys.exit(1)
