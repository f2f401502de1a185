//! Record and replay against the live server: a workload is captured with `pgoutput tail
//! --wal-positions` once per option set, each from its own slot created at the same point
//! (so each holds the same history), every protocol version and streaming mode among
//! them, binary, and two-phase. Each capture is served back by the test server and read
//! by pg_recvlogical and psycopg2 with the options it was captured with: the payloads
//! and each XLogData header's `dataStart` and `walEnd` must be the recorded ones. Then
//! every capture is rendered for every other option set and must equal what PostgreSQL
//! sent for that set, but for what the README names as inherent (a capture that was not
//! streamed does not say which transactions PostgreSQL would have streamed).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use pgoutput_codec::{Encoder, Lsn, PgOutputMessage, ProtocolVersion, Streaming};
use pgoutput_harness::server::{Publication, RenderedMessage, Script, TestServer};
use pgoutput_tests::pg::Server;

use crate::consumer::stream_options;
use crate::scenario::TAIL_USER;
use crate::tail::{binary, current_lsn, wait};
use crate::Options;

/// The SQL the captures hold: every kind of change and transaction, a large streamed
/// transaction with a subtransaction rolled back, DDL inside a streamed transaction and
/// DDL alone (empty stream blocks on PostgreSQL 16 and later), TRUNCATE, two-phase, and
/// a plain commit last, then WAL with nothing to send.
const WORKLOAD: &[&str] = &[
    "INSERT INTO accounts VALUES (20, 'dora', 7.25, 'ok', repeat('y', 10000));",
    "UPDATE accounts SET balance = 8.00 WHERE id = 20;",
    "UPDATE accounts SET id = 21, feeling = 'happy' WHERE id = 20;",
    "BEGIN; INSERT INTO ledger VALUES (10, 'x'); UPDATE ledger SET entry = 'y'; DELETE FROM ledger; COMMIT;",
    "TRUNCATE counters;",
    "INSERT INTO counters (n) VALUES (10);",
    "SELECT pg_logical_emit_message(false, 'replay', 'nontx') IS NOT NULL;",
    "BEGIN; SELECT pg_logical_emit_message(true, 'replay', 'tx') IS NOT NULL; INSERT INTO counters (n) VALUES (11); COMMIT;",
    // Records whose positions sit at a boundary. A transactional message is queued at the
    // end of its record (`logicalmsg_decode` passes `endptr`), so as a transaction's last
    // record its position is the commit's; a message-only transaction is all boundary; a
    // non-transactional message sent while a transaction is open is streamed before the
    // transaction, whose changes come before it in the WAL; a TRUNCATE last in its
    // transaction.
    "BEGIN; INSERT INTO counters (n) VALUES (15); SELECT pg_logical_emit_message(true, 'replay', 'last') IS NOT NULL; COMMIT;",
    "BEGIN; SELECT pg_logical_emit_message(true, 'replay', 'only') IS NOT NULL; COMMIT;",
    "BEGIN; INSERT INTO counters (n) VALUES (16); SELECT pg_logical_emit_message(false, 'replay', 'inside') IS NOT NULL; INSERT INTO counters (n) VALUES (17); COMMIT;",
    "BEGIN; INSERT INTO counters (n) VALUES (18); TRUNCATE counters; COMMIT;",
    "SELECT pg_replication_origin_session_setup('upstream') IS NULL;
     BEGIN;
     SELECT pg_replication_origin_xact_setup('0/ABCDEF0', '2024-01-02 03:04:05+00') IS NULL;
     INSERT INTO counters (n) VALUES (12);
     COMMIT;
     SELECT pg_replication_origin_session_reset() IS NULL;",
    "BEGIN;
     INSERT INTO bulk SELECT g, repeat('a', 100) FROM generate_series(50001, 51000) g;
     SAVEPOINT s1;
     INSERT INTO bulk SELECT g, repeat('b', 100) FROM generate_series(51001, 52000) g;
     ROLLBACK TO SAVEPOINT s1;
     INSERT INTO bulk VALUES (55000, 'after');
     COMMIT;",
    "BEGIN;
     INSERT INTO bulk SELECT g, repeat('c', 100) FROM generate_series(60001, 61000) g;
     ALTER TABLE ledger ADD COLUMN extra int;
     INSERT INTO ledger VALUES (11, 'z', 5);
     COMMIT;",
    "BEGIN; ALTER TABLE ledger ADD COLUMN note text; COMMIT;",
    "INSERT INTO ledger VALUES (12, 'after ddl', 6, 'n');",
    "BEGIN; INSERT INTO bulk SELECT g, repeat('d', 100) FROM generate_series(70001, 71000) g; ROLLBACK;",
    "BEGIN; INSERT INTO counters (n) VALUES (13); PREPARE TRANSACTION 'replay_commit'; COMMIT PREPARED 'replay_commit';",
    "BEGIN; INSERT INTO counters (n) VALUES (14); PREPARE TRANSACTION 'replay_rollback'; ROLLBACK PREPARED 'replay_rollback';",
    "BEGIN;
     INSERT INTO bulk SELECT g, repeat('e', 100) FROM generate_series(80001, 81000) g;
     PREPARE TRANSACTION 'replay_stream';
     COMMIT PREPARED 'replay_stream';",
    "INSERT INTO counters (n) VALUES (99);",
    // WAL pgoutput sends nothing for: the recordings end with a keepalive past the last
    // commit, which the replays must report too.
    "CHECKPOINT;",
];

