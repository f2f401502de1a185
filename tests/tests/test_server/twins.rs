//! The same bytes to a real PostgreSQL 15 walsender and to the test server announcing
//! 15: what each answers (message types, severities, SQLSTATEs, messages) must be the
//! same, for the timeouts and limits a walsender enforces and for the edge cases where the
//! test server used to differ (copy messages after the copy, a status update with extra
//! bytes, a start position past the WAL end, another session's temporary slot, a
//! publication that does not exist, start-up packets at the edges of the length PostgreSQL
//! reads), and for real clients (pg_recvlogical and psycopg2
//! answering reply requests under a short `wal_sender_timeout`, a stopped pg_recvlogical
//! dropped while another client is served).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pgoutput_codec::Lsn;
use pgoutput_harness::server::{Auth, Publication, Script, Table, TestServer, Transaction};
use pgoutput_tests::pg::Server;

use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};

use super::raw::{
    message, startup_packet, startup_packet_to, status_update, summaries, Msg, Raw, Read1, Target,
};

/// How long each server waits, in both: short, so the test is quick.
const WAL_SENDER_TIMEOUT: Duration = Duration::from_millis(1000);
const AUTHENTICATION_TIMEOUT: Duration = Duration::from_secs(1);
const MAX_WAL_SENDERS: usize = 3;

/// A scenario run against one target: what it saw, as lines to compare.
type Scenario = fn(&Twin, &Target) -> Vec<String>;

/// What a scenario needs of each side besides the address.
struct Twin {
    pg: Option<Server>,
    ours: Option<TestServer>,
    /// PostgreSQL 15's programs (pg_recvlogical).
    bin: PathBuf,
}

impl Twin {
    /// A libpq connection string for the target, as user postgres.
    fn dsn(&self, target: &Target) -> String {
        match target {
            Target::Postgres(_) => self.pg.as_ref().unwrap().conninfo("postgres", None),
            Target::Ours(_) => self.ours.as_ref().unwrap().connection_string(),
        }
    }

    /// Whether a client is streaming from `slot`.
    fn active(&self, target: &Target, slot: &str) -> bool {
        match target {
            Target::Postgres(_) => {
                self.pg
                    .as_ref()
                    .unwrap()
                    .query_one(&format!(
                        "SELECT active FROM pg_replication_slots WHERE slot_name = '{slot}';"
                    ))
                    .unwrap()
                    == "t"
            }
            Target::Ours(_) => self
                .ours
                .as_ref()
                .unwrap()
                .slots()
                .iter()
                .any(|s| s.name == slot && s.active_client.is_some()),
        }
    }

