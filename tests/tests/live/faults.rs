//! `pgoutput tail` through faults on a live server: the walsender killed and the server
//! restarted while rows are written and streamed. Afterwards the file tail wrote holds
//! every row written exactly once, every transaction whole and once, in commit order.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pgoutput_codec::Lsn;
use pgoutput_tests::pg::Server;

use crate::scenario::TAIL_USER;
use crate::tail::{binary, confirmed, current_lsn};

const SLOT: &str = "fault_slot";
/// The rows of each large transaction.
const BIG: u32 = 100_000;
/// All rows written.
const ROWS: u32 = 2 * BIG + 500;

fn file_size(file: &Path) -> u64 {
    std::fs::metadata(file).map_or(0, |m| m.len())
}

/// Rows `from..=big_to` in one transaction, then rows up to `small_to` in single-row
/// transactions.
fn write_rows(server: &Server, (from, big_to, small_to): (u32, u32, u32)) -> Result<(), String> {
    let mut sql = format!("INSERT INTO fault_t SELECT generate_series({from}, {big_to});\n");
    for id in big_to + 1..=small_to {
        sql.push_str(&format!("INSERT INTO fault_t VALUES ({id});\n"));
    }
    server.psql(&sql).map(|_| ()).map_err(|e| e.to_string())
}

/// Polls `ready` every 100 ms for up to `limit`.
fn wait_until(
    what: &str,
    limit: Duration,
    mut ready: impl FnMut() -> Result<bool, String>,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while !ready()? {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

struct Tail {
    child: Child,
    stderr: JoinHandle<String>,
}

fn start_tail(server: &Server, file: &Path) -> Result<Tail, String> {
    let (user, password) = TAIL_USER;
    let mut child = Command::new(binary()?)
        .arg("tail")
        .arg(server.conninfo(user, Some(password)))
        .args([
            "--slot",
            SLOT,
            "--create-slot",
            "--publication",
            "fault_pub",
        ])
        .arg("--file")
        .arg(file)
        .args(["--fsync-interval", "1", "--status-interval", "1"])
        .args(["--reconnect-delay", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut pipe = child.stderr.take().ok_or("stderr")?;
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    });
    Ok(Tail { child, stderr })
}

impl Tail {
    /// SIGTERM, then the exit status and everything it said.
    fn stop(mut self) -> Result<String, String> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return Err("tail did not stop on SIGTERM".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let stderr = self.stderr.join().map_err(|_| "stderr thread")?;
        if !status.success() {
            return Err(format!("tail exited with {status}:\n{stderr}"));
        }
        Ok(stderr)
    }
}

/// What the file holds: the ids inserted, each whole transaction's commit end, and any
/// fault in the shape (a row outside a transaction, a Begin without its Commit).
fn read_output(file: &Path) -> Result<(Vec<u32>, Vec<Lsn>), String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let mut ids = Vec::new();
    let mut commits = Vec::new();
    let mut open = false;
    for (number, line) in text.lines().enumerate() {
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("line {}: {e}", number + 1))?;
        match value["type"].as_str() {
            Some("begin") if open => {
                return Err(format!("line {}: Begin inside a transaction", number + 1))
            }
            Some("begin") => open = true,
            Some("insert") if open => {
                let id = value["new_tuple"][0]["text"]
                    .as_str()
                    .and_then(|id| id.parse().ok())
                    .ok_or_else(|| format!("line {}: no id in {line}", number + 1))?;
                ids.push(id);
            }
            Some("commit") if open => {
                open = false;
                let end = value["end_lsn"]
                    .as_str()
                    .and_then(|lsn| lsn.parse().ok())
                    .ok_or_else(|| format!("line {}: no end_lsn", number + 1))?;
                commits.push(end);
            }
            Some("relation") => {}
            _ => return Err(format!("line {}: unexpected {line}", number + 1)),
        }
    }
    if open {
        return Err("the file ends inside a transaction".into());
    }
    Ok((ids, commits))
}

