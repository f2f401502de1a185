//! `pgoutput tail` against the test server: the slot advances while published tables are
//! idle, `--end-lsn` is exact, SIGTERM ends cleanly, a closed standard output ends quietly,
//! publication names follow identifier rules, progress and lost connections are reported
//! with real positions, a lost connection is retried until interrupted, `--file` is
//! fsynced before the slot is confirmed, `--wal-positions` and `-o` reach the output and
//! the server, and slots are created if not there and dropped.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use pgoutput_client::StreamOptions;
use pgoutput_codec::ProtocolVersion;
use pgoutput_harness::server::{Publication, Script, Table, TestServer, Transaction};

fn published() -> Table {
    Table::new(16385, "public", "t")
        .key_column("id", 23)
        .column("v", 25)
}

fn unpublished() -> Table {
    Table::new(16390, "public", "other").key_column("id", 23)
}

fn server(script: Script) -> TestServer {
    TestServer::builder()
        .publication(Publication::new("mixpub").table(published()))
        .table(unpublished())
        .script(script)
        .start()
        .unwrap()
}

fn tail(server: &TestServer, slot: &str, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pgoutput"));
    command
        .args([
            "tail",
            &server.connection_string(),
            "--slot",
            slot,
            "--create-slot",
        ])
        .args(["--publication", "mixpub"])
        .args(extra)
        .stdin(Stdio::null());
    command
}

fn run(command: &mut Command) -> Output {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn lines(output: &Output) -> Vec<String> {
    String::from_utf8(output.stdout.clone())
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `n` transactions, each inserting one row into the published table.
fn inserts(n: usize) -> Script {
    (0..n).fold(Script::new(), |script, id| {
        script.transaction(Transaction::new().insert(&published(), [id.to_string(), "x".into()]))
    })
}

/// Transactions on the published table, then many on a table no publication has.
fn busy_elsewhere() -> Script {
    let mut script = Script::new().transaction(Transaction::new().insert(&published(), ["1", "a"]));
    for id in 0..30 {
        script = script.transaction(Transaction::new().insert(&unpublished(), [id.to_string()]));
    }
    script
}

#[test]
fn the_slot_advances_while_published_tables_are_idle() {
    let server = server(busy_elsewhere());
    let end = server.wal_end();
    let output = run(&mut tail(&server, "idle", &["--end-lsn", &end.to_string()]));
    assert_eq!(lines(&output).len(), 4, "Begin, Relation, Insert, Commit");
    assert_eq!(server.confirmed_flush_lsn("idle"), Some(end));
}

#[test]
fn end_lsn_stops_exactly_there() {
    let server = server(inserts(5));
    let end = server.events()[2].end_lsn();
    let output = run(&mut tail(
        &server,
        "exact",
        &["--end-lsn", &end.to_string()],
    ));
    // Three transactions: Begin, Insert, Commit each, and t's Relation once.
    assert_eq!(lines(&output).len(), 10, "{:#?}", lines(&output));
    assert_eq!(server.confirmed_flush_lsn("exact"), Some(end));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "stopped (reached the end position); last flushed LSN {end}"
        )),
        "{stderr}"
    );
    // It started where the slot stands, and says so.
    assert!(
        stderr.contains("streaming slot exact from 0/1000000"),
        "{stderr}"
    );
}

#[test]
fn sigterm_confirms_what_was_printed_and_ends_cleanly() {
    let server =
        server(Script::new().transaction(Transaction::new().insert(&published(), ["1", "a"])));
    let end = server.wal_end();
    let mut child = tail(&server, "term", &["--status-interval", "3600"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    for _ in 0..4 {
        line.clear();
        stdout.read_line(&mut line).unwrap();
    }
    assert!(line.contains("\"commit\""), "{line}");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("stopped (interrupted)"));
    // The final status update confirmed the transaction, so a rerun does not repeat it.
    assert_eq!(server.confirmed_flush_lsn("term"), Some(end));
}

#[test]
fn a_closed_standard_output_ends_quietly() {
    let server = server(inserts(2000));
    let mut child = tail(&server, "pipe", &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    drop(stdout); // `| head -1`
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.to_lowercase().contains("broken pipe"), "{stderr}");
    // Nothing beyond what reached standard output is confirmed.
    let confirmed = server.confirmed_flush_lsn("pipe").unwrap();
    assert!(confirmed < server.wal_end());
}

#[test]
fn publication_names_follow_identifier_rules() {
    let server =
        server(Script::new().transaction(Transaction::new().insert(&published(), ["1", "a"])));
    let end = server.wal_end();
    let output = run(Command::new(env!("CARGO_BIN_EXE_pgoutput"))
        .args([
            "tail",
            &server.connection_string(),
            "--slot",
            "mix",
            "--create-slot",
        ])
        .args(["--publication", "MixPub", "--end-lsn", &end.to_string()]));
    assert_eq!(lines(&output).len(), 4, "MixPub means mixpub");
}

/// `tail` streaming `slot` (with `--status-interval 1` and `extra`) until the server has
/// the end of its one transaction confirmed, then the server shut down under it; returns
/// the still-running tail (standard error piped) and that end.
fn tail_through_shutdown(slot: &str, extra: &[&str]) -> (std::process::Child, pgoutput_codec::Lsn) {
    let server =
        server(Script::new().transaction(Transaction::new().insert(&published(), ["1", "a"])));
    let end = server.wal_end();
    let child = tail(
        &server,
        slot,
        &[&["--status-interval", "1"], extra].concat(),
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    server
        .wait_for_confirmed_flush(slot, end, Duration::from_secs(60))
        .unwrap();
    drop(server);
    (child, end)
}

#[test]
fn a_lost_connection_says_what_happened() {
    let (child, end) = tail_through_shutdown("lost", &["--no-loop"]);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the server shut down: terminating connection due to administrator command; last flushed LSN {end}"
        )),
        "{stderr}"
    );
}

