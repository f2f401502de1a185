//! One client connection: start-up and authentication, then replication commands and
//! SQL, then streaming. Whatever the client sends ends in an answer, an ErrorResponse, or
//! a closed connection; never a panic or a hang.
//!
//! This module holds the connection and its command loop; [`auth`] logs the client in,
//! [`slots`] creates and drops replication slots, [`streaming`] runs START_REPLICATION.

mod auth;
mod slots;
mod streaming;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::server::command::{self, Command};
use crate::server::error::{error, sqlstate, SqlError};
use crate::server::queries::{self, Reply};
use crate::server::{ClientInfo, Shared};
use crate::wire::backend::{self, Column};
use crate::wire::frontend::{Frontend, FrontendReader, ReadError, Startup};
use crate::wire::Socket;
use crate::{Ctx, ProtocolVersion};

/// How long a read waits before the loop looks at its clock and the stop flag.
const POLL: Duration = Duration::from_millis(20);
/// How long start-up and authentication may take.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a write may block on a client that does not read.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a connection ends.
enum Closed {
    /// The client said Terminate or closed its socket.
    ByClient,
    /// Our error (already reported to the client where possible).
    Error(String),
    /// The server is shutting down.
    Shutdown,
}

/// One connection's state. Generic over the byte stream so that the fuzzer can drive a
/// session in memory; the server runs it over a [`Socket`].
struct Session<'s, S> {
    shared: &'s Shared,
    socket: S,
    reader: FrontendReader,
    out: Vec<u8>,
    id: usize,
    in_transaction: bool,
    /// Set when the connection ended while streaming.
    closed: Option<Closed>,
}

fn envelope() -> Ctx {
    Ctx::plain(ProtocolVersion::V1)
}

pub(crate) fn serve(shared: &Shared, socket: Socket, id: usize, peer: SocketAddr) {
    let _ = socket.set_read_timeout(Some(POLL));
    let _ = socket.set_write_timeout(Some(WRITE_TIMEOUT));
    run(shared, socket, id, peer);
}

/// A whole connection over `stream`: start-up, commands, streaming, then the cleanup that
/// frees its slots and records that it left.
pub(crate) fn run<S: Read + Write>(shared: &Shared, stream: S, id: usize, peer: SocketAddr) {
    let mut session = Session {
        shared,
        socket: stream,
        reader: FrontendReader::default(),
        out: Vec::new(),
        id,
        in_transaction: false,
        closed: None,
    };
    let why = match session.startup(peer) {
        Ok(true) => session.commands(),
        Ok(false) => Closed::ByClient,
        Err(closed) => closed,
    };
    if let Closed::Shutdown = why {
        // What PostgreSQL sends on a fast shutdown.
        session.fatal(
            sqlstate::ADMIN_SHUTDOWN,
            "terminating connection due to administrator command",
        );
    }
    let mut state = shared.lock();
    if let Some(client) = state.clients.iter_mut().find(|c| c.id == id) {
        client.connected = false;
    }
    for slot in &mut state.slots {
        if slot.active_client == Some(id) {
            slot.active_client = None;
        }
    }
    state.slots.retain(|s| s.temporary_owner != Some(id));
    state.sockets.retain(|(client, _)| *client != id);
    drop(state);
    shared.changed.notify_all();
    match why {
        Closed::ByClient => shared.log(format!("client {id}: disconnected")),
        Closed::Error(text) => shared.log(format!("client {id}: closed: {text}")),
        Closed::Shutdown => {}
    }
}

