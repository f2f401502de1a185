//! The test walsender against real clients: this crate's client (every option set,
//! several at once, hostile input), pg_recvlogical 15 and 18, psycopg2, and a PostgreSQL
//! 18 subscriber. Real-client tests need the servers `scripts/install-postgres` installs
//! (and psycopg2); without them they say so and pass, unless `PGOUTPUT_REQUIRE_LIVE=1`.

mod async_consumer;
mod consumer;
mod control_guard;
mod faults;
mod hostile;
mod inject;
mod judge;
mod psycopg;
mod quick_start;
mod raw;
mod recvlogical;
mod replay;
mod rust_client;
mod subscriber;
mod twins;
mod typed;
mod whole;

use pgoutput_client::StreamOptions;
use pgoutput_codec::{ColumnValue, ProtocolVersion, Streaming, TruncateOptions};
use pgoutput_harness::server::{Publication, Script, Table, Transaction};
use pgoutput_tests::pg::{find_servers, ServerBinaries};

/// `t1 (id int4 primary key, v text)`.
pub fn t1() -> Table {
    Table::new(16385, "public", "t1")
        .key_column("id", 23)
        .column("v", 25)
        .row([Some("100"), Some("initial")])
}

/// `t2 (id int4 primary key, b bytea, f float8)`.
pub fn t2() -> Table {
    Table::new(16393, "public", "t2")
        .key_column("id", 23)
        .column("b", 17)
        .column("f", 701)
        .row([Some("200"), Some("\\x01"), None])
}

pub fn publication() -> Publication {
    Publication::new("p").table(t1()).table(t2())
}

/// Every kind of transaction a subscriber must apply: inserts, updates with old keys,
/// deletes, a truncate, an unchanged TOAST value, a streamed transaction with a
/// subtransaction abort, a streamed transaction that aborts, and a two-phase one.
pub fn script() -> Script {
    let (t1, t2) = (t1(), t2());
    Script::new()
        .transaction(
            Transaction::new()
                .insert(&t1, ["1", "a"])
                .insert(&t1, ["2", "b"])
                .insert(&t2, [Some("1"), Some("\\x0102"), Some("1.5")]),
        )
        .transaction(
            Transaction::new()
                .update(&t1, Some(vec!["1", "a"]), ["1", "a2"])
                .delete(&t1, ["2", "b"]),
        )
        .transaction(
            Transaction::new()
                .streamed()
                .insert(&t1, ["10", "s10"])
                .insert(&t1, ["11", "s11"])
                .stream_boundary()
                .aborted_subtransaction(|t| t.insert(&t1, ["99", "rolled back"]))
                .subtransaction(|t| t.insert(&t1, ["12", "s12"]))
                .insert(&t1, ["13", "s13"]),
        )
        .transaction(
            Transaction::new()
                .streamed()
                .insert(&t1, ["50", "never"])
                .abort(),
        )
        .transaction(
            Transaction::new()
                .insert(&t1, ["20", "prepared"])
                .prepare("gid1"),
        )
        .commit_prepared("gid1")
        .transaction(Transaction::new().truncate(&[&t2], TruncateOptions::NONE))
        .transaction(
            Transaction::new()
                .insert(&t2, [Some("2"), Some("\\x0a0b"), Some("3.25")])
                .update(
                    &t1,
                    None::<Vec<&str>>,
                    [ColumnValue::from("13"), ColumnValue::UnchangedToast],
                ),
        )
}

/// What t1 and t2 hold after the script (with the initial rows when they were copied).
pub fn expected_rows(copied: bool) -> (Vec<&'static str>, Vec<&'static str>) {
    let mut t1 = vec![
        "1|a2",
        "10|s10",
        "11|s11",
        "12|s12",
        "13|s13",
        "20|prepared",
    ];
    if copied {
        t1.push("100|initial");
    }
    (t1, vec!["2|\\x0a0b|3.25"])
}

