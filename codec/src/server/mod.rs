//! A test walsender: a server that real logical replication clients (pg_recvlogical,
//! psycopg2, a PostgreSQL subscriber, this crate's client) connect to and stream a
//! scripted pgoutput stream from, re-encoded for each client's options.
//!
//! ```
//! use std::time::Duration;
//! use pgoutput_codec::server::{Publication, Script, Table, TestServer, Transaction};
//!
//! let accounts = Table::new(16385, "public", "accounts").key_column("id", 23).column("name", 25);
//! let script = Script::new().transaction(
//!     Transaction::new().insert(&accounts, ["1", "alice"]).insert(&accounts, ["2", "bob"]),
//! );
//! let server = TestServer::builder()
//!     .publication(Publication::new("app").table(accounts))
//!     .script(script)
//!     .start()?;
//! // Point the consumer under test at server.connection_string(), then:
//! let end = server.wal_end();
//! assert!(server.wait_for_confirmed_flush("app_slot", end, Duration::from_millis(10)).is_err());
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Blocking `std::net` with one thread per connection: it needs no async runtime and runs
//! under any runtime's tests. A client that stalls or misbehaves holds only its own thread.

mod catalog;
mod command;
mod error;
mod options;
mod queries;
mod render;
mod script;
mod session;
mod values;

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use crate::client::StreamOptions;
pub use catalog::{Column, Publication, Table};
pub use render::{Frame, RenderError};
pub use script::{End, Event, Script, ScriptError, Step, Transaction};

use crate::wire::scram::Verifier;
use crate::wire::Socket;
use crate::{Lsn, StandbyStatusUpdate};
use catalog::Catalog;
use script::Clock;

/// How clients log in.
#[derive(Clone, PartialEq, Eq)]
pub struct Auth(AuthKind);

#[derive(Clone, PartialEq, Eq)]
enum AuthKind {
    Trust,
    Cleartext { user: String, password: String },
    Scram { user: String, verifier: Verifier },
}

impl Auth {
    /// Any user, no password (`trust` in `pg_hba.conf`).
    #[must_use]
    pub fn trust() -> Auth {
        Auth(AuthKind::Trust)
    }

    /// `user` with a cleartext `password` (`password` in `pg_hba.conf`).
    #[must_use]
    pub fn password(user: &str, password: &str) -> Auth {
        Auth(AuthKind::Cleartext {
            user: user.to_owned(),
            password: password.to_owned(),
        })
    }

    /// `user` with SCRAM-SHA-256; the server keeps only a verifier made from `password`.
    #[must_use]
    pub fn scram(user: &str, password: &str) -> Auth {
        Auth(AuthKind::Scram {
            user: user.to_owned(),
            verifier: Verifier::from_password(password),
        })
    }

    /// `user` with SCRAM-SHA-256 and a stored verifier as `pg_authid.rolpassword` holds it
    /// (`SCRAM-SHA-256$4096:salt$StoredKey:ServerKey`); `None` if it is not one.
    #[must_use]
    pub fn scram_verifier(user: &str, verifier: &str) -> Option<Auth> {
        Some(Auth(AuthKind::Scram {
            user: user.to_owned(),
            verifier: Verifier::parse(verifier)?,
        }))
    }

    fn user(&self) -> Option<&str> {
        match &self.0 {
            AuthKind::Trust => None,
            AuthKind::Cleartext { user, .. } | AuthKind::Scram { user, .. } => Some(user),
        }
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            AuthKind::Trust => f.write_str("Auth::trust"),
            AuthKind::Cleartext { user, .. } => write!(f, "Auth::password({user:?}, ..)"),
            AuthKind::Scram { user, .. } => write!(f, "Auth::scram({user:?}, ..)"),
        }
    }
}

/// A log sink: each client, the options it asked for, the positions it confirms.
type Logger = Arc<dyn Fn(&str) + Send + Sync>;

/// Builds a [`TestServer`].
pub struct Builder {
    listen: SocketAddr,
    auth: Auth,
    server_version: String,
    system_identifier: u64,
    database: String,
    publications: Vec<Publication>,
    script: Script,
    start_lsn: Lsn,
    keepalive_interval: Duration,
    max_replication_slots: usize,
    logger: Option<Logger>,
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("listen", &self.listen)
            .field("auth", &self.auth)
            .field("server_version", &self.server_version)
            .field("database", &self.database)
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// Where to listen (default `127.0.0.1:0`: an ephemeral port on loopback).
    #[must_use]
    pub fn listen(mut self, addr: SocketAddr) -> Builder {
        self.listen = addr;
        self
    }

