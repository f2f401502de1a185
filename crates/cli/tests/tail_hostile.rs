//! `pgoutput tail` against a hostile server, a few lines of protocol written by hand: a
//! frame that does not decode, a 3-byte CopyData, an ErrorResponse or a lost connection
//! inside a transaction leave `--file` without the unfinished transaction; a CopyData
//! that announces 1 GiB reserves nothing; Ctrl-C ends tail while the server is silent
//! (the file cut back to its last whole transaction);
//! a backend message tag the protocol lacks is a protocol violation, not a reason to
//! reconnect forever.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A protocol message: tag, Int32 length, body.
fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A CopyData holding an XLogData frame at `lsn` around `payload`.
fn xlog(lsn: u64, payload: &[u8]) -> Vec<u8> {
    let mut body = vec![b'w'];
    body.extend_from_slice(&lsn.to_be_bytes());
    body.extend_from_slice(&lsn.to_be_bytes());
    body.extend_from_slice(&0u64.to_be_bytes());
    body.extend_from_slice(payload);
    message(b'd', &body)
}

/// Begin (final LSN 0/2000, xid 744) and an Insert of one text column into relation
/// 16385, after the Relation describing it: an open transaction.
fn open_transaction() -> Vec<u8> {
    let mut out = Vec::new();
    let mut begin = vec![b'B'];
    begin.extend_from_slice(&0x2000u64.to_be_bytes());
    begin.extend_from_slice(&0u64.to_be_bytes());
    begin.extend_from_slice(&744u32.to_be_bytes());
    out.extend(xlog(0x1000, &begin));
    let relation = b"R\0\0\x40\x01public\0t\0d\0\x01\x01id\0\0\0\0\x17\xff\xff\xff\xff";
    out.extend(xlog(0, relation));
    out.extend(xlog(0x1100, b"I\0\0\x40\x01N\0\x01t\0\0\0\x011"));
    out
}

/// Reads one frontend message (or the start-up packet, which has no tag).
fn read_message(socket: &mut TcpStream, tagged: bool) -> Option<(u8, Vec<u8>)> {
    let mut tag = [0u8];
    if tagged {
        socket.read_exact(&mut tag).ok()?;
    }
    let mut len = [0u8; 4];
    socket.read_exact(&mut len).ok()?;
    let mut body = vec![0; (u32::from_be_bytes(len) as usize).checked_sub(4)?];
    socket.read_exact(&mut body).ok()?;
    Some((tag[0], body))
}

/// A walsender that logs anyone in, refuses any query but START_REPLICATION, answers
/// that with CopyBothResponse and then runs `stream` on the socket; it counts the
/// connections it accepts.
fn hostile_server(
    stream: impl Fn(&mut TcpStream) + Send + Sync + 'static,
) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    std::thread::spawn(move || {
        for socket in listener.incoming() {
            let Ok(mut socket) = socket else { return };
            count.fetch_add(1, Ordering::SeqCst);
            if read_message(&mut socket, false).is_none() {
                continue;
            }
            let mut hello = message(b'R', &0u32.to_be_bytes());
            hello.extend(message(b'S', b"server_version\x0015.15\0"));
            hello.extend(message(b'K', &[0, 0, 0, 1, 0, 0, 0, 2]));
            hello.extend(message(b'Z', b"I"));
            if socket.write_all(&hello).is_err() {
                continue;
            }
            // Any other query (SHOW wal_sender_timeout) is refused; START_REPLICATION
            // goes on.
            let started = loop {
                match read_message(&mut socket, true) {
                    Some((b'Q', query)) if query.starts_with(b"START_REPLICATION") => break true,
                    Some((b'Q', _)) => {
                        let mut refusal = message(b'E', b"SERROR\0C42601\0Mnot here\0\0");
                        refusal.extend(message(b'Z', b"I"));
                        if socket.write_all(&refusal).is_err() {
                            break false;
                        }
                    }
                    _ => break false,
                }
            };
            if !started {
                continue;
            }
            let _ = socket.write_all(&message(b'W', &[0, 0, 0]));
            stream(&mut socket);
        }
    });
    (
        format!("host=127.0.0.1 port={port} user=u dbname=d sslmode=disable connect_timeout=5"),
        accepted,
    )
}

struct Run {
    file: std::path::PathBuf,
    dir: std::path::PathBuf,
}

