//! With `PGOUTPUT_BENCH_CAPTURE=<dir>` (PostgreSQL 16 or later), writes the benchmark's
//! real streams (`tests/benches/data/`): a mixed OLTP stream over tables of 6 and 20
//! columns of mixed types, an insert-heavy bulk load, a large transaction streamed with
//! `streaming 'parallel'`, and a two-phase stream. Each workload runs on a slot of its
//! own, created just before it, so each file holds that workload alone.

use std::path::Path;

use pgoutput_tests::pg::Server;

use crate::capture::write_hex_file;

const SCHEMA: &str = "\
CREATE TABLE bench_customers (id int PRIMARY KEY, name text, email varchar(80), \
    created timestamptz, active bool, balance numeric(12,2));
CREATE TABLE bench_orders (id bigint PRIMARY KEY, customer_id int, placed timestamptz, \
    status text, total numeric(12,2), items int, weight float8, note text, shipped date, \
    ref uuid, attrs jsonb, flags smallint, priority int, region char(2), code varchar(20), \
    discount real, paid bool, tracking text, memo text, extra bytea);
CREATE PUBLICATION bench_pub FOR TABLE bench_customers, bench_orders;";

fn order(id: u64, customer: u64) -> String {
    format!(
        "INSERT INTO bench_orders VALUES ({id}, {customer}, '2026-11-30 12:00:00+00'::timestamptz \
         + interval '{id} seconds', 'placed', {}.{:02}, {}, {}.5, 'order note {id}', \
         '2026-12-01', md5('{id}')::uuid, '{{\"gift\": {}, \"lines\": [{id}]}}', {}, {}, 'EU', \
         'C-{id}', 0.{}, {}, NULL, repeat('m', {}), '\\x{:06x}');\n",
        id * 7 % 1000,
        id % 100,
        id % 9 + 1,
        id % 40,
        id.is_multiple_of(2),
        id % 8,
        id % 5,
        id % 10,
        id.is_multiple_of(3),
        id % 30,
        id
    )
}

/// What one workload is read with, and its slot.
struct Capture {
    name: &'static str,
    slot: &'static str,
    version: u32,
    streaming: &'static str,
    two_phase: bool,
}

