//! A test walsender: a server that real logical replication clients (pg_recvlogical,
//! psycopg2, a PostgreSQL subscriber, this crate's client) connect to and stream a
//! scripted pgoutput stream from, re-encoded for each client's options.
//!
//! ```
//! use pgoutput_codec::client::StreamOptions;
//! use pgoutput_codec::server::{Publication, Script, Table, TestServer, Transaction};
//! use pgoutput_codec::{Decoder, PgOutputMessage, ProtocolVersion, Streaming};
//!
//! let accounts = Table::new(16385, "public", "accounts").key_column("id", 23).column("name", 25);
//! let script = Script::new().transaction(
//!     Transaction::new().insert(&accounts, ["1", "alice"]).insert(&accounts, ["2", "bob"]),
//! );
//! let server = TestServer::builder()
//!     .publication(Publication::new("app").table(accounts))
//!     .script(script)
//!     .start()?;
//! // Point the consumer under test at server.connection_string(); what a client with these
//! // options is sent, frame by frame:
//! let options = StreamOptions::new(ProtocolVersion::V1, &["app"]);
//! let mut decoder = Decoder::new(ProtocolVersion::V1, Streaming::Off)?;
//! let mut kinds = Vec::new();
//! for frame in server.render(&options)? {
//!     kinds.push(match decoder.decode(&frame.payload)? {
//!         PgOutputMessage::Begin(_) => "begin",
//!         PgOutputMessage::Relation(_) => "relation",
//!         PgOutputMessage::Insert(_) => "insert",
//!         PgOutputMessage::Commit(commit) => {
//!             assert_eq!(commit.end_lsn, server.wal_end());
//!             "commit"
//!         }
//!         other => panic!("unexpected {other:?}"),
//!     });
//! }
//! assert_eq!(kinds, ["begin", "relation", "insert", "insert", "commit"]);
//! // Then `server.wait_for_confirmed_flush("app_slot", server.wal_end(), timeout)` returns
//! // once the consumer under test has confirmed all of it.
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Blocking `std::net` with one thread per connection: it needs no async runtime and runs
//! under any runtime's tests. A client that stalls or misbehaves holds only its own thread.

mod catalog;
pub(crate) mod command;
mod connection;
mod control;
mod inbox;
pub(crate) mod options;
mod queries;
mod render;
mod schema_cache;
mod script;
mod sent;
mod state;

use std::fmt;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use crate::client::StreamOptions;
pub use crate::confirmed::Timeout;
pub use crate::control::Control;
pub use crate::faults::{Action, Fault, FaultError, MessageKind, Trigger};
pub use crate::judge::{Ending, Fact, Finding, Positions, Probe, Resent};
pub use catalog::{Column, Publication, Table};
pub use render::{RenderError, RenderedMessage};
pub use script::{End, Event, Script, ScriptError, Step, Transaction, MAX_LINE_LEN};
pub use sent::SentMessage;

