//! A real PostgreSQL 18 subscriber (`CREATE SUBSCRIPTION … CONNECTION` to the test
//! server) applies the script: without and with initial table copy, parallel streaming,
//! two-phase, binary both ways. Its tables must end as the script says.

use std::time::{Duration, Instant};

use pgoutput_harness::server::{Auth, TestServer};
use pgoutput_tests::pg::Server;

use super::{binaries, expected_rows, publication, script};

fn rows(pg: &Server, sql: &str) -> Vec<String> {
    pg.psql(sql)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The subscriber's tables, empty.
fn fresh_tables(pg: &Server) {
    pg.psql(
        "DROP TABLE IF EXISTS t1, t2;
         CREATE TABLE t1 (id int PRIMARY KEY, v text);
         CREATE TABLE t2 (id int PRIMARY KEY, b bytea, f float8);",
    )
    .unwrap();
}

fn apply(pg: &Server, server_version: &str, name: &str, with: &str, copied: bool) {
    let server = TestServer::builder()
        .server_version(server_version)
        .auth(Auth::scram("rep", "pw"))
        .publication(publication())
        .script(script())
        .start()
        .unwrap();
    fresh_tables(pg);
    pg.psql(&format!(
        "CREATE SUBSCRIPTION {name} CONNECTION '{} password=pw' PUBLICATION p WITH ({with})",
        server.connection_string()
    ))
    .unwrap();
    let end = server.wal_end();
    let confirmed = server.wait_for_confirmed_flush(name, end, Duration::from_secs(90));
    let (t1, t2) = expected_rows(copied);
    // The subscriber confirms a transaction once applied; give the last one a moment to
    // become visible, then compare.
    let deadline = Instant::now() + Duration::from_secs(30);
    let t1_sql = "SELECT id || '|' || coalesce(v, 'NULL') FROM t1 ORDER BY id";
    let t2_sql = "SELECT id || '|' || coalesce(b::text, 'NULL') || '|' || coalesce(f::text, 'NULL') FROM t2 ORDER BY id";
    while (rows(pg, t1_sql) != t1 || rows(pg, t2_sql) != t2) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        confirmed.map_err(|e| format!("{e}; log: {:#?}", server.log())),
        Ok(end),
        "{with}"
    );
    assert_eq!(rows(pg, t1_sql), t1, "{with}; log: {:#?}", server.log());
    assert_eq!(rows(pg, t2_sql), t2, "{with}");
    assert_eq!(rows(pg, "SELECT count(*) FROM pg_prepared_xacts"), ["0"]);
    pg.psql(&format!("DROP SUBSCRIPTION {name}")).unwrap();
    assert!(
        server.slots().iter().all(|s| s.name != name),
        "DROP SUBSCRIPTION drops the slot"
    );
    let commands = server.commands();
    assert!(commands
        .iter()
        .any(|c| c.starts_with("SELECT t.pubname FROM")));
    assert!(commands.iter().any(|c| c.starts_with("START_REPLICATION")));
    if copied {
        assert!(commands.iter().any(|c| c.starts_with("COPY public.t1")));
    }
    let asked = |needle: &str| {
        commands
            .iter()
            .any(|c| c.starts_with("START_REPLICATION") && c.contains(needle))
    };
    if server_version.starts_with("15") {
        assert!(asked("proto_version '3'") && !asked("origin"));
        assert!(commands.iter().any(|c| c.contains("pg_publication_tables")));
    } else {
        assert!(asked("proto_version '4'") && asked("streaming"));
    }
    if copied && with.contains("binary = true") {
        assert!(commands.iter().any(|c| c.contains("FORMAT binary")));
    }
}

#[test]
fn postgres_18_subscriber_applies_the_script() {
    let Some(binaries) = binaries("18") else {
        return;
    };
    let pg = Server::start(&binaries).unwrap();
    apply(
        &pg,
        "18.6",
        "sub_nocopy",
        "copy_data = false, streaming = parallel, two_phase = true, binary = true",
        false,
    );
    apply(
        &pg,
        "18.6",
        "sub_copy",
        "copy_data = true, streaming = parallel, two_phase = true, binary = false",
        true,
    );
    // Initial rows in COPY's binary format, as a binary subscription asks for them.
    apply(
        &pg,
        "18.6",
        "sub_copy_binary",
        "copy_data = true, streaming = on, two_phase = false, binary = true",
        true,
    );
    // Announcing PostgreSQL 15 makes the subscriber ask for protocol 3 and `streaming 'on'`
    // and use PostgreSQL 15's catalog queries.
    apply(
        &pg,
        "15.20",
        "sub_pg15",
        "copy_data = true, streaming = parallel, two_phase = true, binary = false",
        true,
    );
}

