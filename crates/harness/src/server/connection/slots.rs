//! CREATE_REPLICATION_SLOT and DROP_REPLICATION_SLOT: slots live in the server and
//! survive reconnects with their confirmed position.

use std::io::Write;
use std::time::Duration;

use super::Connection;
use crate::server::state::NewSlot;
use pgoutput_wire::backend::{self, Column};
use pgoutput_wire::error::{error, sqlstate, SqlError};
use pgoutput_wire::grammar;

impl<W: Write> Connection<'_, W> {
    pub(super) fn create_slot(
        &mut self,
        name: String,
        temporary: bool,
        plugin: &str,
        options: &grammar::Options,
    ) -> Result<(), SqlError> {
        if plugin != "pgoutput" {
            return Err(error(
                sqlstate::UNDEFINED_FILE,
                format!("could not access file \"{plugin}\": No such file or directory"),
            ));
        }
        let (mut snapshot, mut two_phase, mut seen) = ("export".to_owned(), false, Vec::new());
        for (option, value) in options {
            if seen.contains(option) {
                return Err(error(
                    sqlstate::SYNTAX_ERROR,
                    "conflicting or redundant options",
                ));
            }
            seen.push(option.clone());
            match option.as_str() {
                "snapshot" => {
                    let value = value.clone().unwrap_or_default();
                    if !["export", "nothing", "use"].contains(&value.as_str()) {
                        return Err(error(sqlstate::INVALID_PARAMETER_VALUE, format!("unrecognized value for CREATE_REPLICATION_SLOT option \"snapshot\": \"{value}\"")));
                    }
                    snapshot = value;
                }
                "two_phase" => two_phase = grammar::boolean(option, value.as_deref())?,
                "failover" if self.shared.config.major >= 17 => {
                    grammar::boolean(option, value.as_deref())?;
                }
                other => {
                    return Err(error(
                        sqlstate::INTERNAL_ERROR,
                        format!("unrecognized option: {other}"),
                    ))
                }
            }
        }
        let consistent_point = self.shared.wal().start_lsn();
        let max = self.shared.config.max_replication_slots;
        let major = self.shared.config.major;
        let mut state = self.shared.lock();
        state.slots().check_new(&name, max, major)?;
        match snapshot.as_str() {
            "use" if !self.in_transaction => {
                return Err(error(sqlstate::INTERNAL_ERROR, "CREATE_REPLICATION_SLOT ... (SNAPSHOT 'use') must be called inside a transaction"))
            }
            "export" if self.in_transaction => {
                return Err(error(sqlstate::INTERNAL_ERROR, "CREATE_REPLICATION_SLOT ... (SNAPSHOT 'export') must not be called inside a transaction"))
            }
            _ => {}
        }
        state.slots_mut().create(NewSlot {
            name: name.clone(),
            two_phase,
            temporary_owner: temporary.then_some(self.id),
            at: consistent_point,
        });
        drop(state);
        self.shared.log(format!(
            "client {}: created slot {name} at {consistent_point}{}",
            self.id,
            if two_phase { " (two_phase)" } else { "" }
        ));
        let snapshot_name = (snapshot == "export").then(|| format!("00000003-{:08X}-1", self.id));
        self.rows(
            &[
                Column::computed("slot_name", 25, -1),
                Column::computed("consistent_point", 25, -1),
                Column::computed("snapshot_name", 25, -1),
                Column::computed("output_plugin", 25, -1),
            ],
            &[vec![
                Some(name),
                Some(consistent_point.to_string()),
                snapshot_name,
                Some("pgoutput".into()),
            ]],
            "CREATE_REPLICATION_SLOT",
        );
        Ok(())
    }

    /// DROP_REPLICATION_SLOT: with WAIT, a slot another walsender has is waited for as
    /// long as it takes, as `ReplicationSlotAcquire` waits (until the server stops or
    /// crashes, which end this connection too).
    pub(super) fn drop_slot(&mut self, name: &str, wait: bool) -> Result<(), SqlError> {
        let mut state = self.shared.lock();
        let epoch = state.epoch();
        loop {
            match state.slots_mut().drop_slot(name, self.id) {
                Err(err)
                    if err.code == sqlstate::OBJECT_IN_USE
                        && wait
                        && state.epoch() == epoch
                        && !self.shared.stopping() =>
                {
                    state = self
                        .shared
                        .changed
                        .wait_timeout(state, Duration::from_millis(50))
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                result => break result?,
            }
        }
        drop(state);
        self.shared
            .log(format!("client {}: dropped slot {name}", self.id));
        backend::command_complete(&mut self.out, "DROP_REPLICATION_SLOT");
        Ok(())
    }
}
