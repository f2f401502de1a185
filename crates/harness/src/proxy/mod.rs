//! A protocol-aware proxy in front of a real PostgreSQL: every client connection gets its
//! own upstream connection, and everything passes through byte for byte (start-up,
//! authentication, simple and extended queries, COPY, cancel requests), so a consumer
//! that runs SQL beside its stream (Debezium, a PostgreSQL subscriber's table sync) works
//! as against PostgreSQL itself. On a replication connection in copy-both mode the proxy
//! reads each frame with the codec, in the context START_REPLICATION set, and the test
//! server's fault rules (the same [`Fault`] JSON) act on the upstream's frames as they go
//! to the client: a close after the third Insert of transaction 5, a reset mid-frame, an
//! ERROR in PostgreSQL's words.
//!
//! ```no_run
//! use pgoutput_harness::proxy::Proxy;
//! use pgoutput_harness::faults::{Action, Fault, Trigger};
//!
//! let proxy = Proxy::builder("host=127.0.0.1 port=5432 sslmode=disable")?
//!     .fault(Fault::new(Trigger::Change { transaction: 2, after: 1 }, Action::Close))
//!     .start()?;
//! // Point the consumer under test at proxy.addr() instead of the server; it logs in
//! // with its own user and password, which the proxy relays.
//! println!("listening on {}", proxy.addr());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Bytes in, bytes out: the proxy never re-encodes what it forwards and adds no traffic of
//! its own to a session, but for what a rule does (an ErrorResponse, a keepalive asking for
//! a reply). A frame the codec cannot decode is forwarded unchanged and noted in the log.
//! One tokio task per connection pair: a blocked client or upstream stalls only its own
//! pair, and either side closing closes the other at once (so the walsender exits and
//! releases its slot, as with a direct connection).

mod builder;
mod control;
mod listener;
mod records;
mod relay;
mod shared;
mod slots;
mod startup;

pub use builder::Builder;
pub use records::ConnectionInfo;
pub use slots::SlotInfo;

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::confirmed::Timeout;
use crate::control::Control;
use crate::faults::{Fault, FaultError};
use crate::judge::{Fact, Finding, Probe};
use pgoutput_client::{ClientError, ConnInfo};
use pgoutput_codec::Lsn;
use shared::Shared;

/// Why a proxy could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum ProxyError {
    /// The upstream connection string does not parse.
    Upstream(ClientError),
    /// A fault rule that cannot work.
    Fault(FaultError),
    /// The certificate or key for TLS with clients does not load.
    Tls(String),
    /// Binding the address or starting the runtime failed.
    Io(io::Error),
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyError::Upstream(err) => write!(f, "upstream: {err}"),
            ProxyError::Fault(err) => write!(f, "fault rule: {err}"),
            ProxyError::Tls(err) => write!(f, "TLS: {err}"),
            ProxyError::Io(err) => write!(f, "{err}"),
        }
    }
}

impl std::error::Error for ProxyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProxyError::Upstream(err) => Some(err),
            ProxyError::Fault(err) => Some(err),
            ProxyError::Tls(_) => None,
            ProxyError::Io(err) => Some(err),
        }
    }
}

impl From<io::Error> for ProxyError {
    fn from(err: io::Error) -> ProxyError {
        ProxyError::Io(err)
    }
}

impl From<FaultError> for ProxyError {
    fn from(err: FaultError) -> ProxyError {
        ProxyError::Fault(err)
    }
}