use crate::wire::scram::Verifier;
use crate::{Lsn, StandbyStatusUpdate};
use catalog::Catalog;
use render::{Failed, Renderer};
use script::Clock;
use state::{Config, Shared, Wal};

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
    /// Whether the password is empty (a verifier is checked when it costs little).
    fn has_empty_password(&self) -> bool {
        match &self.0 {
            AuthKind::Trust => false,
            AuthKind::Cleartext { password, .. } => password.is_empty(),
            AuthKind::Scram { verifier, .. } => {
                verifier.iterations() <= 100_000 && verifier.is_for("")
            }
        }
    }

    /// Whether anyone may log in (trust).
    #[must_use]
    pub fn is_trust(&self) -> bool {
        matches!(self.0, AuthKind::Trust)
    }

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
    tables: Vec<Table>,
    script: Script,
    start_lsn: Lsn,
    keepalive_interval: Duration,
    wal_sender_timeout: Duration,
    authentication_timeout: Duration,
    max_wal_senders: usize,
    max_replication_slots: usize,
    checkpoint_interval: Duration,
    faults: Vec<Fault>,
    probe: Option<Probe>,
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

    /// A table the server knows without publishing it (a publication `FOR ALL TABLES`
    /// has it too): a script's changes may touch only tables the server knows.
    #[must_use]
    pub fn table(mut self, table: Table) -> Builder {
        self.tables.push(table);
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

    /// Ours, not PostgreSQL's: how long a streaming connection may go without a message
    /// before the server sends a keepalive (without a reply request) for idle traffic
    /// (default 10 s). Reply requests follow [`wal_sender_timeout`](Self::wal_sender_timeout).
    #[must_use]
    pub fn keepalive_interval(mut self, interval: Duration) -> Builder {
        self.keepalive_interval = interval;
        self
    }

    /// PostgreSQL's `wal_sender_timeout` (default 60 s; zero turns it off, as there). A
    /// streaming client that sends nothing for this long is disconnected without a word,
    /// and once half of it has passed since its last reply it gets one keepalive that asks
    /// for a reply (`WalSndKeepaliveIfNecessary`).
    #[must_use]
    pub fn wal_sender_timeout(mut self, timeout: Duration) -> Builder {
        self.wal_sender_timeout = timeout;
        self
    }

    /// PostgreSQL's `authentication_timeout` (default 60 s): how long a client may take
    /// to send its start-up packet, and then again to authenticate, before the server
    /// closes the connection without a word.
    #[must_use]
    pub fn authentication_timeout(mut self, timeout: Duration) -> Builder {
        self.authentication_timeout = timeout;
        self
    }

    /// PostgreSQL's `max_wal_senders` (default 10): how many replication connections may
    /// be open at once. One more gets FATAL 53300 after its start-up packet, as there.
    #[must_use]
    pub fn max_wal_senders(mut self, max: usize) -> Builder {
        self.max_wal_senders = max;
        self
    }

    /// How many replication slots may exist at once (default 100; PostgreSQL's
    /// `max_replication_slots`). Creating one more fails with SQLSTATE 53400, as there.
    #[must_use]
    pub fn max_replication_slots(mut self, max: usize) -> Builder {
        self.max_replication_slots = max;
        self
    }

    /// How often a checkpoint persists every slot's confirmed position (default 5 min;
    /// PostgreSQL's `checkpoint_timeout`): a crash ([`Action::Crash`],
    /// [`TestServer::crash`]) takes each slot back to its last persisted position.
    #[must_use]
    pub fn checkpoint_interval(mut self, interval: Duration) -> Builder {
        self.checkpoint_interval = interval;
        self
    }

    /// A fault rule, armed from the start (see [`Fault`]; more can be added while the
    /// server runs with [`TestServer::add_fault`]). A rule that cannot work makes
    /// [`Builder::start`] fail.
    #[must_use]
    pub fn fault(mut self, fault: Fault) -> Builder {
        self.faults.push(fault);
        self
    }

    /// Arms the judge's probe (see [`Probe`]): one transaction in `every` is held after
    /// its first change with a keepalive asking for a reply, so a consumer that confirms
    /// a transaction before it has it is caught for certain
    /// ([`Finding::ConfirmedUnsent`]); and each time the stream catches up, the client is
    /// asked for a reply, so a slot left behind while idle shows.
    #[must_use]
    pub fn probe(mut self, probe: Probe) -> Builder {
        self.probe = Some(probe);
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
    /// `InvalidInput` when the settings or the script cannot be served (the script's
    /// error names its line or event), else the I/O error when the listening socket cannot
    /// be bound.
    pub fn start(self) -> io::Result<TestServer> {
        let invalid = |text: String| io::Error::new(io::ErrorKind::InvalidInput, text);
        let major = major_version(&self.server_version).ok_or_else(|| {
            invalid(format!(
                "server_version {:?} has no major version",
                self.server_version
            ))
        })?;
        if self.auth.has_empty_password() {
            // PostgreSQL stores no empty password ("empty string is not a valid password,
            // clearing password"), so no one logs in with one.
            return Err(invalid(
                "empty string is not a valid password (PostgreSQL clears such a password)".into(),
            ));
        }
        for fault in &self.faults {
            fault
                .check()
                .map_err(|e| invalid(format!("fault {fault:?}: {e}")))?;
        }
        let mut publications = self.publications;
        if publications.is_empty() {
            publications.push(Publication::all_tables("demo"));
        }
        let mut catalog = Catalog::new(publications).map_err(invalid)?;
        for table in self.tables {
            catalog.add_table(table);
        }
        let mut script = self.script;
        for table in &script.tables {
            catalog.add_table(table.clone());
        }
        script.check(&catalog).map_err(|e| invalid(e.to_string()))?;
        let mut wal = Wal::new(
            self.start_lsn,
            Clock {
                next_lsn: self.start_lsn,
                next_xid: 750,
            },
        );
        let mut clock = wal.clock();
        script
            .fill(&mut clock)
            .map_err(|e| invalid(e.to_string()))?;
        wal.set_clock(clock);
        for event in script.events {
            wal.push(event);
        }
        let listener = TcpListener::bind(self.listen)?;
        let addr = listener.local_addr()?;
        let config = Config {
            server_version: self.server_version,
            major,
            system_identifier: self.system_identifier,
            database: self.database,
            auth: self.auth,
            keepalive_interval: self.keepalive_interval,
            wal_sender_timeout: Some(self.wal_sender_timeout).filter(|t| !t.is_zero()),
            authentication_timeout: self.authentication_timeout,
            max_wal_senders: self.max_wal_senders,
            max_replication_slots: self.max_replication_slots,
            checkpoint_interval: self.checkpoint_interval,
            logger: self.logger,
        };
        let shared = Arc::new(Shared::new(config, catalog, wal));
        for fault in self.faults {
            shared.faults.add(fault);
        }
        shared.probe.set(self.probe);
        let checkpointer = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("pgoutput-test-checkpointer".into())
                .spawn(move || checkpointer(&shared))?
        };
        shared
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(checkpointer);
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

/// A value as a libpq connection string needs it: quoted, with `\\` and `'` escaped,
/// when it is empty or holds a space, a quote or a backslash.
fn conninfo_value(value: &str) -> String {
    if !value.is_empty() && !value.contains([' ', '\'', '\\']) {
        return value.to_owned();
    }
    let escaped = value.replace('\\', "\\\\").replace('\'', "\\'");
    format!("'{escaped}'")
}

fn major_version(version: &str) -> Option<u32> {
    version
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
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
    /// The confirmed position the last checkpoint wrote to disk: where a crash takes the
    /// slot back to (PostgreSQL persists a slot's position at checkpoints, so after a
    /// crash it sends again what a consumer confirmed since).
    pub persisted_lsn: Lsn,
    /// Invalidated (as when the slot exceeded `max_slot_wal_keep_size`):
    /// START_REPLICATION fails with 55000.
    pub invalidated: bool,
    /// For a TEMPORARY slot: the client that created it (the slot goes when it does).
    temporary_owner: Option<usize>,
    /// Held by a walsender that has not exited yet: START_REPLICATION fails with 55006.
    held: Option<state::Hold>,
    /// How many START_REPLICATIONs the slot has had (the fault rules' `connection`).
    starts: u64,
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
    /// The messages it was sent while streaming, with their positions (the last
    /// 10,000).
    pub sent: Vec<SentMessage>,
    /// How long each of its replies to a reply request took.
    pub replies: Vec<Duration>,
    /// How its connection ended (`None` while it is connected).
    pub ended: Option<String>,
}

/// How many connections may be open at once, before any start-up packet: PostgreSQL's
/// postmaster allows twice its backends (`MaxLivePostmasterChildren`), which with the
/// default settings is 2 × (100 connections + 3 autovacuum workers + 1 launcher + 8
/// worker processes), plus the walsenders.
fn max_live_connections(max_wal_senders: usize) -> usize {
    2 * (100 + 3 + 1 + 8 + max_wal_senders)
}

/// Persists every slot's position each `checkpoint_interval`, until the server stops.
fn checkpointer(shared: &Shared) {
    let interval = shared.config.checkpoint_interval;
    let mut next = Instant::now() + interval;
    let mut state = shared.lock();
    while !shared.stopping() {
        let now = Instant::now();
        if now >= next {
            state.checkpoint();
            next = now + interval;
            continue;
        }
        state = shared
            .changed
            .wait_timeout(state, next - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    loop {
        let accepted = listener.accept();
        // Shutdown wakes the blocking accept with a connection of its own.
        if shared.stopping() {
            return;
        }
        match accepted {
            Ok((stream, peer)) => {
                if shared.finishing() {
                    refuse(stream, "57P03", "the database system is shutting down");
                    continue;
                }
                let live = shared.lock().connection_count();
                if live >= max_live_connections(shared.config.max_wal_senders) {
                    refuse(
                        stream,
                        crate::wire::error::sqlstate::TOO_MANY_CONNECTIONS,
                        "sorry, too many clients already",
                    );
                    continue;
                }
                let attempt = shared.next_attempt();
                let on_connect: Vec<Action> = shared
                    .faults
                    .fire(None, |trigger| {
                        matches!(trigger, Trigger::Connect { attempt: n } if *n == attempt)
                    })
                    .into_iter()
                    .map(|(_, action)| action)
                    .collect();
                let id = shared.next_client_id();
                // On failure the closure, and the socket in it, is dropped: closed.
                let handle = std::thread::Builder::new()
                    .name(format!("pgoutput-test-client-{id}"))
                    .spawn({
                        let shared = Arc::clone(shared);
                        move || connection::serve_tcp(&shared, stream, id, peer, on_connect)
                    });
                match handle {
                    Ok(handle) => {
                        let mut threads = shared.threads.lock().unwrap_or_else(|e| e.into_inner());
                        // Finished connections need no joining later.
                        threads.retain(|t| !t.is_finished());
                        threads.push(handle);
                    }
                    Err(err) => shared.log(format!("client {id}: no thread to serve it: {err}")),
                }
            }
            // Out of file descriptors and the like: try again shortly.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// A FATAL from the postmaster to a connection it will not serve, without waiting on it.
fn refuse(mut stream: TcpStream, code: &str, text: &str) {
    let mut out = Vec::new();
    crate::wire::backend::error_or_notice(&mut out, b'E', "FATAL", code, text, None, None);
    let _ = stream.set_nonblocking(true);
    let _ = stream.write_all(&out);
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
            tables: Vec::new(),
            script: Script::new(),
            start_lsn: Lsn(0x0100_0000),
            keepalive_interval: Duration::from_secs(10),
            wal_sender_timeout: Duration::from_secs(60),
            authentication_timeout: Duration::from_secs(60),
            max_wal_senders: 10,
            max_replication_slots: 100,
            checkpoint_interval: Duration::from_secs(300),
            faults: Vec::new(),
            probe: None,
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
            "host={} port={} dbname={} user={}",
            self.addr.ip(),
            self.addr.port(),
            conninfo_value(&config.database),
            conninfo_value(config.auth.user().unwrap_or("postgres"))
        );
        // The cleartext password is known; a SCRAM verifier does not reveal one.
        if let AuthKind::Cleartext { password, .. } = &config.auth.0 {
            text.push_str(&format!(" password={}", conninfo_value(password)));
        }
        text
    }

    /// The end of the WAL: the end of the script's last event.
    #[must_use]
    pub fn wal_end(&self) -> Lsn {
        self.shared.wal_end()
    }

    /// Appends a transaction (or other event) to the stream; connected clients get it
    /// next. Its zero LSNs, xids and timestamps are filled in after the current end.
    /// Returns the new WAL end (appending is the point; the position is a convenience).
    ///
    /// # Errors
    ///
    /// [`ScriptError`] (with line 0: no line holds it) when the event cannot be placed
    /// after the current end: positions that go backwards or past the end of the LSN
    /// space, or a `COMMIT PREPARED` of a gid no transaction prepared.
    pub fn append(&self, event: Event) -> Result<Lsn, ScriptError> {
        let mut script = Script::new();
        script.events.push(event);
        self.append_script(script)
    }

    /// Appends every event of `script` ([`TestServer::append`] for many; what the
    /// control API's `POST /events` does with its JSON lines).
    ///
    /// # Errors
    ///
    /// As [`TestServer::append`], naming the line of a JSON script; nothing is appended
    /// then.
    pub fn append_script(&self, mut script: Script) -> Result<Lsn, ScriptError> {
        let mut wal = self.shared.wal();
        script.check_after(&self.shared.catalog, &wal)?;
        let mut clock = wal.clock();
        script.fill(&mut clock)?;
        wal.set_clock(clock);
        let end = script
            .events
            .iter()
            .map(Event::end_lsn)
            .max()
            .unwrap_or(wal.end());
        for event in script.events {
            wal.push(event);
        }
        drop(wal);
        self.shared.lock().wake_all();
        Ok(end)
    }

    /// The events of the stream, with every LSN, xid and timestamp filled in.
    #[must_use]
    pub fn events(&self) -> Vec<Event> {
        self.shared.wal().events().cloned().collect()
    }

    /// What a client with `options` receives for the whole stream, frame by frame, when it
    /// starts from the beginning: what byte-exact assertions compare with.
    ///
    /// # Errors
    ///
    /// [`RenderError`] when the script holds what those options cannot carry (a value a
    /// binary client cannot be sent, a message the protocol version lacks).
    pub fn render(&self, options: &StreamOptions) -> Result<Vec<RenderedMessage>, RenderError> {
        let entries = {
            let wal = self.shared.wal();
            wal.entries(0, wal.len())
        };
        let catalog = &self.shared.catalog;
        let mut renderer = Renderer::new(catalog, options, self.shared.config.major);
        let mut frames = Vec::new();
        for entry in entries {
            match renderer.event(&entry.event, entry.partner.as_deref(), &mut frames) {
                Ok(()) => {}
                Err(Failed::Render(err)) => return Err(err),
                Err(Failed::Sql(err)) => return Err(RenderError(err.message)),
                Err(Failed::Stopped) => unreachable!("a list of frames takes every frame"),
            }
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
        crate::confirmed::wait(
            self.shared.lock(),
            &self.shared.changed,
            lsn,
            timeout,
            |state| {
                state
                    .slots
                    .iter()
                    .find(|s| s.name == slot)
                    .map(|s| s.confirmed_flush_lsn)
            },
        )
    }

    /// Arms a fault rule (see [`Fault`]).
    ///
    /// # Errors
    ///
    /// Why the rule cannot work (a count of 0, an action its trigger does not allow, an
    /// error code without a known wording and no message).
    pub fn add_fault(&self, fault: Fault) -> Result<(), FaultError> {
        fault.check()?;
        self.shared.log(format!("fault armed: {fault:?}"));
        self.shared.faults.add(fault);
        Ok(())
    }

    /// Disarms every fault rule (an action under way, such as a stall, goes on).
    pub fn clear_faults(&self) {
        self.shared.faults.clear();
    }

    /// The fault rules, each with how many times it has fired.
    #[must_use]
    pub fn faults(&self) -> Vec<(Fault, u64)> {
        self.shared.faults.faults()
    }

    /// What each slot's consumer did wrong, judged across all its connections, by slot
    /// (each finding names the client that showed it, where one did).
    #[must_use]
    pub fn findings(&self) -> Vec<(String, Finding)> {
        self.shared.lock().judges().findings()
    }

    /// What happened on each slot (streams started, how they ended, crashes, transactions
    /// sent again), by slot, oldest first.
    #[must_use]
    pub fn facts(&self) -> Vec<(String, Fact)> {
        self.shared.lock().judges().facts()
    }

    /// The positions the judge saw on `slot` (what its clients were sent, what they
    /// confirmed, the probe's holds).
    #[must_use]
    pub fn positions(&self, slot: &str) -> Option<Positions> {
        self.shared
            .lock()
            .judges()
            .get(slot)
            .map(crate::judge::Judge::positions)
    }

    /// Arms the judge's probe (see [`Builder::probe`]), changes it, or disarms it.
    pub fn set_probe(&self, probe: Option<Probe>) {
        self.shared.log(format!("probe: {probe:?}"));
        self.shared.probe.set(probe);
    }

    /// The judge's probe, if armed.
    #[must_use]
    pub fn probe(&self) -> Option<Probe> {
        self.shared.probe.get()
    }

    /// Fails the test with a readable account of every finding, if there is any.
    ///
    /// # Panics
    ///
    /// When a consumer did what a correct one does not.
    #[track_caller]
    pub fn assert_no_findings(&self) {
        let findings = self.findings();
        let clients = self.clients();
        crate::judge::assert_none(&findings, |slot, finding| {
            let client = finding
                .connection()
                .and_then(|id| clients.iter().find(|c| c.id as u64 == id));
            match client {
                Some(c) => format!(
                    "slot {slot}, client {} (user {:?}, application_name {:?})",
                    c.id, c.user, c.application_name
                ),
                None => format!("slot {slot}"),
            }
        });
    }

    /// PostgreSQL's fast shutdown: sessions waiting for a command end with FATAL 57P01,
    /// streaming walsenders send what is left and wait for their client to confirm it
    /// (`WalSndDone`), and new connections are refused with 57P03. The server keeps
    /// running until dropped; [`TestServer::shut_down`] says when every connection is
    /// gone.
    pub fn begin_shutdown(&self) {
        self.shared.log("fast shutdown requested".into());
        self.shared.finish();
    }

    /// After [`TestServer::begin_shutdown`]: whether every connection has ended.
    #[must_use]
    pub fn shut_down(&self) -> bool {
        self.shared.finishing() && self.shared.lock().connection_count() == 0
    }

    /// A checkpoint now: every slot's confirmed position is persisted.
    pub fn checkpoint(&self) {
        self.shared.lock().checkpoint();
        self.shared
            .log("checkpoint: slot positions persisted".into());
    }

    /// A crash and restart: every connection is dropped, TEMPORARY slots are gone, and
    /// every slot goes back to the position its last checkpoint persisted, so what a
    /// consumer confirmed since is sent again.
    pub fn crash(&self) {
        self.shared.crash();
    }

    /// Invalidates `slot`, as PostgreSQL does when it exceeds `max_slot_wal_keep_size`:
    /// START_REPLICATION on it fails with 55000 from then on. `false` when there is no
    /// such slot.
    #[must_use = "false when there is no such slot"]
    pub fn invalidate_slot(&self, slot: &str) -> bool {
        let mut state = self.shared.lock();
        match state.slot(slot) {
            Some(info) => {
                info.invalidated = true;
                true
            }
            None => false,
        }
    }

    /// Drops `slot` (as `pg_drop_replication_slot` would, whoever streams from it):
    /// START_REPLICATION on it fails with 42704. `false` when there is no such slot.
    #[must_use = "false when there is no such slot"]
    pub fn drop_slot(&self, slot: &str) -> bool {
        let mut state = self.shared.lock();
        let before = state.slots.len();
        state.slots.retain(|s| s.name != slot);
        before != state.slots.len()
    }

    /// Holds `slot` for `duration`, as a walsender that has not exited yet does:
    /// START_REPLICATION and DROP_REPLICATION_SLOT on it fail with 55006 ("replication
    /// slot … is active for PID …"). While a client streams from it, the hold starts when
    /// that client leaves. `false` when there is no such slot.
    #[must_use = "false when there is no such slot"]
    pub fn hold_slot(&self, slot: &str, duration: Duration) -> bool {
        self.shared.lock().hold(slot, duration)
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
        let mut output = Vec::new();
        let id = self.shared.next_client_id();
        let log_len = self.shared.lock().log.len();
        connection::serve_in_memory(&self.shared, input, &mut output, id);
        let mut state = self.shared.lock();
        state.clients.retain(|c| c.id != id);
        let keep = log_len.min(state.log.len());
        state.log.truncate(keep);
        drop(state);
        output
    }

    /// Stops accepting, closes every connection and waits for the listener thread.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.stop();
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
        // Connections are woken by the stop and say goodbye as
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
        self.shared.lock().shutdown_sockets();
        for thread in threads {
            let _ = thread.join();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}
