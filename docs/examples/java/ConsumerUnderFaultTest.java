import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.postgresql.PGConnection;
import org.postgresql.PGProperty;
import org.postgresql.replication.LogSequenceNumber;
import org.postgresql.replication.PGReplicationStream;

/**
 * A pgjdbc logical replication consumer under a fault: the test server closes the
 * connection after the first change of transaction 2; the consumer reconnects, resumes
 * where its slot stands, applies every transaction once, and confirms only what it applied.
 */
class ConsumerUnderFaultTest {
    /** Table t (id int4 key, v text) in publication p. */
    static final String CONFIG = "{\"publications\": [{\"name\": \"p\", \"tables\": [{\"oid\": 16385, \"name\": \"t\","
            + " \"columns\": [{\"name\": \"id\", \"type_oid\": 23, \"key\": true}, {\"name\": \"v\", \"type_oid\": 25}]}]}]}";
    static final String CLOSE_IN_TRANSACTION_2 =
            "{\"when\": {\"on\": \"change\", \"transaction\": 2, \"after\": 1}, \"then\": {\"do\": \"close\"}, \"slot\": \"java\"}";

    /** Four transactions of two inserts each, ids 1 to 8, as JSON lines. */
    static String script() {
        StringBuilder lines = new StringBuilder();
        for (int id = 1; id <= 8; id += 2) {
            lines.append("{\"type\":\"begin\"}\n");
            for (int i = id; i <= id + 1; i++) {
                lines.append("{\"type\":\"insert\",\"relation_oid\":16385,\"new_tuple\":[{\"text\":\"")
                        .append(i).append("\"},{\"text\":\"v").append(i).append("\"}]}\n");
            }
            lines.append("{\"type\":\"commit\"}\n");
        }
        return lines.toString();
    }

    @Test
    void everyTransactionOnceThroughAClose(@TempDir Path dir) throws Exception {
        Files.writeString(dir.resolve("config.json"), CONFIG);
        Files.writeString(dir.resolve("script.jsonl"), script());
        try (PgoutputServer server = PgoutputServer.start(
                "--config", dir.resolve("config.json").toString(),
                "--script", dir.resolve("script.jsonl").toString(),
                "--fault", CLOSE_IN_TRANSACTION_2,
                "--probe", "1")) {
            Consumer consumer = new Consumer(server.jdbcUrl(), "java");
            consumer.createSlot();
            consumer.runUntil(4);

            assertEquals(List.of(List.of(1, 2), List.of(3, 4), List.of(5, 6), List.of(7, 8)), consumer.applied);
            assertEquals(1, consumer.reconnects);
            String end = LogSequenceNumber.valueOf(consumer.lastEnd).asString();
            String confirmed;
            try {
                confirmed = server.waitForFlush("java", end, Duration.ofSeconds(30));
            } catch (java.io.IOException notConfirmed) {
                // What the server heard, to tell a lost status update from one never sent.
                throw new AssertionError(notConfirmed.getMessage() + "\nclients: " + server.get("/clients")
                        + "\nlog:\n" + server.log(), notConfirmed);
            }
            assertEquals(end, confirmed);
            assertTrue(server.get("/faults").contains("\"fired\":1"), server.get("/faults"));
            // The judge's account: nothing wrong, and the stream ended once by the fault.
            assertEquals("[]", server.get("/findings"), server.log());
            assertTrue(server.get("/facts").contains("\"how\":\"fault\""), server.get("/facts"));
        }
    }

    /** The consumer under test, as a Java CDC pipeline would read pgoutput with pgjdbc. */
    static final class Consumer {
        final String url;
        final String slot;
        final List<List<Integer>> applied = new ArrayList<>();
        long lastEnd;
        int reconnects;

        Consumer(String url, String slot) {
            this.url = url;
            this.slot = slot;
        }

        Connection connect() throws SQLException {
            Properties props = new Properties();
            PGProperty.USER.set(props, "postgres");
            PGProperty.REPLICATION.set(props, "database");
            PGProperty.ASSUME_MIN_SERVER_VERSION.set(props, "10");
            PGProperty.PREFER_QUERY_MODE.set(props, "simple");
            return DriverManager.getConnection(url, props);
        }

        void createSlot() throws SQLException {
            try (Connection conn = connect()) {
                conn.unwrap(PGConnection.class).getReplicationAPI().createReplicationSlot().logical()
                        .withSlotName(slot).withOutputPlugin("pgoutput").make();
            }
        }

        /** Streams until {@code transactions} are applied, reconnecting when the connection is lost. */
        void runUntil(int transactions) throws Exception {
            while (applied.size() < transactions) {
                try (Connection conn = connect()) {
                    PGReplicationStream stream = conn.unwrap(PGConnection.class).getReplicationAPI()
                            .replicationStream().logical().withSlotName(slot)
                            .withStartPosition(LogSequenceNumber.valueOf(lastEnd))
                            .withSlotOption("proto_version", "1").withSlotOption("publication_names", "p")
                            .withStatusInterval(1, TimeUnit.SECONDS).start();
                    List<Integer> pending = null;
                    while (applied.size() < transactions) {
                        ByteBuffer message = stream.read();
                        int at = message.position();
                        switch (message.get(at)) {
                            case 'B' -> pending = new ArrayList<>();
                            case 'I' -> {
                                // relation oid, 'N', column count, then column 1: 't', length, text
                                int length = message.getInt(at + 9);
                                byte[] text = new byte[length];
                                message.get(at + 13, text);
                                pending.add(Integer.parseInt(new String(text, StandardCharsets.UTF_8)));
                            }
                            case 'C' -> {
                                long end = message.getLong(at + 10);
                                if (end > lastEnd) {
                                    applied.add(pending);
                                    lastEnd = end;
                                }
                                pending = null;
                                // Confirmed once applied, never before.
                                stream.setAppliedLSN(LogSequenceNumber.valueOf(end));
                                stream.setFlushedLSN(LogSequenceNumber.valueOf(end));
                                stream.forceUpdateStatus();
                            }
                            default -> { }
                        }
                    }
                    // CopyDone, and the server's answer awaited: the last status update is
                    // read before the connection closes. Closed at once, the connection can
                    // meet the server writing a keepalive before it has read that update,
                    // and a walsender whose write fails ends without it.
                    stream.close();
                } catch (SQLException lost) {
                    // The connection is gone mid-transaction: what was not committed comes again.
                    reconnects++;
                }
            }
        }
    }
}
