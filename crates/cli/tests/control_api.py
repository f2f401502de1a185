"""A CDC consumer in Python (psycopg2) tested against `pgoutput serve`, driven through its
control API with nothing but urllib: a connection closed in the middle of a transaction,
transactions appended while it streams, a crash that sends a confirmed transaction again,
and the fast shutdown. The consumer applies a transaction at its Commit and skips one it
has applied already (by its end LSN), so every transaction must be applied exactly once.

    python3 control_api.py DSN CONTROL_URL
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


class Consumer:
    def __init__(self, slot):
        self.slot = slot
        self.applied = []  # (end_lsn, ids) in order
        self.skipped = []  # end LSNs sent again and skipped
        self.pending = None
        self.disconnects = 0
        self.cur = None

    def connect(self, create=False):
        conn = psycopg2.connect(DSN, connection_factory=psycopg2.extras.LogicalReplicationConnection)
        cur = conn.cursor()
        if create:
            cur.create_replication_slot(self.slot, output_plugin="pgoutput")
        # Resume where the slot stands (start_lsn 0/0), as pg_recvlogical does: after a
        # crash that is the last checkpoint's position, behind what we applied.
        cur.start_replication(slot_name=self.slot, decode=False, start_lsn=0,
                              options={"proto_version": "1", "publication_names": "p"})
        self.cur = cur

    def last_end(self):
        return self.applied[-1][0] if self.applied else 0

    def handle(self, msg):
        payload = msg.payload
        tag = payload[:1]
        if tag == b"B":
            self.pending = []
        elif tag == b"I":
            # relation oid, 'N', column count, then each column: 't', length, text
            pos = 1 + 4 + 1 + 2
            assert payload[pos:pos + 1] == b"t"
            (length,) = struct.unpack(">i", payload[pos + 1:pos + 5])
            self.pending.append(int(payload[pos + 5:pos + 5 + length]))
        elif tag == b"C":
            (end,) = struct.unpack(">Q", payload[10:18])
            if end <= self.last_end():
                self.skipped.append(end)
            else:
                self.applied.append((end, self.pending))
            self.pending = None
            msg.cursor.send_feedback(write_lsn=end, flush_lsn=end, force=True)

    def run_until(self, done, seconds=20, reconnect=True):
        """Reads and applies until done(), reconnecting when the server drops us (or,
        without `reconnect`, until it does: then True)."""
        deadline = time.monotonic() + seconds
        while not done():
            assert time.monotonic() < deadline, f"timed out: applied {self.applied}"
            try:
                msg = self.cur.read_message()
                if msg is None:
                    select.select([self.cur], [], [], 0.05)
                else:
                    self.handle(msg)
            except psycopg2.Error:
                if not reconnect:
                    return True
                # A partial transaction is thrown away; we resume after the last applied one.
                self.pending = None
                self.disconnects += 1
                time.sleep(0.2)
                self.connect()
        return False


def main():
    status, _ = api("POST", "/faults", {"when": {"on": "change", "transaction": 2, "after": 1},
                                        "then": {"do": "close"}, "slot": "py"})
    assert status == 201, status
    consumer = Consumer("py")
    consumer.connect(create=True)
    consumer.run_until(lambda: len(consumer.applied) == 4)
    assert consumer.disconnects == 1, consumer.disconnects
    assert [ids for _, ids in consumer.applied] == [[1, 2], [3, 4], [5, 6], [7, 8]], consumer.applied

    status, slots = api("GET", "/slots")
    assert status == 200 and slots[0]["name"] == "py", slots
    status, waited = api("POST", "/wait", {"slot": "py", "lsn": lsn_text(consumer.last_end()), "timeout_ms": 5000})
    assert status == 200, waited
    status, faults = api("GET", "/faults")
    assert faults[0]["fired"] == 1, faults

    # A checkpoint persists the slot here; a transaction appended now is applied and
    # confirmed after it.
    assert api("POST", "/checkpoint")[0] == 200
    status, appended = api("POST", "/events", lines=[
        {"type": "begin"},
        {"type": "insert", "relation_oid": 16385, "new_tuple": [{"text": "9"}, {"text": "nine"}]},
        {"type": "commit"},
    ])
    assert status == 200, appended
    consumer.run_until(lambda: len(consumer.applied) == 5)
    fifth = consumer.last_end()
    assert lsn_value(appended["wal_end"]) == fifth, (appended, fifth)
    assert api("POST", "/wait", {"slot": "py", "lsn": lsn_text(fifth), "timeout_ms": 5000})[0] == 200

    # The crash takes the slot back to the checkpoint: the fifth transaction comes again,
    # and the consumer must skip it.
    assert api("POST", "/crash")[0] == 200
    # (The first transaction may have come twice too: its confirmation can lose the race
    # with the close.)
    consumer.run_until(lambda: fifth in consumer.skipped)
    assert len(consumer.applied) == 5
    # The server's record: the re-sent transaction is a fact of the slot's (a correct
    # consumer skips it), and nothing is a finding.
    status, facts = api("GET", "/facts")
    resent = [{k: f[k] for k in ("count", "first", "last", "confirmed_before")}
              for f in facts if f["fact"] == "resent"]
    assert resent == [{"count": 1, "first": lsn_text(fifth), "last": lsn_text(fifth),
                       "confirmed_before": lsn_text(fifth)}], facts
    status, findings = api("GET", "/findings")
    assert status == 200 and findings == [], findings
    status, slots = api("GET", "/slots")
    assert slots[0]["confirmed_flush_lsn"] == lsn_text(fifth), slots

    # The fast shutdown: the walsender waits for the consumer to confirm all it was
    # sent, then ends the stream; the server then exits.
    assert api("POST", "/shutdown")[0] == 202
    assert consumer.run_until(lambda: False, reconnect=False), "the stream did not end"
    print(json.dumps({"applied": [ids for _, ids in consumer.applied], "disconnects": consumer.disconnects}))


main()
