//! The test server's settings, and starting it.

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use super::catalog::Catalog;
use super::listener;
use super::script::Clock;
use super::state::{Config, Shared, Wal};
use super::{Auth, Logger, Publication, Script, Table, TestServer};
use crate::faults::Fault;
use crate::judge::Probe;
use pgoutput_codec::Lsn;

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
    /// The defaults (see [`TestServer::builder`]).
    pub(super) fn new() -> Builder {
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
            max_replication_slots: 10,
            checkpoint_interval: Duration::from_secs(300),
            faults: Vec::new(),
            probe: None,
            logger: None,
        }
    }

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

    /// How many replication slots may exist at once (default 10, as PostgreSQL's
    /// `max_replication_slots`). Creating one more fails with SQLSTATE 53400, as there.
    #[must_use]
    pub fn max_replication_slots(mut self, max: usize) -> Builder {
        self.max_replication_slots = max;
        self
    }

    /// How often a checkpoint persists every slot's confirmed position (default 5 min;
    /// PostgreSQL's `checkpoint_timeout`): a crash
    /// ([`Action::Crash`](crate::faults::Action::Crash), [`TestServer::crash`]) takes each
    /// slot back to its last persisted position.
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
    /// ([`Finding::ConfirmedUnsent`](crate::judge::Finding::ConfirmedUnsent)); and each
    /// time the stream catches up, the client is asked for a reply, so a slot left behind
    /// while idle shows.
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
                .spawn(move || listener::checkpointer(&shared))?
        };
        shared.add_thread(checkpointer);
        let accept = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("pgoutput-test-server".into())
                .spawn(move || listener::accept_loop(&shared, &listener))?
        };
        Ok(TestServer::new(addr, shared, accept))
    }
}

fn major_version(version: &str) -> Option<u32> {
    version
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}
