"""A PostgreSQL subscriber as the consumer under ``pgoutput trial``, with a sink of tables.

    pgoutput trial --upstream 'host=… dbname=source' \
        --sink-database 'host=… dbname=sink user=postgres' \
        --scenario baseline,cut-inside-transaction \
        -- python3 docs/examples/python/trial_subscriber.py

The consumer here is the subscriber's apply worker; this script only sets it up. It
subscribes the sink's database (``PGOUTPUT_TRIAL_SINK_DATABASE``, where the trial made the
source's tables) to the trial's publication on the trial's slot, through the trial's
proxy (``PGOUTPUT_TRIAL_DSN``), with streaming on and nothing copied (the slot was made
before the workload); then it waits. On SIGTERM (the trial's stop) it drops the
subscription, leaving the slot to the trial. Started again (after it exited), it keeps a
subscription it finds.

The apply worker is not this process: a scenario that kills the consumer or needs it to
fail loudly (``killed-after-acknowledging``, ``slot-dropped``) does not apply to it.
"""

import os
import signal
import sys

import psycopg2
from psycopg2 import sql


def main():
    env = os.environ
    slot = env["PGOUTPUT_TRIAL_SLOT"]
    name = sql.Identifier(slot)
    conn = psycopg2.connect(env["PGOUTPUT_TRIAL_SINK_DATABASE"])
    # CREATE and DROP SUBSCRIPTION refuse a transaction block.
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SELECT 1 FROM pg_subscription WHERE subname = %s", [slot])
    if cur.fetchone() is None:
        cur.execute(
            sql.SQL(
                "CREATE SUBSCRIPTION {} CONNECTION %s PUBLICATION {} WITH "
                "(create_slot = false, slot_name = %s, copy_data = false, streaming = on)"
            ).format(name, sql.Identifier(env["PGOUTPUT_TRIAL_PUBLICATION"])),
            [env["PGOUTPUT_TRIAL_DSN"], slot],
        )
    print("subscribed %s to slot %s" % (conn.dsn, slot), flush=True)

    def stop(signum, frame):
        # The slot is the trial's: unhook it before dropping the subscription.
        for statement in ("ALTER SUBSCRIPTION {} DISABLE", "ALTER SUBSCRIPTION {} SET (slot_name = NONE)",
                          "DROP SUBSCRIPTION {}"):
            cur.execute(sql.SQL(statement).format(name))
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        signal.pause()


if __name__ == "__main__":
    try:
        main()
    except psycopg2.Error as err:
        print("trial subscriber: %s" % err, file=sys.stderr)
        sys.exit(1)
