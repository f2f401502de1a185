//! `pgoutput proxy` in front of the live server. With no rule armed, pg_recvlogical and
//! psycopg2 get through the proxy exactly what they get directly (from two slots created
//! at the same point, so each holds the same history), logging in by SCRAM relayed
//! through it; psql's `\copy` and a cancel request go through. With rules armed on the
//! replication stream (a close inside a transaction, a reset mid-frame, a FATAL 57P01, a
//! stall), the crate's reconnecting `Consumer` still gets every transaction exactly once
//! and the real slot is confirmed to the end; psycopg2 sees the FATAL in PostgreSQL's
//! words.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pgoutput_client::{ConnInfo, Consumer, ConsumerConfig, Reconnecting};
use pgoutput_codec::{Lsn, ProtocolVersion, StreamStart, Streaming};
use pgoutput_harness::faults::{Action, Fault, MessageKind, Trigger};
use pgoutput_harness::judge::{Ending, Fact};
use pgoutput_harness::proxy::Proxy;
use pgoutput_tests::pg::Server;

use crate::consumer::{stream_options, transaction_ends};
use crate::scenario::TAIL_USER;
use crate::tail::{current_lsn, wait};
use crate::{peek_slot, Options, Row};

/// What the slots hold: inserts, updates and deletes, a transaction large enough to be
/// streamed (with a subtransaction rolled back), a logical message, and a TRUNCATE; its
/// keys start at `base`, so that each check runs its own.
fn workload(base: u32) -> Vec<String> {
    let (a, b, c) = (base + 1, base + 1001, base + 1500);
    vec![
        format!("INSERT INTO accounts VALUES ({base}, 'pat', 1.50, 'ok', 'n');"),
        format!("UPDATE accounts SET balance = 2.50 WHERE id = {base};"),
        format!("BEGIN; INSERT INTO ledger VALUES ({base}, 'p'); DELETE FROM ledger WHERE id = {base}; COMMIT;"),
        format!(
            "BEGIN;
             INSERT INTO bulk SELECT g, repeat('p', 100) FROM generate_series({a}, {}) g;
             SAVEPOINT s;
             INSERT INTO bulk SELECT g, repeat('q', 100) FROM generate_series({b}, {c}) g;
             ROLLBACK TO SAVEPOINT s;
             INSERT INTO bulk VALUES ({}, 'after');
             COMMIT;",
            base + 1000,
            base + 1999
        ),
        "SELECT pg_logical_emit_message(true, 'proxy', 'tx') IS NOT NULL;".to_owned(),
        format!("DELETE FROM accounts WHERE id = {base};"),
        format!("BEGIN; INSERT INTO counters (n) VALUES ({base}); TRUNCATE ledger; COMMIT;"),
    ]
}

/// Runs `sql` with its commits flushed before it returns: these servers run with
/// `synchronous_commit` off, and the SQL interface's peek reads only what is flushed.
pub(crate) fn write(server: &Server, sql: &str) -> Result<(), String> {
    server
        .psql(&format!("SET synchronous_commit = on;\n{sql}"))
        .map(drop)
        .map_err(|e| e.to_string())
}

