//! The handle on a running test server: what a test asks of it and does to it.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::connection;
use super::credentials::AuthKind;
use super::render::{Halt, Renderer};
use super::state::Shared;
use super::{
    Builder, ClientInfo, Event, RenderError, RenderedMessage, Script, ScriptError, SlotInfo,
};
use crate::confirmed::Timeout;
use crate::faults::{Fault, FaultError};
use crate::judge::{Fact, Finding, Positions, Probe};
use pgoutput_client::StreamOptions;
use pgoutput_codec::Lsn;

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
    pub(super) fn new(addr: SocketAddr, shared: Arc<Shared>, accept: JoinHandle<()>) -> TestServer {
        TestServer {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    /// A builder with the defaults: `127.0.0.1:0`, trust, `server_version` 18.6, database
    /// `postgres`, an empty script.
    #[must_use]
    pub fn builder() -> Builder {
        Builder::new()
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
                Err(Halt::Render(err)) => return Err(err),
                Err(Halt::Sql(err)) => {
                    return Err(RenderError::Server {
                        code: err.code.into_owned(),
                        message: err.message,
                    })
                }
                Err(Halt::Sink(never)) => match never {},
            }
        }
        Ok(frames)
    }

    /// The replication slots.
    #[must_use]
    pub fn slots(&self) -> Vec<SlotInfo> {
        self.shared.lock().slots().list()
    }

    /// The position a slot's client confirmed as flushed.
    #[must_use]
    pub fn confirmed_flush_lsn(&self, slot: &str) -> Option<Lsn> {
        self.shared
            .lock()
            .slots()
            .get(slot)
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
            |state| state.slots().get(slot).map(|s| s.confirmed_flush_lsn),
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
    /// running until dropped; [`TestServer::is_shut_down`] says when every connection is
    /// gone.
    pub fn fast_shutdown(&self) {
        self.shared.log("fast shutdown requested".into());
        self.shared.finish();
    }

    /// After [`TestServer::fast_shutdown`]: whether every connection has ended.
    #[must_use]
    pub fn is_shut_down(&self) -> bool {
        self.shared.finishing() && self.shared.lock().connection_count() == 0
    }

    /// A checkpoint now: every slot's confirmed position is persisted.
    pub fn checkpoint(&self) {
        self.shared.lock().slots_mut().checkpoint();
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
        self.shared.lock().slots_mut().invalidate(slot)
    }

    /// Drops `slot` (as `pg_drop_replication_slot` would, whoever streams from it):
    /// START_REPLICATION on it fails with 42704. `false` when there is no such slot.
    #[must_use = "false when there is no such slot"]
    pub fn drop_slot(&self, slot: &str) -> bool {
        self.shared.lock().slots_mut().remove(slot)
    }

    /// Holds `slot` for `duration`, as a walsender that has not exited yet does:
    /// START_REPLICATION and DROP_REPLICATION_SLOT on it fail with 55006 ("replication
    /// slot … is active for PID …"). While a client streams from it, the hold starts when
    /// that client leaves. `false` when there is no such slot.
    #[must_use = "false when there is no such slot"]
    pub fn hold_slot(&self, slot: &str, duration: Duration) -> bool {
        self.shared.lock().slots_mut().hold(slot, duration)
    }

    /// The clients so far, in order of connection (every connected one, and the last 1,000
    /// that disconnected; each with its last 10,000 commands and status updates).
    #[must_use]
    pub fn clients(&self) -> Vec<ClientInfo> {
        self.shared.lock().records().clients()
    }

    /// Every command any client sent, in order of connection.
    #[must_use]
    pub fn commands(&self) -> Vec<String> {
        self.shared.lock().records().commands()
    }

    /// The log lines so far (the last 10,000).
    #[must_use]
    pub fn log(&self) -> Vec<String> {
        self.shared.lock().records().log()
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
        let log_len = self.shared.lock().records().log_len();
        connection::serve_in_memory(&self.shared, input, &mut output, id);
        let mut state = self.shared.lock();
        state.records_mut().forget(id);
        state.records_mut().truncate_log(log_len);
        drop(state);
        output
    }

    /// Stops accepting, closes every connection and waits for the listener thread.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
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
        let threads = self.shared.take_threads();
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
        self.halt();
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