/// A slot per option set, each created at the same point of the WAL (so each holds the
/// same history): at most 11 sets.
const SLOTS: [&str; 11] = [
    "replay_0",
    "replay_1",
    "replay_2",
    "replay_3",
    "replay_4",
    "replay_5",
    "replay_6",
    "replay_7",
    "replay_8",
    "replay_9",
    "replay_10",
];

/// An option set, as the failures name it.
fn name(set: &Options) -> String {
    format!(
        "proto {} streaming {}{}{}",
        set.version,
        set.streaming,
        if set.binary { " binary" } else { "" },
        if set.two_phase { " two_phase" } else { "" }
    )
}

/// Every protocol version with every streaming mode it allows, in text; binary once;
/// two-phase with streaming on (protocol 3) and with the highest mode of the highest
/// version.
fn sets(server: &Server) -> Vec<Options> {
    let max = server.max_protocol();
    let mut sets = Vec::new();
    let mut add = |version: ProtocolVersion, streaming, binary, two_phase| {
        sets.push(Options {
            slot: SLOTS[sets.len()],
            version,
            streaming,
            binary,
            two_phase,
        })
    };
    for version in ProtocolVersion::ALL
        .into_iter()
        .filter(|v| v.number() <= max)
    {
        for streaming in [Streaming::Off, Streaming::On, Streaming::Parallel] {
            if version >= streaming.min_version() {
                add(version, streaming, false, false);
            }
        }
    }
    let top = ProtocolVersion::from_number(max).expect("a known version");
    add(top, Streaming::On, true, false);
    add(ProtocolVersion::V3, Streaming::On, false, true);
    if top == ProtocolVersion::V4 {
        add(top, Streaming::Parallel, false, true);
    }
    sets
}

/// One XLogData frame: its header positions and payload.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Frame {
    wal_start: Lsn,
    wal_end: Lsn,
    payload: Vec<u8>,
}

/// The test server's frames: PostgreSQL's logical walsender sends `walEnd` equal to
/// `dataStart`, and so does the test server.
impl From<RenderedMessage> for Frame {
    fn from(m: RenderedMessage) -> Frame {
        Frame {
            wal_start: m.lsn,
            wal_end: m.lsn,
            payload: m.payload,
        }
    }
}

/// A capture: the JSON lines tail wrote and the frames they stand for.
struct Capture {
    set: Options,
    text: String,
    frames: Vec<Frame>,
}

