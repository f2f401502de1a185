//! The commands state: replication commands and the SQL that clients send before they
//! stream, each answered as PostgreSQL's walsender answers it, until Terminate, a closed
//! socket, or shutdown.

use std::io::Write;

use super::{Closed, Connection, Failure};
use crate::server::queries::{self, Reply};
use pgoutput_wire::backend::{self, Column};
use pgoutput_wire::error::{error, sqlstate, SqlError};
use pgoutput_wire::frontend::Frontend;
use pgoutput_wire::grammar::{self, Command};

impl<W: Write> Connection<'_, W> {
    /// The command loop: until Terminate, a closed socket, or shutdown.
    pub(super) fn commands(&mut self) -> Closed {
        loop {
            let message = match self.next() {
                Ok(message) => message,
                Err(closed) => return closed,
            };
            let result = match message {
                Frontend::Query(text) => self.query(&text),
                Frontend::Terminate => return Closed::ByClient,
                Frontend::Sync => Ok(()),
                Frontend::Password(_) => {
                    return self.fatal(sqlstate::PROTOCOL_VIOLATION, "unexpected password message")
                }
                // "Accept but ignore these messages, per protocol spec; we probably got
                // here because a COPY failed, and the frontend is still sending data."
                // (postgres.c): postgres.js sends CopyDone, then CopyFail, on `sql.end()`.
                Frontend::CopyData(_) | Frontend::CopyDone | Frontend::CopyFail(_) => Ok(()),
                Frontend::Other(tag) => {
                    let err = match tag {
                        b'F' => error(
                            sqlstate::PROTOCOL_VIOLATION,
                            "fastpath function calls not supported in a replication connection",
                        ),
                        b'P' | b'B' | b'E' | b'D' | b'C' => error(
                            sqlstate::PROTOCOL_VIOLATION,
                            "extended query protocol not supported in a replication connection",
                        ),
                        other => error(
                            sqlstate::PROTOCOL_VIOLATION,
                            format!("invalid frontend message type {other}"),
                        ),
                    };
                    self.error(&err);
                    self.ready()
                }
            };
            if let Err(closed) = result {
                return closed;
            }
        }
    }

    fn query(&mut self, text: &str) -> Result<(), Closed> {
        self.shared.lock().records_mut().add_command(self.id, text);
        let result = match grammar::parse(text) {
            Some(Ok(command)) => self.replication_command(command),
            Some(Err(err)) => Err(Failure::Error(err)),
            None => self.sql(text).map_err(Failure::Error),
        };
        if let Err(failure) = result {
            let err = match failure {
                Failure::Error(err) => err,
                Failure::Closed(closed) => return Err(closed),
            };
            self.shared.log(format!(
                "client {}: {} (SQLSTATE {}) for {text:?}",
                self.id, err.message, err.code
            ));
            self.error(&err);
            if self.walsender {
                // WalSndErrorCleanup: the slot in use is released and the session's
                // TEMPORARY slots are dropped (ReplicationSlotCleanup), whatever failed.
                let dropped = self.shared.lock().slots_mut().clean_up(self.id);
                if !dropped.is_empty() {
                    self.shared.log(format!(
                        "client {}: the ERROR dropped its temporary slots {dropped:?}",
                        self.id
                    ));
                }
            }
        }
        self.ready()
    }

    pub(super) fn rows(&mut self, columns: &[Column<'_>], rows: &[Vec<Option<String>>], tag: &str) {
        backend::row_description(&mut self.out, columns);
        for row in rows {
            backend::data_row(&mut self.out, row);
        }
        backend::command_complete(&mut self.out, tag);
    }

    fn sql(&mut self, text: &str) -> Result<(), SqlError> {
        let reply = { queries::answer(text, &self.shared.catalog, self.shared.config.major)? };
        match reply {
            Reply::SetConfig => {
                self.rows(
                    &[Column::computed("set_config", 25, -1)],
                    &[vec![Some(String::new())]],
                    "SELECT 1",
                );
                if self.shared.config.major >= 18 {
                    backend::parameter_status(&mut self.out, "search_path", "");
                }
            }
            Reply::Rows { columns, rows, tag } => self.rows(&columns, &rows, &tag),
            Reply::Command {
                tag,
                in_transaction,
            } => {
                if tag.is_empty() {
                    backend::empty_query_response(&mut self.out);
                } else {
                    backend::command_complete(&mut self.out, tag);
                }
                if let Some(in_transaction) = in_transaction {
                    self.in_transaction = in_transaction;
                }
            }
            Reply::Copy {
                columns,
                binary,
                chunks,
                rows,
            } => {
                backend::copy_response(&mut self.out, b'H', columns, binary);
                for chunk in &chunks {
                    backend::copy_data(&mut self.out, chunk);
                }
                backend::copy_done(&mut self.out);
                backend::command_complete(&mut self.out, &format!("COPY {rows}"));
            }
        }
        Ok(())
    }

    fn replication_command(&mut self, command: Command) -> Result<(), Failure> {
        let config = &self.shared.config;
        match command {
            Command::IdentifySystem => {
                let (timeline_type, timeline_len) =
                    if config.major >= 18 { (20, 8) } else { (23, 4) };
                let wal_end = self.shared.wal_end();
                self.rows(
                    &[
                        Column::computed("systemid", 25, -1),
                        Column::computed("timeline", timeline_type, timeline_len),
                        Column::computed("xlogpos", 25, -1),
                        Column::computed("dbname", 25, -1),
                    ],
                    &[vec![
                        Some(config.system_identifier.to_string()),
                        Some("1".into()),
                        Some(wal_end.to_string()),
                        Some(config.database.clone()),
                    ]],
                    "IDENTIFY_SYSTEM",
                );
                Ok(())
            }
            Command::Show(name) => {
                let value = match name.as_str() {
                    "data_directory_mode" => "0700".to_owned(),
                    "server_version" => config.server_version.clone(),
                    "wal_segment_size" => "16MB".to_owned(),
                    "integer_datetimes" => "on".to_owned(),
                    "server_encoding" | "client_encoding" => "UTF8".to_owned(),
                    "wal_sender_timeout" => {
                        show_duration(config.wal_sender_timeout.unwrap_or_default())
                    }
                    "authentication_timeout" => show_duration(config.authentication_timeout),
                    "max_wal_senders" => config.max_wal_senders.to_string(),
                    "max_replication_slots" => config.max_replication_slots.to_string(),
                    _ => {
                        return Err(error(
                            sqlstate::UNDEFINED_OBJECT,
                            format!("unrecognized configuration parameter \"{name}\""),
                        )
                        .into())
                    }
                };
                self.rows(
                    &[Column::computed(&name, 25, -1)],
                    &[vec![Some(value)]],
                    "SHOW",
                );
                Ok(())
            }
            Command::CreateSlot {
                name,
                temporary,
                plugin,
                options,
            } => Ok(self.create_slot(name, temporary, &plugin, &options)?),
            Command::DropSlot { name, wait } => Ok(self.drop_slot(&name, wait)?),
            Command::StartLogical { slot, lsn, options } => self.start(&slot, lsn, &options),
            Command::CreatePhysicalSlot | Command::StartPhysical => Err(error(
                sqlstate::FEATURE_NOT_SUPPORTED,
                "this test server serves logical replication only",
            )
            .into()),
            Command::Unsupported(name) => Err(error(
                sqlstate::FEATURE_NOT_SUPPORTED,
                format!("{name} is not supported by this test server"),
            )
            .into()),
        }
    }
}

/// A time setting as SHOW prints it: in the largest unit that holds it exactly (60 s is
/// `1min`, 1500 ms `1500ms`, 0 `0`), as PostgreSQL's GUC display does.
fn show_duration(duration: std::time::Duration) -> String {
    let ms = duration.as_millis();
    if ms == 0 {
        return "0".into();
    }
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("min", 60_000),
        ("s", 1_000),
    ] {
        if ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}
