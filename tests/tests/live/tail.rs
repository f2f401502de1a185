//! `pgoutput tail` against the live server: the built binary connects as a SCRAM-SHA-256
//! role, streams each option set's slot, and must print exactly the messages the SQL
//! interface returns for that slot, in order, then leave the slot confirmed at the last
//! transaction it printed.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use pgoutput_codec::{Decoder, Lsn, Streaming};
use pgoutput_tests::pg::Server;

use crate::scenario::{MD5_USER, PASSWORD_USER, TAIL_USER};
use crate::{peek_slot, Options};

/// The `pgoutput` binary cargo built next to this test (the examples package's bin).
pub(crate) fn binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("pgoutput"))
        .ok_or("no target directory")?;
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} is missing: build it with `cargo build -p pgoutput-cli` \
             (cargo test --workspace builds it)",
            path.display()
        ))
    }
}

fn tail_command(server: &Server, args: &[&str]) -> Result<Command, String> {
    tail_command_as(server, TAIL_USER, args)
}

/// `pgoutput tail` logging in as `user` with `password`.
fn tail_command_as(
    server: &Server,
    (user, password): (&str, &str),
    args: &[&str],
) -> Result<Command, String> {
    let mut command = Command::new(binary()?);
    command
        .arg("tail")
        .arg(server.conninfo(user, Some(password)))
        .args(args);
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Ok(command)
}