    /// Waits until a client streams from `slot` (false after 10 s).
    fn until_active(&self, target: &Target, slot: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.active(target, slot) {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// Makes one transaction of `rows` inserts of 200-byte values: more than a socket
    /// buffers when `rows` is large.
    fn write_many(&self, target: &Target, rows: usize) {
        match target {
            Target::Postgres(_) => {
                let pg = self.pg.as_ref().unwrap();
                pg.psql(&format!(
                    "INSERT INTO t SELECT (SELECT coalesce(max(id), 0) FROM t) + g, repeat('x', 200) \
                     FROM generate_series(1, {rows}) g;"
                ))
                .unwrap();
            }
            Target::Ours(_) => {
                let ours = self.ours.as_ref().unwrap();
                let value = "x".repeat(200);
                let mut transaction = Transaction::new();
                for i in 0..rows {
                    transaction =
                        transaction.insert(&table(), [(2000 + i).to_string(), value.clone()]);
                }
                ours.append(pgoutput_harness::server::Event::Transaction(transaction))
                    .unwrap();
            }
        }
    }

    /// Makes a change the slot created before it will decode.
    fn write(&self, target: &Target) {
        match target {
            Target::Postgres(_) => {
                let pg = self.pg.as_ref().unwrap();
                pg.psql("INSERT INTO t VALUES ((SELECT coalesce(max(id), 0) + 1 FROM t), 'x');")
                    .unwrap();
            }
            Target::Ours(_) => {
                let ours = self.ours.as_ref().unwrap();
                ours.append(pgoutput_harness::server::Event::Transaction(
                    Transaction::new().insert(&table(), ["1000", "x"]),
                ))
                .unwrap();
            }
        }
    }

    /// A fast shutdown of the target; the real server is started again once it is done.
    fn shut_down(&self, target: &Target) {
        match target {
            Target::Postgres(_) => self.pg.as_ref().unwrap().restart().unwrap(),
            Target::Ours(_) => self.ours.as_ref().unwrap().fast_shutdown(),
        }
    }

    fn confirmed(&self, target: &Target, slot: &str) -> Lsn {
        match target {
            Target::Postgres(_) => self
                .pg
                .as_ref()
                .unwrap()
                .query_one(&format!(
                    "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '{slot}';"
                ))
                .unwrap()
                .parse()
                .unwrap(),
            Target::Ours(_) => self
                .ours
                .as_ref()
                .unwrap()
                .confirmed_flush_lsn(slot)
                .unwrap(),
        }
    }
}

fn table() -> Table {
    Table::new(16385, "public", "t")
        .key_column("id", 23)
        .column("v", 25)
}

fn create_slot(raw: &mut Raw, slot: &str) -> Vec<String> {
    summaries(&raw.query(&format!("CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput")))
}

/// A session streaming from a new slot `slot` with publication `p`, and what it was
/// answered so far.
fn streaming(target: &Target, slot: &str) -> (Raw, Vec<String>) {
    let mut raw = Raw::login(target, "postgres");
    let mut out = create_slot(&mut raw, slot);
    out.extend(summaries(&raw.start(slot, "0/0", "p")));
    (raw, out)
}

fn copy_messages_after_the_copy_are_ignored(twin: &Twin, target: &Target) -> Vec<String> {
    let (mut raw, mut out) = streaming(target, "after_copy");
    raw.send(&message(b'c', &[]));
    out.extend(raw.drain(Duration::from_millis(500)).summary());
    // What postgres.js sends on sql.end(): CopyDone, then CopyFail.
    raw.send(&message(b'c', &[]));
    raw.send(&message(b'f', b"done\0"));
    raw.send(&message(b'd', b"r"));
    out.extend(summaries(&raw.query("IDENTIFY_SYSTEM")));
    out.extend(create_slot(&mut raw, "unused_after_copy"));
    let _ = twin;
    out
}

/// The settings a consumer asks a walsender for with SHOW (the crate's consumer and
/// pgoutput tail ask for `wal_sender_timeout`), printed in PostgreSQL's units.
fn show_settings(_: &Twin, target: &Target) -> Vec<String> {
    let mut raw = Raw::login(target, "postgres");
    let mut out = Vec::new();
    for name in [
        "wal_sender_timeout",
        "authentication_timeout",
        "max_wal_senders",
    ] {
        let answer = raw.query(&format!("SHOW {name}"));
        out.extend(summaries(&answer));
        if let Some(row) = answer.iter().find(|m| m.tag == b'D') {
            // One column: its length, then its text.
            out.push(format!(
                "{name} = {}",
                String::from_utf8_lossy(&row.body[6..])
            ));
        }
    }
    out
}

fn a_status_update_with_extra_bytes_is_accepted(twin: &Twin, target: &Target) -> Vec<String> {
    let mut raw = Raw::login(target, "postgres");
    let mut out = create_slot(&mut raw, "extra");
    twin.write(target);
    out.extend(summaries(&raw.start("extra", "0/0", "p")));
    let drained = raw.drain(Duration::from_millis(500));
    let end = *drained.keepalive_ends.iter().max().unwrap();
    raw.send(&status_update(end, 16));
    raw.send(&message(b'c', &[]));
    out.extend(raw.drain(Duration::from_millis(500)).summary());
    out.push(format!(
        "confirmed the keepalive's position: {}",
        twin.confirmed(target, "extra") == end
    ));
    out
}

fn a_short_status_update_is_an_error(_: &Twin, target: &Target) -> Vec<String> {
    let (mut raw, mut out) = streaming(target, "short");
    raw.send(&message(b'd', b"r\0\0\0\0\0\0\0\x01\0\0"));
    out.extend(raw.drain(Duration::from_millis(500)).summary());
    out.extend(summaries(&raw.query("IDENTIFY_SYSTEM")));
    out
}

fn an_unknown_standby_message_closes_silently(_: &Twin, target: &Target) -> Vec<String> {
    let (mut raw, mut out) = streaming(target, "unknown_kind");
    raw.send(&message(b'd', b"z123"));
    out.extend(raw.drain(Duration::from_secs(3)).summary());
    out
}

fn copy_fail_while_streaming_is_fatal(_: &Twin, target: &Target) -> Vec<String> {
    let (mut raw, mut out) = streaming(target, "copy_fail");
    raw.send(&message(b'f', b"no\0"));
    out.extend(raw.drain(Duration::from_secs(3)).summary());
    out
}

fn another_sessions_temporary_slot_is_in_use(_: &Twin, target: &Target) -> Vec<String> {
    let mut owner = Raw::login(target, "postgres");
    let mut out = summaries(&owner.query("CREATE_REPLICATION_SLOT tmp TEMPORARY LOGICAL pgoutput"));
    let mut other = Raw::login(target, "postgres");
    out.extend(summaries(&other.start("tmp", "0/0", "p")));
    out.extend(summaries(&other.query("DROP_REPLICATION_SLOT tmp")));
    // The owner streams it.
    out.extend(summaries(&owner.start("tmp", "0/0", "p")));
    out
}

/// An ERROR in a walsender session drops the session's TEMPORARY slots
/// (`WalSndErrorCleanup` calls `ReplicationSlotCleanup`), whatever failed; its other
/// slots stay.
fn an_error_drops_the_sessions_temporary_slots(_: &Twin, target: &Target) -> Vec<String> {
    let mut owner = Raw::login(target, "postgres");
    let mut out =
        summaries(&owner.query("CREATE_REPLICATION_SLOT tmp_err TEMPORARY LOGICAL pgoutput"));
    out.extend(create_slot(&mut owner, "kept_err"));
    out.extend(summaries(&owner.start("no_such_slot", "0/0", "p")));
    out.extend(summaries(&owner.query(
        "CREATE_REPLICATION_SLOT tmp_err2 TEMPORARY LOGICAL pgoutput",
    )));
    out.extend(create_slot(&mut owner, "kept_err"));
    let mut other = Raw::login(target, "postgres");
    for slot in ["tmp_err", "tmp_err2"] {
        out.extend(summaries(
            &other.query(&format!("DROP_REPLICATION_SLOT {slot}")),
        ));
    }
    out.extend(summaries(&other.query("DROP_REPLICATION_SLOT kept_err")));
    out
}

/// ERRORs that carry a HINT: a slot name with a character PostgreSQL does not allow, and
/// no slot left under `max_replication_slots` (40 on the real server, 10 on ours: slots
/// are made until the first ERROR, then dropped).
fn errors_with_hints(_: &Twin, target: &Target) -> Vec<String> {
    let mut raw = Raw::login(target, "postgres");
    let mut out = summaries(&raw.query("CREATE_REPLICATION_SLOT \"Bad-Name\" LOGICAL pgoutput"));
    let mut made = Vec::new();
    for n in 0..64 {
        let slot = format!("full_{n}");
        let answer = raw.query(&format!("CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput"));
        if let Some(err) = answer.iter().find(|m| m.tag == b'E') {
            out.push(err.summary());
            break;
        }
        made.push(slot);
    }
    out.push(format!("made some first: {}", !made.is_empty()));
    for slot in made {
        raw.query(&format!("DROP_REPLICATION_SLOT {slot}"));
    }
    out
}

fn a_missing_publication_is_refused_at_the_first_change(
    twin: &Twin,
    target: &Target,
) -> Vec<String> {
    let mut raw = Raw::login(target, "postgres");
    let mut out = create_slot(&mut raw, "missing_pub");
    twin.write(target);
    out.extend(summaries(&raw.start("missing_pub", "0/0", "nope")));
    out.extend(summaries(&raw.until_ready(Duration::from_secs(10))));
    out
}

fn a_start_past_the_wal_end_reports_the_real_position(twin: &Twin, target: &Target) -> Vec<String> {
    let mut raw = Raw::login(target, "postgres");
    let mut out = create_slot(&mut raw, "future");
    let far = Lsn(0x100_0000_0000);
    out.extend(summaries(&raw.start("future", &far.to_string(), "p")));
    let drained = raw.drain(Duration::from_millis(500));
    let reported = *drained.keepalive_ends.iter().max().unwrap();
    out.push(format!(
        "keepalives below the requested start: {}",
        reported < far
    ));
    // A client that confirms what it was told, as clients do.
    raw.send(&status_update(reported, 0));
    raw.send(&message(b'c', &[]));
    out.extend(raw.drain(Duration::from_millis(500)).summary());
    twin.write(target);
    let mut again = Raw::login(target, "postgres");
    out.extend(summaries(&again.start("future", "0/0", "p")));
    let later = again.drain(Duration::from_millis(1000));
    out.push(format!(
        "a later change still reaches the slot: {}",
        later.begins > 0
    ));
    out
}

fn a_client_that_never_replies_is_dropped(_: &Twin, target: &Target) -> Vec<String> {
    let (mut raw, mut out) = streaming(target, "silent");
    let drained = raw.drain(WAL_SENDER_TIMEOUT * 5);
    out.push(format!("asked for a reply: {}", drained.reply_requested));
    out.extend(drained.summary());
    out
}

fn a_client_that_replies_when_asked_stays(twin: &Twin, target: &Target) -> Vec<String> {
    let mut raw = Raw::login(target, "postgres");
    let mut out = create_slot(&mut raw, "asked");
    let before = twin.confirmed(target, "asked");
    twin.write(target);
    out.extend(summaries(&raw.start("asked", "0/0", "p")));
    // Like postgres.js: a status update only when a keepalive asks for one, confirming
    // the position it reports.
    let until = Instant::now() + WAL_SENDER_TIMEOUT * 3;
    let mut closed = false;
    let mut replies = 0;
    while Instant::now() < until && !closed {
        match raw.read(Duration::from_millis(50)) {
            Read1::Msg(b'd', body) if body.first() == Some(&b'k') && body[17] == 1 => {
                let end = Lsn(u64::from_be_bytes(body[1..9].try_into().unwrap()));
                raw.send(&status_update(end, 0));
                replies += 1;
            }
            Read1::Closed => closed = true,
            _ => {}
        }
    }
    out.push(format!("still connected: {}", !closed));
    out.push(format!("asked more than once: {}", replies > 1));
    out.push(format!(
        "the slot advanced: {}",
        twin.confirmed(target, "asked") > before
    ));
    raw.send(&message(b'c', &[]));
    out.extend(raw.drain(Duration::from_millis(500)).summary());
    out
}

/// pg_recvlogical 15 streaming `slot` to /dev/null with further `args`.
fn pg_recvlogical(twin: &Twin, target: &Target, slot: &str, args: &[&str]) -> Child {
    Command::new(twin.bin.join("pg_recvlogical"))
        .args([
            "-d",
            &twin.dsn(target),
            "--slot",
            slot,
            "--start",
            "-f",
            "-",
        ])
        .args([
            "-o",
            "proto_version=1",
            "-o",
            "publication_names=p",
            "--no-loop",
        ])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("pg_recvlogical runs")
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([name, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {name}");
}

/// How the child ended, waiting at most 10 s (then it is killed: "hung").
fn ended(mut child: Child) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return match status.code() {
                Some(0) => "exit 0".into(),
                Some(_) => "exit failure".into(),
                None => "killed by a signal".into(),
            };
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return "hung".into();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// pg_recvlogical with no status interval (`-s 0`) sends a status update only when a
/// keepalive asks for one: that alone keeps it connected, and its flush position reaches
/// the slot. Interrupted, it ends cleanly.
fn pg_recvlogical_answering_reply_requests_stays(twin: &Twin, target: &Target) -> Vec<String> {
    let mut raw = Raw::login(target, "postgres");
    let mut out = create_slot(&mut raw, "rl");
    drop(raw);
    let before = twin.confirmed(target, "rl");
    let mut child = pg_recvlogical(twin, target, "rl", &["-s", "0"]);
    out.push(format!("streaming: {}", twin.until_active(target, "rl")));
    twin.write(target);
    std::thread::sleep(WAL_SENDER_TIMEOUT * 3);
    out.push(format!(
        "still running: {}",
        child.try_wait().unwrap().is_none()
    ));
    out.push(format!(
        "the slot advanced: {}",
        twin.confirmed(target, "rl") > before
    ));
    signal(&child, "-INT");
    out.push(ended(child));
    out
}

/// psycopg2's `read_message` loop with a 10 s status interval: only its answers to the
/// server's reply requests keep it connected through three timeouts.
const PSYCOPG2_CLIENT: &str = r#"
import select, sys, time, psycopg2, psycopg2.extras
dsn, slot, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
cur = conn.cursor()
cur.start_replication(slot_name=slot, decode=False, status_interval=10,
                      options={"proto_version": "1", "publication_names": "p"})
print("streaming", flush=True)
messages, deadline = 0, time.monotonic() + seconds
try:
    while time.monotonic() < deadline:
        msg = cur.read_message()
        if msg is None:
            select.select([cur], [], [], 0.05)
        else:
            messages += 1
    print("still connected: True")
except psycopg2.Error as e:
    print("still connected: False")
print("messages:", messages)
"#;

fn psycopg2_answering_reply_requests_stays(twin: &Twin, target: &Target) -> Vec<String> {
    let mut raw = Raw::login(target, "postgres");
    let mut out = create_slot(&mut raw, "psy");
    drop(raw);
    let seconds = (WAL_SENDER_TIMEOUT * 3).as_secs_f64().to_string();
    let child = Command::new("python3")
        .args(["-c", PSYCOPG2_CLIENT, &twin.dsn(target), "psy", &seconds])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    out.push(format!("streaming: {}", twin.until_active(target, "psy")));
    twin.write(target);
    let output = child.wait_with_output().unwrap();
    out.extend(
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|l| *l != "streaming")
            .map(str::to_owned),
    );
    if !output.status.success() {
        out.push(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    out
}

/// A stopped pg_recvlogical (SIGSTOP: it neither reads nor answers, its socket full of
/// a large transaction) is dropped after `wal_sender_timeout`, and another client is
/// served meanwhile.
fn a_stopped_client_is_dropped_while_others_are_served(
    twin: &Twin,
    target: &Target,
) -> Vec<String> {
    let mut raw = Raw::login(target, "postgres");
    let mut out = create_slot(&mut raw, "stopped");
    drop(raw);
    let child = pg_recvlogical(twin, target, "stopped", &[]);
    out.push(format!(
        "streaming: {}",
        twin.until_active(target, "stopped")
    ));
    signal(&child, "-STOP");
    twin.write_many(target, 100_000);
    let started = Instant::now();
    let mut raw = Raw::login(target, "postgres");
    out.extend(create_slot(&mut raw, "other"));
    drop(raw);
    let other = pg_recvlogical(twin, target, "other", &["-s", "0"]);
    let served = twin.until_active(target, "other");
    out.push(format!(
        "another client served within two seconds: {}",
        served && started.elapsed() < Duration::from_secs(2)
    ));
    std::thread::sleep(WAL_SENDER_TIMEOUT * 3);
    out.push(format!(
        "the stopped client's slot still active: {}",
        twin.active(target, "stopped")
    ));
    out.push(format!(
        "the other client still streaming: {}",
        twin.active(target, "other")
    ));
    signal(&other, "-INT");
    out.push(ended(other));
    signal(&child, "-CONT");
    out.push(ended(child));
    out
}

/// PostgreSQL's fast shutdown (`pg_ctl restart -m fast` for the real server; the test
/// server's `begin_shutdown`) while a client streams and has not confirmed the last
/// commit: keepalives ask for a reply and the walsender waits; once the client confirms,
/// CommandComplete and the end.
fn a_fast_shutdown_waits_for_the_client(twin: &Twin, target: &Target) -> Vec<String> {
    let mut raw = Raw::login(target, "postgres");
    let mut out = create_slot(&mut raw, "down");
    twin.write(target);
    out.extend(summaries(&raw.start("down", "0/0", "p")));
    let deadline = Instant::now() + Duration::from_secs(10);
    let commit_end = loop {
        assert!(Instant::now() < deadline, "no Commit");
        if let Read1::Msg(b'd', body) = raw.read(Duration::from_millis(100)) {
            if body[0] == b'w' && body[25] == b'C' {
                break Lsn(u64::from_be_bytes(body[35..43].try_into().unwrap()));
            }
        }
    };
    // A session waiting for a command is ended at once.
    let mut idle = Raw::login(target, "postgres");
    std::thread::scope(|scope| {
        let stopping = scope.spawn(|| twin.shut_down(target));
        // Less than wal_sender_timeout, which still applies.
        let asked = raw.drain(WAL_SENDER_TIMEOUT / 2);
        let past = asked
            .keepalive_ends
            .iter()
            .copied()
            .max()
            .unwrap_or(commit_end);
        out.push(format!("asked for a reply: {}", asked.reply_requested));
        out.push(format!(
            "a keepalive past the commit: {}",
            past > commit_end
        ));
        out.push(format!("open while unconfirmed: {}", !asked.closed));
        out.extend(asked.summary());
        raw.send(&status_update(past, 0));
        out.extend(raw.drain(Duration::from_secs(5)).summary());
        out.push("the idle session:".into());
        out.extend(idle.drain(Duration::from_secs(5)).summary());
        stopping.join().unwrap();
    });
    out
}

fn too_many_walsenders(_: &Twin, target: &Target) -> Vec<String> {
    // The walsenders of the scenarios before are gone by now (a loaded machine takes
    // its time to end backends).
    std::thread::sleep(Duration::from_millis(2000));
    let held: Vec<Raw> = (0..MAX_WAL_SENDERS)
        .map(|_| Raw::login(target, "postgres"))
        .collect();
    let mut extra = Raw::connect(target);
    extra.send(&startup_packet("postgres"));
    let mut out = summaries(&extra.until_ready(Duration::from_secs(10)));
    drop(held);
    // The places come back once the walsenders are gone.
    std::thread::sleep(Duration::from_millis(2000));
    let mut again = Raw::connect(target);
    again.send(&startup_packet("postgres"));
    out.extend(summaries(&again.until_ready(Duration::from_secs(10))));
    out
}

fn silent_after_the_password_request(_: &Twin, target: &Target) -> Vec<String> {
    let mut raw = Raw::connect(target);
    raw.send(&startup_packet("tailer"));
    let mut out = Vec::new();
    if let Read1::Msg(tag, body) = raw.read(Duration::from_secs(5)) {
        out.push(format!(
            "{} {}",
            char::from(tag),
            u32::from_be_bytes(body[..4].try_into().unwrap())
        ));
    }
    out.extend(raw.drain(AUTHENTICATION_TIMEOUT * 5).summary());
    out
}

/// SASLInitialResponses whose Int32 length does not match what follows (more, less, and
/// below -1), and one naming another mechanism: each refused with PostgreSQL's words.
fn malformed_sasl_initial_responses(_: &Twin, target: &Target) -> Vec<String> {
    let mut out = Vec::new();
    let first = b"n,,n=,r=abcdefghijklmnop";
    for (mechanism, len, data) in [
        (&b"SCRAM-SHA-256"[..], 100, &first[..]),
        (&b"SCRAM-SHA-256"[..], 3, &first[..]),
        (&b"SCRAM-SHA-256"[..], -5, &b""[..]),
        (&b"SCRAM-SHA-1"[..], first.len() as i32, &first[..]),
    ] {
        let mut raw = Raw::connect(target);
        raw.send(&startup_packet("tailer"));
        if let Read1::Msg(tag, _) = raw.read(Duration::from_secs(5)) {
            out.push(char::from(tag).to_string());
        }
        let mut body = mechanism.to_vec();
        body.push(0);
        body.extend_from_slice(&len.to_be_bytes());
        body.extend_from_slice(data);
        raw.send(&message(b'p', &body));
        out.extend(raw.drain(Duration::from_secs(5)).summary());
    }
    out
}

/// A SCRAM login to a database that does not exist: the password is asked for first, a
/// wrong one is refused as wrong (a stranger learns nothing about database names), and
/// only the right one learns, after AuthenticationOk, that there is no such database.
fn an_unknown_database_is_told_only_after_the_password(_: &Twin, target: &Target) -> Vec<String> {
    // Authentication requests with their code (10 SASL, 11 continue, 12 final, 0 ok).
    let line = |msg: &Msg| match msg.tag {
        b'R' => format!(
            "R {}",
            u32::from_be_bytes(msg.body[..4].try_into().unwrap())
        ),
        _ => msg.summary(),
    };
    let mut out = Vec::new();
    for password in ["wrong", "pw"] {
        let mut raw = Raw::connect(target);
        raw.send(&startup_packet_to("tailer", "nosuchdb"));
        let mut scram = ScramSha256::new(password.as_bytes(), ChannelBinding::unsupported());
        let read = |raw: &mut Raw, out: &mut Vec<String>| match raw.read(Duration::from_secs(5)) {
            Read1::Msg(tag, body) => {
                out.push(line(&Msg {
                    tag,
                    body: body.clone(),
                }));
                (tag == b'R').then_some(body)
            }
            other => {
                out.push(format!("{other:?}"));
                None
            }
        };
        if read(&mut raw, &mut out).is_none() {
            continue;
        }
        let mut first = b"SCRAM-SHA-256\0".to_vec();
        first.extend_from_slice(&(scram.message().len() as i32).to_be_bytes());
        first.extend_from_slice(scram.message());
        raw.send(&message(b'p', &first));
        let Some(server_first) = read(&mut raw, &mut out) else {
            continue;
        };
        scram.update(&server_first[4..]).unwrap();
        raw.send(&message(b'p', scram.message()));
        let drained = raw.drain(Duration::from_secs(5));
        out.extend(drained.messages.iter().map(line));
        if drained.closed {
            out.push("closed".into());
        }
    }
    out
}

fn a_trickled_start_up_packet(_: &Twin, target: &Target) -> Vec<String> {
    let mut raw = Raw::connect(target);
    let packet = startup_packet("postgres");
    let started = Instant::now();
    // One byte every 50 ms: the whole packet would take longer than the timeout.
    let mut sent = 0;
    while sent < packet.len() && started.elapsed() < AUTHENTICATION_TIMEOUT * 3 {
        raw.send(&packet[sent..=sent]);
        sent += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut out = vec![format!("sent it all: {}", sent == packet.len())];
    out.extend(raw.drain(AUTHENTICATION_TIMEOUT * 3).summary());
    out
}

/// Start-up packets at the edges of the length PostgreSQL reads (a body of 4 to 10,000
/// bytes): outside them it closes without a word; at the largest it reads the packet
/// (and answers a well-formed one, refuses a malformed one for its layout).
fn start_up_packet_lengths(_: &Twin, target: &Target) -> Vec<String> {
    let packet = |len: usize, tail: &[u8]| {
        let mut packet = (len as u32).to_be_bytes().to_vec();
        packet.extend_from_slice(&196_608u32.to_be_bytes());
        packet.extend_from_slice(b"user\0postgres\0replication\0database\0");
        packet.resize(len - tail.len(), b'a');
        packet.extend_from_slice(tail);
        packet.truncate(len);
        packet
    };
    let mut out = Vec::new();
    let cases: [(&str, Vec<u8>); 4] = [
        ("7 bytes", vec![0, 0, 0, 7, 0, 3, 0]),
        ("10,005 bytes", packet(10_005, b"\0\0")),
        ("10,004 bytes, malformed", packet(10_004, b"\0")),
        (
            "10,004 bytes",
            // A last parameter whose value fills the packet.
            {
                let mut p = packet(10_004, b"\0\0");
                let at = 8 + b"user\0postgres\0replication\0database\0".len();
                p[at..at + 17].copy_from_slice(b"application_name\0");
                p
            },
        ),
    ];
    for (what, bytes) in cases {
        let mut raw = Raw::connect(target);
        raw.send(&bytes);
        let answer = match raw.read(AUTHENTICATION_TIMEOUT * 3) {
            Read1::Msg(b'E', body) => Msg { tag: b'E', body }.summary(),
            Read1::Msg(tag, _) => format!("{}", tag as char),
            Read1::Closed => "closed without a word".to_owned(),
            Read1::TimedOut => "nothing".to_owned(),
        };
        out.push(format!("{what}: {answer}"));
    }
    out
}

#[test]
fn the_test_server_answers_as_postgresql_15_does() {
    let Some(binaries) = super::binaries("15") else {
        return;
    };
    let settings = [
        format!("wal_sender_timeout = {}ms", WAL_SENDER_TIMEOUT.as_millis()),
        format!(
            "authentication_timeout = {}s",
            AUTHENTICATION_TIMEOUT.as_secs()
        ),
        format!("max_wal_senders = {MAX_WAL_SENDERS}"),
    ];
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let pg = Server::start_with_settings(&binaries, &settings).unwrap();
    pg.psql(
        "CREATE TABLE t (id int PRIMARY KEY, v text); CREATE PUBLICATION p FOR TABLE t;\
         CREATE ROLE tailer LOGIN REPLICATION PASSWORD 'pw';",
    )
    .unwrap();
    let postgres = Target::of(&pg);
    let builder = || {
        TestServer::builder()
            .server_version("15.15")
            .wal_sender_timeout(WAL_SENDER_TIMEOUT)
            .authentication_timeout(AUTHENTICATION_TIMEOUT)
            .max_wal_senders(MAX_WAL_SENDERS)
            .publication(Publication::new("p").table(table()))
            .script(Script::new())
    };
    let mut twin = Twin {
        pg: Some(pg),
        ours: None,
        bin: binaries.bin.clone(),
    };
    let scenarios: [(&str, Scenario, bool); 23] = [
        (
            "copy after copy",
            copy_messages_after_the_copy_are_ignored,
            false,
        ),
        ("SHOW settings", show_settings, false),
        (
            "extra bytes",
            a_status_update_with_extra_bytes_is_accepted,
            false,
        ),
        (
            "short status update",
            a_short_status_update_is_an_error,
            false,
        ),
        (
            "unknown standby message",
            an_unknown_standby_message_closes_silently,
            false,
        ),
        (
            "CopyFail while streaming",
            copy_fail_while_streaming_is_fatal,
            false,
        ),
        (
            "temporary slot",
            another_sessions_temporary_slot_is_in_use,
            false,
        ),
        (
            "an ERROR drops temporary slots",
            an_error_drops_the_sessions_temporary_slots,
            false,
        ),
        ("errors with hints", errors_with_hints, false),
        (
            "missing publication",
            a_missing_publication_is_refused_at_the_first_change,
            false,
        ),
        (
            "start past the WAL end",
            a_start_past_the_wal_end_reports_the_real_position,
            false,
        ),
        (
            "never replies",
            a_client_that_never_replies_is_dropped,
            false,
        ),
        (
            "replies when asked",
            a_client_that_replies_when_asked_stays,
            false,
        ),
        (
            "pg_recvlogical answering reply requests",
            pg_recvlogical_answering_reply_requests_stays,
            false,
        ),
        (
            "psycopg2 answering reply requests",
            psycopg2_answering_reply_requests_stays,
            false,
        ),
        (
            "a stopped client",
            a_stopped_client_is_dropped_while_others_are_served,
            false,
        ),
        ("max_wal_senders", too_many_walsenders, false),
        (
            "silent after the password request",
            silent_after_the_password_request,
            true,
        ),
        (
            "trickled start-up packet",
            a_trickled_start_up_packet,
            false,
        ),
        ("start-up packet lengths", start_up_packet_lengths, false),
        (
            "malformed SASLInitialResponse",
            malformed_sasl_initial_responses,
            true,
        ),
        (
            "unknown database",
            an_unknown_database_is_told_only_after_the_password,
            true,
        ),
        // Last: the real server restarts.
        ("fast shutdown", a_fast_shutdown_waits_for_the_client, false),
    ];
    // Beyond being alike: what each real-client scenario is there to show.
    let required: [(&str, &[&str]); 8] = [
        (
            "SHOW settings",
            &[
                "wal_sender_timeout = 1s",
                "authentication_timeout = 1s",
                "max_wal_senders = 3",
            ],
        ),
        (
            "an ERROR drops temporary slots",
            &[
                "E ERROR 42704 replication slot \"tmp_err\" does not exist",
                "E ERROR 42704 replication slot \"tmp_err#\" does not exist",
            ],
        ),
        ("errors with hints", &["made some first: true"]),
        (
            "unknown database",
            &[
                "E FATAL 28P01 password authentication failed for user \"tailer\"",
                "R 0",
                "E FATAL 3D000 database \"nosuchdb\" does not exist",
            ],
        ),
        (
            "fast shutdown",
            &[
                "asked for a reply: true",
                "open while unconfirmed: true",
                "C",
                "closed",
                "E FATAL 57P01 terminating connection due to administrator command",
            ],
        ),
        (
            "pg_recvlogical answering reply requests",
            &["still running: true", "the slot advanced: true", "exit 0"],
        ),
        (
            "psycopg2 answering reply requests",
            &["still connected: True", "messages: 4"],
        ),
        (
            "a stopped client",
            &[
                "another client served within two seconds: true",
                "the stopped client's slot still active: false",
                "the other client still streaming: true",
                "exit 0",
                "exit failure",
            ],
        ),
    ];
    let psycopg2 = super::psycopg2_found();
    let mut differences = Vec::new();
    for (name, scenario, scram) in scenarios {
        if name.starts_with("psycopg2") && !psycopg2 {
            continue;
        }
        let theirs = scenario(&twin, &postgres);
        // A fresh test server for each scenario, as the real server's state does not
        // matter to any of them.
        let mut ours_builder = builder();
        if scram {
            ours_builder = ours_builder.auth(Auth::scram("tailer", "pw"));
        }
        twin.ours = Some(ours_builder.start().unwrap());
        let ours = Target::Ours(twin.ours.as_ref().unwrap().addr());
        let mine = scenario(&twin, &ours);
        if theirs != mine {
            differences.push(format!(
                "{name}:\n  PostgreSQL 15: {theirs:?}\n  test server:   {mine:?}"
            ));
        } else {
            eprintln!("{name}: {theirs:?}");
        }
        for (_, lines) in required.iter().filter(|(n, _)| *n == name) {
            for line in *lines {
                if !theirs.iter().any(|l| l == line) || !mine.iter().any(|l| l == line) {
                    differences.push(format!("{name}: not both said {line:?}"));
                }
            }
        }
        twin.ours = None;
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