    /// How clients log in (default: trust).
    #[must_use]
    pub fn auth(mut self, auth: Auth) -> Builder {
        self.auth = auth;
        self
    }

    /// The `server_version` announced (default `18.6`). Clients choose their options by
    /// it (a PostgreSQL 18 subscriber asks a `15.x` server for protocol 3), and the server
    /// checks options, answers catalog queries and shapes replies as that release does.
    #[must_use]
    pub fn server_version(mut self, version: &str) -> Builder {
        self.server_version = version.to_owned();
        self
    }

    /// The system identifier IDENTIFY_SYSTEM reports.
    #[must_use]
    pub fn system_identifier(mut self, id: u64) -> Builder {
        self.system_identifier = id;
        self
    }

    /// The database clients must connect to (default `postgres`).
    #[must_use]
    pub fn database(mut self, name: &str) -> Builder {
        self.database = name.to_owned();
        self
    }

    /// Adds a publication. Without any, the server has `demo`, `FOR ALL TABLES`.
    #[must_use]
    pub fn publication(mut self, publication: Publication) -> Builder {
        self.publications.push(publication);
        self
    }

    /// The stream to send.
    #[must_use]
    pub fn script(mut self, script: Script) -> Builder {
        self.script = script;
        self
    }

    /// Where the WAL starts: every new slot's consistent point, before the script's first
    /// transaction, so that every slot streams the whole script (default `0/1000000`).
    #[must_use]
    pub fn start_lsn(mut self, lsn: Lsn) -> Builder {
        self.start_lsn = lsn;
        self
    }

    /// How long a streaming connection may be idle before the server sends a keepalive
    /// that asks for a reply (default 10 s).
    #[must_use]
    pub fn keepalive_interval(mut self, interval: Duration) -> Builder {
        self.keepalive_interval = interval;
        self
    }

    /// How many replication slots may exist at once (default 100; PostgreSQL's
    /// `max_replication_slots`). Creating one more fails with SQLSTATE 53400, as there.
    #[must_use]
    pub fn max_replication_slots(mut self, max: usize) -> Builder {
        self.max_replication_slots = max;
        self
    }

    /// Where log lines go (each client, its options, the positions it confirms, errors).
    #[must_use]
    pub fn logger(mut self, log: impl Fn(&str) + Send + Sync + 'static) -> Builder {
        self.logger = Some(Arc::new(log));
        self
    }

    /// Binds the listener and starts accepting clients.
    ///
    /// # Errors
    ///
    /// The I/O error when the listening socket cannot be bound.
    pub fn start(self) -> io::Result<TestServer> {
        let major = major_version(&self.server_version).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "server_version {:?} has no major version",
                    self.server_version
                ),
            )
        })?;
        let mut publications = self.publications;
        if publications.is_empty() {
            publications.push(Publication::all_tables("demo"));
        }
        let mut catalog = Catalog::new(publications);
        let mut script = self.script;
        for table in &script.tables {
            catalog.add_table(table.clone());
        }
        let mut clock = Clock {
            next_lsn: self.start_lsn,
            next_xid: 750,
        };
        script.fill(&mut clock);
        let listener = TcpListener::bind(self.listen)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            config: Config {
                server_version: self.server_version,
                major,
                system_identifier: self.system_identifier,
                database: self.database,
                auth: self.auth,
                keepalive_interval: self.keepalive_interval,
                max_replication_slots: self.max_replication_slots,
                logger: self.logger,
            },
            state: Mutex::new(State {
                catalog,
                events: script.events,
                clock,
                start_lsn: self.start_lsn,
                slots: Vec::new(),
                clients: Vec::new(),
                sockets: Vec::new(),
                log: Vec::new(),
            }),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            next_client: AtomicUsize::new(1),
            threads: Mutex::new(Vec::new()),
        });
        let accept = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("pgoutput-test-server".into())
                .spawn(move || accept_loop(&shared, &listener))?
        };
        Ok(TestServer {
            addr,
            shared,
            accept: Some(accept),
        })
    }
}

fn major_version(version: &str) -> Option<u32> {
    version
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

pub(crate) struct Config {
    server_version: String,
    major: u32,
    system_identifier: u64,
    database: String,
    auth: Auth,
    keepalive_interval: Duration,
    max_replication_slots: usize,
    logger: Option<Logger>,
}

/// A replication slot of the test server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotInfo {
    /// The slot name.
    pub name: String,
    /// The last position a client confirmed as flushed (the consistent point until then).
    pub confirmed_flush_lsn: Lsn,
    /// Created with `TWO_PHASE`.
    pub two_phase: bool,
    /// The client streaming from it, if any.
    pub active_client: Option<usize>,
    /// For a TEMPORARY slot: the client that created it (the slot goes when it does).
    temporary_owner: Option<usize>,
}