impl<S: Read + Write> Session<'_, S> {
    fn flush(&mut self) -> Result<(), Closed> {
        if self.out.is_empty() {
            return Ok(());
        }
        let result = self.socket.write_all(&self.out);
        self.out.clear();
        result.map_err(|e| Closed::Error(format!("write failed: {e}")))
    }

    fn stopping(&self) -> bool {
        self.shared.stop.load(Ordering::SeqCst)
    }

    /// The next message, waiting as long as it takes (until shutdown).
    fn next(&mut self) -> Result<Frontend, Closed> {
        loop {
            if self.stopping() {
                return Err(Closed::Shutdown);
            }
            match self.reader.next(&mut self.socket) {
                Ok(Some(message)) => return Ok(message),
                Ok(None) => continue,
                Err(err) => return Err(self.read_failed(err)),
            }
        }
    }

    fn read_failed(&mut self, err: ReadError) -> Closed {
        match err {
            ReadError::Closed => Closed::ByClient,
            ReadError::Io(e) => Closed::Error(e.to_string()),
            ReadError::Malformed(text) => self.fatal(sqlstate::PROTOCOL_VIOLATION, &text),
        }
    }

    /// A FATAL error: reported, then the connection closes.
    fn fatal(&mut self, code: &str, text: &str) -> Closed {
        backend::error_or_notice(&mut self.out, b'E', "FATAL", code, text, None, None);
        let _ = self.flush();
        Closed::Error(text.to_owned())
    }

    fn error(&mut self, err: &SqlError) {
        backend::error_or_notice(
            &mut self.out,
            b'E',
            "ERROR",
            err.code,
            &err.message,
            None,
            None,
        );
    }

    fn ready(&mut self) -> Result<(), Closed> {
        backend::ready_for_query(&mut self.out, if self.in_transaction { b'T' } else { b'I' });
        self.flush()
    }

    /// Start-up packet and authentication. `Ok(false)`: the client went away cleanly.
    fn startup(&mut self, peer: SocketAddr) -> Result<bool, Closed> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        let params = loop {
            if self.stopping() {
                return Err(Closed::Shutdown);
            }
            if Instant::now() > deadline {
                return Err(Closed::Error("start-up timed out".into()));
            }
            match self.reader.startup(&mut self.socket) {
                Ok(None) => continue,
                Ok(Some(Startup::SslRequest | Startup::GssEncRequest)) => {
                    self.out.push(b'N');
                    self.flush()?;
                }
                Ok(Some(Startup::CancelRequest)) => return Ok(false),
                Ok(Some(Startup::Params { params, .. })) => break params,
                Err(err) => return Err(self.read_failed(err)),
            }
        };
        let param = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let config = &self.shared.config;
        let user = param("user").unwrap_or_default();
        let application_name = param("application_name").unwrap_or_default();
        self.shared.lock().add_client(ClientInfo {
            id: self.id,
            user: user.clone(),
            application_name: application_name.clone(),
            commands: Vec::new(),
            stream_options: Vec::new(),
            status_updates: Vec::new(),
            connected: true,
        });
        self.shared.log(format!(
            "client {}: connected from {peer} as {user:?}, application_name {application_name:?}",
            self.id
        ));
        if user.is_empty() {
            return Err(self.fatal(
                sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                "no PostgreSQL user name specified in startup packet",
            ));
        }
        if param("replication").as_deref() != Some("database") {
            return Err(self.fatal(
                sqlstate::FEATURE_NOT_SUPPORTED,
                "this test server serves logical replication connections only: connect with replication=database",
            ));
        }
        let database = param("database").unwrap_or_else(|| user.clone());
        if database != config.database {
            return Err(self.fatal(
                sqlstate::INVALID_CATALOG_NAME,
                &format!("database \"{database}\" does not exist"),
            ));
        }
        self.authenticate(&user)?;
        backend::authentication(&mut self.out, backend::AUTH_OK, &[]);
        let application_name = application_name.clone();
        let mut status = vec![
            ("in_hot_standby", "off"),
            ("integer_datetimes", "on"),
            ("TimeZone", "Etc/UTC"),
            ("IntervalStyle", "postgres"),
            ("is_superuser", "on"),
            ("application_name", application_name.as_str()),
            ("default_transaction_read_only", "off"),
            ("DateStyle", "ISO, MDY"),
            ("standard_conforming_strings", "on"),
            ("session_authorization", user.as_str()),
            ("client_encoding", "UTF8"),
            ("server_version", config.server_version.as_str()),
            ("server_encoding", "UTF8"),
        ];
        if config.major >= 18 {
            status.push(("search_path", "\"$user\", public"));
            status.push(("scram_iterations", "4096"));
        }
        for (name, value) in status {
            backend::parameter_status(&mut self.out, name, value);
        }
        backend::backend_key_data(
            &mut self.out,
            10_000 + self.id as u32,
            0x5eed_0000 ^ self.id as u32,
        );
        self.ready()?;
        Ok(true)
    }

    /// The command loop: until Terminate, a closed socket, or shutdown.
    fn commands(&mut self) -> Closed {
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
                Frontend::CopyData(_) | Frontend::CopyDone | Frontend::CopyFail(_) => {
                    return self.fatal(
                        sqlstate::PROTOCOL_VIOLATION,
                        "unexpected copy message outside COPY",
                    )
                }
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
        self.shared.lock().add_command(self.id, text);
        let result = match command::parse(text) {
            Some(Ok(command)) => self.replication_command(command),
            Some(Err(err)) => Err(err),
            None => self.sql(text),
        };
        if let Some(closed) = self.closed.take() {
            return Err(closed);
        }
        if let Err(err) = result {
            self.shared.log(format!(
                "client {}: {} (SQLSTATE {}) for {text:?}",
                self.id, err.message, err.code
            ));
            self.error(&err);
        }
        self.ready()
    }

    fn rows(&mut self, columns: &[Column<'_>], rows: &[Vec<Option<String>>], tag: &str) {
        backend::row_description(&mut self.out, columns);
        for row in rows {
            backend::data_row(&mut self.out, row);
        }
        backend::command_complete(&mut self.out, tag);
    }

    fn sql(&mut self, text: &str) -> Result<(), SqlError> {
        let reply = {
            let state = self.shared.lock();
            queries::answer(text, &state.catalog, self.shared.config.major)?
        };
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

    fn replication_command(&mut self, command: Command) -> Result<(), SqlError> {
        let config = &self.shared.config;
        match command {
            Command::IdentifySystem => {
                let (timeline_type, timeline_len) =
                    if config.major >= 18 { (20, 8) } else { (23, 4) };
                let wal_end = self.shared.lock().wal_end();
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
                    _ => {
                        return Err(error(
                            sqlstate::UNDEFINED_OBJECT,
                            format!("unrecognized configuration parameter \"{name}\""),
                        ))
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
            } => self.create_slot(name, temporary, &plugin, &options),
            Command::DropSlot { name, wait } => self.drop_slot(&name, wait),
            Command::StartLogical { slot, lsn, options } => self.start(&slot, lsn, &options),
            Command::CreatePhysicalSlot | Command::StartPhysical => Err(error(
                sqlstate::FEATURE_NOT_SUPPORTED,
                "this test server serves logical replication only",
            )),
            Command::Unsupported(name) => Err(error(
                sqlstate::FEATURE_NOT_SUPPORTED,
                format!("{name} is not supported by this test server"),
            )),
        }
    }
}
