//! The source database as the trial uses it: one connection for its own SQL (slots,
//! walsenders, positions) and a workload's sessions, each a connection of its own, whose
//! commits are read back into the ledger from the reference slot.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::ledger::Ledger;
use crate::schema;
use crate::sink::Database;
use crate::workload::{self, Session};
use pgoutput_client::{ConnInfo, Connection};
use pgoutput_codec::Lsn;

/// The trial's SQL connection to the source (a replication connection's SQL, as the
/// client speaks it).
pub(crate) struct Source(Connection);

impl Source {
    pub(crate) fn connect(info: &ConnInfo) -> Result<Source, String> {
        Connection::connect(info)
            .map(Source)
            .map_err(|e| format!("connecting to the source: {e}"))
    }

    pub(crate) fn run(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        self.0
            .simple_query(sql)
            .map_err(|e| format!("on the source: {e} (running {sql:?})"))
    }

    /// The trial's objects made afresh, and no slot of an earlier run left.
    pub(crate) fn prepare(&mut self) -> Result<(), String> {
        self.drop_slots()?;
        self.run(&schema::drop_sql())?;
        self.run(&schema::create_sql())?;
        Ok(())
    }

    pub(crate) fn drop_slots(&mut self) -> Result<(), String> {
        let slots = self.run(schema::leftover_slots_sql())?;
        for slot in slots
            .into_iter()
            .filter_map(|row| row.into_iter().next().flatten())
        {
            self.drop_slot(&slot)?;
        }
        Ok(())
    }

    /// Drops `slot`, ending the walsender streaming it first.
    pub(crate) fn drop_slot(&mut self, slot: &str) -> Result<(), String> {
        self.end_walsender(slot)?;
        self.drop_slot_when_free(slot)
    }

    /// Ends the walsender streaming `slot`, if one is.
    pub(crate) fn end_walsender(&mut self, slot: &str) -> Result<(), String> {
        self.run(&format!(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots \
             WHERE slot_name = '{slot}' AND active_pid IS NOT NULL"
        ))?;
        Ok(())
    }

    pub(crate) fn slot_exists(&mut self, slot: &str) -> Result<bool, String> {
        let rows = self.run(&format!(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = '{slot}'"
        ))?;
        Ok(!rows.is_empty())
    }

    /// Drops `slot`, waiting for the walsender that held it to exit (a terminated
    /// backend releases its slot as it exits).
    pub(crate) fn drop_slot_when_free(&mut self, slot: &str) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.run(&format!("SELECT pg_drop_replication_slot('{slot}')")) {
                Ok(_) => return Ok(()),
                Err(err) if err.contains("55006") && Instant::now() < deadline => {
                    // Held by an exiting backend: wait for it to go.
                    self.run("SELECT pg_sleep(0.05)")?;
                }
                Err(err) => return Err(err),
            }
        }
    }

    pub(crate) fn current_lsn(&mut self) -> Result<Lsn, String> {
        let rows = self.run("SELECT pg_current_wal_insert_lsn()")?;
        rows.first()
            .and_then(|row| row.first().cloned().flatten())
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| "pg_current_wal_insert_lsn() gave no position".to_owned())
    }
}

/// A scenario's workload on the source: the planner (whose rows a later batch of steps
/// goes on from) and its sessions, each its own connection, opened as first used.
pub(crate) struct Workload<'a> {
    info: &'a ConnInfo,
    planner: workload::Planner,
    open: BTreeMap<Session, Connection>,
}

impl<'a> Workload<'a> {
    pub(crate) fn new(info: &'a ConnInfo, seed: u64) -> Workload<'a> {
        Workload {
            info,
            planner: workload::Planner::new(seed),
            open: BTreeMap::new(),
        }
    }

    /// Closes the sessions' connections (a later `commit` opens them again).
    pub(crate) fn close(&mut self) {
        self.open.clear();
    }

    /// `steps` committed on the source and what they committed read into `ledger` from
    /// the reference slot (what they rolled back from the plan): the WAL end after them.
    /// A sink of tables, `tables`, has the steps' schema changes made first.
    pub(crate) fn commit(
        &mut self,
        steps: &[workload::Step],
        source: &mut Source,
        ledger: &mut Ledger,
        tables: Option<&mut Database>,
    ) -> Result<Lsn, String> {
        let plan = self.planner.plan(steps)?;
        if let Some(tables) = tables {
            for change in &plan.schema {
                tables.run(change)?;
            }
        }
        self.run(&plan.statements)?;
        let end = source.current_lsn()?;
        let more = crate::reference::read(
            self.info,
            schema::REFERENCE_SLOT,
            end,
            Duration::from_secs(60),
        )?;
        ledger.transactions.extend(more.transactions);
        ledger.aborted.extend(plan.aborted);
        Ok(end)
    }

    pub(crate) fn run(&mut self, statements: &[workload::Statement]) -> Result<(), String> {
        for statement in statements {
            let conn = match self.open.entry(statement.session.clone()) {
                std::collections::btree_map::Entry::Occupied(entry) => entry.into_mut(),
                std::collections::btree_map::Entry::Vacant(entry) => entry.insert(
                    Connection::connect(self.info)
                        .map_err(|e| format!("connecting to the source: {e}"))?,
                ),
            };
            conn.simple_query(&statement.sql).map_err(|e| {
                format!(
                    "the workload on the source: {e} (running {:?})",
                    statement.sql
                )
            })?;
        }
        Ok(())
    }
}
