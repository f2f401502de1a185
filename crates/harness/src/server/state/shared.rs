//! Everything the connections of one server share, behind locks and atomics.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::super::catalog::Catalog;
use super::{Config, State, Wal};
use crate::faults::Plan;
use crate::judge::ProbeSwitch;
use pgoutput_codec::Lsn;

/// Everything the connections share.
pub(crate) struct Shared {
    pub config: Config,
    pub catalog: Arc<Catalog>,
    wal: Mutex<Wal>,
    state: Mutex<State>,
    /// Signalled when a slot or a client record changes.
    pub changed: Condvar,
    stop: AtomicBool,
    /// A fast shutdown is under way: idle sessions end, walsenders finish as
    /// `WalSndDone` does, new connections are refused.
    finishing: AtomicBool,
    next_client: AtomicUsize,
    /// The fault rules.
    pub faults: Plan,
    /// The judge's probe, when armed.
    pub probe: ProbeSwitch,
    /// Connections accepted so far (the `connect` trigger's attempts).
    attempts: AtomicU64,
    /// START_REPLICATIONs so far, on any slot.
    starts: AtomicU64,
    /// The connection threads, joined at shutdown.
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// Locks a mutex even when a thread panicked holding it: a panicking client thread must
/// not take the server down with it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub(crate) fn new(config: Config, catalog: Catalog, wal: Wal) -> Shared {
        Shared {
            config,
            catalog: Arc::new(catalog),
            wal: Mutex::new(wal),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            finishing: AtomicBool::new(false),
            next_client: AtomicUsize::new(1),
            faults: Plan::default(),
            probe: ProbeSwitch::default(),
            attempts: AtomicU64::new(0),
            starts: AtomicU64::new(0),
            threads: Mutex::new(Vec::new()),
        }
    }

    /// Keeps a thread to join when the server stops (forgetting finished ones, which need
    /// no joining).
    pub(crate) fn add_thread(&self, handle: JoinHandle<()>) {
        let mut threads = lock(&self.threads);
        threads.retain(|t| !t.is_finished());
        threads.push(handle);
    }

    /// The threads to join, taken.
    pub(crate) fn take_threads(&self) -> Vec<JoinHandle<()>> {
        std::mem::take(&mut *lock(&self.threads))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    pub(crate) fn wal(&self) -> MutexGuard<'_, Wal> {
        lock(&self.wal)
    }

    pub(crate) fn wal_end(&self) -> Lsn {
        self.wal().end()
    }

    pub(crate) fn next_client_id(&self) -> usize {
        self.next_client.fetch_add(1, Ordering::SeqCst)
    }

    /// Counts an accepted connection: its number (from 1).
    pub(crate) fn next_attempt(&self) -> u64 {
        self.attempts.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Counts a START_REPLICATION: its number on the server (from 1).
    pub(crate) fn next_start(&self) -> u64 {
        self.starts.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The server crashes and restarts (see [`State::crash`]).
    pub(crate) fn crash(&self) {
        self.lock().crash();
        self.log("crash: every connection dropped, slots back at their persisted positions".into());
        self.notify();
    }

    /// Starts PostgreSQL's fast shutdown (see [`Shared::finishing`]).
    pub(crate) fn finish(&self) {
        self.finishing.store(true, Ordering::SeqCst);
        self.lock().wake_all();
        self.changed.notify_all();
    }

    pub(crate) fn finishing(&self) -> bool {
        self.finishing.load(Ordering::SeqCst)
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Marks the server as stopping and wakes every connection.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.lock().wake_all();
        self.changed.notify_all();
    }

    /// Tells waiters on slots and client records that something changed.
    pub(crate) fn notify(&self) {
        self.changed.notify_all();
    }

    pub(crate) fn log(&self, line: String) {
        if let Some(logger) = &self.config.logger {
            logger(&line);
        }
        self.lock().records_mut().add_log(line);
    }
}