/// A running proxy. Dropping it stops it: the listener closes and every connection pair
/// with it.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Proxy {
    fn running(
        addr: SocketAddr,
        shared: Arc<Shared>,
        stop: oneshot::Sender<()>,
        thread: JoinHandle<()>,
    ) -> Proxy {
        Proxy {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// A proxy in front of the PostgreSQL that `upstream` (a libpq connection string or
    /// URI: host, port, `sslmode` and the TLS settings are used; the user, database and
    /// password are each client's own) names. The `PG*` environment variables fill in
    /// what it leaves out, as for libpq, with two exceptions that keep the proxy from
    /// lending its own identity to its clients: it reaches the upstream over a Unix
    /// socket (where `peer` authentication would log them in as the proxy's OS user) only
    /// when `host` (or `PGHOST`) names one, and otherwise over TCP to `localhost`; and it
    /// presents a client certificate only when `sslcert` (or `PGSSLCERT`) names one,
    /// never `~/.postgresql/postgresql.crt` by default.
    ///
    /// # Errors
    ///
    /// [`ProxyError::Upstream`] for a connection string that does not parse.
    pub fn builder(upstream: &str) -> Result<Builder, ProxyError> {
        // Each client logs in as itself: the connection string needs no user.
        let env = |name: &str| match std::env::var(name) {
            Ok(value) => Some(value),
            Err(_) if name == "PGUSER" => Some("postgres".to_owned()),
            Err(_) => None,
        };
        let named = |key: &str, var: &str| {
            std::env::var_os(var).is_some()
                || pgoutput_client::conninfo_pairs(upstream)
                    .is_ok_and(|pairs| pairs.iter().any(|(k, _)| k == key))
        };
        let mut info = ConnInfo::parse(Some(upstream), env).map_err(ProxyError::Upstream)?;
        if info.is_unix_socket() && !named("host", "PGHOST") {
            info.host = "localhost".to_owned();
        }
        if !named("sslcert", "PGSSLCERT") {
            info.tls.cert = None;
            info.tls.key = None;
        }
        Ok(Builder::new(info))
    }

    /// Where clients connect.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Arms a rule.
    ///
    /// # Errors
    ///
    /// A rule that cannot work (see [`Fault::check`]), or whose action the proxy does not
    /// do.
    pub fn add_fault(&self, fault: Fault) -> Result<(), FaultError> {
        self.shared.add_fault(fault)
    }

    /// Disarms every rule.
    pub fn clear_faults(&self) {
        self.shared.faults.clear();
    }

    /// The rules, each with how often it has fired.
    #[must_use]
    pub fn faults(&self) -> Vec<(Fault, u64)> {
        self.shared.faults.faults()
    }

    /// What the proxy noted: connections, rules that fired, frames it could not decode
    /// (the last 10,000 lines).
    #[must_use]
    pub fn log(&self) -> Vec<String> {
        self.log_since(0).0
    }

    /// The lines noted since line number `since` (counted from 0 over the proxy's life,
    /// those still kept), and the number to ask from next time: a reader that follows
    /// the log copies each line once.
    #[must_use]
    pub fn log_since(&self, since: u64) -> (Vec<String>, u64) {
        let log = self.shared.log.lock().unwrap_or_else(|e| e.into_inner());
        let next = self.shared.logged.load(Ordering::SeqCst);
        let first = next - log.len() as u64;
        let skip = usize::try_from(since.saturating_sub(first)).unwrap_or(usize::MAX);
        (log.iter().skip(skip).cloned().collect(), next)
    }

    /// How many client connections are open.
    #[must_use]
    pub fn connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// Every open connection, and the last 1,000 that ended: who, its upstream, its slot,
    /// the frames it was sent, its status updates, how it ended.
    #[must_use]
    pub fn connection_records(&self) -> Vec<ConnectionInfo> {
        self.shared.records.connections()
    }

    /// How many slots the proxy keeps state of: each one a client streamed through it
    /// (the upstream had it) or a test set a state of. A START_REPLICATION the upstream
    /// refuses, or one from a client that has not logged in, adds none.
    #[must_use]
    pub fn known_slots(&self) -> usize {
        self.shared.slots.known()
    }

    /// The slots streamed through the proxy: what clients confirmed and were sent.
    #[must_use]
    pub fn slots(&self) -> Vec<SlotInfo> {
        self.shared.slot_infos()
    }

    /// Waits until a client has confirmed `lsn` (or past it) for `slot` through the proxy.
    ///
    /// # Errors
    ///
    /// Where the slot stood when `timeout` passed (`None`: nothing streamed it yet).
    pub fn wait_for_confirmed_flush(
        &self,
        slot: &str,
        lsn: Lsn,
        timeout: Duration,
    ) -> Result<Lsn, Timeout> {
        self.shared
            .slots
            .wait_for_confirmed_flush(slot, lsn, timeout)
    }

    /// A checkpoint: each slot's confirmed position becomes what the upstream hears
    /// (sent to it at once, in a status update on the connection streaming the slot). Only
    /// with a [`Builder::checkpoint_interval`]; without one the upstream hears every
    /// status update as it comes.
    pub fn checkpoint(&self) {
        self.shared.checkpoint();
    }

    /// A server crash, as clients see one: every connection is cut, and for
    /// [`Builder::crash_refusal`] new ones get `FATAL: the database system is starting
    /// up`. The real server then sends again what its slots heard was not confirmed (with
    /// a [`Builder::checkpoint_interval`], what consumers confirmed since the last
    /// checkpoint).
    pub fn crash(&self) {
        self.shared.crash();
    }

    /// START_REPLICATION of `slot` gets "replication slot … is active for PID …" (55006)
    /// from the proxy for `duration` after the client streaming it leaves (from now, if
    /// none does), as when PostgreSQL has not yet reaped the walsender before.
    pub fn hold_slot(&self, slot: &str, duration: Duration) {
        self.shared.slots.hold(slot, duration);
    }

    /// START_REPLICATION of `slot` gets PostgreSQL's error for an invalidated slot
    /// (55000) from the proxy, in the upstream version's words.
    pub fn invalidate_slot(&self, slot: &str) {
        self.shared.slots.invalidate(slot);
    }

    /// START_REPLICATION of `slot` gets "replication slot … does not exist" (42704) from
    /// the proxy, as after a failover that lost it; the real slot is left as it is.
    pub fn forget_slot(&self, slot: &str) {
        self.shared.slots.forget(slot);
    }

    /// What the consumers did wrong, judged per slot across all its connections: each
    /// finding with its slot.
    #[must_use]
    pub fn findings(&self) -> Vec<(String, Finding)> {
        self.shared.slots.findings()
    }

    /// What happened on each slot (streams started, how they ended, crashes,
    /// transactions sent again), by slot, oldest first.
    #[must_use]
    pub fn facts(&self) -> Vec<(String, Fact)> {
        self.shared.slots.facts()
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

    /// Panics with a readable account if any consumer misbehaved ([`Proxy::findings`]).
    ///
    /// # Panics
    ///
    /// When there is a finding.
    #[track_caller]
    pub fn assert_no_findings(&self) {
        crate::judge::assert_none(&self.findings(), |slot, finding| {
            match finding.connection() {
                Some(connection) => format!("slot {slot}, connection {connection}: the consumer"),
                None => format!("slot {slot}: the consumer"),
            }
        });
    }

    /// Serves the control API on `addr` (loopback only, unless `remote`): `GET /` lists
    /// its endpoints.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a non-loopback address without `remote`, else the error of
    /// binding the socket.
    pub fn control(&self, addr: SocketAddr, remote: bool) -> io::Result<Control> {
        control::start(Arc::clone(&self.shared), addr, remote)
    }

    /// Stops the proxy and waits for its thread: every connection is closed.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.halt();
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::path::Path;

    use super::*;

    /// A backend message.
    fn message(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        out.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    fn read_message(stream: &mut TcpStream) -> Vec<u8> {
        let mut header = [0u8; 5];
        stream.read_exact(&mut header).unwrap();
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        let mut whole = header.to_vec();
        whole.resize(len + 1, 0);
        stream.read_exact(&mut whole[5..]).unwrap();
        whole
    }

    /// The upstream leg carries no identity of the proxy's that the connection string does
    /// not name: TCP, not the default Unix socket (`peer` would log a client in as the
    /// proxy's OS user), and no default client certificate.
    #[test]
    fn the_upstream_leg_lends_no_identity_of_the_proxys_own() {
        let builder = Proxy::builder("port=5999 sslmode=prefer").unwrap();
        if std::env::var_os("PGHOST").is_none() {
            assert_eq!(builder.upstream().host, "localhost");
        }
        if std::env::var_os("PGSSLCERT").is_none() {
            assert_eq!(builder.upstream().tls.cert, None);
            assert_eq!(builder.upstream().tls.key, None);
        }
        let named = Proxy::builder(
            "host=/var/run/postgresql port=5999 sslcert=/c.crt sslkey=/c.key sslmode=prefer",
        )
        .unwrap();
        assert_eq!(named.upstream().host, "/var/run/postgresql");
        assert_eq!(
            named.upstream().tls.cert.as_deref(),
            Some(Path::new("/c.crt"))
        );
        assert_eq!(
            named.upstream().tls.key.as_deref(),
            Some(Path::new("/c.key"))
        );
    }

    /// A start-up packet of a length PostgreSQL does not read is closed without a word,
    /// as PostgreSQL closes it (its "invalid length of startup packet" is only logged),
    /// and without reaching the upstream.
    #[test]
    fn a_start_up_packet_of_a_length_postgresql_does_not_read_gets_no_answer() {
        let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = upstream.local_addr().unwrap().port();
        let proxy = Proxy::builder(&format!("host=127.0.0.1 port={port} sslmode=disable"))
            .unwrap()
            .start()
            .unwrap();
        for packet in [
            &[0u8, 0, 0, 7, 0, 3, 0][..],
            &[0, 0, 0x27, 0x15, 0, 3, 0, 0],
        ] {
            let mut client = TcpStream::connect(proxy.addr()).unwrap();
            client.write_all(packet).unwrap();
            let mut answer = Vec::new();
            // The end of the connection, however it comes (a reset when bytes were left
            // unread), with nothing before it.
            let _ = client.read_to_end(&mut answer);
            assert_eq!(answer, b"", "{packet:?}");
        }
        upstream.set_nonblocking(true).unwrap();
        assert!(upstream.accept().is_err(), "the upstream was reached");
        let log = proxy.log();
        assert_eq!(
            log.iter()
                .filter(|l| l.contains("invalid length of startup packet: closed without an answer"))
                .count(),
            2,
            "{log:?}"
        );
    }

    /// XLogData CopyData frames of `payloads`, each at 0/1000000.
    fn xlog_frames(payloads: &[&[u8]]) -> Vec<Vec<u8>> {
        payloads
            .iter()
            .map(|payload| {
                let mut frame = Vec::new();
                let xlog = pgoutput_codec::XLogData {
                    wal_start: Lsn(0x100_0000),
                    wal_end: Lsn(0x100_0000),
                    send_time: pgoutput_codec::PgTimestamp(0),
                    data: (*payload).into(),
                };
                pgoutput_wire::backend::xlog_data(&mut frame, &xlog);
                frame
            })
            .collect()
    }

    /// An upstream that logs its one client in, answers its query with CopyBothResponse
    /// and `stream`, then waits for it to leave: its port and its thread.
    fn streaming_upstream(stream: Vec<u8>) -> (u16, std::thread::JoinHandle<()>) {
        let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = upstream.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = upstream.accept().unwrap();
            let mut startup = [0u8; 4];
            conn.read_exact(&mut startup).unwrap();
            let mut rest = vec![0; u32::from_be_bytes(startup) as usize - 4];
            conn.read_exact(&mut rest).unwrap();
            conn.write_all(&message(b'R', &[0, 0, 0, 0])).unwrap();
            conn.write_all(&message(b'Z', b"I")).unwrap();
            assert_eq!(read_message(&mut conn)[0], b'Q');
            conn.write_all(&message(b'W', &[0, 0, 0])).unwrap();
            conn.write_all(&stream).unwrap();
            let _ = conn.read(&mut [0; 1]);
        });
        (port, server)
    }

    /// A client of `proxy`, logged in and streaming slot `s` (its CopyBothResponse read).
    fn streaming_client(proxy: &Proxy) -> TcpStream {
        let mut client = TcpStream::connect(proxy.addr()).unwrap();
        let mut startup = 196_608u32.to_be_bytes().to_vec();
        startup.extend_from_slice(b"user\0u\0replication\0database\0\0");
        let mut packet = ((startup.len() + 4) as u32).to_be_bytes().to_vec();
        packet.extend(startup);
        client.write_all(&packet).unwrap();
        assert_eq!(read_message(&mut client)[0], b'R');
        assert_eq!(read_message(&mut client)[0], b'Z');
        client
            .write_all(&message(
                b'Q',
                b"START_REPLICATION SLOT s LOGICAL 0/0 (proto_version '1', publication_names 'p')\0",
            ))
            .unwrap();
        assert_eq!(read_message(&mut client)[0], b'W');
        client
    }

    /// A frame the codec refuses (a Commit cut short before its end position, which the
    /// proxy reads) reaches the client as it came, and the proxy notes it.
    #[test]
    fn a_frame_the_codec_refuses_is_forwarded_unchanged_and_noted() {
        let frames = xlog_frames(&[b"C\0\0\0\0\0\x01\0\0\0\0\0"]);
        let (port, server) = streaming_upstream(frames.concat());
        let proxy = Proxy::builder(&format!("host=127.0.0.1 port={port} sslmode=disable"))
            .unwrap()
            .start()
            .unwrap();
        let mut client = streaming_client(&proxy);
        assert_eq!(read_message(&mut client), frames[0]);
        drop(client);
        server.join().unwrap();
        let log = proxy.log();
        assert!(
            log.iter()
                .any(|l| l.contains("the frame at 0/1000000 did not decode, forwarded as it came")),
            "{log:?}"
        );
    }

    /// A `slow` rule paces the rest of the stream: every frame after the rule's point
    /// arrives, unchanged, and each waited its delay (a lower bound, which no load can
    /// break).
    #[test]
    fn a_slow_rule_paces_the_rest_of_the_stream() {
        // Begin, then two Inserts of one column, protocol 1.
        let frames = xlog_frames(&[
            b"B\0\0\0\0\x01\0\0\x28\0\0\0\0\0\0\0\0\0\0\x02\xee",
            b"I\0\0\x40\x00N\0\x01t\0\0\0\x011",
            b"I\0\0\x40\x00N\0\x01t\0\0\0\x012",
        ]);
        let (port, server) = streaming_upstream(frames.concat());
        let delay = Duration::from_millis(150);
        let slow = Fault::new(
            crate::faults::Trigger::message(1),
            crate::faults::Action::Slow {
                delay_ms: Some(150),
                bytes_per_second: None,
            },
        );
        let proxy = Proxy::builder(&format!("host=127.0.0.1 port={port} sslmode=disable"))
            .unwrap()
            .fault(slow)
            .start()
            .unwrap();
        let mut client = streaming_client(&proxy);
        let started = std::time::Instant::now();
        let got: Vec<Vec<u8>> = (0..3).map(|_| read_message(&mut client)).collect();
        // The two frames after the first waited their delay each.
        assert!(started.elapsed() >= 2 * delay, "{:?}", started.elapsed());
        assert_eq!(got, frames);
        drop(client);
        server.join().unwrap();
        assert_eq!(proxy.faults()[0].1, 1);
    }
}
