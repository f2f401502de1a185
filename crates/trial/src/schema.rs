//! The trial's own objects on the source: made afresh for each scenario, so that one
//! scenario's rows, columns and slots never reach the next. Every name starts with
//! `pgoutput_trial`, and nothing else on the server is touched.

/// The published table: a key, the version every update raises, a text that a workload
/// can make TOASTed, numeric and jsonb; and an enum column (`mood`) and a domain column
/// (`code`), each a Type message before its first row, once a workload adds them.
pub const ITEMS: &str = "pgoutput_trial_items";

/// A table outside the publication: its writes move the WAL end and send nothing.
pub const UNPUBLISHED: &str = "pgoutput_trial_unpublished";

/// The publication the consumer is told to use.
pub const PUBLICATION: &str = "pgoutput_trial";

/// The enum type of [`ITEMS`]'s `mood` (made with the tables, the column added by a
/// workload's `add_column`).
pub const MOOD: &str = "pgoutput_trial_mood";

/// The domain type of [`ITEMS`]'s `code` (a text that is not empty), made with the
/// tables, the column added with `mood`.
pub const CODE: &str = "pgoutput_trial_code";

/// The slot the trial reads the source's own account from (the ledger), made before the
/// consumer's so that it sees everything the consumer can.
pub const REFERENCE_SLOT: &str = "pgoutput_trial_reference";

/// The slot the consumer streams from in the scenario numbered `n` (from 1).
#[must_use]
pub fn consumer_slot(n: usize) -> String {
    format!("pgoutput_trial_{n}")
}

/// Drops what a trial made, in an order that works from any state a stopped trial left.
#[must_use]
pub fn drop_sql() -> String {
    format!(
        "DROP PUBLICATION IF EXISTS {PUBLICATION}; {}",
        drop_tables_sql()
    )
}

/// Drops the tables and their type (on the source, or a sink of tables).
#[must_use]
pub fn drop_tables_sql() -> String {
    format!(
        "DROP TABLE IF EXISTS {ITEMS}, {UNPUBLISHED}; DROP TYPE IF EXISTS {MOOD}; \
         DROP DOMAIN IF EXISTS {CODE}"
    )
}

/// Makes the tables and the publication, from nothing.
#[must_use]
pub fn create_sql() -> String {
    format!(
        "{}; CREATE PUBLICATION {PUBLICATION} FOR TABLE {ITEMS}",
        tables_sql()
    )
}

/// Makes the tables, from nothing: on the source, and on a sink of tables (a
/// subscriber's database), where a consumer writes the rows it applied.
#[must_use]
pub fn tables_sql() -> String {
    format!(
        "CREATE TYPE {MOOD} AS ENUM ('calm', 'busy', 'stuck'); \
         CREATE DOMAIN {CODE} AS text CHECK (VALUE <> ''); \
         CREATE TABLE {ITEMS} (id bigint PRIMARY KEY, version bigint NOT NULL, note text, \
             amount numeric(12, 2), doc jsonb); \
         ALTER TABLE {ITEMS} ALTER COLUMN note SET STORAGE EXTERNAL; \
         CREATE TABLE {UNPUBLISHED} (id bigint PRIMARY KEY, version bigint NOT NULL)"
    )
}

/// The trial's slots left on the server (by an earlier, stopped run): dropped before a
/// scenario makes its own.
#[must_use]
pub fn leftover_slots_sql() -> &'static str {
    "SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE 'pgoutput\\_trial\\_%'"
}