fn read(server: &Server, capture: &Capture) -> Result<Vec<String>, String> {
    let mut options = vec![
        format!("'proto_version', '{}'", capture.version),
        "'publication_names', 'bench_pub'".to_owned(),
    ];
    if capture.streaming != "off" {
        options.push(format!("'streaming', '{}'", capture.streaming));
    }
    if capture.two_phase {
        options.push("'two_phase', 'on'".to_owned());
    }
    let out = server
        .psql(&format!(
            "SELECT encode(data, 'hex') FROM pg_logical_slot_peek_binary_changes('{}', NULL, \
             NULL, {});",
            capture.slot,
            options.join(", ")
        ))
        .map_err(|e| e.to_string())?;
    Ok(out
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

fn slot(server: &Server, capture: &Capture) -> Result<(), String> {
    server
        .psql(&format!(
            "SELECT pg_create_logical_replication_slot('{}', 'pgoutput', false, {});",
            capture.slot, capture.two_phase
        ))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn write(dir: &Path, server: &Server, capture: &Capture, lines: Vec<String>) -> Result<(), String> {
    let about = format!(
        "{}: {} (slot {}), proto_version {}, streaming {}, two_phase {}.\n\
         Captured by the live conformance suite for the benchmarks.",
        server.version(),
        capture.name,
        capture.slot,
        capture.version,
        capture.streaming,
        capture.two_phase,
    );
    let path = dir.join(format!("{}.hex", capture.name));
    write_hex_file(&path, &about, capture.version, capture.streaming, lines)
}

pub fn capture(dir: &Path, server: &Server) -> Result<String, String> {
    server.psql(SCHEMA).map_err(|e| e.to_string())?;
    let mut written = Vec::new();
    let mut run = |capture: Capture, sql: String| -> Result<(), String> {
        slot(server, &capture)?;
        // The SQL interface reads up to the flushed WAL: commit synchronously.
        server
            .psql(&format!("SET synchronous_commit = on;\n{sql}"))
            .map_err(|e| e.to_string())?;
        let lines = read(server, &capture)?;
        server
            .psql(&format!(
                "SELECT pg_drop_replication_slot('{}');",
                capture.slot
            ))
            .map_err(|e| e.to_string())?;
        if lines.is_empty() {
            return Err(format!("{}: the slot holds nothing", capture.name));
        }
        written.push(format!("{} ({} messages)", capture.name, lines.len()));
        write(dir, server, &capture, lines)?;
        Ok(())
    };
    // OLTP: small transactions that insert, update and delete across both tables.
    let mut oltp = String::new();
    for t in 0..300u64 {
        oltp.push_str("BEGIN;\n");
        oltp.push_str(&format!(
            "INSERT INTO bench_customers VALUES ({t}, 'customer {t}', 'c{t}@example.com', \
             now(), {}, {}.{:02});\n",
            t % 4 != 0,
            t * 31 % 10_000,
            t % 100
        ));
        oltp.push_str(&order(t * 2, t));
        oltp.push_str(&order(t * 2 + 1, t));
        if t % 3 == 0 {
            oltp.push_str(&format!(
                "UPDATE bench_orders SET status = 'shipped', tracking = 'TRK{t}' WHERE id = {};\n",
                t * 2
            ));
        }
        if t % 5 == 0 && t > 0 {
            oltp.push_str(&format!(
                "UPDATE bench_customers SET balance = balance + 1 WHERE id = {};\n",
                t - 1
            ));
        }
        if t % 7 == 0 && t > 0 {
            oltp.push_str(&format!(
                "DELETE FROM bench_orders WHERE id = {};\n",
                t * 2 - 1
            ));
        }
        oltp.push_str("COMMIT;\n");
    }
    run(
        Capture {
            name: "bench-oltp",
            slot: "bench_oltp",
            version: 1,
            streaming: "off",
            two_phase: false,
        },
        oltp,
    )?;
    // Bulk: one transaction of 2,000 orders.
    let bulk: String = std::iter::once("BEGIN;\n".to_owned())
        .chain((10_000..12_000).map(|id| order(id, id % 300)))
        .chain(std::iter::once("COMMIT;\n".to_owned()))
        .collect();
    run(
        Capture {
            name: "bench-bulk-load",
            slot: "bench_bulk",
            version: 1,
            streaming: "off",
            two_phase: false,
        },
        bulk,
    )?;
    // A large transaction streamed in parallel mode (logical_decoding_work_mem is 64kB).
    let streamed: String = std::iter::once("BEGIN;\n".to_owned())
        .chain((20_000..21_000).map(|id| order(id, id % 300)))
        .chain(std::iter::once(
            "UPDATE bench_orders SET paid = true WHERE id BETWEEN 20000 AND 20200;\nCOMMIT;\n"
                .to_owned(),
        ))
        .collect();
    run(
        Capture {
            name: "bench-streamed-parallel",
            slot: "bench_streamed",
            version: 4,
            streaming: "parallel",
            two_phase: false,
        },
        streamed,
    )?;
    // Two-phase: prepared transactions, committed or rolled back.
    let mut two_phase = String::new();
    for t in 0..60u64 {
        two_phase.push_str("BEGIN;\n");
        two_phase.push_str(&order(30_000 + t, t));
        two_phase.push_str(&format!("PREPARE TRANSACTION 'bench_{t}';\n"));
        let end = if t % 4 == 0 { "ROLLBACK" } else { "COMMIT" };
        two_phase.push_str(&format!("{end} PREPARED 'bench_{t}';\n"));
    }
    run(
        Capture {
            name: "bench-two-phase",
            slot: "bench_two_phase",
            version: 3,
            streaming: "off",
            two_phase: true,
        },
        two_phase,
    )?;
    Ok(written.join(", "))
}