/// What the server saw of one client.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientInfo {
    /// The client's number, in order of connection (its BackendKeyData process id is
    /// 10000 more).
    pub id: usize,
    /// The user from its start-up packet.
    pub user: String,
    /// Its `application_name`.
    pub application_name: String,
    /// Every query and replication command it sent, in order.
    pub commands: Vec<String>,
    /// The options of each START_REPLICATION it ran.
    pub stream_options: Vec<StreamOptions>,
    /// Every standby status update it sent.
    pub status_updates: Vec<StandbyStatusUpdate>,
    /// Whether it is still connected.
    pub connected: bool,
}

pub(crate) struct State {
    catalog: Catalog,
    events: Vec<Event>,
    clock: Clock,
    start_lsn: Lsn,
    slots: Vec<SlotInfo>,
    clients: Vec<ClientInfo>,
    sockets: Vec<(usize, Socket)>,
    log: Vec<String>,
}

impl State {
    /// The end of the WAL: the end of the last event.
    fn wal_end(&self) -> Lsn {
        self.events
            .iter()
            .map(Event::end_lsn)
            .max()
            .unwrap_or(self.start_lsn)
            .max(self.start_lsn)
    }

    /// Registers a new client, forgetting the oldest disconnected ones beyond the limit.
    fn add_client(&mut self, client: ClientInfo) {
        let disconnected = self.clients.iter().filter(|c| !c.connected).count();
        if disconnected >= MAX_CLIENT_RECORDS {
            let mut excess = disconnected - MAX_CLIENT_RECORDS + MAX_CLIENT_RECORDS / 10;
            self.clients.retain(|c| {
                let drop = !c.connected && excess > 0;
                excess -= usize::from(drop);
                !drop
            });
        }
        self.clients.push(client);
    }

    /// Records a command of client `id`.
    fn add_command(&mut self, id: usize, command: &str) {
        push_bounded(
            &mut self.client(id).commands,
            command.to_owned(),
            MAX_PER_CLIENT,
        );
    }

    /// Records a standby status update of client `id`.
    fn add_status_update(&mut self, id: usize, update: StandbyStatusUpdate) {
        push_bounded(&mut self.client(id).status_updates, update, MAX_PER_CLIENT);
    }

    fn client(&mut self, id: usize) -> &mut ClientInfo {
        self.clients
            .iter_mut()
            .find(|c| c.id == id)
            .expect("registered at connection")
    }
}

pub(crate) struct Shared {
    config: Config,
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
    next_client: AtomicUsize,
    /// The connection threads, joined at shutdown.
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking client thread must not take the server down with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn log(&self, line: String) {
        if let Some(logger) = &self.config.logger {
            logger(&line);
        }
        let mut state = self.lock();
        if state.log.len() >= MAX_LOG_LINES {
            state.log.drain(..MAX_LOG_LINES / 10);
        }
        state.log.push(line);
    }
}

/// How many log lines, disconnected clients' records, and commands and status updates
/// per client the server keeps, dropping the oldest: a `pgoutput serve` that runs for
/// days (or a fuzzer's millions of connections) must not grow without bound.
const MAX_LOG_LINES: usize = 10_000;
const MAX_CLIENT_RECORDS: usize = 1_000;
const MAX_PER_CLIENT: usize = 10_000;

/// Appends to a record list, dropping the oldest tenth when it is full.
fn push_bounded<T>(list: &mut Vec<T>, item: T, max: usize) {
    if list.len() >= max {
        list.drain(..max / 10);
    }
    list.push(item);
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    loop {
        let accepted = listener.accept();
        // Shutdown wakes the blocking accept with a connection of its own.
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        match accepted {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                let id = shared.next_client.fetch_add(1, Ordering::SeqCst);
                let socket = Socket::Tcp(stream);
                if let Ok(clone) = socket.try_clone() {
                    shared.lock().sockets.push((id, clone));
                }
                let handle = std::thread::Builder::new()
                    .name(format!("pgoutput-test-client-{id}"))
                    .spawn({
                        let shared = Arc::clone(shared);
                        move || session::serve(&shared, socket, id, peer)
                    });
                if let Ok(handle) = handle {
                    let mut threads = shared.threads.lock().unwrap_or_else(|e| e.into_inner());
                    // Finished connections need no joining later.
                    threads.retain(|t| !t.is_finished());
                    threads.push(handle);
                }
            }
            // Out of file descriptors and the like: try again shortly.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// A running test server. Dropping it stops the server: it closes every connection and
/// waits for the listener and every connection thread to finish.
pub struct TestServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl fmt::Debug for TestServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Waiting for a position timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeout {
    /// Where the slot stood when time ran out (`None`: no such slot).
    pub confirmed_flush_lsn: Option<Lsn>,
}

impl fmt::Display for Timeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.confirmed_flush_lsn {
            Some(lsn) => write!(f, "timed out with the slot confirmed at {lsn}"),
            None => f.write_str("timed out before the slot existed"),
        }
    }
}