/// Waits for `child`, killing it after `limit`.
pub(crate) fn wait(mut child: Child, limit: Duration) -> Result<Output, String> {
    let deadline = Instant::now() + limit;
    // Standard output may already be taken (and read) by the caller.
    let stdout = child.stdout.take();
    let mut stderr = child.stderr.take().ok_or("stderr")?;
    let out = std::thread::spawn(move || {
        let mut buf = Vec::new();
        match stdout {
            Some(mut stdout) => stdout.read_to_end(&mut buf).map(|_| buf),
            None => Ok(buf),
        }
    });
    let err = std::thread::spawn(move || {
        let mut buf = Vec::new();
        stderr.read_to_end(&mut buf).map(|_| buf)
    });
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(format!("pgoutput tail did not finish within {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out
        .join()
        .map_err(|_| "stdout thread")?
        .map_err(|e| e.to_string())?;
    let stderr = err
        .join()
        .map_err(|_| "stderr thread")?
        .map_err(|e| e.to_string())?;
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// Where the WAL ends now: the insert position, which covers every committed record (the
/// write position can lag it while `synchronous_commit` is off, as on these servers).
pub(crate) fn current_lsn(server: &Server) -> Result<String, String> {
    server
        .query_one("SELECT pg_current_wal_insert_lsn();")
        .map_err(|e| e.to_string())
}

/// `pgoutput tail` with `conninfo` as given (no password from the environment), waited
/// for up to a minute.
pub(crate) fn run_tail(conninfo: &str, args: &[&str]) -> Result<Output, String> {
    wait(
        Command::new(binary()?)
            .arg("tail")
            .arg(conninfo)
            .args(args)
            .env_remove("PGPASSWORD")
            .env_remove("PGPASSFILE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?,
        Duration::from_secs(60),
    )
}

pub(crate) fn confirmed(server: &Server, slot: &str) -> Result<Lsn, String> {
    server
        .query_one(&format!(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '{slot}';"
        ))
        .map_err(|e| e.to_string())?
        .parse()
        .map_err(|e| format!("{e}"))
}

/// `--create-slot`, run before the workload so the new slot sees all of it.
pub fn create_slot(server: &Server) -> Result<String, String> {
    let end = current_lsn(server)?;
    let output = wait(
        tail_command(
            server,
            &[
                "--slot",
                "tail_created",
                "--create-slot",
                "--publication",
                "pub",
                "--end-lsn",
                &end,
            ],
        )?
        .spawn()
        .map_err(|e| e.to_string())?,
        Duration::from_secs(60),
    )?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() || !stderr.contains("created slot tail_created") {
        return Err(format!("{}: {stderr}", output.status));
    }
    Ok(stderr.lines().next().unwrap_or_default().to_owned())
}

/// Streams the slot of `options` with the binary and compares with the SQL interface.
pub fn check(server: &Server, options: &Options) -> Result<String, String> {
    let mode = options.streaming.to_string();
    let slot = format!("tail_{}_{mode}", options.version);
    let expected_rows = peek_slot(server, &slot, options)?;
    let mut decoder =
        Decoder::new(options.version, options.streaming).map_err(|e| e.to_string())?;
    let mut expected = Vec::new();
    let mut last_end = Lsn(0);
    for row in &expected_rows {
        let message = decoder.decode(&row.data).map_err(|e| e.to_string())?;
        if let Some(end) = message.transaction_end_lsn() {
            last_end = last_end.max(end);
        }
        expected.push(serde_json::to_value(&message).map_err(|e| e.to_string())?);
    }
    let end = current_lsn(server)?;
    let version = options.version.number().to_string();
    let mut args = vec![
        "--slot",
        &slot,
        "--publication",
        "pub",
        "--proto-version",
        &version,
        "--messages",
        "--end-lsn",
        &end,
    ];
    if options.streaming != Streaming::Off {
        args.extend(["--streaming", &mode]);
    }
    if options.binary {
        args.push("--binary");
    }
    let output = wait(
        tail_command(server, &args)?
            .spawn()
            .map_err(|e| e.to_string())?,
        Duration::from_secs(120),
    )?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!(
            "pgoutput tail failed with {}: {stderr}",
            output.status
        ));
    }
    let printed: Vec<serde_json::Value> = output
        .stdout
        .lines()
        .map(|line| {
            serde_json::from_str(&line.map_err(|e| e.to_string())?).map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    if printed.len() != expected.len() {
        let first = (0..printed.len().min(expected.len())).find(|&i| printed[i] != expected[i]);
        let at = first.unwrap_or(printed.len().min(expected.len()));
        return Err(format!(
            "printed {} messages, the slot holds {}; first difference at {at}: printed {:?}, \
             the slot {:?}: {stderr}",
            printed.len(),
            expected.len(),
            printed.get(at).map(|v| v.to_string()),
            expected.get(at).map(|v| v.to_string()),
        ));
    }
    if let Some(i) = (0..printed.len()).find(|&i| printed[i] != expected[i]) {
        return Err(format!(
            "message {i}: printed {} but the slot holds {}",
            printed[i], expected[i]
        ));
    }
    // As pg_recvlogical does, the slot moves to the WAL end the server reports once
    // nothing is open: past the last commit, never past the end position.
    let confirmed = confirmed(server, &slot)?;
    let end_lsn: Lsn = end.parse().map_err(|e| format!("{e}"))?;
    if confirmed < last_end || confirmed > end_lsn {
        return Err(format!(
            "slot {slot} confirmed at {confirmed}, expected from the last commit {last_end} \
             to the end position {end_lsn}"
        ));
    }
    let flushed = format!("last flushed LSN {confirmed}");
    if !stderr.contains(&flushed) {
        return Err(format!("stderr does not report {flushed:?}: {stderr}"));
    }
    Ok(format!(
        "{} messages in order, slot confirmed at {confirmed}",
        printed.len()
    ))
}

/// Ctrl-C (SIGINT) stops `tail` cleanly: it exits 0 and reports the last flushed LSN.
pub fn check_interrupt(server: &Server) -> Result<String, String> {
    let mut child = tail_command(
        server,
        &[
            "--slot",
            "tail_created",
            "--publication",
            "pub",
            "--format",
            "compact",
        ],
    )?
    .spawn()
    .map_err(|e| e.to_string())?;
    let stdout = child.stdout.take().ok_or("stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let first = lines
        .next()
        .ok_or("tail printed nothing")?
        .map_err(|e| e.to_string())?;
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .map_err(|e| e.to_string())?;
    if !kill.success() {
        return Err("kill -INT failed".into());
    }
    // Keep reading so the child never blocks on a full pipe while it shuts down.
    let rest = std::thread::spawn(move || lines.count());
    let output = wait(child, Duration::from_secs(30))?;
    let printed = 1 + rest.join().map_err(|_| "reader")?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success()
        || !stderr.contains("interrupted")
        || !stderr.contains("last flushed LSN")
    {
        return Err(format!("{}: {stderr}", output.status));
    }
    Ok(format!(
        "stopped after {printed} lines (first: {}); {}",
        first.chars().take(40).collect::<String>(),
        stderr.lines().last().unwrap_or_default()
    ))
}

/// MD5 and cleartext password authentication: each role creates a slot and stops at once;
/// a wrong password is refused with the server's message.
pub fn check_authentication(server: &Server) -> Result<String, String> {
    let mut done = Vec::new();
    for (method, (user, password)) in [("md5", MD5_USER), ("password", PASSWORD_USER)] {
        let end = current_lsn(server)?;
        let slot = format!("tail_auth_{method}");
        let args = [
            "--slot",
            &slot,
            "--create-slot",
            "--publication",
            "pub",
            "--end-lsn",
            &end,
        ];
        let output = wait(
            tail_command_as(server, (user, password), &args)?
                .spawn()
                .map_err(|e| e.to_string())?,
            Duration::from_secs(60),
        )?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() || !stderr.contains(&format!("created slot {slot}")) {
            return Err(format!("{method}: {}: {stderr}", output.status));
        }
        let wrong = wait(
            tail_command_as(server, (user, "wrong"), &args)?
                .spawn()
                .map_err(|e| e.to_string())?,
            Duration::from_secs(60),
        )?;
        let stderr = String::from_utf8_lossy(&wrong.stderr);
        if wrong.status.success() || !stderr.contains("password authentication failed") {
            return Err(format!(
                "{method} with a wrong password: {}: {stderr}",
                wrong.status
            ));
        }
        done.push(method);
    }
    Ok(format!(
        "{} authentication, and wrong passwords refused",
        done.join(" and ")
    ))
}