/// Waits until the subscriber's tables hold what the script leaves, or 60 s pass.
fn tables_end_as_scripted(pg: &Server) -> bool {
    let (t1, t2) = expected_rows(false);
    let t1_sql = "SELECT id || '|' || coalesce(v, 'NULL') FROM t1 ORDER BY id";
    let t2_sql = "SELECT id || '|' || coalesce(b::text, 'NULL') || '|' || coalesce(f::text, 'NULL') FROM t2 ORDER BY id";
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if rows(pg, t1_sql) == t1 && rows(pg, t2_sql) == t2 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// A PostgreSQL 18 subscriber under faults: connections dropped inside transactions
/// again and again, the walsender's shutdown sequence, and a crash that takes the slot
/// back behind what it confirmed. Its tables must end exactly as the script says each
/// time: it resumes from its replication origin, so nothing is applied twice.
#[test]
fn postgres_18_subscriber_survives_faults() {
    use pgoutput_harness::faults::{Action, Fault, Trigger};
    use pgoutput_harness::judge::Fact;
    let Some(binaries) = binaries("18") else {
        return;
    };
    // The apply worker is restarted this soon after an error (5 s by default).
    let pg =
        Server::start_with_settings(&binaries, &["wal_retrieve_retry_interval = 200ms"]).unwrap();
    let cases: [(&str, Vec<Fault>); 3] = [
        (
            "drops",
            vec![
                // Three connections in a row lose the line in their first transaction,
                // after its first change.
                Fault::new(
                    Trigger::Change {
                        transaction: 1,
                        after: 1,
                    },
                    Action::Close,
                )
                .times(3),
                // The next is reset in the middle of its first Stream Start's frame.
                Fault::new(
                    Trigger::Message {
                        n: 1,
                        kind: Some(pgoutput_harness::faults::MessageKind::of::<
                            pgoutput_codec::StreamStart,
                        >()),
                        before: false,
                        byte: Some(12),
                    },
                    Action::Reset,
                )
                .connection(4)
                .slot("sub_drops"),
            ],
        ),
        (
            "shutdown",
            vec![Fault::new(
                Trigger::Commit { transaction: 2 },
                Action::Shutdown,
            )],
        ),
        ("crash", Vec::new()),
    ];
    for (name, faults) in cases {
        let sub = format!("sub_{name}");
        let mut builder = TestServer::builder()
            .server_version("18.6")
            .auth(Auth::scram("rep", "pw"))
            .publication(publication())
            .script(script());
        for fault in faults {
            builder = builder.fault(fault);
        }
        let server = builder.start().unwrap();
        fresh_tables(&pg);
        pg.psql(&format!(
            "CREATE SUBSCRIPTION {sub} CONNECTION '{} password=pw' PUBLICATION p
             WITH (copy_data = false, streaming = parallel, two_phase = true)",
            server.connection_string()
        ))
        .unwrap();
        let end = server.wal_end();
        let confirmed = server.wait_for_confirmed_flush(&sub, end, Duration::from_secs(90));
        assert!(
            confirmed.is_ok(),
            "{name}: {confirmed:?}; log: {:#?}",
            server.log()
        );
        if name == "crash" {
            // Everything is confirmed; the last checkpoint was the slot's creation.
            server.crash();
            assert!(server.confirmed_flush_lsn(&sub) < Some(end));
            // The subscriber reconnects from its origin's position, and the slot catches
            // up without a transaction sent again.
            let again = server.wait_for_confirmed_flush(&sub, end, Duration::from_secs(60));
            assert_eq!(
                again.map_err(|e| format!("{e}; log: {:#?}", server.log())),
                Ok(end)
            );
            let starts: Vec<String> = server
                .commands()
                .into_iter()
                .filter(|c| c.starts_with("START_REPLICATION"))
                .collect();
            assert!(starts.len() >= 2, "{starts:?}");
            assert!(
                starts.last().unwrap().contains(&format!("LOGICAL {end}")),
                "the subscriber resumes from its origin: {starts:?}"
            );
            assert!(
                !server
                    .facts()
                    .iter()
                    .any(|(_, f)| matches!(f, Fact::Resent(_))),
                "{:?}",
                server.facts()
            );
        } else {
            for (rule, fired) in server.faults() {
                assert!(
                    fired >= 1,
                    "{name}: {rule:?} never fired; log: {:#?}",
                    server.log()
                );
            }
        }
        assert!(
            tables_end_as_scripted(&pg),
            "{name}: log: {:#?}",
            server.log()
        );
        assert_eq!(
            rows(&pg, "SELECT count(*) FROM pg_prepared_xacts"),
            ["0"],
            "{name}"
        );
        pg.psql(&format!("DROP SUBSCRIPTION {sub}")).unwrap();
    }
}