impl std::error::Error for Timeout {}

impl TestServer {
    /// A builder with the defaults: `127.0.0.1:0`, trust, `server_version` 18.6, database
    /// `postgres`, an empty script.
    #[must_use]
    pub fn builder() -> Builder {
        Builder {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            auth: Auth::trust(),
            server_version: "18.6".into(),
            system_identifier: 7_400_000_000_000_000_001,
            database: "postgres".into(),
            publications: Vec::new(),
            script: Script::new(),
            start_lsn: Lsn(0x0100_0000),
            keepalive_interval: Duration::from_secs(10),
            max_replication_slots: 100,
            logger: None,
        }
    }

    /// The address it listens on.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A libpq connection string (`host=… port=… dbname=… user=…`, with the password for
    /// cleartext authentication; with SCRAM add `password=…` yourself, since the server
    /// keeps only a verifier). Under trust the user is `postgres` (any user is let in).
    #[must_use]
    pub fn connection_string(&self) -> String {
        let config = &self.shared.config;
        let mut text = format!(
            "host={} port={} dbname={}",
            self.addr.ip(),
            self.addr.port(),
            config.database
        );
        text.push_str(&format!(
            " user={}",
            config.auth.user().unwrap_or("postgres")
        ));
        // The cleartext password is known; a SCRAM verifier does not reveal one.
        if let AuthKind::Cleartext { password, .. } = &config.auth.0 {
            text.push_str(&format!(" password={password}"));
        }
        text
    }

    /// The end of the WAL: the end of the script's last event.
    #[must_use]
    pub fn wal_end(&self) -> Lsn {
        self.shared.lock().wal_end()
    }

    /// Appends a transaction (or other event) to the stream; connected clients get it
    /// next. Its zero LSNs, xids and timestamps are filled in after the current end.
    /// Returns the new WAL end (appending is the point; the position is a convenience).
    #[allow(clippy::must_use_candidate)]
    pub fn append(&self, event: Event) -> Lsn {
        let mut state = self.shared.lock();
        let mut script = Script {
            events: vec![event],
            tables: Vec::new(),
        };
        let mut clock = state.clock;
        script.fill(&mut clock);
        state.clock = clock;
        let end = script.events[0].end_lsn();
        state.events.extend(script.events);
        drop(state);
        self.shared.changed.notify_all();
        end
    }

    /// The events of the stream, with every LSN, xid and timestamp filled in.
    #[must_use]
    pub fn events(&self) -> Vec<Event> {
        self.shared.lock().events.clone()
    }

    /// What a client with `options` receives for the whole stream, frame by frame, when it
    /// starts from the beginning: what byte-exact assertions compare with.
    ///
    /// # Errors
    ///
    /// [`RenderError`] when the script holds what those options cannot carry (a value a
    /// binary client cannot be sent, a message the protocol version lacks).
    pub fn render(&self, options: &StreamOptions) -> Result<Vec<Frame>, RenderError> {
        let state = self.shared.lock();
        let mut renderer = render::Renderer::new(&state.catalog, options);
        let mut frames = Vec::new();
        for index in 0..state.events.len() {
            frames.extend(renderer.event(&state.events, index)?);
        }
        Ok(frames)
    }

    /// The replication slots.
    #[must_use]
    pub fn slots(&self) -> Vec<SlotInfo> {
        self.shared.lock().slots.clone()
    }

    /// The position a slot's client confirmed as flushed.
    #[must_use]
    pub fn confirmed_flush_lsn(&self, slot: &str) -> Option<Lsn> {
        self.shared
            .lock()
            .slots
            .iter()
            .find(|s| s.name == slot)
            .map(|s| s.confirmed_flush_lsn)
    }