/// Sends SIGTERM to `child`.
fn terminate(child: &std::process::Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Reads standard error until a line contains `needle`; returns everything read.
fn stderr_until(reader: &mut impl BufRead, needle: &str) -> String {
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "no {needle:?} in:\n{seen}"
        );
        seen.push_str(&line);
        if line.contains(needle) {
            return seen;
        }
    }
}

#[test]
fn a_lost_connection_is_retried_until_interrupted() {
    let (mut child, end) = tail_through_shutdown("retry", &["--reconnect-delay", "1"]);
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let lost = stderr_until(&mut stderr, "reconnecting in 1 s");
    assert!(
        lost.contains(&format!("the server shut down: terminating connection due to administrator command; last flushed LSN {end}; reconnecting in 1 s")),
        "{lost}"
    );
    // Nothing listens any more: each attempt fails and is retried.
    let retried = stderr_until(&mut stderr, "retrying in 1 s");
    assert!(retried.contains("Connection refused"), "{retried}");
    terminate(&child);
    let rest = stderr_until(&mut stderr, "stopped (interrupted)");
    assert!(rest.contains(&format!("last flushed LSN {end}")), "{rest}");
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_temporary_slot_ends_with_its_connection() {
    let (child, _) = tail_through_shutdown("temp", &["--temporary"]);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("a temporary slot is gone with its connection"),
        "{stderr}"
    );
}

