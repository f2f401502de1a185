//! One client connection: start-up and authentication, then replication commands and
//! SQL, then streaming. Whatever the client sends ends in an answer, an ErrorResponse, or
//! a closed connection; never a panic or a hang.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::command::{self, error, Command, CommandError};
use super::queries::{self, Reply};
use super::render::Renderer;
use super::{AuthKind, ClientInfo, Event, Shared, SlotInfo, StreamOptions};
use crate::wire::backend::{self, Column};
use crate::wire::frontend::{Frontend, FrontendReader, ReadError, Startup};
use crate::wire::scram;
use crate::wire::Socket;
use crate::{
    decode, encode, ClientMessage, Ctx, Lsn, PgTimestamp, PrimaryKeepalive, ProtocolVersion,
    ServerMessage, XLogData,
};

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
            ReadError::Malformed(text) => self.fatal("08P01", &text),
        }
    }

    /// A FATAL error: reported, then the connection closes.
    fn fatal(&mut self, code: &str, text: &str) -> Closed {
        backend::error_or_notice(&mut self.out, b'E', "FATAL", code, text, None, None);
        let _ = self.flush();
        Closed::Error(text.to_owned())
    }

    fn error(&mut self, err: &CommandError) {
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
                "28000",
                "no PostgreSQL user name specified in startup packet",
            ));
        }
        if param("replication").as_deref() != Some("database") {
            return Err(self.fatal(
                "0A000",
                "this test server serves logical replication connections only: connect with replication=database",
            ));
        }
        let database = param("database").unwrap_or_else(|| user.clone());
        if database != config.database {
            return Err(self.fatal("3D000", &format!("database \"{database}\" does not exist")));
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

    fn authenticate(&mut self, user: &str) -> Result<(), Closed> {
        let auth = self.shared.config.auth.clone();
        let failed = |session: &mut Self| {
            session.fatal(
                "28P01",
                &format!("password authentication failed for user \"{user}\""),
            )
        };
        match &auth.0 {
            AuthKind::Trust => Ok(()),
            AuthKind::Cleartext {
                user: expected,
                password,
            } => {
                backend::authentication(&mut self.out, backend::AUTH_CLEARTEXT, &[]);
                self.flush()?;
                let Frontend::Password(body) = self.next()? else {
                    return Err(self.fatal("08P01", "expected password response"));
                };
                let given = body.strip_suffix(&[0]).unwrap_or(&body);
                if expected == user && given == password.as_bytes() {
                    Ok(())
                } else {
                    Err(failed(self))
                }
            }
            AuthKind::Scram {
                user: expected,
                verifier,
            } => {
                backend::authentication_sasl(&mut self.out, &["SCRAM-SHA-256"]);
                self.flush()?;
                let Frontend::Password(body) = self.next()? else {
                    return Err(self.fatal("08P01", "expected SASL response"));
                };
                // SASLInitialResponse: mechanism, Int32 length, data.
                let Some(nul) = body.iter().position(|&b| b == 0) else {
                    return Err(self.fatal("08P01", "malformed SASLInitialResponse"));
                };
                if &body[..nul] != b"SCRAM-SHA-256" {
                    return Err(self.fatal(
                        "08P01",
                        "client selected an invalid SASL authentication mechanism",
                    ));
                }
                let data = body.get(nul + 5..).unwrap_or_default();
                let (exchange, server_first) = match scram::start(verifier, data) {
                    Ok(started) => started,
                    Err(why) => return Err(self.fatal("08P01", why)),
                };
                backend::authentication(
                    &mut self.out,
                    backend::AUTH_SASL_CONTINUE,
                    server_first.as_bytes(),
                );
                self.flush()?;
                let Frontend::Password(client_final) = self.next()? else {
                    return Err(self.fatal("08P01", "expected SASL response"));
                };
                match exchange.finish(&client_final) {
                    Ok(server_final) if expected == user => {
                        backend::authentication(
                            &mut self.out,
                            backend::AUTH_SASL_FINAL,
                            server_final.as_bytes(),
                        );
                        Ok(())
                    }
                    _ => Err(failed(self)),
                }
            }
        }
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
                Frontend::Password(_) => return self.fatal("08P01", "unexpected password message"),
                Frontend::CopyData(_) | Frontend::CopyDone | Frontend::CopyFail(_) => {
                    return self.fatal("08P01", "unexpected copy message outside COPY")
                }
                Frontend::Other(tag) => {
                    let err = match tag {
                        b'F' => error(
                            "08P01",
                            "fastpath function calls not supported in a replication connection",
                        ),
                        b'P' | b'B' | b'E' | b'D' | b'C' => error(
                            "08P01",
                            "extended query protocol not supported in a replication connection",
                        ),
                        other => error("08P01", format!("invalid frontend message type {other}")),
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

    fn sql(&mut self, text: &str) -> Result<(), CommandError> {
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

    fn replication_command(&mut self, command: Command) -> Result<(), CommandError> {
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
                            "42704",
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
                "0A000",
                "this test server serves logical replication only",
            )),
            Command::Unsupported(name) => Err(error(
                "0A000",
                format!("{name} is not supported by this test server"),
            )),
        }
    }

    fn create_slot(
        &mut self,
        name: String,
        temporary: bool,
        plugin: &str,
        options: &command::Options,
    ) -> Result<(), CommandError> {
        if plugin != "pgoutput" {
            return Err(error(
                "58P01",
                format!("could not access file \"{plugin}\": No such file or directory"),
            ));
        }
        let (mut snapshot, mut two_phase, mut seen) = ("export".to_owned(), false, Vec::new());
        for (option, value) in options {
            if seen.contains(option) {
                return Err(error("42601", "conflicting or redundant options"));
            }
            seen.push(option.clone());
            match option.as_str() {
                "snapshot" => {
                    let value = value.clone().unwrap_or_default();
                    if !["export", "nothing", "use"].contains(&value.as_str()) {
                        return Err(error("22023", format!("unrecognized value for CREATE_REPLICATION_SLOT option \"snapshot\": \"{value}\"")));
                    }
                    snapshot = value;
                }
                "two_phase" => two_phase = command::boolean(option, value.as_deref())?,
                "failover" if self.shared.config.major >= 17 => {
                    command::boolean(option, value.as_deref())?;
                }
                other => return Err(error("XX000", format!("unrecognized option: {other}"))),
            }
        }
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            return Err(error(
                "42602",
                format!("replication slot name \"{name}\" contains invalid character"),
            ));
        }
        if name.len() > 63 {
            return Err(error(
                "42622",
                format!("replication slot name \"{name}\" is too long"),
            ));
        }
        let mut state = self.shared.lock();
        if state.slots.iter().any(|s| s.name == name) {
            return Err(error(
                "42710",
                format!("replication slot \"{name}\" already exists"),
            ));
        }
        if state.slots.len() >= self.shared.config.max_replication_slots {
            return Err(error("53400", "all replication slots are in use"));
        }
        match snapshot.as_str() {
            "use" if !self.in_transaction => {
                return Err(error("XX000", "CREATE_REPLICATION_SLOT ... (SNAPSHOT 'use') must be called inside a transaction"))
            }
            "export" if self.in_transaction => {
                return Err(error("XX000", "CREATE_REPLICATION_SLOT ... (SNAPSHOT 'export') must not be called inside a transaction"))
            }
            _ => {}
        }
        let consistent_point = state.start_lsn;
        state.slots.push(SlotInfo {
            name: name.clone(),
            confirmed_flush_lsn: consistent_point,
            two_phase,
            active_client: None,
            temporary_owner: temporary.then_some(self.id),
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

    fn drop_slot(&mut self, name: &str, wait: bool) -> Result<(), CommandError> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut state = self.shared.lock();
        loop {
            let Some(index) = state.slots.iter().position(|s| s.name == name) else {
                return Err(error(
                    "42704",
                    format!("replication slot \"{name}\" does not exist"),
                ));
            };
            match state.slots[index].active_client {
                Some(client) if client != self.id => {
                    if !wait || Instant::now() >= deadline || self.stopping() {
                        return Err(error(
                            "55006",
                            format!(
                                "replication slot \"{name}\" is active for PID {}",
                                10_000 + client
                            ),
                        ));
                    }
                    state = self
                        .shared
                        .changed
                        .wait_timeout(state, Duration::from_millis(50))
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                _ => {
                    state.slots.remove(index);
                    break;
                }
            }
        }
        drop(state);
        self.shared
            .log(format!("client {}: dropped slot {name}", self.id));
        backend::command_complete(&mut self.out, "DROP_REPLICATION_SLOT");
        Ok(())
    }

    /// START_REPLICATION: checks, then streaming until CopyDone (then back to commands).
    fn start(
        &mut self,
        slot: &str,
        lsn: Lsn,
        options: &command::Options,
    ) -> Result<(), CommandError> {
        if self.in_transaction {
            return Err(error(
                "25001",
                "START_REPLICATION cannot run inside a transaction block",
            ));
        }
        let from = {
            let mut state = self.shared.lock();
            let Some(info) = state.slots.iter_mut().find(|s| s.name == slot) else {
                return Err(error(
                    "42704",
                    format!("replication slot \"{slot}\" does not exist"),
                ));
            };
            if let Some(client) = info.active_client.filter(|c| *c != self.id) {
                return Err(error(
                    "55006",
                    format!(
                        "replication slot \"{slot}\" is active for PID {}",
                        10_000 + client
                    ),
                ));
            }
            let mut options = StreamOptions::parse(options, self.shared.config.major)?;
            // A slot created with TWO_PHASE decodes prepared transactions whatever the
            // client asks (logical.c), which is how a subscriber whose two-phase state is
            // already enabled gets them without sending `two_phase`.
            options.two_phase |= info.two_phase;
            info.active_client = Some(self.id);
            let from = info.confirmed_flush_lsn.max(lsn);
            state.client(self.id).stream_options.push(options.clone());
            (from, options)
        };
        let (from, options) = from;
        self.shared.log(format!(
            "client {}: streaming slot {slot} from {from} with {options:?}",
            self.id
        ));
        match self.stream(slot, from, &options) {
            Ok(()) => Ok(()),
            Err(Streamed::Refused(err)) => Err(err),
            Err(Streamed::Closed(closed)) => {
                // The connection is over: nothing more is sent on it.
                self.closed = Some(closed);
                Ok(())
            }
        }
    }

    fn keepalive(&mut self, wal_end: Lsn, reply_requested: bool) {
        let keepalive = ServerMessage::PrimaryKeepalive(PrimaryKeepalive {
            wal_end,
            send_time: PgTimestamp::now(),
            reply_requested,
        });
        let payload = encode(&keepalive, envelope()).expect("a keepalive always encodes");
        backend::copy_data(&mut self.out, &payload);
    }

    fn stream(&mut self, slot: &str, from: Lsn, options: &StreamOptions) -> Result<(), Streamed> {
        let (catalog, mut events) = {
            let state = self.shared.lock();
            (state.catalog.clone(), state.events.clone())
        };
        let mut renderer = Renderer::new(&catalog, options);
        backend::copy_response(&mut self.out, b'W', 0, false);
        self.keepalive(from, false);
        self.flush().map_err(Streamed::Closed)?;
        let mut cursor = 0;
        let mut position = from;
        let mut last_sent = Instant::now();
        let interval = self.shared.config.keepalive_interval;
        loop {
            if self.stopping() {
                return Err(Streamed::Closed(Closed::Shutdown));
            }
            match self.reader.next(&mut self.socket) {
                Ok(None) => {}
                Ok(Some(Frontend::CopyData(data))) => {
                    let reply = self
                        .client_copy_data(slot, &data)
                        .map_err(Streamed::Closed)?;
                    if reply {
                        self.keepalive(position, false);
                    }
                }
                Ok(Some(Frontend::CopyDone)) => {
                    backend::copy_done(&mut self.out);
                    backend::command_complete(&mut self.out, "COPY 0");
                    backend::command_complete(&mut self.out, "START_REPLICATION");
                    self.release(slot);
                    return Ok(());
                }
                Ok(Some(Frontend::Terminate)) => return Err(Streamed::Closed(Closed::ByClient)),
                Ok(Some(other)) => {
                    let text = format!("unexpected message in copy-both mode: {other:?}");
                    return Err(Streamed::Closed(self.fatal("08P01", &text)));
                }
                Err(err) => return Err(Streamed::Closed(self.read_failed(err))),
            }
            if cursor == events.len() {
                let state = self.shared.lock();
                if state.events.len() > events.len() {
                    events = state.events.clone();
                }
            }
            if cursor < events.len() {
                let end = events[cursor].end_lsn();
                if end > from {
                    let frames = match renderer.event(&events, cursor) {
                        Ok(frames) => frames,
                        Err(err) => {
                            self.shared
                                .log(format!("client {}: cannot stream: {err}", self.id));
                            self.release(slot);
                            return Err(Streamed::Refused(error("0A000", err.0)));
                        }
                    };
                    for frame in frames {
                        let xlog = XLogData {
                            wal_start: frame.lsn,
                            wal_end: frame.lsn,
                            send_time: PgTimestamp::now(),
                            data: frame.payload.into(),
                        };
                        let payload = encode(&xlog, envelope()).expect("XLogData always encodes");
                        backend::copy_data(&mut self.out, &payload);
                    }
                    // Blocks of a transaction still in progress move no position.
                    if !matches!(events[cursor], Event::StreamProgress { .. }) {
                        position = position.max(end);
                        self.keepalive(position, false);
                    }
                    last_sent = Instant::now();
                }
                cursor += 1;
            } else if last_sent.elapsed() >= interval {
                self.keepalive(position, true);
                last_sent = Instant::now();
            }
            self.flush().map_err(Streamed::Closed)?;
        }
    }

    /// A standby status update (recorded; a non-zero flush position advances the slot) or
    /// hot standby feedback. `Ok(true)` when the client asked for a reply.
    fn client_copy_data(&mut self, slot: &str, data: &[u8]) -> Result<bool, Closed> {
        match decode::<ClientMessage>(data, envelope()) {
            Ok(ClientMessage::StandbyStatusUpdate(update)) => {
                let mut state = self.shared.lock();
                state.add_status_update(self.id, update);
                let mut advanced = None;
                if let Some(info) = state.slots.iter_mut().find(|s| s.name == slot) {
                    if update.flush_lsn > info.confirmed_flush_lsn {
                        info.confirmed_flush_lsn = update.flush_lsn;
                        advanced = Some(update.flush_lsn);
                    }
                }
                drop(state);
                self.shared.changed.notify_all();
                if let Some(lsn) = advanced {
                    self.shared.log(format!(
                        "client {}: slot {slot} confirmed at {lsn}",
                        self.id
                    ));
                }
                Ok(update.reply_requested)
            }
            Ok(ClientMessage::HotStandbyFeedback(_)) => Ok(false),
            Err(err) => Err(self.fatal("08P01", &format!("invalid standby message: {err}"))),
        }
    }

    fn release(&mut self, slot: &str) {
        let mut state = self.shared.lock();
        if let Some(info) = state.slots.iter_mut().find(|s| s.name == slot) {
            if info.active_client == Some(self.id) {
                info.active_client = None;
            }
        }
        drop(state);
        self.shared.changed.notify_all();
    }
}

/// How streaming ended, when not by CopyDone.
enum Streamed {
    /// The stream cannot be sent: an ErrorResponse, then back to commands.
    Refused(CommandError),
    /// The connection is over.
    Closed(Closed),
}
