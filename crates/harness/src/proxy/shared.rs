//! What every connection pair of a proxy shares: the upstream, the rules, the records of
//! connections and slots, the log, and the crash that cuts them all.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::records::Records;
use super::slots::{SlotInfo, Slots};
use crate::faults::Plan;
use crate::faults::{Fault, FaultError};
use crate::judge::ProbeSwitch;
use pgoutput_client::ConnInfo;
use pgoutput_codec::{
    encode, ClientMessage, Ctx, PgTimestamp, ProtocolVersion, StandbyStatusUpdate,
};
use pgoutput_wire::error::{error, sqlstate, SqlError};

/// How many log lines the proxy keeps (the oldest go first).
const LOG_LINES: usize = 10_000;

/// START_REPLICATION counts, for the rules' `connection` scope.
#[derive(Debug, Default)]
struct Starts {
    server: u64,
    by_slot: HashMap<String, u64>,
}

/// How the proxy guards itself against its clients, as PostgreSQL does.
#[derive(Debug, Clone, Copy)]
pub(super) struct Guard {
    /// Connections open at once, at most (`max_connections`).
    pub(super) max_connections: usize,
    /// How long a client has from its connect to its start-up packet, its TLS handshake
    /// and the upstream connection included (`authentication_timeout`).
    pub(super) authentication_timeout: Duration,
    /// Clients must use TLS (as `hostssl` lines only in `pg_hba.conf`).
    pub(super) require_tls: bool,
}

impl Default for Guard {
    /// PostgreSQL's defaults: 100 connections, 60 s.
    fn default() -> Guard {
        Guard {
            max_connections: 100,
            authentication_timeout: Duration::from_secs(60),
            require_tls: false,
        }
    }
}

/// What every connection pair shares.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) upstream: ConnInfo,
    /// TLS with clients that ask for it, when the proxy has a certificate.
    pub(super) tls: Option<Arc<rustls::ServerConfig>>,
    pub(super) guard: Guard,
    /// The upstream's major version, as its last connection said (for the proxy's own
    /// wordings before a connection has its own).
    pub(super) upstream_major: AtomicU32,
    pub(super) faults: Plan,
    /// The judge's probe, when armed.
    pub(super) probe: ProbeSwitch,
    /// Connections accepted so far (for `connect` triggers).
    pub(super) attempts: AtomicU64,
    starts: Mutex<Starts>,
    /// Client connections open now.
    pub(super) open: AtomicUsize,
    pub(super) log: Mutex<VecDeque<String>>,
    /// Lines logged over the proxy's life.
    pub(super) logged: AtomicU64,
    pub(super) records: Records,
    pub(super) slots: Slots,
    /// Bumped by each crash: every pair watches it.
    pub(super) crashes: watch::Sender<u64>,
    crash_refusal: Duration,
    /// New connections are refused until then (after a crash).
    refuse_until: Mutex<Option<Instant>>,
}

impl Shared {
    pub(super) fn new(
        upstream: ConnInfo,
        tls: Option<Arc<rustls::ServerConfig>>,
        guard: Guard,
        holding: bool,
        crash_refusal: Duration,
    ) -> Shared {
        Shared {
            tls,
            guard,
            upstream_major: AtomicU32::new(0),
            upstream,
            faults: Plan::default(),
            probe: ProbeSwitch::default(),
            attempts: AtomicU64::new(0),
            starts: Mutex::new(Starts::default()),
            open: AtomicUsize::new(0),
            log: Mutex::new(VecDeque::new()),
            logged: AtomicU64::new(0),
            records: Records::default(),
            slots: Slots::new(holding),
            crashes: watch::channel(0).0,
            crash_refusal,
            refuse_until: Mutex::new(None),
        }
    }

    pub(super) fn add_fault(&self, fault: Fault) -> Result<(), FaultError> {
        fault.check()?;
        self.faults.add(fault);
        Ok(())
    }

    /// The slots streamed through the proxy.
    pub(super) fn slot_infos(&self) -> Vec<SlotInfo> {
        self.slots.infos()
    }

    pub(super) fn checkpoint(&self) {
        for (slot, lsn, connection) in self.slots.checkpoint() {
            // What the upstream may hear now: a status update on the slot's connection.
            let update = ClientMessage::StandbyStatusUpdate(StandbyStatusUpdate {
                write_lsn: lsn,
                flush_lsn: lsn,
                apply_lsn: lsn,
                send_time: PgTimestamp::now(),
                reply_requested: false,
            });
            let payload = encode(&update, Ctx::plain(ProtocolVersion::V1))
                .expect("a status update always encodes");
            let mut message = Vec::new();
            pgoutput_wire::backend::copy_data(&mut message, &payload);
            let told = connection.is_some_and(|id| self.records.to_upstream_of(id, message));
            self.log(format!(
                "checkpoint: slot {slot} persisted at {lsn}{}",
                if told { ", told its upstream" } else { "" }
            ));
        }
    }

    pub(super) fn crash(&self) {
        *self.refuse_until.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(Instant::now() + self.crash_refusal);
        self.slots.crash();
        self.crashes.send_modify(|n| *n += 1);
        self.log("crash: every connection cut".to_owned());
    }

    /// PostgreSQL's FATAL for a connection while the proxy plays a server starting up
    /// after a crash.
    pub(super) fn refusing(&self) -> Option<SqlError> {
        let until = *self.refuse_until.lock().unwrap_or_else(|e| e.into_inner());
        until.filter(|u| Instant::now() < *u).map(|_| {
            error(
                sqlstate::CANNOT_CONNECT_NOW,
                "the database system is starting up",
            )
        })
    }

    pub(super) fn log(&self, line: String) {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() == LOG_LINES {
            log.pop_front();
        }
        log.push_back(line);
        self.logged.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts a START_REPLICATION of `slot`: its number for the slot and for the proxy.
    pub(super) fn count_start(&self, slot: &str) -> (u64, u64) {
        let mut starts = self.starts.lock().unwrap_or_else(|e| e.into_inner());
        starts.server += 1;
        let of_slot = starts.by_slot.entry(slot.to_owned()).or_default();
        *of_slot += 1;
        (*of_slot, starts.server)
    }
}