#[test]
fn file_output_is_fsynced_and_appended_and_carries_wal_positions() {
    let server = server(inserts(3));
    let end = server.wal_end();
    let dir = std::env::temp_dir().join(format!("pgoutput-tail-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("out.jsonl");
    std::fs::write(&file, "earlier line\n").unwrap();
    let end_text = end.to_string();
    let output = run(&mut tail(
        &server,
        "file",
        &[
            "--file",
            file.to_str().unwrap(),
            "--fsync-interval",
            "1",
            "--wal-positions",
            "--end-lsn",
            &end_text,
        ],
    ));
    assert!(output.stdout.is_empty());
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "earlier line");
    // Relation before the first insert, then Begin, Insert, Commit three times.
    assert_eq!(lines.len(), 1 + 1 + 3 * 3, "{text}");
    for line in &lines[1..] {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(
            value["wal_start"].is_string() && value["wal_end"].is_string(),
            "{line}"
        );
        assert!(value["type"].is_string(), "{line}");
    }
    let last: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(last["type"], "commit");
    assert_eq!(last["end_lsn"], end_text);
    assert_eq!(server.confirmed_flush_lsn("file"), Some(end));
    // The recording is a script: served back, it is the stream, positions included.
    let recording = lines[1..].join("\n");
    let replay = TestServer::builder()
        .publication(Publication::all_tables("mixpub"))
        .script(Script::from_json_lines(&recording).unwrap())
        .start()
        .unwrap();
    let options = StreamOptions::new(ProtocolVersion::V1, &["mixpub"]);
    assert_eq!(
        replay.render(&options).unwrap(),
        server.render(&options).unwrap()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn plugin_options_reach_the_server_and_flag_options_are_refused() {
    let server = server(inserts(1));
    let end = server.wal_end().to_string();
    let output = tail(&server, "opt", &["-o", "colour=red", "--end-lsn", &end])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("unrecognized pgoutput option: colour"),
        "{stderr}"
    );
    let output = tail(&server, "opt2", &["-o", "proto_version=2"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("use --proto-version"), "{stderr}");
}

#[test]
fn slots_are_created_if_not_there_and_dropped() {
    let server = server(inserts(1));
    let end = server.wal_end().to_string();
    run(&mut tail(&server, "keep", &["--end-lsn", &end]));
    let again = run(&mut tail(
        &server,
        "keep",
        &["--if-not-exists", "--end-lsn", &end],
    ));
    assert!(String::from_utf8_lossy(&again.stderr).contains("slot keep exists already"));
    let refused = tail(&server, "keep", &["--end-lsn", &end])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let dropped = run(Command::new(env!("CARGO_BIN_EXE_pgoutput")).args([
        "tail",
        &server.connection_string(),
        "--slot",
        "keep",
        "--drop-slot",
    ]));
    assert!(String::from_utf8_lossy(&dropped.stderr).contains("dropped slot keep"));
    assert!(server.slots().iter().all(|slot| slot.name != "keep"));
}

/// After each fault the server can inject, `--file` holds every transaction exactly once:
/// a transaction cut off is cut from the file and sent again in full after the
/// reconnect, and a crash that rewinds the slot sends nothing tail has written already
/// (it resumes after its last transaction).
#[test]
fn the_file_holds_each_transaction_once_after_every_fault() {
    use pgoutput_harness::faults::{Action, Fault, Trigger};
    let three = |t: usize| -> Transaction {
        (0..3).fold(Transaction::new(), |tx, r| {
            tx.insert(&published(), [(t * 10 + r).to_string(), "x".into()])
        })
    };
    let script = (0..4).fold(Script::new(), |s, t| s.transaction(three(t)));
    let faults = [
        (
            "close inside a transaction",
            Trigger::Change {
                transaction: 2,
                after: 2,
            },
            Action::Close,
        ),
        (
            "reset inside a transaction",
            Trigger::Change {
                transaction: 3,
                after: 1,
            },
            Action::Reset,
        ),
        ("close mid-frame", Trigger::mid_frame(8, 20), Action::Close),
        ("reset mid-frame", Trigger::mid_frame(3, 9), Action::Reset),
        (
            "57P01",
            Trigger::Change {
                transaction: 2,
                after: 1,
            },
            Action::error("57P01"),
        ),
        (
            "55000",
            Trigger::Change {
                transaction: 2,
                after: 1,
            },
            Action::error("55000"),
        ),
        ("crash", Trigger::Commit { transaction: 3 }, Action::Crash),
        // The walsender's shutdown: everything is sent, tail confirms it, the stream
        // ends, and tail reconnects to find nothing more.
        (
            "shutdown",
            Trigger::Commit { transaction: 2 },
            Action::Shutdown,
        ),
    ];
    for (name, when, then) in faults {
        let server = TestServer::builder()
            .publication(Publication::new("mixpub").table(published()))
            .table(unpublished())
            .script(script.clone())
            .start()
            .unwrap();
        server.add_fault(Fault::new(when, then)).unwrap();
        let end = server.wal_end();
        let dir = std::env::temp_dir().join(format!("pgoutput-tail-faults-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("out.jsonl");
        let _ = std::fs::remove_file(&file);
        let output = tail(
            &server,
            "s",
            &[
                "--if-not-exists",
                "--file",
                file.to_str().unwrap(),
                "--fsync-interval",
                "0",
                "--status-interval",
                "1",
                "--reconnect-delay",
                "1",
                "--end-lsn",
                &end.to_string(),
            ],
        )
        .output()
        .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        // An ERROR other than the shutdown's is not a lost connection: tail stops, the
        // unfinished transaction cut from the file.
        let stops = name == "55000";
        assert_eq!(output.status.success(), !stops, "{name}: {stderr}");
        assert!(server.faults()[0].1 == 1, "{name}: the fault did not fire");
        let mut transactions: Vec<Vec<String>> = Vec::new();
        let mut open: Option<Vec<String>> = None;
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            match value["type"].as_str().unwrap() {
                "begin" => {
                    assert!(
                        open.is_none(),
                        "{name}: a Begin inside a transaction: {}\n{stderr}",
                        std::fs::read_to_string(&file).unwrap()
                    );
                    open = Some(Vec::new());
                }
                "insert" => open
                    .as_mut()
                    .unwrap()
                    .push(value["new_tuple"][0]["text"].as_str().unwrap().to_owned()),
                "commit" => transactions.push(open.take().unwrap()),
                _ => {}
            }
        }
        assert!(open.is_none(), "{name}: the file ends inside a transaction");
        let whole = if stops { 1 } else { 4 };
        let expected: Vec<Vec<String>> = (0..whole)
            .map(|t| (0..3).map(|r| (t * 10 + r).to_string()).collect())
            .collect();
        assert_eq!(transactions, expected, "{name}: {stderr}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A slot still held by a walsender that has not exited (55006) when tail starts: tail
/// says so, tries again after --reconnect-delay and streams once the slot is free.
#[test]
fn a_held_slot_at_the_start_is_waited_out() {
    let server = server(inserts(1));
    let end = server.wal_end().to_string();
    let created = run(&mut tail(&server, "held", &["--end-lsn", "0/1"]));
    assert!(created.status.success());
    assert!(server.hold_slot("held", Duration::from_millis(1500)));
    let output = tail(
        &server,
        "held",
        &[
            "--if-not-exists",
            "--reconnect-delay",
            "1",
            "--end-lsn",
            &end,
        ],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("is active for PID"), "{stderr}");
    assert!(stderr.contains("retrying in 1 s"), "{stderr}");
    assert_eq!(
        lines(&output).len(),
        4,
        "Relation, Begin, Insert, Commit: {stderr}"
    );
}