    /// Waits until `slot` is confirmed at `lsn` or beyond.
    ///
    /// # Errors
    ///
    /// A description of where the slot stands when `timeout` passes first, or when there is
    /// no such slot.
    pub fn wait_for_confirmed_flush(
        &self,
        slot: &str,
        lsn: Lsn,
        timeout: Duration,
    ) -> Result<Lsn, Timeout> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        loop {
            let confirmed = state
                .slots
                .iter()
                .find(|s| s.name == slot)
                .map(|s| s.confirmed_flush_lsn);
            if let Some(confirmed) = confirmed.filter(|c| *c >= lsn) {
                return Ok(confirmed);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Timeout {
                    confirmed_flush_lsn: confirmed,
                });
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The clients so far, in order of connection (every connected one, and the last 1,000
    /// that disconnected; each with its last 10,000 commands and status updates).
    #[must_use]
    pub fn clients(&self) -> Vec<ClientInfo> {
        self.shared.lock().clients.clone()
    }

    /// Every command any client sent, in order of connection.
    #[must_use]
    pub fn commands(&self) -> Vec<String> {
        self.shared
            .lock()
            .clients
            .iter()
            .flat_map(|c| c.commands.iter().cloned())
            .collect()
    }

    /// The log lines so far (the last 10,000).
    #[must_use]
    pub fn log(&self) -> Vec<String> {
        self.shared.lock().log.clone()
    }

    /// Runs one whole client connection in memory on the calling thread: `input` is all
    /// the client sends, then it closes its side; returns what the server sent. Its client
    /// record and log lines are forgotten afterwards (slots it made stay). For the
    /// fuzzer, which needs no sockets or threads per input, and whose leak check must not
    /// see the server's records grow.
    #[doc(hidden)]
    #[must_use]
    pub fn __serve_in_memory(&self, input: &[u8]) -> Vec<u8> {
        let mut stream = MemoryStream {
            input,
            output: Vec::new(),
        };
        let id = self.shared.next_client.fetch_add(1, Ordering::SeqCst);
        let log_len = self.shared.lock().log.len();
        session::run(
            &self.shared,
            &mut stream,
            id,
            SocketAddr::from(([127, 0, 0, 1], 0)),
        );
        let mut state = self.shared.lock();
        state.clients.retain(|c| c.id != id);
        let keep = log_len.min(state.log.len());
        state.log.truncate(keep);
        drop(state);
        stream.output
    }

    /// Stops accepting, closes every connection and waits for the listener thread.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        // Wake the accept loop, which blocks in accept().
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = std::net::TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        // Connections see the stop flag within a poll interval and say goodbye as
        // PostgreSQL does (FATAL 57P01); give them a moment, then close whatever is still
        // open (a client that does not read), and wait for every thread.
        let threads = std::mem::take(
            &mut *self
                .shared
                .threads
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        let deadline = Instant::now() + Duration::from_millis(500);
        while threads.iter().any(|t| !t.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        for (_, socket) in self.shared.lock().sockets.drain(..) {
            let _ = socket.shutdown();
        }
        for thread in threads {
            let _ = thread.join();
        }
    }
}

/// A client connection in memory: reads come from `input` (then end of stream), writes
/// collect in `output`.
struct MemoryStream<'a> {
    input: &'a [u8],
    output: Vec<u8>,
}

impl io::Read for MemoryStream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.input.read(buf)
    }
}

impl io::Write for MemoryStream<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(id: usize, connected: bool) -> ClientInfo {
        ClientInfo {
            id,
            user: "u".into(),
            application_name: String::new(),
            commands: Vec::new(),
            stream_options: Vec::new(),
            status_updates: Vec::new(),
            connected,
        }
    }

    #[test]
    fn records_stay_bounded() {
        let mut state = State {
            catalog: Catalog::default(),
            events: Vec::new(),
            clock: Clock {
                next_lsn: Lsn(1),
                next_xid: 1,
            },
            start_lsn: Lsn(1),
            slots: Vec::new(),
            clients: Vec::new(),
            sockets: Vec::new(),
            log: Vec::new(),
        };
        state.add_client(client(0, true));
        for id in 1..5_000 {
            state.add_client(client(id, false));
        }
        assert!(state.clients.len() <= MAX_CLIENT_RECORDS + 1);
        // The connected client is never forgotten, and the newest are kept.
        assert_eq!(state.clients[0].id, 0);
        assert_eq!(state.clients.last().unwrap().id, 4_999);
        for n in 0..25_000 {
            state.add_command(0, &format!("SELECT {n}"));
        }
        let commands = &state.clients[0].commands;
        assert!(commands.len() <= MAX_PER_CLIENT);
        assert_eq!(commands.last().unwrap(), "SELECT 24999");
    }
}