impl Run {
    fn new(name: &str) -> Run {
        let dir = std::env::temp_dir().join(format!("pgoutput-tail-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Run {
            file: dir.join("out.jsonl"),
            dir,
        }
    }

    fn command(&self, conninfo: &str, extra: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pgoutput"));
        command
            .args(["tail", conninfo, "--slot", "s", "--publication", "p"])
            .args([
                "--file",
                self.file.to_str().unwrap(),
                "--fsync-interval",
                "0",
            ])
            .args(["--reconnect-delay", "1"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// The types of the messages in the file, in order.
    fn types(&self) -> Vec<String> {
        std::fs::read_to_string(&self.file)
            .unwrap_or_default()
            .lines()
            .map(|line| {
                let value: serde_json::Value = serde_json::from_str(line).unwrap();
                value["type"].as_str().unwrap().to_owned()
            })
            .collect()
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits for `child` to exit within `limit`; kills it and fails otherwise.
fn exits_within(mut child: Child, limit: Duration, what: &str) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let output = child.wait_with_output().unwrap();
            panic!(
                "{what}: tail did not exit within {limit:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// What the server sends inside a transaction, after which tail must stop (exit 1) and
/// the file hold no part of the unfinished transaction.
#[test]
fn a_failure_inside_a_transaction_leaves_no_part_of_it_in_the_file() {
    let mut error = b"SERROR\0VERROR\0CXX000\0Mcould not decode\0\0".to_vec();
    error.truncate(error.len());
    let cases: [(&str, Vec<u8>, &[&str], &str); 4] = [
        (
            "a frame that does not decode",
            xlog(0x1200, b"I\0\0\x40\x01N\0\x05t"),
            &[],
            "Insert.new_tuple",
        ),
        (
            "a 3-byte CopyData",
            message(b'd', b"w\0\0"),
            &[],
            "XLogData",
        ),
        (
            "an ErrorResponse XX000",
            [message(b'E', &error), message(b'Z', b"I")].concat(),
            &[],
            "XX000",
        ),
        (
            "a lost connection with --no-loop",
            Vec::new(),
            &["--no-loop"],
            "closed",
        ),
    ];
    for (name, bytes, extra, says) in cases {
        let (conninfo, _) = hostile_server(move |socket| {
            let _ = socket.write_all(&open_transaction());
            let _ = socket.write_all(&bytes);
            std::thread::sleep(Duration::from_millis(200));
        });
        let run = Run::new("fail");
        // A transaction already in the file from an earlier run stays.
        std::fs::write(&run.file, "{\"type\":\"begin\"}\n{\"type\":\"commit\"}\n").unwrap();
        let child = run.command(&conninfo, extra).spawn().unwrap();
        let output = exits_within(child, Duration::from_secs(20), name);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{name}: {stderr}");
        assert!(stderr.contains(says), "{name}: {stderr}");
        assert!(
            stderr.contains("removed the unfinished transaction"),
            "{name}: {stderr}"
        );
        assert_eq!(run.types(), ["begin", "commit"], "{name}: {stderr}");
    }
}

/// A CopyData whose length announces almost 1 GiB, of which a few bytes come: tail
/// reserves nothing for it (its address space stays small).
#[test]
fn a_huge_announced_frame_reserves_nothing() {
    let (conninfo, _) = hostile_server(|socket| {
        let mut frame = vec![b'd'];
        // Just under PostgreSQL's limit for a message (1 GiB less two bytes).
        frame.extend_from_slice(&0x3FFF_0000u32.to_be_bytes());
        frame.extend_from_slice(b"w\0\0\0\0");
        let _ = socket.write_all(&frame);
        std::thread::sleep(Duration::from_secs(5));
    });
    let run = Run::new("huge");
    let mut child = run.command(&conninfo, &["--no-loop"]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "tail exited: it is waiting for the frame"
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmPeak:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        peak_kib < 512 * 1024,
        "tail's address space peaked at {peak_kib} KiB"
    );
}

/// Ctrl-C while the server has gone silent (mid-transaction, reading nothing, the
/// connection open) ends tail within a few seconds, cleanly, the file cut back.
#[test]
fn ctrl_c_ends_tail_while_the_server_is_silent() {
    let (conninfo, _) = hostile_server(|socket| {
        let _ = socket.write_all(&open_transaction());
        std::thread::sleep(Duration::from_secs(60));
    });
    let run = Run::new("silent");
    let child = run.command(&conninfo, &[]).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while run.types().len() < 3 {
        assert!(Instant::now() < deadline, "tail wrote {:?}", run.types());
        std::thread::sleep(Duration::from_millis(50));
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let started = Instant::now();
    let output = exits_within(child, Duration::from_secs(5), "Ctrl-C");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("stopped (interrupted)"), "{stderr}");
    assert!(run.types().is_empty(), "{:?}", run.types());
    eprintln!("tail exited {:?} after SIGINT", started.elapsed());
}

/// A backend message tag the protocol does not have: tail stops with a protocol
/// violation (exit 1) and does not reconnect.
#[test]
fn an_unknown_backend_message_is_a_protocol_violation_not_a_lost_connection() {
    let (conninfo, accepted) = hostile_server(|socket| {
        let _ = socket.write_all(&message(b'q', b"?"));
        std::thread::sleep(Duration::from_secs(10));
    });
    let run = Run::new("tag");
    let child = run.command(&conninfo, &[]).spawn().unwrap();
    let output = exits_within(child, Duration::from_secs(10), "an unknown tag");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("protocol violation"), "{stderr}");
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "{stderr}");
}
