import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * {@code pgoutput serve} as a child process of the test: started on free loopback ports,
 * waited for until it accepts connections, driven through its control API with the JDK's
 * HttpClient, always stopped by {@link #close()}.
 */
public final class PgoutputServer implements AutoCloseable {
    private static final Pattern LISTENING =
            Pattern.compile("pgoutput serve: listening on (127\\.0\\.0\\.1):(\\d+);");
    private static final Pattern CONTROL = Pattern.compile("pgoutput serve: control API on (http://\\S+)");

    private final Process process;
    private final StringBuffer log = new StringBuffer();
    private final HttpClient http = HttpClient.newHttpClient();
    public final String host;
    public final int port;
    public final URI control;

    /** Starts {@code pgoutput serve} with these arguments (a script, faults, a probe ...). */
    public static PgoutputServer start(String... arguments) throws IOException, InterruptedException {
        return new PgoutputServer(List.of(arguments));
    }

    private PgoutputServer(List<String> arguments) throws IOException, InterruptedException {
        // PGOUTPUT_BINARY, else `pgoutput` on PATH (pip's environment, node_modules/.bin, ~/.cargo/bin).
        String binary = System.getenv().getOrDefault("PGOUTPUT_BINARY", "pgoutput");
        List<String> command = new ArrayList<>(List.of(binary, "serve", "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0"));
        command.addAll(arguments);
        process = new ProcessBuilder(command).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        CompletableFuture<Matcher> listening = new CompletableFuture<>();
        CompletableFuture<Matcher> controlLine = new CompletableFuture<>();
        Thread reader = new Thread(() -> {
            try (BufferedReader lines = new BufferedReader(
                    new InputStreamReader(process.getErrorStream(), StandardCharsets.UTF_8))) {
                for (String line; (line = lines.readLine()) != null; ) {
                    log.append(line).append('\n');
                    Matcher l = LISTENING.matcher(line);
                    if (l.find()) listening.complete(l);
                    Matcher c = CONTROL.matcher(line);
                    if (c.find()) controlLine.complete(c);
                }
            } catch (IOException ignored) {
                // the process ended
            }
            IllegalStateException exited = new IllegalStateException("pgoutput serve exited before it listened:\n" + log);
            listening.completeExceptionally(exited);
            controlLine.completeExceptionally(exited);
        }, "pgoutput serve log");
        reader.setDaemon(true);
        reader.start();
        try {
            Matcher l = listening.get(30, TimeUnit.SECONDS);
            host = l.group(1);
            port = Integer.parseInt(l.group(2));
            control = URI.create(controlLine.get(30, TimeUnit.SECONDS).group(1));
        } catch (Exception e) {
            process.destroyForcibly();
            throw new IOException("pgoutput serve did not start: " + e.getMessage() + "\n" + log, e);
        }
    }

    /** The JDBC URL pgjdbc connects to. */
    public String jdbcUrl() {
        return "jdbc:postgresql://" + host + ":" + port + "/postgres";
    }

    /** What the server logged so far: each client, what it asked for, what it confirmed. */
    public String log() {
        return log.toString();
    }

    public String get(String path) throws IOException, InterruptedException {
        return send(HttpRequest.newBuilder(control.resolve(path)).GET());
    }

    public String post(String path, String json) throws IOException, InterruptedException {
        return send(HttpRequest.newBuilder(control.resolve(path)).POST(HttpRequest.BodyPublishers.ofString(json)));
    }

    /**
     * Waits until the consumer confirmed {@code lsn} on {@code slot}; answers the slot's
     * confirmed flush position. A timeout is an {@link IOException} (HTTP 408).
     */
    public String waitForFlush(String slot, String lsn, Duration timeout) throws IOException, InterruptedException {
        String body = post("/wait", "{\"slot\": \"" + slot + "\", \"lsn\": \"" + lsn + "\", \"timeout_ms\": "
                + timeout.toMillis() + "}");
        return field(body, "confirmed_flush_lsn");
    }

    private String send(HttpRequest.Builder request) throws IOException, InterruptedException {
        HttpResponse<String> response = http.send(request.build(), HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() / 100 != 2) {
            // Every refusal is {"error": "the server's reason"}.
            throw new IOException(request.build().method() + " " + request.build().uri().getPath() + ": HTTP "
                    + response.statusCode() + ": " + field(response.body(), "error"));
        }
        return response.body();
    }

    /**
     * A string field of a flat JSON object, enough for the control API's answers read
     * here (no JSON library: the JDK has none); null when absent or null.
     */
    public static String field(String json, String name) {
        Matcher m = Pattern.compile("\"" + Pattern.quote(name) + "\"\\s*:\\s*\"((?:[^\"\\\\]|\\\\.)*)\"").matcher(json);
        return m.find() ? m.group(1) : null;
    }

    /** Stops the server (SIGTERM, then SIGKILL after 10 seconds). Safe to call twice. */
    @Override
    public void close() throws InterruptedException {
        process.destroy();
        if (!process.waitFor(10, TimeUnit.SECONDS)) {
            process.destroyForcibly().waitFor();
        }
    }
}
