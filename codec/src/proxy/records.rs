//! What the proxy knows of its connections and of the slots streamed through it: who
//! each client is, its upstream, the slot it streams, the frames it was sent, the status
//! updates it sent, how it ended; per slot, the highest position a client confirmed
//! through the proxy (what [`Proxy::wait_for_confirmed_flush`](super::Proxy::wait_for_confirmed_flush)
//! waits on) and the highest transaction end sent.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use tokio::sync::mpsc;

use crate::server::Timeout;
use crate::Lsn;

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
    /// How it ended (`None` while it is open).
    pub ended: Option<String>,
}

/// A slot streamed through the proxy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SlotInfo {
    /// The slot name.
    pub name: String,
    /// The highest flush position a client confirmed for it through the proxy.
    pub confirmed_flush_lsn: Lsn,
    /// What the upstream was let hear of it: the confirmed position, or with a
    /// persistence interval, the last checkpoint's.
    pub heard_lsn: Lsn,
    /// The highest transaction end the proxy sent a client of it.
    pub sent_lsn: Lsn,
    /// The connection streaming it now.
    pub active_connection: Option<u64>,
    /// What was sent again after the last crash that the consumer had confirmed before.
    pub resent: Option<super::Resent>,
}

/// One connection's record, updated by its relay as things happen.
#[derive(Debug)]
pub(super) struct Record {
    info: Mutex<ConnectionInfo>,
    frames: AtomicU64,
    undecodable: AtomicU64,
    /// Where bytes for its upstream go (a checkpoint's status update).
    upstream: Mutex<Option<mpsc::UnboundedSender<Vec<u8>>>>,
}

impl Record {
    /// The pair's channel for bytes to the upstream.
    pub(super) fn streams_to(&self, upstream: mpsc::UnboundedSender<Vec<u8>>) {
        *self.upstream.lock().unwrap_or_else(|e| e.into_inner()) = Some(upstream);
    }

    pub(super) fn frame(&self) {
        self.frames.fetch_add(1, Ordering::Relaxed);
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

/// The records of every connection and slot.
#[derive(Debug, Default)]
pub(super) struct Records {
    connections: Mutex<VecDeque<Arc<Record>>>,
    slots: Mutex<HashMap<String, SlotInfo>>,
    /// Signalled when a slot's confirmed position moves.
    confirmed: Condvar,
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
                slot: None,
                frames: 0,
                undecodable_frames: 0,
                status_updates: 0,
                flush_lsn: Lsn(0),
                connected: SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
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
        let id = record.id();
        self.slot(slot, |s| s.active_connection = Some(id));
    }

    /// A transaction ending at `end` was sent to a client of `slot`.
    pub(super) fn sent(&self, slot: &str, end: Lsn) {
        self.slot(slot, |s| s.sent_lsn = s.sent_lsn.max(end));
    }

    /// A status update confirming `flush` for `slot`.
    pub(super) fn status_update(&self, record: &Record, slot: &str, flush: Lsn) {
        {
            let mut info = record.lock();
            info.status_updates += 1;
            info.flush_lsn = info.flush_lsn.max(flush);
        }
        self.slot(slot, |s| {
            s.confirmed_flush_lsn = s.confirmed_flush_lsn.max(flush)
        });
        self.confirmed.notify_all();
    }

    /// The connection ended, `how`; the slot it streamed, if any.
    pub(super) fn ended(&self, record: &Record, how: &str) -> Option<String> {
        *record.upstream.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let (id, slot) = {
            let mut info = record.lock();
            info.ended = Some(how.to_owned());
            (info.id, info.slot.clone())
        };
        if let Some(slot) = &slot {
            self.slot(slot, |s| {
                if s.active_connection == Some(id) {
                    s.active_connection = None;
                }
            });
        }
        slot
    }

    /// Sends `bytes` to the upstream of the connection streaming `slot`, if one does.
    pub(super) fn to_upstream_of(&self, slot: &str, bytes: Vec<u8>) -> bool {
        let active = self
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(slot)
            .and_then(|s| s.active_connection);
        let Some(id) = active else {
            return false;
        };
        let connections = self.connections.lock().unwrap_or_else(|e| e.into_inner());
        let Some(record) = connections.iter().find(|r| r.id() == id) else {
            return false;
        };
        let upstream = record.upstream.lock().unwrap_or_else(|e| e.into_inner());
        upstream.as_ref().is_some_and(|u| u.send(bytes).is_ok())
    }

    fn slot(&self, name: &str, change: impl FnOnce(&mut SlotInfo)) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        // Looked up by the borrowed name first: no allocation for a slot already known.
        if let Some(slot) = slots.get_mut(name) {
            return change(slot);
        }
        let slot = slots.entry(name.to_owned()).or_insert_with(|| SlotInfo {
            name: name.to_owned(),
            confirmed_flush_lsn: Lsn(0),
            heard_lsn: Lsn(0),
            sent_lsn: Lsn(0),
            active_connection: None,
            resent: None,
        });
        change(slot);
    }

    pub(super) fn connections(&self) -> Vec<ConnectionInfo> {
        self.connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|r| r.snapshot())
            .collect()
    }

    pub(super) fn slots(&self) -> Vec<SlotInfo> {
        let mut slots: Vec<SlotInfo> = self
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        slots.sort_by(|a, b| a.name.cmp(&b.name));
        slots
    }

    /// Waits until a client confirmed `lsn` (or past it) for `slot` through the proxy.
    pub(super) fn wait_for_confirmed_flush(
        &self,
        slot: &str,
        lsn: Lsn,
        timeout: Duration,
    ) -> Result<Lsn, Timeout> {
        let deadline = Instant::now() + timeout;
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let confirmed = slots.get(slot).map(|s| s.confirmed_flush_lsn);
            match confirmed {
                Some(confirmed) if confirmed >= lsn => return Ok(confirmed),
                _ => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Timeout {
                    confirmed_flush_lsn: confirmed,
                });
            }
            slots = self
                .confirmed
                .wait_timeout(slots, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}
