//! A sink of tables: a PostgreSQL database where the consumer writes the rows it applied
//! (a subscriber's, or any consumer's that keeps a copy of the source's tables).
//!
//! Before each scenario the trial makes the source's tables there afresh
//! ([`schema::tables_sql`]) and drops every subscription left on a trial's slot; a
//! workload's schema change is made there before it is made on the source, as the
//! operator of a subscriber does. At the end it reads each row's columns as text and
//! compares them with the rows the source holds ([`grade_state`](crate::grade_state)):
//! a table holds no history, so what it can show is a row missing, stale, with a wrong
//! value, rolled back or never written, not a duplicate or an order.
//!
//! The connection string is a libpq one (`host=… port=… user=… dbname=…`); the trial
//! speaks to it over a replication connection (`replication=database`), so its user needs
//! the REPLICATION attribute, as a subscriber's owner (a superuser) has.

use pgoutput_client::{ConnInfo, Connection};

use crate::change::{Change, Op};
use crate::schema::{self, ITEMS};

/// A connection to the sink's database.
pub struct Database {
    conn: Connection,
    /// `dbname at host:port`, for reports.
    name: String,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("name", &self.name)
            .finish()
    }
}

impl Database {
    /// Connects to the sink's database.
    ///
    /// # Errors
    ///
    /// The connection string does not parse, or the login fails.
    pub fn connect(conninfo: &str) -> Result<Database, String> {
        let info = ConnInfo::parse(Some(conninfo), |name| std::env::var(name).ok())
            .map_err(|e| format!("--sink-database: {e}"))?;
        let name = format!(
            "the tables of {} at {}:{}",
            info.dbname, info.host, info.port
        );
        let conn = Connection::connect(&info)
            .map_err(|e| format!("connecting to the sink's database: {e}"))?;
        Ok(Database { conn, name })
    }

    /// Runs `sql` there.
    ///
    /// # Errors
    ///
    /// The server's error, with the statement.
    pub fn run(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        self.conn
            .simple_query(sql)
            .map_err(|e| format!("on the sink's database: {e} (running {sql:?})"))
    }

    /// No subscription left on a trial's slot, and the tables made afresh.
    ///
    /// # Errors
    ///
    /// What the server refused.
    pub fn prepare(&mut self) -> Result<(), String> {
        self.drop_subscriptions()?;
        self.run(&schema::drop_tables_sql())?;
        self.run(&schema::tables_sql())?;
        Ok(())
    }

    /// Drops the subscriptions of this database that stream a trial's slot (left by a
    /// consumer that was killed before it dropped its own), leaving the slot to the trial.
    ///
    /// # Errors
    ///
    /// What the server refused.
    pub fn drop_subscriptions(&mut self) -> Result<(), String> {
        let names = self.run(
            "SELECT quote_ident(subname) FROM pg_subscription \
             WHERE subdbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND subslotname LIKE 'pgoutput\\_trial\\_%'",
        )?;
        for name in names
            .into_iter()
            .filter_map(|row| row.into_iter().next().flatten())
        {
            // One statement each: DROP SUBSCRIPTION refuses a transaction block, and a
            // query of several statements is one.
            self.run(&format!("ALTER SUBSCRIPTION {name} DISABLE"))?;
            self.run(&format!("ALTER SUBSCRIPTION {name} SET (slot_name = NONE)"))?;
            self.run(&format!("DROP SUBSCRIPTION {name}"))?;
        }
        Ok(())
    }

    /// The rows of the published table: each with its key and its other columns as text
    /// (NULLs left out, as a JSON-lines sink leaves them out).
    ///
    /// # Errors
    ///
    /// What the server refused, or a row that does not read.
    pub fn rows(&mut self) -> Result<Vec<Change>, String> {
        let rows = self.run(&format!(
            "SELECT json_object_agg(c.key, c.value)::text \
             FROM {ITEMS} t, json_each_text(row_to_json(t)) c GROUP BY t.id ORDER BY t.id"
        ))?;
        rows.into_iter()
            .filter_map(|row| row.into_iter().next().flatten())
            .map(|text| row(&text))
            .collect()
    }

    /// Where it is, in words: "the tables of sink at 127.0.0.1:5432".
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A row of [`ITEMS`] from its columns as a JSON object of texts.
fn row(text: &str) -> Result<Change, String> {
    let columns: std::collections::BTreeMap<String, Option<String>> =
        serde_json::from_str(text).map_err(|e| format!("a row of {ITEMS} ({text}): {e}"))?;
    let mut values: std::collections::BTreeMap<String, String> = columns
        .into_iter()
        .filter_map(|(column, value)| Some((column, value?)))
        .collect();
    let id = values
        .remove("id")
        .ok_or_else(|| format!("a row of {ITEMS} without its key ({text})"))?;
    let mut change = Change::new(ITEMS, Op::Insert, [("id", id)]);
    change.values = values;
    Ok(change)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_its_key_and_its_other_columns_without_nulls() {
        let change =
            row(r#"{"id" : "7", "version" : "2", "note" : null, "doc" : "{\"a\": 1}"}"#).unwrap();
        assert_eq!(change.table, ITEMS);
        assert_eq!(change.key["id"], "7");
        assert_eq!(change.values["version"], "2");
        assert_eq!(change.values["doc"], r#"{"a": 1}"#);
        assert!(!change.values.contains_key("note"));
        assert!(!change.values.contains_key("id"));
        assert!(row(r#"{"version": "1"}"#)
            .unwrap_err()
            .contains("without its key"));
        assert!(row("[1]").is_err());
    }
}
