//! The judge against real consumers: the crate's `Consumer` and pg_recvlogical recover
//! correctly from the faults that make a consumer look suspicious (a close before its
//! first status update, a mid-frame reset, a crash) and have no finding, with the probe
//! armed; consumers with the field's bugs (written with the raw client, each doing one
//! thing wrong) are caught. psycopg2's are in `crates/cli/tests/judge_api.py`, through the
//! control API.

use std::time::{Duration, Instant};

use pgoutput_client::{ConnInfo, Connection, Consumer, ConsumerConfig, StreamOptions};
use pgoutput_codec::{Lsn, ProtocolVersion};
use pgoutput_harness::faults::{Action, Fault, Trigger};
use pgoutput_harness::judge::{Ending, Fact, Finding, Probe};
use pgoutput_harness::server::{Event, Publication, TestServer, Transaction};

use super::raw::{message, query, status_update, Raw, Read1, Target};

/// A server of six two-row transactions with the probe holding each one.
fn probed_server(faults: &[Fault]) -> TestServer {
    let (t, script) = super::two_row_transactions(6);
    let mut builder = TestServer::builder()
        .publication(Publication::new("p").table(t))
        .script(script)
        .probe(Probe::every(1));
    for fault in faults {
        builder = builder.fault(fault.clone());
    }
    builder.start().unwrap()
}

/// Moves the WAL end with nothing to send (WAL of other databases): the end it moved to.
fn idle_wal(server: &TestServer) -> Lsn {
    let lsn = Lsn(server.wal_end().0 + 0x100);
    server.append(Event::WalPosition { lsn }).unwrap()
}