pub fn check(server: &Server) -> Result<String, String> {
    server
        .psql(
            "CREATE TABLE fault_t (id int PRIMARY KEY);\n\
             CREATE PUBLICATION fault_pub FOR TABLE fault_t;",
        )
        .map_err(|e| e.to_string())?;
    let file = server.socket_dir().join("fault.jsonl");
    let tail = start_tail(server, &file)?;
    let result = faults(server, &file);
    let stderr = tail.stop();
    let (done, stderr) = match (result, stderr) {
        (Ok(done), Ok(stderr)) => (done, stderr),
        (Err(err), Ok(stderr) | Err(stderr)) => return Err(format!("{err}; tail said:\n{stderr}")),
        (Ok(_), Err(err)) => return Err(err),
    };
    let reconnects = stderr.matches("pgoutput tail: reconnected").count();
    if reconnects < 2 {
        return Err(format!("expected a reconnect after each fault:\n{stderr}"));
    }
    let (ids, commits) = read_output(&file)?;
    let expected: BTreeSet<u32> = (1..=done).collect();
    let printed: BTreeSet<u32> = ids.iter().copied().collect();
    if printed != expected {
        let missing: Vec<_> = expected.difference(&printed).take(10).collect();
        return Err(format!(
            "{} of {done} rows printed; missing, for example, {missing:?}\n{stderr}",
            printed.len()
        ));
    }
    if ids.len() != printed.len() {
        return Err(format!(
            "{} rows printed for {done} written: some twice\n{stderr}",
            ids.len()
        ));
    }
    if commits.windows(2).any(|pair| pair[0] >= pair[1]) {
        return Err(format!(
            "a transaction was printed twice or out of order\n{stderr}"
        ));
    }
    let cuts = stderr.matches("removed the unfinished transaction").count();
    // The kill landed while a transaction was being written: the test tried the hard case.
    if cuts == 0 {
        return Err(format!("no fault hit an unfinished transaction:\n{stderr}"));
    }
    Ok(format!(
        "{done} rows in {} transactions, each once, through a killed walsender and a \
         restart ({reconnects} reconnects, {cuts} unfinished transactions cut)",
        commits.len()
    ))
}

/// Waits until tail's walsender is there (so that the next fault hits a live stream).
fn wait_streaming(server: &Server) -> Result<(), String> {
    wait_until("tail's walsender", Duration::from_secs(60), || {
        let count = server
            .query_one(
                "SELECT count(*) FROM pg_stat_replication \
                 WHERE application_name = 'pgoutput tail';",
            )
            .map_err(|e| e.to_string())?;
        Ok(count == "1")
    })
}

/// The faults, while rows are written; returns the number of rows written.
fn faults(server: &Server, file: &Path) -> Result<u32, String> {
    wait_streaming(server)?;
    // A large transaction, and the walsender killed while tail is writing it out. Then
    // more, written while tail is away.
    let size = file_size(file);
    write_rows(server, (1, BIG, BIG))?;
    wait_until("tail to write", Duration::from_secs(60), || {
        Ok(file_size(file) > size + 100_000)
    })?;
    server
        .psql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_replication \
             WHERE application_name = 'pgoutput tail';",
        )
        .map_err(|e| e.to_string())?;
    write_rows(server, (BIG + 1, BIG + 1, BIG + 200))?;
    // The same with a restart of the whole server.
    wait_streaming(server)?;
    let size = file_size(file);
    write_rows(server, (BIG + 201, 2 * BIG + 200, 2 * BIG + 200))?;
    wait_until("tail to write", Duration::from_secs(60), || {
        Ok(file_size(file) > size + 100_000)
    })?;
    server.restart().map_err(|e| e.to_string())?;
    write_rows(server, (2 * BIG + 201, 2 * BIG + 201, ROWS))?;
    let end: Lsn = current_lsn(server)?.parse().map_err(|e| format!("{e}"))?;
    wait_until(
        &format!("the slot to be confirmed at {end}"),
        Duration::from_secs(120),
        || Ok(confirmed(server, SLOT)? >= end),
    )?;
    // The file has everything the slot confirmed: fsynced before it was confirmed.
    if !file.is_file() {
        return Err("no output file".into());
    }
    Ok(ROWS)
}