/// The frames `tail --wal-positions` lines stand for: each message encoded again with the
/// session encoder of the set (the codec is exact, so these are the bytes PostgreSQL sent).
fn frames(set: &Options, text: &str) -> Result<Vec<Frame>, String> {
    let mut encoder = Encoder::new(set.version, set.streaming).map_err(|e| e.to_string())?;
    let lsn = |value: &mut serde_json::Value, key: &str| -> Result<Lsn, String> {
        let field = value
            .as_object_mut()
            .and_then(|o| o.remove(key))
            .ok_or_else(|| format!("a line without {key}"))?;
        serde_json::from_value(field).map_err(|e| e.to_string())
    };
    text.lines()
        .filter(|line| !line.contains(r#""type":"keepalive""#))
        .map(|line| {
            let mut value: serde_json::Value =
                serde_json::from_str(line).map_err(|e| e.to_string())?;
            let wal_start = lsn(&mut value, "wal_start")?;
            let wal_end = lsn(&mut value, "wal_end")?;
            // tail's mark on an enum's Type line is not part of the message.
            if let Some(object) = value.as_object_mut() {
                object.remove("enum");
            }
            let message: PgOutputMessage<'_> =
                serde_json::from_value(value).map_err(|e| e.to_string())?;
            let payload = encoder.encode(&message).map_err(|e| e.to_string())?;
            Ok(Frame {
                wal_start,
                wal_end,
                payload,
            })
        })
        .collect()
}

/// Creates a slot per set, runs the workload, captures each slot with tail, then checks
/// the replays.
pub fn check(server: &Server, bin: &Path) -> Result<String, String> {
    let sets = sets(server);
    for set in &sets {
        server
            .psql(&format!(
                "SELECT pg_create_logical_replication_slot('{}', 'pgoutput', false, {}) IS NOT NULL;",
                set.slot, set.two_phase
            ))
            .map_err(|e| e.to_string())?;
    }
    for sql in WORKLOAD {
        server.psql(sql).map_err(|e| format!("{sql}: {e}"))?;
    }
    let end = current_lsn(server)?;
    let mut captures = Vec::new();
    for set in &sets {
        let text = capture(server, set, &end)?;
        let frames = frames(set, &text)?;
        captures.push(Capture {
            set: *set,
            text,
            frames,
        });
    }
    let dir = std::env::temp_dir().join(format!(
        "pgoutput-replay-{}-{}",
        server.major(),
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let result = check_captures(&captures, bin, &dir);
    if let Some(keep) = std::env::var_os("PGOUTPUT_LIVE_CAPTURE") {
        for c in &captures {
            let name = format!("replay-pg{}-{}.jsonl", server.major(), c.set.slot);
            let _ = std::fs::write(Path::new(&keep).join(name), &c.text);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    for set in &sets {
        let _ = server.psql(&format!("SELECT pg_drop_replication_slot('{}');", set.slot));
    }
    result
}

/// `pgoutput tail --wal-positions` of the set's slot up to `end`.
fn capture(server: &Server, set: &Options, end: &str) -> Result<String, String> {
    let version = set.version.number().to_string();
    let mode = set.streaming.to_string();
    let mut args = vec![
        "tail".to_owned(),
        server.conninfo(TAIL_USER.0, Some(TAIL_USER.1)),
        "--slot".into(),
        set.slot.to_owned(),
        "--publication".into(),
        "pub".into(),
        "--proto-version".into(),
        version,
        "--streaming".into(),
        mode,
        "--messages".into(),
        "--wal-positions".into(),
        "--end-lsn".into(),
        end.to_owned(),
    ];
    if set.binary {
        args.push("--binary".into());
    }
    if set.two_phase {
        args.push("--two-phase".into());
    }
    let stdout =
        run(Command::new(binary()?).args(&args)).map_err(|e| format!("tail {}: {e}", name(set)))?;
    String::from_utf8(stdout).map_err(|e| e.to_string())
}

/// Runs `command` for up to two minutes: its standard output, or its exit status and
/// standard error.
fn run(command: &mut Command) -> Result<Vec<u8>, String> {
    let output = wait(
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?,
        Duration::from_secs(120),
    )?;
    if output.status.success() {
        Ok(output.stdout)
    } else {
        Err(format!(
            "{}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

fn check_captures(captures: &[Capture], bin: &Path, dir: &Path) -> Result<String, String> {
    let mut failures = String::new();
    let mut frames_checked = 0;
    // One test server per capture serves it back and renders it for the other sets.
    let servers = captures
        .iter()
        .map(|capture| serve(&capture.text))
        .collect::<Result<Vec<_>, _>>()?;
    for (capture, server) in captures.iter().zip(&servers) {
        match replay(capture, server, bin, dir) {
            Ok(n) => frames_checked += n,
            Err(e) => writeln!(failures, "replay of {}: {e}", name(&capture.set)).unwrap(),
        }
    }
    let mut renders = 0;
    let (mut not_streamed, mut not_two_phase, mut masked) = (0, 0, 0);
    for (from, server) in captures.iter().zip(&servers) {
        for to in captures {
            if from.set.streaming == Streaming::Off && to.set.streaming != Streaming::Off {
                // Inherent: a capture that was not streamed does not say which
                // transactions PostgreSQL would have streamed, or where their blocks end.
                not_streamed += 1;
                continue;
            }
            if !from.set.two_phase && to.set.two_phase {
                // Inherent: without two_phase a prepared transaction arrives as an
                // ordinary one at COMMIT PREPARED; the capture does not say it was
                // prepared.
                not_two_phase += 1;
                continue;
            }
            let rendered = server
                .render(&stream_options(&to.set))
                .map_err(|e| format!("{} for {}: {e}", name(&from.set), name(&to.set)));
            let rendered = match rendered {
                Ok(r) => r,
                Err(e) => {
                    writeln!(failures, "{e}").unwrap();
                    continue;
                }
            };
            let mut got: Vec<Frame> = rendered.into_iter().map(Frame::from).collect();
            let rendered_rest = got.split_off(got.len().min(to.frames.len()));
            // Inherent: PostgreSQL sends a streamed transaction's Origin with LSN 0/0, so
            // a streamed capture does not hold the origin's commit position.
            let origin_lsn_unknown =
                from.set.streaming != Streaming::Off && to.set.streaming == Streaming::Off;
            // Inherent: only a parallel capture holds when a subtransaction aborted.
            let abort_time_unknown = from.set.streaming != Streaming::Parallel
                && to.set.streaming == Streaming::Parallel;
            let got: Vec<Frame> = got
                .into_iter()
                .zip(&to.frames)
                .map(|(mut g, w)| {
                    if (abort_time_unknown && same_but_abort_time(&g.payload, &w.payload))
                        || (origin_lsn_unknown && same_but_origin_lsn(&g.payload, &w.payload))
                    {
                        g.payload.clone_from(&w.payload);
                        masked += 1;
                    }
                    g
                })
                .chain(rendered_rest)
                .collect();
            if let Some(diff) = first_difference(&got, &to.frames) {
                writeln!(
                    failures,
                    "{} rendered for {}: {diff}",
                    name(&from.set),
                    name(&to.set)
                )
                .unwrap();
            }
            renders += 1;
        }
    }
    let keepalives = captures
        .iter()
        .map(|c| c.text.matches(r#""type":"keepalive""#).count())
        .sum::<usize>();
    if failures.is_empty() {
        Ok(format!(
            "{} captures served back byte for byte with their positions ({frames_checked} frames \
             through pg_recvlogical and psycopg2, {keepalives} recorded keepalives); {renders} renders for every option set equal \
             to what PostgreSQL sent, but for {masked} frames of what is inherent (an \
             Origin's LSN in a streamed capture, a subtransaction's abort time outside a \
             parallel one); not rendered: {not_streamed} non-streamed captures for streaming \
             sets, {not_two_phase} captures without two_phase for two-phase sets",
            captures.len()
        ))
    } else {
        Err(failures)
    }
}

/// Stream Aborts that differ in their abort timestamp alone (the last 8 bytes).
fn same_but_abort_time(got: &[u8], want: &[u8]) -> bool {
    got.first() == Some(&b'A')
        && got.len() == want.len()
        && got.len() > 8
        && got[..got.len() - 8] == want[..want.len() - 8]
}

/// Origin messages that differ in their origin LSN alone (bytes 1 to 8), ours 0/0.
fn same_but_origin_lsn(got: &[u8], want: &[u8]) -> bool {
    got.first() == Some(&b'O')
        && got.len() == want.len()
        && got.len() > 9
        && got[1..9] == [0; 8]
        && got[9..] == want[9..]
}

/// Where two frame lists first differ, if they do.
fn first_difference(got: &[Frame], want: &[Frame]) -> Option<String> {
    let at = (0..got.len().min(want.len())).find(|&i| got[i] != want[i]);
    match at {
        Some(i) => Some(format!(
            "frame {i} of {}: got {} {} {}, PostgreSQL sent {} {} {}",
            want.len(),
            got[i].wal_start,
            got[i].wal_end,
            pgoutput_tests::hex(&got[i].payload),
            want[i].wal_start,
            want[i].wal_end,
            pgoutput_tests::hex(&want[i].payload),
        )),
        None if got.len() != want.len() => Some(format!(
            "{} frames, PostgreSQL sent {}",
            got.len(),
            want.len()
        )),
        None => None,
    }
}

/// Serves the capture back; pg_recvlogical and psycopg2 read it with its options. The
/// frames checked.
/// A test server serving the capture `text` (publication `pub`, every table).
fn serve(text: &str) -> Result<TestServer, String> {
    let script = Script::from_json_lines(text).map_err(|e| e.to_string())?;
    TestServer::builder()
        .publication(Publication::all_tables("pub"))
        .script(script)
        .start()
        .map_err(|e| e.to_string())
}

fn replay(capture: &Capture, server: &TestServer, bin: &Path, dir: &Path) -> Result<usize, String> {
    // The WAL end the recording's last keepalive reported is the replay's (pg_recvlogical
    // below reaches --endpos only through it); psycopg2 stops at the last frame.
    let end = server.wal_end();
    if let Some(keepalive) = capture
        .text
        .lines()
        .rev()
        .find(|line| line.contains(r#""type":"keepalive""#))
    {
        let value: serde_json::Value =
            serde_json::from_str(keepalive).map_err(|e| e.to_string())?;
        let recorded: Lsn =
            serde_json::from_value(value["wal_end"].clone()).map_err(|e| e.to_string())?;
        if recorded != end {
            return Err(format!(
                "the replay's WAL end is {end}, the recording's last keepalive {recorded}"
            ));
        }
    }
    let last = capture.frames.last().ok_or("an empty capture")?.wal_start;
    let options = stream_options(&capture.set);
    // The server's own rendering first: the clearest message when it is off.
    let rendered: Vec<Frame> = server
        .render(&options)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(Frame::from)
        .collect();
    if let Some(diff) = first_difference(&rendered, &capture.frames) {
        return Err(format!("rendered: {diff}"));
    }
    let psycopg = psycopg2(server, &capture.set, last)?;
    if let Some(diff) = first_difference(&psycopg, &capture.frames) {
        return Err(format!("psycopg2: {diff}"));
    }
    let written = recvlogical(server, &capture.set, end, bin, dir)?;
    let expected: Vec<u8> = capture
        .frames
        .iter()
        .flat_map(|f| f.payload.iter().copied().chain([b'\n']))
        .collect();
    if written != expected {
        return Err(format!(
            "pg_recvlogical wrote {} bytes, PostgreSQL's payloads are {}",
            written.len(),
            expected.len()
        ));
    }
    Ok(capture.frames.len())
}

const PSYCOPG2: &str = r#"
import sys, json, psycopg2, psycopg2.extras
dsn, end, options = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
cur = conn.cursor()
cur.create_replication_slot("psy", output_plugin="pgoutput")
cur.start_replication(slot_name="psy", decode=False, options=options)
out = sys.stdout
def consume(msg):
    out.write("%d %d %s\n" % (msg.data_start, msg.wal_end, msg.payload.hex()))
    if msg.data_start == end:
        msg.cursor.send_feedback(flush_lsn=end, write_lsn=end, force=True)
        raise psycopg2.extras.StopReplication()
try:
    cur.consume_stream(consume)
except psycopg2.extras.StopReplication:
    pass
conn.close()
"#;

/// What psycopg2 receives: each message's `data_start`, `wal_end` and payload.
fn psycopg2(server: &TestServer, set: &Options, end: Lsn) -> Result<Vec<Frame>, String> {
    let options: serde_json::Map<String, serde_json::Value> = set
        .pairs()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.into()))
        .collect();
    let stdout = run(Command::new("python3").args([
        "-c",
        PSYCOPG2,
        &server.connection_string(),
        &end.0.to_string(),
        &serde_json::Value::Object(options).to_string(),
    ]))?;
    String::from_utf8_lossy(&stdout)
        .lines()
        .map(|line| {
            let mut fields = line.split(' ');
            let mut lsn = || -> Result<Lsn, String> {
                Ok(Lsn(fields
                    .next()
                    .and_then(|f| f.parse().ok())
                    .ok_or_else(|| format!("bad line {line:?}"))?))
            };
            let wal_start = lsn()?;
            let wal_end = lsn()?;
            let payload = pgoutput_tests::unhex(fields.next().unwrap_or_default());
            Ok(Frame {
                wal_start,
                wal_end,
                payload,
            })
        })
        .collect()
}

/// What pg_recvlogical writes: each payload and a newline.
fn recvlogical(
    server: &TestServer,
    set: &Options,
    end: Lsn,
    bin: &Path,
    dir: &Path,
) -> Result<Vec<u8>, String> {
    let dsn = server.connection_string();
    let slot = format!("rl_{}", set.slot);
    let file: PathBuf = dir.join(format!("{slot}.out"));
    let recvlogical = |args: Vec<String>| {
        run(Command::new(bin.join("pg_recvlogical")).args(&args))
            .map(drop)
            .map_err(|e| format!("pg_recvlogical {args:?}: {e}"))
    };
    recvlogical(vec![
        "-d".into(),
        dsn.clone(),
        "--slot".into(),
        slot.clone(),
        "--create-slot".into(),
        "--plugin".into(),
        "pgoutput".into(),
    ])?;
    let mut args = vec![
        "-d".into(),
        dsn,
        "--slot".into(),
        slot,
        "--start".into(),
        "--no-loop".into(),
        "--endpos".into(),
        end.to_string(),
        "-f".into(),
        file.display().to_string(),
    ];
    for (name, value) in set.pairs() {
        args.extend(["-o".into(), format!("{name}={value}")]);
    }
    recvlogical(args)?;
    std::fs::read(&file).map_err(|e| e.to_string())
}
