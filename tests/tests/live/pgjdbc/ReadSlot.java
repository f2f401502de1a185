// Reads a logical slot with pgjdbc's replication API (PGReplicationStream), pgoutput
// protocol 1, and prints each message as "<LSN> <payload hex>", up to the first message
// at or past a given LSN. Nothing is confirmed: the slot keeps what it holds.
//
// java -cp <dir>:<pgjdbc jar> ReadSlot <jdbc url> <user> <password> <slot> <publication> <end LSN>

import java.nio.ByteBuffer;
import java.sql.Connection;
import java.sql.DriverManager;
import java.util.HexFormat;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.postgresql.PGConnection;
import org.postgresql.PGProperty;
import org.postgresql.replication.LogSequenceNumber;
import org.postgresql.replication.PGReplicationStream;

public class ReadSlot {
    public static void main(String[] args) throws Exception {
        if (args.length != 6) {
            System.err.println("usage: ReadSlot <url> <user> <password> <slot> <publication> <end LSN>");
            System.exit(2);
        }
        String url = args[0];
        String slot = args[3];
        String publication = args[4];
        LogSequenceNumber end = LogSequenceNumber.valueOf(args[5]);
        Properties props = new Properties();
        PGProperty.USER.set(props, args[1]);
        PGProperty.PASSWORD.set(props, args[2]);
        PGProperty.ASSUME_MIN_SERVER_VERSION.set(props, "10");
        PGProperty.REPLICATION.set(props, "database");
        PGProperty.PREFER_QUERY_MODE.set(props, "simple");
        PGProperty.APPLICATION_NAME.set(props, "pgjdbc-read-slot");
        StringBuilder out = new StringBuilder();
        try (Connection conn = DriverManager.getConnection(url, props)) {
            PGConnection pg = conn.unwrap(PGConnection.class);
            PGReplicationStream stream = pg.getReplicationAPI()
                .replicationStream()
                .logical()
                .withSlotName(slot)
                .withSlotOption("proto_version", "1")
                .withSlotOption("publication_names", publication)
                .withStatusInterval(1, TimeUnit.SECONDS)
                .start();
            HexFormat hex = HexFormat.of();
            while (true) {
                ByteBuffer message = stream.read();
                LogSequenceNumber lsn = stream.getLastReceiveLSN();
                byte[] payload = new byte[message.remaining()];
                message.get(payload);
                out.append(lsn.asString()).append(' ').append(hex.formatHex(payload)).append('\n');
                if (lsn.compareTo(end) >= 0) {
                    break;
                }
            }
            stream.close();
        }
        System.out.print(out);
    }
}