/// Waits until no client of `server` streams (each stream's end judged).
fn all_ended(server: &TestServer) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.clients().iter().any(|c| c.connected) {
        assert!(Instant::now() < deadline, "{:?}", server.clients());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_crates_consumer_through_cuts_and_a_crash_has_no_finding() {
    let ends: Vec<Lsn> = probed_server(&[])
        .events()
        .iter()
        .map(Event::end_lsn)
        .collect();
    let server = probed_server(&[
        // Closed before its first status update was due.
        Fault::new(Trigger::message(2), Action::Close).connection(1),
        // Reset in the middle of a frame.
        Fault::new(Trigger::mid_frame(6, 7), Action::Reset).connection(2),
        // A crash once the third transaction is confirmed.
        Fault::new(Trigger::Flush { lsn: ends[2] }, Action::Crash).connection(3),
    ]);
    let info = ConnInfo::parse(Some(&server.connection_string()), |_| None).unwrap();
    let mut conn = Connection::connect(&info).unwrap();
    conn.simple_query("CREATE_REPLICATION_SLOT \"c\" LOGICAL pgoutput (SNAPSHOT 'nothing')")
        .unwrap();
    let config = ConsumerConfig::new("c", StreamOptions::new(ProtocolVersion::V1, &["p"]))
        .auto_confirm(true)
        .reconnect(Duration::from_millis(20));
    let mut consumer = Consumer::start(conn, Some(info), config).unwrap();
    let mut commits = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while commits < 6 || server.confirmed_flush_lsn("c") < Some(ends[5]) {
        assert!(Instant::now() < deadline, "{:?}", server.facts());
        if let Some(event) = consumer.next_within(Duration::from_millis(50)).unwrap() {
            commits += usize::from(event.confirmable_lsn().is_some());
        }
    }
    // Idle: the WAL end moves with nothing to send; the consumer confirms it.
    let idle = idle_wal(&server);
    while server.confirmed_flush_lsn("c") < Some(idle) {
        assert!(Instant::now() < deadline, "{:?}", server.slots());
        if let Some(event) = consumer.next_within(Duration::from_millis(50)).unwrap() {
            panic!("nothing more to come: {:?}", event.message);
        }
    }
    consumer.close();
    all_ended(&server);
    server.assert_no_findings();
    let facts: Vec<Fact> = server.facts().into_iter().map(|(_, f)| f).collect();
    let endings: Vec<Ending> = facts
        .iter()
        .filter_map(|f| match f {
            Fact::Ended { how, .. } => Some(*how),
            _ => None,
        })
        .collect();
    assert_eq!(
        endings,
        [Ending::Fault, Ending::Fault, Ending::Crash, Ending::Client],
        "{facts:?}"
    );
    let positions = server.positions("c").unwrap();
    assert!(
        positions.probes >= 6 && positions.probes_answered >= 6,
        "{positions:?}"
    );
}

/// Logged in, slot `slot` created, streaming from it (protocol 1, publication `p`).
fn streaming(server: &TestServer, slot: &str) -> Raw {
    let target = Target::Ours(server.addr());
    let mut raw = Raw::login(&target, "postgres");
    raw.send(&query(&format!(
        "CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput"
    )));
    raw.until_ready(Duration::from_secs(5));
    raw.start(slot, "0/0", "p");
    raw
}

/// Reads frames until `done` says so of one (its XLogData payload, or a keepalive's
/// bytes), answering nothing.
fn read_until(raw: &mut Raw, mut done: impl FnMut(&[u8]) -> bool) {
    let mut seen = Vec::new();
    loop {
        match raw.read(Duration::from_secs(5)) {
            Read1::Msg(b'd', body) if body[0] == b'w' && done(&body[25..]) => return,
            Read1::Msg(b'd', body) if body[0] == b'k' && done(&body) => return,
            Read1::Msg(b'd', body) => seen.push(body[..body.len().min(26)].to_vec()),
            Read1::Msg(..) => {}
            other => panic!("{other:?} after {seen:?}"),
        }
    }
}

/// Reads the six transactions: the last one's end.
fn read_all(raw: &mut Raw) -> Lsn {
    let (mut commits, mut last) = (0, Lsn(0));
    read_until(raw, |p| {
        if p[0] == b'C' {
            commits += 1;
            last = commit_end(p);
        }
        commits == 6
    });
    last
}

fn commit_end(payload: &[u8]) -> Lsn {
    Lsn(u64::from_be_bytes(payload[10..18].try_into().unwrap()))
}

fn findings(server: &TestServer, slot: &str) -> Vec<Finding> {
    server
        .findings()
        .into_iter()
        .filter(|(s, _)| s == slot)
        .map(|(_, f)| f)
        .collect()
}

/// A consumer confirming a transaction's commit at its Begin (pglogrepl#40) is caught
/// while the probe holds the rest, though updates it sent before it read the hold's
/// request arrive first: the answer to the idle request before the transaction, and one
/// of its own. A hold ends on an answer to its own request, not to one before it.
#[test]
fn a_hold_is_not_ended_by_an_answer_to_an_earlier_request() {
    let (t, _) = super::two_row_transactions(0);
    let server = TestServer::builder()
        .publication(Publication::new("p").table(t.clone()))
        .probe(Probe::every(1).wait(Duration::from_secs(30)))
        .start()
        .unwrap();
    let mut raw = streaming(&server, "s");
    // Idle: the probe asks at the WAL end; the answer waits.
    read_until(&mut raw, |k| k[0] == b'k' && k[17] == 1);
    server
        .append(Event::Transaction(
            Transaction::new().insert(&t, ["10"]).insert(&t, ["11"]),
        ))
        .unwrap();
    let mut commit = Lsn(0);
    read_until(&mut raw, |p| {
        if p[0] == b'B' {
            commit = Lsn(u64::from_be_bytes(p[1..9].try_into().unwrap()));
        }
        p[0] == b'B'
    });
    // What it had sent before it read the hold's request (the idle answer, an update of
    // its own), then its confirmation at Begin.
    raw.send(&status_update(Lsn(0), 0));
    raw.send(&status_update(Lsn(0), 0));
    raw.send(&status_update(Lsn(commit.0 + 1), 0));
    read_until(&mut raw, |p| p[0] == b'C');
    let deadline = Instant::now() + Duration::from_secs(10);
    while findings(&server, "s").is_empty() {
        assert!(Instant::now() < deadline, "{:?}", server.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        matches!(
            findings(&server, "s")[..],
            [Finding::ConfirmedUnsent { flush, .. }] if flush == Lsn(commit.0 + 1)
        ),
        "{:?}",
        findings(&server, "s")
    );
}

#[test]
fn a_consumer_that_confirms_only_transactions_leaves_its_slot_behind_while_idle() {
    let server = probed_server(&[]);
    let mut raw = streaming(&server, "s");
    // It confirms the last Commit's end, and nothing else.
    let end = read_all(&mut raw);
    raw.send(&status_update(end, 0));
    server
        .wait_for_confirmed_flush("s", end, Duration::from_secs(5))
        .unwrap();
    let idle = idle_wal(&server);
    // The probe asks at the new WAL end, and again once answered; the consumer answers
    // each time with what it had.
    for _ in 0..2 {
        read_until(&mut raw, |k| {
            k[0] == b'k'
                && Lsn(u64::from_be_bytes(k[1..9].try_into().unwrap())) == idle
                && k[17] == 1
        });
        assert_eq!(findings(&server, "s"), [], "not before it answered twice");
        raw.send(&status_update(end, 0));
    }
    // Found once it has left the slot so for the judge's patience (10 s).
    let deadline = Instant::now() + Duration::from_secs(40);
    while findings(&server, "s").is_empty() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        findings(&server, "s"),
        [Finding::NotAdvancedWhileIdle {
            connection: 1,
            confirmed: end,
            wal_end: idle
        }]
    );
    // It leaves so: the finding stays.
    raw.send(&message(b'c', &[]));
    raw.until_ready(Duration::from_secs(5));
    raw.send(&message(b'X', &[]));
    drop(raw);
    all_ended(&server);
    assert!(matches!(
        findings(&server, "s")[..],
        [Finding::NotAdvancedWhileIdle { .. }]
    ));
}

#[test]
fn a_consumer_that_confirms_changes_and_not_their_commit_is_stuck_inside_a_transaction() {
    let server = probed_server(&[]);
    let end = server.wal_end();
    let mut raw = streaming(&server, "s");
    let mut last_change = Lsn(0);
    loop {
        match raw.read(Duration::from_secs(5)) {
            Read1::Msg(b'd', body) if body[0] == b'w' => {
                let position = Lsn(u64::from_be_bytes(body[1..9].try_into().unwrap()));
                if body[25] == b'I' {
                    last_change = position;
                    // The bug: the position of each change, never the Commit's.
                    raw.send(&status_update(position, 0));
                }
                if body[25] == b'C' && commit_end(&body[25..]) == end {
                    break;
                }
            }
            Read1::Msg(..) => {}
            other => panic!("{other:?}"),
        }
    }
    // Idle at the last Commit: the probe's reply request, answered with the change
    // (once the server has read every update before).
    server
        .wait_for_confirmed_flush("s", last_change, Duration::from_secs(5))
        .unwrap();
    for _ in 0..2 {
        read_until(&mut raw, |k| k[0] == b'k' && k[17] == 1);
        raw.send(&status_update(last_change, 0));
    }
    // Found once it has left the slot so for the judge's patience (10 s).
    let deadline = Instant::now() + Duration::from_secs(40);
    while findings(&server, "s").is_empty() {
        assert!(Instant::now() < deadline, "{:?}", server.positions("s"));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        findings(&server, "s"),
        [Finding::StuckInsideTransaction {
            connection: 1,
            confirmed: last_change,
            transaction_end: end
        }]
    );
}

/// A flush position going back on a connection changes nothing in PostgreSQL, which never
/// moves a slot's position back: the slot stays where it was, and no finding.
#[test]
fn status_updates_going_backwards_leave_the_slot_and_are_no_finding() {
    let server = probed_server(&[]);
    let mut raw = streaming(&server, "s");
    let end = read_all(&mut raw);
    raw.send(&status_update(end, 0));
    raw.send(&status_update(Lsn(end.0 - 0x10), 0));
    raw.send(&status_update(Lsn(1), 0));
    server
        .wait_for_confirmed_flush("s", end, Duration::from_secs(5))
        .unwrap();
    // The connection's last words, then its end: every update has been heard.
    raw.send(&status_update(Lsn(end.0 - 0x20), 0));
    raw.send(&message(b'X', &[]));
    drop(raw);
    all_ended(&server);
    assert_eq!(server.confirmed_flush_lsn("s"), Some(end));
    assert_eq!(findings(&server, "s"), []);
}

#[test]
fn a_start_behind_what_the_consumer_confirmed_is_a_fact_and_no_finding() {
    let server = probed_server(&[]);
    let mut raw = streaming(&server, "s");
    let end = read_all(&mut raw);
    raw.send(&status_update(end, 0));
    server
        .wait_for_confirmed_flush("s", end, Duration::from_secs(5))
        .unwrap();
    raw.send(&message(b'X', &[]));
    drop(raw);
    all_ended(&server);
    let mut raw = Raw::login(&Target::Ours(server.addr()), "postgres");
    raw.start("s", "0/10", "p");
    read_until(&mut raw, |k| k[0] == b'k');
    raw.send(&status_update(end, 0));
    raw.send(&message(b'X', &[]));
    drop(raw);
    all_ended(&server);
    assert!(
        server.facts().iter().any(|(_, f)| matches!(f,
            Fact::Started { connection: 2, requested: Lsn(0x10), confirmed, behind: true }
                if *confirmed == end)),
        "{:?}",
        server.facts()
    );
    assert_eq!(server.findings(), []);
}

/// pg_recvlogical 15 and 18 with the probe armed, through a close before its first status
/// update and a reset in the middle of a frame, each run ended by the fault, then one to
/// the end, then one to a WAL end that moved with nothing to send: no finding.
#[test]
fn pg_recvlogical_through_cuts_has_no_finding() {
    for major in ["15", "18"] {
        let Some(binaries) = super::binaries(major) else {
            continue;
        };
        let server = probed_server(&[
            Fault::new(Trigger::message(2), Action::Close).connection(1),
            Fault::new(Trigger::mid_frame(9, 7), Action::Reset).connection(2),
        ]);
        let dir =
            std::env::temp_dir().join(format!("pgoutput-judge-rl-{major}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("out");
        let run = |args: &[&str]| {
            let output = std::process::Command::new(binaries.bin.join("pg_recvlogical"))
                .args(["-d", &server.connection_string(), "--slot", "rl"])
                .args(args)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            (
                output.status.success(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            )
        };
        let (created, stderr) = run(&["--create-slot", "--plugin", "pgoutput"]);
        assert!(created, "{stderr}");
        let start = |endpos: Lsn| {
            run(&[
                "--start",
                "--no-loop",
                "-s",
                "1",
                "-F",
                "0",
                "-f",
                file.to_str().unwrap(),
                "-o",
                "proto_version=1",
                "-o",
                "publication_names=p",
                "--endpos",
                &endpos.to_string(),
            ])
        };
        let end = server.wal_end();
        assert!(!start(end).0, "the first run is closed");
        assert!(!start(end).0, "the second is reset");
        let (ok, stderr) = start(end);
        assert!(ok, "{major}: {stderr}");
        assert_eq!(server.confirmed_flush_lsn("rl"), Some(end), "{major}");
        all_ended(&server);
        assert_eq!(server.findings(), [], "{major}");
        // Idle: the WAL end moves past the last transaction; pg_recvlogical runs to it.
        let idle = idle_wal(&server);
        let (ok, stderr) = start(idle);
        assert!(ok, "{major}: {stderr}");
        all_ended(&server);
        // It confirms the keepalive's WAL end as it leaves at its end position.
        assert_eq!(server.confirmed_flush_lsn("rl"), Some(idle), "{major}");
        assert_eq!(server.findings(), [], "{major}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
