//! What the proxy knows of its connections: who each client is, its upstream, the slot it
//! streams, the frames it was sent, the status updates it sent, how it ended. (What it
//! knows of each slot is in [`super::slots`].)

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use serde::Serialize;
use tokio::sync::mpsc;

use pgoutput_codec::Lsn;

/// How many ended connections are kept (the oldest go first); open ones always are.
const ENDED_KEPT: usize = 1_000;

/// A client connection, as the proxy saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ConnectionInfo {
    /// Its number: the n-th connection the proxy accepted.
    pub id: u64,
    /// The client's address.
    pub peer: SocketAddr,
    /// The start-up packet's `user`, `database`, `application_name` and `replication`.
    pub user: String,
    pub database: String,
    pub application_name: String,
    pub replication: Option<String>,
    /// The upstream it was relayed to (`host:port`).
    pub upstream: String,
    /// Whether the client's connection to the proxy, and the proxy's to the upstream,
    /// use TLS.
    pub client_tls: bool,
    pub upstream_tls: bool,
    /// The slot it streams (or streamed) from.
    pub slot: Option<String>,
    /// XLogData frames sent to it, and those the codec could not decode (forwarded as
    /// they came).
    pub frames: u64,
    pub undecodable_frames: u64,
    /// Standby status updates it sent, and the highest flush position among them.
    pub status_updates: u64,
    pub flush_lsn: Lsn,
    /// Seconds since the Unix epoch when it connected.
    pub connected: u64,
    /// A `stall` rule holds it now: nothing goes either way, its sockets left open.
    pub stalled: bool,
    /// How it ended (`None` while it is open).
    pub ended: Option<String>,
}

/// One connection's record, updated by its relay as things happen.
#[derive(Debug)]
pub(super) struct Record {
    info: Mutex<ConnectionInfo>,
    frames: AtomicU64,
    undecodable: AtomicU64,
    /// Where bytes for its upstream go (a checkpoint's status update).
    upstream: Mutex<Option<mpsc::Sender<Vec<u8>>>>,
}

impl Record {
    /// The pair's channel for bytes to the upstream.
    pub(super) fn streams_to(&self, upstream: mpsc::Sender<Vec<u8>>) {
        *self.upstream.lock().unwrap_or_else(|e| e.into_inner()) = Some(upstream);
    }

    /// The client speaks TLS with the proxy.
    pub(super) fn client_tls(&self) {
        self.lock().client_tls = true;
    }

    /// The proxy speaks TLS with the upstream.
    pub(super) fn upstream_tls(&self) {
        self.lock().upstream_tls = true;
    }

    pub(super) fn frame(&self) {
        self.frames.fetch_add(1, Ordering::Relaxed);
    }

    /// A `stall` rule holds the connection, or lets it go.
    pub(super) fn stalled(&self, stalled: bool) {
        self.lock().stalled = stalled;
    }

    pub(super) fn undecodable(&self) {
        self.undecodable.fetch_add(1, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, ConnectionInfo> {
        self.info.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn id(&self) -> u64 {
        self.lock().id
    }

    fn snapshot(&self) -> ConnectionInfo {
        let mut info = self.lock().clone();
        info.frames = self.frames.load(Ordering::Relaxed);
        info.undecodable_frames = self.undecodable.load(Ordering::Relaxed);
        info
    }
}

/// The records of every connection.
#[derive(Debug, Default)]
pub(super) struct Records {
    connections: Mutex<VecDeque<Arc<Record>>>,
}

/// Who a client said it was in its start-up packet.
pub(super) struct Startup<'a> {
    pub id: u64,
    pub peer: SocketAddr,
    pub parameter: &'a dyn Fn(&str) -> Option<String>,
    pub upstream: String,
}

impl Records {
    /// A connection that has started up.
    pub(super) fn open(&self, startup: &Startup<'_>) -> Arc<Record> {
        let parameter = |name: &str| (startup.parameter)(name).unwrap_or_default();
        let record = Arc::new(Record {
            info: Mutex::new(ConnectionInfo {
                id: startup.id,
                peer: startup.peer,
                user: parameter("user"),
                database: (startup.parameter)("database").unwrap_or_else(|| parameter("user")),
                application_name: parameter("application_name"),
                replication: (startup.parameter)("replication"),
                upstream: startup.upstream.clone(),
                client_tls: false,
                upstream_tls: false,
                slot: None,
                frames: 0,
                undecodable_frames: 0,
                status_updates: 0,
                flush_lsn: Lsn(0),
                connected: SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
                stalled: false,
                ended: None,
            }),
            frames: AtomicU64::new(0),
            undecodable: AtomicU64::new(0),
            upstream: Mutex::new(None),
        });
        let mut connections = self.connections.lock().unwrap_or_else(|e| e.into_inner());
        connections.push_back(Arc::clone(&record));
        let ended = connections
            .iter()
            .filter(|r| r.lock().ended.is_some())
            .count();
        if ended > ENDED_KEPT {
            if let Some(oldest) = connections.iter().position(|r| r.lock().ended.is_some()) {
                connections.remove(oldest);
            }
        }
        record
    }

    /// The connection streams `slot` now.
    pub(super) fn streaming(&self, record: &Record, slot: &str) {
        record.lock().slot = Some(slot.to_owned());
    }

    /// A status update confirming `flush`.
    pub(super) fn status_update(&self, record: &Record, flush: Lsn) {
        let mut info = record.lock();
        info.status_updates += 1;
        info.flush_lsn = info.flush_lsn.max(flush);
    }

    /// The connection ended, `how`.
    pub(super) fn ended(&self, record: &Record, how: &str) {
        *record.upstream.lock().unwrap_or_else(|e| e.into_inner()) = None;
        record.lock().ended = Some(how.to_owned());
    }

    /// Sends `bytes` to the upstream of connection `id`, if it is still streaming.
    pub(super) fn to_upstream_of(&self, id: u64, bytes: Vec<u8>) -> bool {
        let connections = self.connections.lock().unwrap_or_else(|e| e.into_inner());
        let Some(record) = connections.iter().find(|r| r.id() == id) else {
            return false;
        };
        let upstream = record.upstream.lock().unwrap_or_else(|e| e.into_inner());
        upstream.as_ref().is_some_and(|u| u.try_send(bytes).is_ok())
    }

    pub(super) fn connections(&self) -> Vec<ConnectionInfo> {
        self.connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|r| r.snapshot())
            .collect()
    }
}