/// `t (id int4 primary key)` and `n` transactions of two inserts each: ids `{i}0`, `{i}1`.
pub fn two_row_transactions(n: usize) -> (Table, Script) {
    let t = Table::new(16385, "public", "t").key_column("id", 23);
    let mut script = Script::new();
    for i in 0..n {
        script = script.transaction(
            Transaction::new()
                .insert(&t, [format!("{i}0")])
                .insert(&t, [format!("{i}1")]),
        );
    }
    (t, script)
}

/// A server of `n` [`two_row_transactions`] in publication `p`, with `faults` armed.
pub fn two_row_server(
    n: usize,
    faults: impl IntoIterator<Item = pgoutput_harness::faults::Fault>,
) -> pgoutput_harness::server::TestServer {
    let (t, script) = two_row_transactions(n);
    let mut builder = pgoutput_harness::server::TestServer::builder()
        .publication(Publication::new("p").table(t))
        .script(script);
    for fault in faults {
        builder = builder.fault(fault);
    }
    builder.start().unwrap()
}

/// The transactions of [`two_row_transactions`] as a consumer hands them out: each
/// one's ids, from its events; a transaction sent again from its start after a resume
/// begins again.
#[derive(Debug, Default)]
pub struct Committed {
    open: Vec<String>,
    /// Each whole transaction's ids, in order.
    pub done: Vec<Vec<String>>,
    /// How many events said the stream resumed.
    pub resumed: usize,
}

impl Committed {
    pub fn see(&mut self, event: &pgoutput_client::Event<'_>) {
        if event.resumed() {
            self.resumed += 1;
            self.open.clear();
        }
        if let Some(row) = event.new_row() {
            self.open.push(row.value::<String>("id").unwrap());
        }
        if event.confirmable_lsn().is_some() {
            self.done.push(std::mem::take(&mut self.open));
        }
    }

    /// What `n` of [`two_row_transactions`] are, each once.
    pub fn expected(n: usize) -> Vec<Vec<String>> {
        (0..n)
            .map(|i| vec![format!("{i}0"), format!("{i}1")])
            .collect()
    }
}

/// A server of [`script`] with a slot per option set in reach (more than PostgreSQL's
/// default of 10).
pub fn every_kind_server() -> pgoutput_harness::server::TestServer {
    pgoutput_harness::server::TestServer::builder()
        .max_replication_slots(64)
        .publication(publication())
        .script(script())
        .start()
        .unwrap()
}

/// A server of 200 two-row transactions on `t` that closes the connection once, inside
/// the `transaction`-th, after its first change.
pub fn cut_inside(transaction: u64) -> pgoutput_harness::server::TestServer {
    use pgoutput_harness::faults::{Action, Fault, Trigger};
    two_row_server(
        200,
        [Fault::new(
            Trigger::Change {
                transaction,
                after: 1,
            },
            Action::Close,
        )],
    )
}

/// Every protocol version with every streaming mode it allows, text and binary (and
/// two-phase with binary from protocol 3).
pub fn option_sets() -> Vec<StreamOptions> {
    let mut sets = Vec::new();
    for version in ProtocolVersion::ALL {
        for streaming in [Streaming::Off, Streaming::On, Streaming::Parallel] {
            if version < streaming.min_version() {
                continue;
            }
            for binary in [false, true] {
                sets.push(
                    StreamOptions::new(version, &["p"])
                        .streaming(streaming)
                        .binary(binary)
                        .two_phase(version >= ProtocolVersion::V3 && binary),
                );
            }
        }
    }
    sets
}

/// The server binaries of `major`, or `None` (a failure under `PGOUTPUT_REQUIRE_LIVE=1`).
pub fn binaries(major: &str) -> Option<ServerBinaries> {
    let found = find_servers()
        .into_iter()
        .find(|b| b.source == format!("PGOUTPUT_PG{major}_BIN"));
    if found.is_none() {
        assert!(
            std::env::var_os("PGOUTPUT_REQUIRE_LIVE").is_none(),
            "PostgreSQL {major} is required (PGOUTPUT_REQUIRE_LIVE=1) but was not found: run scripts/install-postgres"
        );
        eprintln!("PostgreSQL {major} not found: skipping (run scripts/install-postgres)");
    }
    found
}

pub use pgoutput_tests::pg::psycopg2_found;