/// A logical slot of pgoutput, created now (it holds what is written from here on).
pub(crate) fn create_slot(server: &Server, slot: &str) -> Result<(), String> {
    server
        .psql(&format!(
            "SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput') IS NOT NULL;"
        ))
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Drops `slot`, as a check's last step (what fails here fails no check).
pub(crate) fn drop_slot(server: &Server, slot: &str) {
    let _ = server.psql(&format!("SELECT pg_drop_replication_slot('{slot}');"));
}

/// The option sets read through the proxy.
fn sets(server: &Server) -> Vec<Options> {
    let top = ProtocolVersion::from_number(server.max_protocol()).expect("a known version");
    let top_streaming = if top == ProtocolVersion::V4 {
        Streaming::Parallel
    } else {
        Streaming::On
    };
    vec![
        Options {
            slot: "proxy_0",
            version: ProtocolVersion::V1,
            streaming: Streaming::Off,
            binary: false,
            two_phase: false,
        },
        Options {
            slot: "proxy_1",
            version: ProtocolVersion::V2,
            streaming: Streaming::On,
            binary: true,
            two_phase: false,
        },
        Options {
            slot: "proxy_2",
            version: top,
            streaming: top_streaming,
            binary: false,
            two_phase: false,
        },
    ]
}

/// The slots of one set: one per client and path.
fn slots(set: &Options) -> [String; 4] {
    ["rl_direct", "rl_proxy", "psy_direct", "psy_proxy"].map(|s| format!("{}_{s}", set.slot))
}

/// A proxy in front of the server's Unix socket.
pub(crate) fn start_proxy(server: &Server) -> Result<Proxy, String> {
    Proxy::builder(&server.conninfo("postgres", None))
        .map_err(|e| e.to_string())?
        .start()
        .map_err(|e| e.to_string())
}

/// A client's connection string through the proxy, as `user`.
pub(crate) fn through(proxy: &Proxy, (user, password): (&str, &str)) -> String {
    format!(
        "host=127.0.0.1 port={} user={user} password={password} dbname=postgres sslmode=prefer",
        proxy.addr().port()
    )
}

/// Runs a command to its end (a minute at most): its standard output, or why it failed.
fn run(command: &mut Command) -> Result<Vec<u8>, String> {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let output = wait(child, Duration::from_secs(60))?;
    if !output.status.success() {
        return Err(format!(
            "{}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(output.stdout)
}

/// Pass-through: the same bytes directly and through the proxy, for every set and both
/// clients; `\copy` and a cancel request through it.
pub fn check_pass_through(server: &Server, bin: &Path) -> Result<String, String> {
    let sets = sets(server);
    for set in &sets {
        for slot in slots(set) {
            create_slot(server, &slot)?;
        }
    }
    for sql in workload(90_000) {
        write(server, &sql)?;
    }
    let end: Lsn = current_lsn(server)?.parse().map_err(|e| format!("{e}"))?;
    let proxy = start_proxy(server)?;
    let direct = server.conninfo(TAIL_USER.0, Some(TAIL_USER.1));
    let proxied = through(&proxy, TAIL_USER);
    let mut frames = 0;
    let mut bytes = 0;
    for set in &sets {
        let [rl_direct, rl_proxy, psy_direct, psy_proxy] = slots(set);
        let expected = peek_slot(server, &psy_direct, set)?;
        if expected.len() < workload(0).len() {
            return Err(format!("{}: only {} messages", set.slot, expected.len()));
        }
        let got_direct = psycopg2(&direct, &psy_direct, set, expected.len())?;
        let got_proxy = psycopg2(&proxied, &psy_proxy, set, expected.len())?;
        let payloads: Vec<&[u8]> = got_direct.iter().map(|(_, _, p)| p.as_slice()).collect();
        let want: Vec<&[u8]> = expected.iter().map(|r: &Row| r.data.as_slice()).collect();
        if payloads != want {
            return Err(format!(
                "{}: psycopg2 directly did not get the SQL interface's payloads",
                set.slot
            ));
        }
        if let Some(i) = (0..got_direct.len()).find(|&i| got_direct.get(i) != got_proxy.get(i)) {
            return Err(format!(
                "{}: psycopg2 through the proxy differs at message {i}: {:?} directly, {:?} through it",
                set.slot,
                got_direct.get(i),
                got_proxy.get(i)
            ));
        }
        let written_direct = recvlogical(bin, &direct, &rl_direct, set, end)?;
        let written_proxy = recvlogical(bin, &proxied, &rl_proxy, set, end)?;
        if written_direct.is_empty() || written_direct != written_proxy {
            return Err(format!(
                "{}: pg_recvlogical wrote {} bytes directly and {} through the proxy, not the same",
                set.slot,
                written_direct.len(),
                written_proxy.len()
            ));
        }
        frames += expected.len();
        bytes += written_direct.len();
    }
    let copied = copy_out(server, &proxy, bin)?;
    cancel(&proxy)?;
    for set in &sets {
        for slot in slots(set) {
            drop_slot(server, &slot);
        }
    }
    wait_all_closed(&proxy)?;
    Ok(format!(
        "{} option sets: psycopg2 {frames} messages and pg_recvlogical {bytes} bytes the same through the proxy (SCRAM relayed); \\copy of {copied} rows; a cancel request reached its backend",
        sets.len()
    ))
}

/// Waits until the proxy has closed every pair (each client has left).
fn wait_all_closed(proxy: &Proxy) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while proxy.connections() != 0 {
        if Instant::now() > deadline {
            return Err(format!(
                "{} client connections still open 30 s after every client left",
                proxy.connections()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

const PSYCOPG2: &str = r#"
import sys, json, psycopg2, psycopg2.extras
dsn, slot, count, options = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
cur = conn.cursor()
cur.start_replication(slot_name=slot, decode=False, options=options)
seen = 0
def consume(msg):
    global seen
    sys.stdout.write("%d %d %s\n" % (msg.data_start, msg.wal_end, msg.payload.hex()))
    seen += 1
    if seen == count:
        raise psycopg2.extras.StopReplication()
try:
    cur.consume_stream(consume)
except psycopg2.extras.StopReplication:
    pass
conn.close()
"#;

/// The first `count` messages psycopg2 gets from `slot` (nothing confirmed): each one's
/// `data_start`, `wal_end` and payload.
pub(crate) fn psycopg2(
    dsn: &str,
    slot: &str,
    set: &Options,
    count: usize,
) -> Result<Vec<(u64, u64, Vec<u8>)>, String> {
    let options: serde_json::Map<String, serde_json::Value> = set
        .pairs()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.into()))
        .collect();
    let stdout = run(Command::new("python3").args([
        "-c",
        PSYCOPG2,
        dsn,
        slot,
        &count.to_string(),
        &serde_json::Value::Object(options).to_string(),
    ]))
    .map_err(|e| format!("psycopg2 on {slot}: {e}"))?;
    String::from_utf8_lossy(&stdout)
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            match fields.as_slice() {
                [start, end, payload] => Ok((
                    start.parse().map_err(|_| format!("bad line {line:?}"))?,
                    end.parse().map_err(|_| format!("bad line {line:?}"))?,
                    pgoutput_tests::unhex(payload),
                )),
                _ => Err(format!("bad line {line:?}")),
            }
        })
        .collect()
}

/// What pg_recvlogical writes from `slot` up to `end`.
fn recvlogical(
    bin: &Path,
    dsn: &str,
    slot: &str,
    set: &Options,
    end: Lsn,
) -> Result<Vec<u8>, String> {
    let dir = std::env::temp_dir().join(format!("pgoutput-proxy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let file = dir.join(format!("{slot}.out"));
    let mut args = vec![
        "-d".to_owned(),
        dsn.to_owned(),
        "--slot".into(),
        slot.into(),
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
    run(Command::new(bin.join("pg_recvlogical")).args(&args))
        .map_err(|e| format!("pg_recvlogical on {slot}: {e}"))?;
    let written = std::fs::read(&file).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(written)
}

/// psql's `\copy` of a table through the proxy: the rows it printed.
fn copy_out(server: &Server, proxy: &Proxy, bin: &Path) -> Result<usize, String> {
    let want = server
        .query_one("SELECT count(*) FROM bulk;")
        .map_err(|e| e.to_string())?;
    let dsn = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        proxy.addr().port()
    );
    let out =
        run(Command::new(bin.join("psql")).args(["-X", "-d", &dsn, "-c", "\\copy bulk to stdout"]))
            .map_err(|e| format!("\\copy: {e}"))?;
    let rows = out.iter().filter(|b| **b == b'\n').count();
    if rows.to_string() != want.trim() {
        return Err(format!("\\copy printed {rows} rows of {}", want.trim()));
    }
    Ok(rows)
}

const CANCEL: &str = r#"
import sys, threading, psycopg2, psycopg2.errors
dsn = sys.argv[1]
conn = psycopg2.connect(dsn)
watcher = psycopg2.connect(dsn)
watcher.autocommit = True
pid = conn.get_backend_pid()
def cancel_when_sleeping():
    cur = watcher.cursor()
    while True:
        cur.execute("SELECT wait_event FROM pg_stat_activity WHERE pid = %s", (pid,))
        if cur.fetchone()[0] == "PgSleep":
            conn.cancel()
            return
        cur.execute("SELECT pg_sleep(0.01)")
threading.Thread(target=cancel_when_sleeping).start()
try:
    conn.cursor().execute("SELECT pg_sleep(60)")
    print("not canceled")
except psycopg2.errors.QueryCanceled as e:
    print(e.pgcode, str(e).strip().splitlines()[0])
"#;

/// A query canceled through the proxy (psycopg2's `cancel()`, a CancelRequest on a new
/// connection with the backend's key, which the proxy passes to the upstream).
fn cancel(proxy: &Proxy) -> Result<(), String> {
    let dsn = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        proxy.addr().port()
    );
    let out = run(Command::new("python3").args(["-c", CANCEL, &dsn]))?;
    let out = String::from_utf8_lossy(&out);
    if out.trim() != "57014 canceling statement due to user request" {
        return Err(format!("the cancel request: {out}"));
    }
    Ok(())
}

/// Faults on the live stream: the crate's consumer, reconnecting, gets every transaction
/// exactly once through a close inside a transaction, a reset mid-frame, a FATAL 57P01
/// and a stall; the slot is confirmed to the end. psycopg2 gets the FATAL as PostgreSQL
/// words it.
pub fn check_faults(server: &Server) -> Result<String, String> {
    let options = Options {
        slot: "proxy_faults",
        version: ProtocolVersion::V2,
        streaming: Streaming::On,
        binary: false,
        two_phase: false,
    };
    for slot in [options.slot, "proxy_fatal"] {
        create_slot(server, slot)?;
    }
    for sql in workload(95_000) {
        write(server, &sql)?;
    }
    let expected = peek_slot(server, options.slot, &options)?;
    let want = transaction_ends(&options, &expected)?;
    let proxy = start_proxy(server)?;
    let slot = options.slot;
    let rules = [
        // Connection 1: closed inside transaction 2, after its first change.
        Fault::new(
            Trigger::Change {
                transaction: 2,
                after: 1,
            },
            Action::Close,
        )
        .slot(slot)
        .connection(1),
        // Connection 2: reset after 10 bytes of its 3rd message.
        Fault::new(Trigger::mid_frame(3, 10), Action::Reset)
            .slot(slot)
            .connection(2),
        // Connection 3: PostgreSQL's FATAL for pg_terminate_backend, inside the first
        // stream block (of the large transaction).
        Fault::new(
            Trigger::message_of(MessageKind::of::<StreamStart>(), 1),
            Action::error("57P01"),
        )
        .slot(slot)
        .connection(3),
        // Connection 4: silent for 300 ms before its first message.
        Fault::new(
            Trigger::Message {
                n: 1,
                kind: None,
                before: true,
                byte: None,
            },
            Action::Stall { ms: Some(300) },
        )
        .slot(slot)
        .connection(4),
    ];
    for rule in rules {
        proxy.add_fault(rule).map_err(|e| e.to_string())?;
    }
    // The judge's probe holds every transaction too: a correct consumer is not accused.
    proxy.set_probe(Some(pgoutput_harness::judge::Probe::every(1)));
    let resumes = consume_through(&proxy, &options, &want)?;
    no_findings(&proxy)?;
    let fired: Vec<u64> = proxy.faults().iter().map(|(_, n)| *n).collect();
    if fired != [1, 1, 1, 1] {
        return Err(format!(
            "the rules fired {fired:?} times; log: {:?}",
            proxy.log()
        ));
    }
    let last = *want.last().ok_or("no transaction")?;
    let flushed = wait_confirmed(server, slot, last)?;
    let fatal = psycopg2_fatal(server, &proxy)?;
    for slot in [options.slot, "proxy_fatal"] {
        drop_slot(server, slot);
    }
    Ok(format!(
        "{} transactions exactly once through a close, a reset mid-frame, 57P01 and a stall ({} resumes), the probe armed and no finding; the real slot confirmed {flushed}; psycopg2 got \"{fatal}\"",
        want.len(),
        resumes
    ))
}

/// A correct consumer: the judge found nothing, across all its connections.
pub(crate) fn no_findings(proxy: &Proxy) -> Result<(), String> {
    match proxy.findings().as_slice() {
        [] => Ok(()),
        findings => Err(format!("findings for a correct consumer: {findings:?}")),
    }
}

/// The crate's consumer, reconnecting and confirming each transaction it is given,
/// reads `options.slot` through the proxy until it has every transaction of `want`:
/// they must come exactly once, in order. How many times it resumed.
fn consume_through(proxy: &Proxy, options: &Options, want: &[Lsn]) -> Result<usize, String> {
    let mut info =
        ConnInfo::parse(Some(&through(proxy, TAIL_USER)), |_| None).map_err(|e| e.to_string())?;
    info.application_name = "proxy-faults".into();
    let resumed = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&resumed);
    let config = ConsumerConfig::new(options.slot, stream_options(options))
        .auto_confirm(true)
        .reconnect(Duration::from_millis(100))
        .on_reconnect(move |note| {
            if let Reconnecting::Resumed { .. } = note {
                count.fetch_add(1, Ordering::SeqCst);
            }
        });
    let mut consumer = Consumer::connect(&info, config).map_err(|e| e.to_string())?;
    let mut ends = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while ends.len() < want.len() {
        if Instant::now() > deadline {
            return Err(format!(
                "{} of {} transactions in 120 s; proxy log: {:?}",
                ends.len(),
                want.len(),
                proxy.log()
            ));
        }
        if let Some(event) = consumer
            .next_within(Duration::from_millis(500))
            .map_err(|e| e.to_string())?
        {
            ends.extend(event.confirmable_lsn());
        }
    }
    if ends != want {
        return Err(format!("transaction ends {ends:?}, expected {want:?}"));
    }
    consumer.close();
    Ok(resumed.load(Ordering::SeqCst))
}

/// The rules that fire between frames, and the shutdown sequence, on a real stream: a
/// `time` rule starts PostgreSQL's shutdown sequence 1 ms into the first connection (the
/// transaction under way finishes, keepalives ask for a reply until the consumer has
/// confirmed what it was sent, then `COPY 0` and the close); a `flush` rule fires when
/// the consumer confirms the last transaction (seen from PostgreSQL itself: the slot's
/// `confirmed_flush_lsn`). The consumer gets every transaction once.
pub fn check_timers_and_shutdown(server: &Server) -> Result<String, String> {
    let options = Options {
        slot: "proxy_timers",
        version: ProtocolVersion::V1,
        streaming: Streaming::Off,
        binary: false,
        two_phase: false,
    };
    let slot = options.slot;
    create_slot(server, slot)?;
    for sql in workload(98_000) {
        write(server, &sql)?;
    }
    let expected = peek_slot(server, slot, &options)?;
    let want = transaction_ends(&options, &expected)?;
    let proxy = start_proxy(server)?;
    let last = *want.last().ok_or("no transaction")?;
    let rules = [
        Fault::new(Trigger::Time { ms: 1 }, Action::Shutdown)
            .slot(slot)
            .connection(1),
        Fault::new(Trigger::Flush { lsn: last }, Action::RequestReply).slot(slot),
    ];
    for rule in rules {
        proxy.add_fault(rule).map_err(|e| e.to_string())?;
    }
    let resumes = consume_through(&proxy, &options, &want)?;
    // The status update that moved the slot there passed the proxy's flush rule first.
    wait_confirmed(server, slot, last)?;
    no_findings(&proxy)?;
    let fired: Vec<u64> = proxy.faults().iter().map(|(_, n)| *n).collect();
    let log = proxy.log();
    if fired != [1, 1] {
        return Err(format!("the rules fired {fired:?} times; log: {log:?}"));
    }
    let Some(shut) = log
        .iter()
        .find(|l| l.contains("shut down: the client confirmed"))
    else {
        return Err(format!("no completed shutdown in the log: {log:?}"));
    };
    let shut = shut.clone();
    // The walsender's own end, as the test server tells it: not a fault's cut.
    let ended = proxy.facts().into_iter().find_map(|(_, fact)| match fact {
        Fact::Ended { connection: 1, how } => Some(how),
        _ => None,
    });
    if ended != Some(Ending::Server) {
        return Err(format!(
            "connection 1 ended {ended:?}, not by the server's shutdown"
        ));
    }
    drop_slot(server, slot);
    Ok(format!(
        "{} transactions once through a time rule, a flush rule and the shutdown sequence ({resumes} resumes); {shut}",
        want.len()
    ))
}

/// Waits until PostgreSQL itself shows `slot` confirmed at `lsn` or past it.
pub(crate) fn wait_confirmed(server: &Server, slot: &str, lsn: Lsn) -> Result<Lsn, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let confirmed: Lsn = server
            .query_one(&format!(
                "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '{slot}';"
            ))
            .map_err(|e| e.to_string())?
            .trim()
            .parse()
            .map_err(|e| format!("{e}"))?;
        if confirmed >= lsn {
            return Ok(confirmed);
        }
        if Instant::now() > deadline {
            return Err(format!("slot {slot} confirmed {confirmed}, not {lsn}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

const PSYCOPG2_FATAL: &str = r#"
import sys, psycopg2, psycopg2.extras
dsn, slot = sys.argv[1], sys.argv[2]
conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
cur = conn.cursor()
cur.start_replication(slot_name=slot, decode=False, options={"proto_version": "1", "publication_names": "pub"})
try:
    cur.consume_stream(lambda msg: None)
    print("no error")
except psycopg2.Error as e:
    print(str(e).strip().splitlines()[0])
"#;

/// psycopg2 streaming through a rule that sends FATAL 57P01 after the first Begin: what
/// it reports.
fn psycopg2_fatal(server: &Server, proxy: &Proxy) -> Result<String, String> {
    proxy.clear_faults();
    proxy
        .add_fault(
            Fault::new(
                Trigger::Message {
                    n: 1,
                    kind: None,
                    before: false,
                    byte: None,
                },
                Action::error("57P01"),
            )
            .slot("proxy_fatal"),
        )
        .map_err(|e| e.to_string())?;
    let out = run(Command::new("python3").args([
        "-c",
        PSYCOPG2_FATAL,
        &through(proxy, TAIL_USER),
        "proxy_fatal",
    ]))?;
    let out = String::from_utf8_lossy(&out).trim().to_owned();
    if out != "terminating connection due to administrator command" {
        return Err(format!("psycopg2 under 57P01 reported {out:?}"));
    }
    let _ = server;
    Ok(out)
}

/// Failures: an unreachable upstream gets the client PostgreSQL's FATAL naming it (and
/// the proxy serves the next client); the upstream's walsender terminated mid-stream
/// reaches the client as PostgreSQL's FATAL and the close; 1,000 clients that vanish
/// mid-session (half of them in copy-both) leave no backend behind on the server.
pub fn check_failures(server: &Server) -> Result<String, String> {
    let unreachable = unreachable_upstream()?;
    let proxy = start_proxy(server)?;
    let terminated = terminated_mid_stream(server, &proxy)?;
    let churned = churn(server, &proxy, 1000)?;
    Ok(format!(
        "unreachable upstream: \"{unreachable}\"; walsender terminated mid-stream: psycopg2 got \"{terminated}\"; {churned}"
    ))
}

/// A startup packet for `user` on database `postgres`, with these parameters more.
pub(crate) fn startup_packet(user: &str, more: &[(&str, &str)]) -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    for (name, value) in [("user", user), ("database", "postgres")]
        .iter()
        .chain(more)
    {
        for s in [name, value] {
            body.extend_from_slice(s.as_bytes());
            body.push(0);
        }
    }
    body.push(0);
    let mut packet = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    packet.extend(body);
    packet
}

/// Reads backend messages until one of type `until` (or an ErrorResponse): each type
/// byte and body.
pub(crate) fn read_until(
    stream: &mut impl std::io::Read,
    until: u8,
) -> Result<Vec<(u8, Vec<u8>)>, String> {
    let mut messages = Vec::new();
    loop {
        let mut header = [0u8; 5];
        stream
            .read_exact(&mut header)
            .map_err(|e| format!("reading a message after {messages:?}: {e}"))?;
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        let mut body = vec![0; len.saturating_sub(4)];
        stream.read_exact(&mut body).map_err(|e| e.to_string())?;
        let tag = header[0];
        messages.push((tag, body));
        if tag == until || tag == b'E' {
            return Ok(messages);
        }
    }
}

/// An ErrorResponse's severity, SQLSTATE and message.
pub(crate) fn error_fields(body: &[u8]) -> (String, String, String) {
    let mut fields = (String::new(), String::new(), String::new());
    for field in body.split(|b| *b == 0).filter(|f| !f.is_empty()) {
        let value = String::from_utf8_lossy(&field[1..]).into_owned();
        match field[0] {
            b'S' => fields.0 = value,
            b'C' => fields.1 = value,
            b'M' => fields.2 = value,
            _ => {}
        }
    }
    fields
}

fn unreachable_upstream() -> Result<String, String> {
    use std::io::Write;
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let proxy = Proxy::builder(&format!("host=127.0.0.1 port={port} sslmode=disable"))
        .map_err(|e| e.to_string())?
        .start()
        .map_err(|e| e.to_string())?;
    let mut last = String::new();
    for _ in 0..2 {
        let mut client = std::net::TcpStream::connect(proxy.addr()).map_err(|e| e.to_string())?;
        client
            .write_all(&startup_packet("postgres", &[]))
            .map_err(|e| e.to_string())?;
        let messages = read_until(&mut client, b'Z')?;
        let Some((b'E', body)) = messages.last() else {
            return Err(format!("no ErrorResponse but {messages:?}"));
        };
        let (severity, code, message) = error_fields(body);
        let target = format!("127.0.0.1:{port}");
        if severity != "FATAL" || code != "08006" || !message.contains(&target) {
            return Err(format!("{severity} {code} {message}"));
        }
        last = message;
    }
    Ok(last)
}

const TERMINATED: &str = r#"
import sys, psycopg2, psycopg2.extras
dsn, admin, slot = sys.argv[1], sys.argv[2], sys.argv[3]
conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
cur = conn.cursor()
cur.start_replication(slot_name=slot, decode=False, options={"proto_version": "1", "publication_names": "pub"})
killed = False
def consume(msg):
    global killed
    if not killed:
        killed = True
        a = psycopg2.connect(admin)
        a.autocommit = True
        a.cursor().execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        a.close()
try:
    cur.consume_stream(consume)
    print("no error")
except psycopg2.Error as e:
    print(str(e).strip().splitlines()[0])
"#;

/// psycopg2 streaming through the proxy while its walsender is terminated: what it
/// reports.
fn terminated_mid_stream(server: &Server, proxy: &Proxy) -> Result<String, String> {
    let slot = "proxy_terminated";
    create_slot(server, slot)?;
    for sql in &workload(93_000)[..2] {
        write(server, sql)?;
    }
    let out = run(Command::new("python3").args([
        "-c",
        TERMINATED,
        &through(proxy, TAIL_USER),
        &server.conninfo("postgres", None),
        slot,
    ]));
    drop_slot(server, slot);
    let out = String::from_utf8_lossy(&out?).trim().to_owned();
    if out != "terminating connection due to administrator command" {
        return Err(format!("psycopg2 reported {out:?}"));
    }
    Ok(out)
}

/// `count` clients log in through the proxy and vanish without a word, every other one
/// in copy-both on a slot; then no backend of theirs is left, and the slot is free.
fn churn(server: &Server, proxy: &Proxy, count: usize) -> Result<String, String> {
    use std::io::Write;
    let slot = "proxy_churn";
    create_slot(server, slot)?;
    let start = format!(
        "START_REPLICATION SLOT {slot} LOGICAL 0/0 (proto_version '1', publication_names 'pub')\0"
    );
    let mut query = vec![b'Q'];
    query.extend_from_slice(&((start.len() + 4) as u32).to_be_bytes());
    query.extend_from_slice(start.as_bytes());
    let started = Instant::now();
    let mut in_use = 0;
    for i in 0..count {
        let streaming = i % 2 == 0;
        let mut more = vec![("application_name", "proxy-churn")];
        if streaming {
            more.push(("replication", "database"));
        }
        let mut client = std::net::TcpStream::connect(proxy.addr()).map_err(|e| e.to_string())?;
        client
            .write_all(&startup_packet("postgres", &more))
            .map_err(|e| e.to_string())?;
        read_until(&mut client, b'Z')?;
        // The walsender of the client before may still be on its way out (PostgreSQL
        // reaps it a moment after its socket closes): 55006 until it has released the
        // slot, as on a direct connection; the client asks again.
        let deadline = Instant::now() + Duration::from_secs(30);
        if streaming {
            loop {
                client.write_all(&query).map_err(|e| e.to_string())?;
                let messages = read_until(&mut client, b'W')?;
                match messages.last() {
                    Some((b'W', _)) => break,
                    Some((b'E', body))
                        if error_fields(body).1 == "55006" && Instant::now() < deadline =>
                    {
                        read_until(&mut client, b'Z')?;
                        in_use += 1;
                    }
                    _ => {
                        return Err(format!(
                            "client {i}: START_REPLICATION answered {messages:?}"
                        ))
                    }
                }
            }
        }
        // Gone: no Terminate, no CopyDone.
        drop(client);
    }
    let elapsed = started.elapsed();
    wait_all_closed(proxy)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = server
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'proxy-churn';",
            )
            .map_err(|e| e.to_string())?;
        if left.trim() == "0" {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} backends of the churned clients left after 30 s",
                left.trim()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    drop_slot(server, slot);
    Ok(format!(
        "{count} clients came and went in {:.1} s (half in copy-both; {in_use} START_REPLICATION found the slot still held by the walsender before, 55006): none of their backends left",
        elapsed.as_secs_f64()
    ))
}

const CONTROL: &str = r#"
import json, sys, threading, urllib.request, urllib.error, psycopg2, psycopg2.extras
control, dsn, slot, admin_dsn = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]

def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(control + path, data=data, method=method)
    try:
        with urllib.request.urlopen(request) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())

out = {}
out["endpoints"] = sorted(call("GET", "/")[1]["endpoints"])
out["bad_rule"] = call("POST", "/faults", {"when": {"on": "commit"}, "then": {"do": "close"}})
out["armed"] = call("POST", "/faults", {"when": {"on": "commit", "transaction": 2}, "then": {"do": "close"}, "slot": slot})
out["wait_before"] = call("POST", "/wait", {"slot": slot, "lsn": "0/1", "timeout_ms": 10})[0]

conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
cur = conn.cursor()
cur.start_replication(slot_name=slot, decode=False, options={"proto_version": "1", "publication_names": "pub"})
# The transactions are written one at a time, each once the proxy has seen the last one
# confirmed: psycopg2 sends a confirmation when it next waits for data, so the rule's cut
# after the second cannot come first.
admin = psycopg2.connect(admin_dsn)
admin.autocommit = True
def write():
    admin.cursor().execute("INSERT INTO counters (n) VALUES (99001)")
commits = []
waiter = None
def wait_then_write(lsn):
    waited = call("POST", "/wait", {"slot": slot, "lsn": lsn, "timeout_ms": 30000})
    out["wait"] = [waited[0], waited[1]["confirmed_flush_lsn"] == lsn]
    write()
def consume(msg):
    global waiter
    if msg.payload[:1] == b"C":
        commits.append(msg.data_start)
        # The Commit's end LSN (bytes 10..18): confirmed once applied.
        end = int.from_bytes(msg.payload[10:18], "big")
        msg.cursor.send_feedback(flush_lsn=end, write_lsn=end, force=True)
        if waiter is None:
            waiter = threading.Thread(target=wait_then_write, args=("%X/%X" % (end >> 32, end & 0xFFFFFFFF),))
            waiter.start()
write()
try:
    cur.consume_stream(consume)
    out["stream"] = "no end"
except psycopg2.Error as e:
    out["stream"] = "ended: " + type(e).__name__
if waiter is not None:
    waiter.join()
out["commits"] = len(commits)
out["fired"] = [r["fired"] for r in call("GET", "/faults")[1]]
connections = [c for c in call("GET", "/connections")[1] if c["slot"] == slot]
out["connection"] = [(c["user"], c["replication"], c["frames"] > 0, c["status_updates"] > 0, c["ended"]) for c in connections]
slots = [s for s in call("GET", "/slots")[1] if s["name"] == slot]
out["slot_confirmed"] = slots[0]["confirmed_flush_lsn"] if slots else None
out["log_fired"] = any("fault: Close at Commit" in line for line in call("GET", "/log")[1])
out["findings"] = call("GET", "/findings")[1]
out["cleared"] = call("DELETE", "/faults")[0]
out["unknown"] = call("GET", "/nothing")[0]
out["wrong_method"] = call("PUT", "/faults")[0]
print(json.dumps(out))
"#;

/// The proxy from the command line, driven over its control API from Python (urllib and
/// psycopg2): a malformed rule is refused with 400, a rule armed over HTTP cuts the
/// stream after the second transaction, `/wait` returns once psycopg2 confirmed,
/// `/connections`, `/slots` and `/log` say what happened.
pub fn check_control(server: &Server) -> Result<String, String> {
    use std::io::BufRead;
    let slot = "proxy_control";
    create_slot(server, slot)?;
    let mut child = Command::new(crate::tail::binary()?)
        .args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--control",
            "127.0.0.1:0",
            "--upstream",
            &server.conninfo("postgres", None),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    // Its first lines say where it listens.
    let mut lines = std::io::BufReader::new(child.stderr.take().ok_or("no stderr")?).lines();
    let mut listen = None;
    let mut control = None;
    while listen.is_none() || control.is_none() {
        let line = lines
            .next()
            .ok_or("the proxy ended before it listened")?
            .map_err(|e| e.to_string())?;
        if let Some(rest) = line.strip_prefix("pgoutput proxy: listening on ") {
            listen = rest.split(',').next().map(str::to_owned);
        }
        if let Some(rest) = line.strip_prefix("pgoutput proxy: control API on ") {
            control = Some(rest.trim_end_matches('/').to_owned());
        }
    }
    let (listen, control) = (listen.unwrap_or_default(), control.unwrap_or_default());
    let port = listen.rsplit(':').next().unwrap_or_default();
    let dsn = format!(
        "host=127.0.0.1 port={port} user={} password={} dbname=postgres",
        TAIL_USER.0, TAIL_USER.1
    );
    let admin = server.conninfo("postgres", None);
    let result = run(Command::new("python3").args(["-c", CONTROL, &control, &dsn, slot, &admin]));
    let _ = child.kill();
    let _ = child.wait();
    drop_slot(server, slot);
    let out: serde_json::Value =
        serde_json::from_slice(&result?).map_err(|e| format!("the script's output: {e}"))?;
    let expect = |key: &str, want: serde_json::Value| -> Result<(), String> {
        if out[key] != want {
            return Err(format!("{key}: {} (want {want}); all: {out}", out[key]));
        }
        Ok(())
    };
    use serde_json::json;
    expect(
        "endpoints",
        json!([
            "DELETE /faults",
            "DELETE /probe",
            "DELETE /slots/:name",
            "GET /connections",
            "GET /facts",
            "GET /faults",
            "GET /findings",
            "GET /log",
            "GET /probe",
            "GET /slots",
            "POST /checkpoint",
            "POST /crash",
            "POST /faults",
            "POST /probe",
            "POST /slots/:name/hold",
            "POST /slots/:name/invalidate",
            "POST /wait"
        ]),
    )?;
    if out["bad_rule"][0] != 400 {
        return Err(format!("a malformed rule: {}", out["bad_rule"]));
    }
    expect("armed", json!([201, {"armed": 1}]))?;
    expect("wait_before", json!(408))?;
    expect("wait", json!([200, true]))?;
    expect("commits", json!(2))?;
    expect("fired", json!([1]))?;
    expect(
        "connection",
        json!([["tailer", "database", true, true, "a rule closed it"]]),
    )?;
    expect("log_fired", json!(true))?;
    expect("findings", json!([]))?;
    expect("cleared", json!(200))?;
    expect("unknown", json!(404))?;
    expect("wrong_method", json!(405))?;
    Ok(format!(
        "over HTTP: a rule armed and fired after 2 transactions, /wait, /connections, /slots (confirmed {}), /log; a malformed rule refused ({})",
        out["slot_confirmed"], out["bad_rule"][1]["error"]
    ))
}

const HELD_CONSUMER: &str = r#"
import sys, psycopg2, psycopg2.extras
dsn, slot, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
cur = conn.cursor()
cur.start_replication(slot_name=slot, decode=False, options={"proto_version": "1", "publication_names": "pub"})
ends = []
def consume(msg):
    if msg.payload[:1] == b"C":
        ends.append(int.from_bytes(msg.payload[10:18], "big"))
        if len(ends) == 2:
            msg.cursor.send_feedback(flush_lsn=ends[1], write_lsn=ends[1], force=True)
        if len(ends) == count:
            raise psycopg2.extras.StopReplication()
try:
    cur.consume_stream(consume)
except psycopg2.extras.StopReplication:
    pass
print("received", flush=True)
sys.stdin.readline()
cur.send_feedback(flush_lsn=ends[-1], write_lsn=ends[-1], force=True)
print("confirmed", flush=True)
try:
    cur.consume_stream(lambda msg: None)
except psycopg2.Error as e:
    print("ended", flush=True)
"#;

const FIRST_COMMIT: &str = r#"
import sys, psycopg2, psycopg2.extras
dsn, slot = sys.argv[1], sys.argv[2]
conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
cur = conn.cursor()
cur.start_replication(slot_name=slot, decode=False, options={"proto_version": "1", "publication_names": "pub"})
def consume(msg):
    if msg.payload[:1] == b"C":
        print(int.from_bytes(msg.payload[10:18], "big"))
        raise psycopg2.extras.StopReplication()
try:
    cur.consume_stream(consume)
except psycopg2.extras.StopReplication:
    pass
"#;

/// The real slot's `confirmed_flush_lsn`.
fn real_confirmed(server: &Server, slot: &str) -> Result<Lsn, String> {
    server
        .query_one(&format!(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '{slot}';"
        ))
        .map_err(|e| e.to_string())?
        .trim()
        .parse()
        .map_err(|e| format!("{e}"))
}

/// A crash with slot persistence, and slot states, on a real server: psycopg2 confirms
/// the second transaction, a checkpoint lets PostgreSQL hear it, psycopg2 confirms the
/// last, which PostgreSQL does not hear, and a `crash` rule on that confirmation cuts the
/// connection (the rule and `Proxy::crash` are one crash); new ones get
/// 57P03 while the server "starts up", and the real server then sends again from the
/// third transaction. START_REPLICATION of a held, an invalidated and a forgotten slot
/// get 55006, 55000 and 42704 from the proxy in PostgreSQL's words.
pub fn check_crash_and_slot_states(server: &Server) -> Result<String, String> {
    use std::io::{BufRead, Write};
    let slot = "proxy_crash";
    create_slot(server, slot)?;
    for i in 0..5 {
        write(
            server,
            &format!("INSERT INTO counters (n) VALUES ({});", 96_000 + i),
        )?;
    }
    let options = Options {
        slot,
        version: ProtocolVersion::V1,
        streaming: Streaming::Off,
        binary: false,
        two_phase: false,
    };
    let rows = peek_slot(server, slot, &options)?;
    let want = transaction_ends(&options, &rows)?;
    if want.len() != 5 {
        return Err(format!(
            "the slot holds {} transactions ({} messages), not the 5 written",
            want.len(),
            rows.len()
        ));
    }
    let before = real_confirmed(server, slot)?;
    let refusal = Duration::from_millis(300);
    let proxy = Proxy::builder(&server.conninfo("postgres", None))
        .map_err(|e| e.to_string())?
        .checkpoint_interval(Duration::from_secs(3600))
        .crash_refusal(refusal)
        .start()
        .map_err(|e| e.to_string())?;
    let mut child = Command::new("python3")
        .args([
            "-c",
            HELD_CONSUMER,
            &through(&proxy, TAIL_USER),
            slot,
            &want.len().to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let mut lines = std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    let mut expect_line = |want: &str| -> Result<(), String> {
        match lines.next() {
            Some(Ok(line)) if line == want => Ok(()),
            other => Err(format!("psycopg2 said {other:?}, not {want:?}")),
        }
    };
    let wait = Duration::from_secs(30);
    let steps = (|| -> Result<(Lsn, Lsn), String> {
        expect_line("received")?;
        proxy
            .wait_for_confirmed_flush(slot, want[1], wait)
            .map_err(|e| e.to_string())?;
        // Held back: PostgreSQL has not heard it.
        let unheard = real_confirmed(server, slot)?;
        proxy.checkpoint();
        let checkpointed = wait_confirmed(server, slot, want[1])?;
        if unheard != before || checkpointed != want[1] {
            return Err(format!(
                "the slot was at {before}, {unheard} before the checkpoint and {checkpointed} after, not {}",
                want[1]
            ));
        }
        // The crash as a rule: when psycopg2 confirms the last transaction.
        let last = *want.last().ok_or("no transaction")?;
        proxy
            .add_fault(Fault::new(Trigger::Flush { lsn: last }, Action::Crash).slot(slot))
            .map_err(|e| e.to_string())?;
        writeln!(stdin, "go").map_err(|e| e.to_string())?;
        expect_line("confirmed")?;
        expect_line("ended")?;
        Ok((checkpointed, real_confirmed(server, slot)?))
    })();
    let (checkpointed, at_crash) = match steps {
        Ok(positions) => positions,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    let _ = child.wait();
    // While it "starts up": PostgreSQL's FATAL to a new connection.
    let mut client = std::net::TcpStream::connect(proxy.addr()).map_err(|e| e.to_string())?;
    client
        .write_all(&startup_packet("postgres", &[]))
        .map_err(|e| e.to_string())?;
    let refused = read_until(&mut client, b'Z')?;
    let refused = match refused.last() {
        Some((b'E', body)) => error_fields(body),
        other => {
            return Err(format!(
                "a connection during the crash refusal got {other:?}"
            ))
        }
    };
    if refused.1 != "57P03" || refused.2 != "the database system is starting up" {
        return Err(format!("during the crash refusal: {refused:?}"));
    }
    // Waits out the refusal, then reads again: from the third transaction.
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        match run(Command::new("python3").args([
            "-c",
            FIRST_COMMIT,
            &through(&proxy, TAIL_USER),
            slot,
        ])) {
            Ok(out) => break out,
            Err(e) if e.contains("starting up") && Instant::now() < deadline => {
                std::thread::sleep(refusal / 4);
            }
            Err(e) => return Err(e),
        }
    };
    let first = Lsn(String::from_utf8_lossy(&first)
        .trim()
        .parse()
        .map_err(|_| format!("not a position: {first:?}"))?);
    if first != want[2] || at_crash != want[1] {
        return Err(format!(
            "after the crash the first transaction ended at {first}, not {} (the third); the slot was at {at_crash} at the crash",
            want[2]
        ));
    }
    let resent = proxy
        .slots()
        .into_iter()
        .find(|s| s.name == slot)
        .and_then(|s| s.resent)
        .ok_or("no re-send recorded after the crash")?;
    if resent.first != want[2] || resent.confirmed_before != *want.last().unwrap_or(&Lsn(0)) {
        return Err(format!("the re-send recorded: {resent:?}"));
    }
    let states = slot_states(server, &proxy)?;
    drop_slot(server, slot);
    Ok(format!(
        "the real slot moved only at the checkpoint ({before} to {checkpointed}) though psycopg2 confirmed {}; after the crash (57P03 meanwhile) PostgreSQL sent again from the third transaction ({first}); {states}",
        want.last().copied().unwrap_or_default()
    ))
}

/// START_REPLICATION of slots in a held, invalidated and forgotten state: the proxy's
/// answers, and that none reached the upstream.
fn slot_states(server: &Server, proxy: &Proxy) -> Result<String, String> {
    use std::io::Write;
    proxy.hold_slot("proxy_held", Duration::from_secs(3600));
    proxy.invalidate_slot("proxy_invalid");
    proxy.forget_slot("proxy_gone");
    let major = server.major();
    let want = [
        (
            "proxy_held",
            "55006",
            "replication slot \"proxy_held\" is active for PID 0".to_owned(),
        ),
        (
            "proxy_invalid",
            "55000",
            if major >= 18 {
                "can no longer access replication slot \"proxy_invalid\"".to_owned()
            } else {
                "cannot read from logical replication slot \"proxy_invalid\"".to_owned()
            },
        ),
        (
            "proxy_gone",
            "42704",
            "replication slot \"proxy_gone\" does not exist".to_owned(),
        ),
    ];
    let mut client = std::net::TcpStream::connect(proxy.addr()).map_err(|e| e.to_string())?;
    client
        .write_all(&startup_packet("postgres", &[("replication", "database")]))
        .map_err(|e| e.to_string())?;
    read_until(&mut client, b'Z')?;
    for (slot, code, message) in &want {
        let start = format!(
            "START_REPLICATION SLOT {slot} LOGICAL 0/0 (proto_version '1', publication_names 'pub')\0"
        );
        let mut query = vec![b'Q'];
        query.extend_from_slice(&((start.len() + 4) as u32).to_be_bytes());
        query.extend_from_slice(start.as_bytes());
        client.write_all(&query).map_err(|e| e.to_string())?;
        let answer = read_until(&mut client, b'W')?;
        let got = match answer.last() {
            Some((b'E', body)) => error_fields(body),
            other => return Err(format!("{slot}: {other:?}")),
        };
        if (got.0.as_str(), got.1.as_str(), &got.2) != ("ERROR", *code, message) {
            return Err(format!("{slot}: {got:?}"));
        }
        // ReadyForQuery follows, and the connection takes the next command.
        read_until(&mut client, b'Z')?;
    }
    let upstream_saw = server
        .query_one("SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'proxy\\_%' AND slot_name IN ('proxy_held', 'proxy_invalid', 'proxy_gone');")
        .map_err(|e| e.to_string())?;
    if upstream_saw.trim() != "0" {
        return Err(format!("{upstream_saw} of the slots exist upstream"));
    }
    Ok("a held, an invalidated and a forgotten slot got 55006, 55000 and 42704 from the proxy in PostgreSQL's words".into())
}

const CONFIRM_AT_BEGIN: &str = r#"
import sys, psycopg2, psycopg2.extras
dsn, slot = sys.argv[1], sys.argv[2]
conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
cur = conn.cursor()
cur.start_replication(slot_name=slot, decode=False, options={"proto_version": "1", "publication_names": "pub"})
def consume(msg):
    if msg.payload[:1] == b"B":
        # The bug (pglogrepl#40, debezium#7531): one past the transaction's commit
        # position, confirmed as soon as its Begin says where it will commit (a restart
        # there skips the transaction).
        past = int.from_bytes(msg.payload[1:9], "big") + 1
        msg.cursor.send_feedback(flush_lsn=past, write_lsn=past, force=True)
        print(past, flush=True)
cur.consume_stream(consume)
"#;

const NEVER_CONFIRMS: &str = r#"
import sys, psycopg2, psycopg2.extras
dsn, slot, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
cur = conn.cursor()
cur.start_replication(slot_name=slot, decode=False, options={"proto_version": "1", "publication_names": "pub"})
commits = 0
def consume(msg):
    global commits
    commits += msg.payload[:1] == b"C"
    if commits == count:
        raise psycopg2.extras.StopReplication()
try:
    cur.consume_stream(consume)
except psycopg2.extras.StopReplication:
    pass
conn.close()
"#;

/// A psycopg2 consumer that confirms each transaction's end (`keeps`: and the WAL end the
/// server reports while nothing is open, `cursor.wal_end`), or (`lags`) each transaction
/// only when the next one begins, which leaves its slot behind while nothing more is
/// published. Prints `ready` after `count` transactions and reads on.
const CONFIRMS_COMMITS: &str = r#"
import select, struct, sys, psycopg2, psycopg2.extras
dsn, slot, count, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
keeps = mode == "keeps"
conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
cur = conn.cursor()
cur.start_replication(slot_name=slot, decode=False, options={"proto_version": "1", "publication_names": "pub"})
commits, open_, confirmed, last = 0, False, 0, 0
while True:
    msg = cur.read_message()
    if msg is None:
        if keeps and not open_ and cur.wal_end > confirmed:
            confirmed = cur.wal_end
            cur.send_feedback(flush_lsn=confirmed, write_lsn=confirmed, force=True)
        select.select([cur], [], [], 0.02)
        continue
    tag = msg.payload[:1]
    open_ = tag != b"C" and (open_ or tag == b"B")
    if tag == b"B" and mode == "lags" and last:
        cur.send_feedback(flush_lsn=last, write_lsn=last, force=True)
    if tag == b"C":
        last = struct.unpack(">Q", msg.payload[10:18])[0]
        if mode != "lags":
            confirmed = max(confirmed, last)
            cur.send_feedback(flush_lsn=confirmed, write_lsn=confirmed, force=True)
        commits += 1
        if commits == count:
            print("ready", flush=True)
"#;

/// Findings through the proxy: a psycopg2 consumer that confirms a transaction's end at
/// its Begin is caught while the judge's probe holds the rest of the transaction back; one that
/// reads and never confirms is caught once it has left; the correct consumers of the
/// other checks have none.
pub fn check_findings(server: &Server) -> Result<String, String> {
    use pgoutput_harness::judge::{Finding, Probe};
    use std::io::BufRead;
    let (early, silent) = ("proxy_early", "proxy_silent");
    for slot in [early, silent, "proxy_lazy", "proxy_keeper"] {
        create_slot(server, slot)?;
    }
    for sql in &workload(94_000)[..3] {
        write(server, sql)?;
    }
    let proxy = start_proxy(server)?;
    // The judge's probe: each transaction held after its first change until the client
    // answers a reply request.
    proxy.set_probe(Some(Probe::every(1).wait(Duration::from_secs(30))));
    let mut child = Command::new("python3")
        .args(["-c", CONFIRM_AT_BEGIN, &through(&proxy, TAIL_USER), early])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut lines = std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    let past: Result<Lsn, String> = match lines.next() {
        Some(Ok(line)) => line
            .trim()
            .parse::<u64>()
            .map(Lsn)
            .map_err(|e| e.to_string()),
        other => Err(format!("psycopg2 said {other:?}")),
    };
    // Waits for the judge to see the confirmation the consumer sent.
    let deadline = Instant::now() + Duration::from_secs(30);
    let caught = loop {
        let findings = proxy.findings();
        if let Some((_, finding)) = findings.iter().find(|(slot, _)| slot == early) {
            break Ok(finding.clone());
        }
        if Instant::now() > deadline {
            break Err(format!("no finding in 30 s; log: {:?}", proxy.log()));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = child.kill();
    let _ = child.wait();
    let (past, caught) = (past?, caught?);
    match caught {
        Finding::ConfirmedUnsent { flush, .. } if flush == past => {}
        other => {
            return Err(format!(
                "caught {other:?}, not the flush of {past}; findings: {:?}; facts: {:?}; log: {:?}",
                proxy.findings(),
                proxy.facts(),
                proxy.log()
            ))
        }
    }
    check_idle(server, &proxy)?;
    // Still probed: psycopg2 answers the reply requests with 0/0, so the consumer that
    // confirms nothing is seen to have been asked while holding transactions.
    run(Command::new("python3").args([
        "-c",
        NEVER_CONFIRMS,
        &through(&proxy, TAIL_USER),
        silent,
        "3",
    ]))?;
    wait_all_closed(&proxy)?;
    let findings = proxy.findings();
    let never: Vec<&Finding> = findings
        .iter()
        .filter(|(slot, _)| slot == silent)
        .map(|(_, f)| f)
        .collect();
    if !matches!(never.as_slice(), [Finding::NeverConfirmed { .. }]) {
        return Err(format!(
            "the consumer that never confirmed: {findings:?}; facts: {:?}; log: {:?}",
            proxy.facts(),
            proxy.log()
        ));
    }
    for slot in [early, silent, "proxy_lazy", "proxy_keeper"] {
        drop_slot(server, slot);
    }
    Ok(format!(
        "a consumer confirming at Begin caught (probe armed) and one leaving its slot behind while idle caught, one confirming the WAL end clean; caught (\"{}\"); one that never confirmed caught",
        Finding::ConfirmedUnsent {
            connection: 0,
            flush: past,
            sent: Lsn(0)
        }
        .to_string()
        .split(',')
        .next()
        .unwrap_or_default()
    ))
}

/// Idle through the proxy, the probe armed: after three transactions, WAL that nothing
/// publishes (a non-transactional message, with `messages` off) moves the upstream's WAL
/// end; a consumer that confirms each transaction when the next begins is caught leaving
/// its slot behind over that WAL once it answered the proxy's reply requests there (idle
/// at its last transaction's end before, it only lags: no finding), one that confirms
/// the keepalive's WAL end is clean.
fn check_idle(server: &Server, proxy: &Proxy) -> Result<(), String> {
    use pgoutput_harness::judge::Finding;
    use std::io::BufRead;
    let mut children = Vec::new();
    for (slot, mode) in [("proxy_lazy", "lags"), ("proxy_keeper", "keeps")] {
        let mut child = Command::new("python3")
            .args([
                "-c",
                CONFIRMS_COMMITS,
                &through(proxy, TAIL_USER),
                slot,
                "3",
                mode,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        let mut lines = std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        children.push(child);
        match lines.next() {
            Some(Ok(line)) if line == "ready" => {}
            other => {
                for child in &mut children {
                    let _ = child.kill();
                }
                return Err(format!("{slot}: psycopg2 said {other:?}"));
            }
        }
    }
    let result = (|| {
        let moved: Lsn = server
            .query_one("SELECT pg_logical_emit_message(false, 'idle', 'unpublished');")
            .map_err(|e| e.to_string())?
            .trim()
            .parse()
            .map_err(|e| format!("{e:?}"))?;
        proxy
            .wait_for_confirmed_flush("proxy_keeper", moved, Duration::from_secs(30))
            .map_err(|e| format!("the consumer confirming the WAL end: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let findings = proxy.findings();
            let lazy: Vec<&Finding> = findings
                .iter()
                .filter(|(slot, _)| slot == "proxy_lazy")
                .map(|(_, f)| f)
                .collect();
            if let [Finding::NotAdvancedWhileIdle { wal_end, .. }] = lazy[..] {
                // Idle at the end of its last transaction it only lags; the finding is
                // over the WAL nothing published, so its WAL end is the message's (or a
                // later one's: the judge's finding follows the idle WAL end).
                let sent = proxy
                    .slots()
                    .into_iter()
                    .find(|s| s.name == "proxy_lazy")
                    .map(|s| s.transaction_end_lsn)
                    .unwrap_or_default();
                if *wal_end <= sent {
                    return Err(format!(
                        "accused over published WAL: the idle finding's WAL end {wal_end} is not past the last transaction's end {sent}"
                    ));
                }
                if *wal_end >= moved {
                    break;
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no idle finding in 30 s: {findings:?}; slots {:?}; log {:?}",
                    proxy.slots(),
                    proxy.log().iter().rev().take(8).collect::<Vec<_>>()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let keeper: Vec<_> = proxy
            .findings()
            .into_iter()
            .filter(|(slot, _)| slot == "proxy_keeper")
            .collect();
        if !keeper.is_empty() {
            return Err(format!("the consumer confirming the WAL end: {keeper:?}"));
        }
        Ok(())
    })();
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    result
}

/// pg_recvlogical through the proxy's faults: closed inside a transaction, reset
/// mid-frame, FATAL 57P01; it reconnects by itself (after 5 s each time, its
/// `RECONNECT_SLEEP_TIME`) and reaches its end position, which PostgreSQL's slot then
/// shows confirmed, the last transaction's Commit written once.
pub fn check_recvlogical_faults(server: &Server, bin: &Path) -> Result<String, String> {
    let slot = "proxy_recvlogical";
    let options = Options {
        slot,
        version: ProtocolVersion::V1,
        streaming: Streaming::Off,
        binary: false,
        two_phase: false,
    };
    create_slot(server, slot)?;
    for sql in &workload(92_000)[..3] {
        write(server, sql)?;
    }
    let expected = peek_slot(server, slot, &options)?;
    let want = transaction_ends(&options, &expected)?;
    let last = *want.last().ok_or("no transaction")?;
    let last_commit = expected.last().map(|r| r.data.clone()).unwrap_or_default();
    let proxy = start_proxy(server)?;
    let rules = [
        Fault::new(
            Trigger::Change {
                transaction: 2,
                after: 1,
            },
            Action::Close,
        )
        .slot(slot)
        .connection(1),
        Fault::new(Trigger::mid_frame(2, 12), Action::Reset)
            .slot(slot)
            .connection(2),
        Fault::new(Trigger::message(1), Action::error("57P01"))
            .slot(slot)
            .connection(3),
    ];
    for rule in rules {
        proxy.add_fault(rule).map_err(|e| e.to_string())?;
    }
    // The probe armed: pg_recvlogical with its defaults (flush reported after each 10 s
    // fsync) is a correct consumer, accused of nothing.
    proxy.set_probe(Some(pgoutput_harness::judge::Probe::every(1)));
    let dir = std::env::temp_dir().join(format!("pgoutput-proxy-rl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let file = dir.join("out");
    let mut args = vec![
        "-d".to_owned(),
        through(&proxy, TAIL_USER),
        "--slot".into(),
        slot.into(),
        "--start".into(),
        "--endpos".into(),
        last.to_string(),
        "-f".into(),
        file.display().to_string(),
    ];
    for (name, value) in options.pairs() {
        args.extend(["-o".into(), format!("{name}={value}")]);
    }
    let started = Instant::now();
    let child = Command::new(bin.join("pg_recvlogical"))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let output = wait(child, Duration::from_secs(90))?;
    let written = std::fs::read(&file).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        return Err(format!("pg_recvlogical: {}: {stderr}", output.status));
    }
    let fired: Vec<u64> = proxy.faults().iter().map(|(_, n)| *n).collect();
    if fired != [1, 1, 1] {
        return Err(format!(
            "the rules fired {fired:?}; pg_recvlogical said: {stderr}"
        ));
    }
    let confirmed = wait_confirmed(server, slot, last)?;
    let commits = written
        .windows(last_commit.len())
        .filter(|w| *w == last_commit.as_slice())
        .count();
    if commits != 1 {
        return Err(format!("the last Commit written {commits} times"));
    }
    wait_all_closed(&proxy)?;
    no_findings(&proxy)?;
    drop_slot(server, slot);
    Ok(format!(
        "through a close, a reset mid-frame and 57P01 pg_recvlogical (its defaults, probe armed, no finding) reached its end position {last} in {:.1} s (3 reconnections), the slot confirmed {confirmed}",
        started.elapsed().as_secs_f64()
    ))
}
