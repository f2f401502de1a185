//! What the connections of one server share: the settings, the WAL, the slots, the
//! clients' records and the log, the live connections and the judges. Each is a type of
//! its own with private fields, changed only through its methods here, which carry the
//! errors PostgreSQL gives.

mod config;
mod connections;
mod records;
mod shared;
mod slots;
mod wal;

use std::sync::Arc;

pub(crate) use config::Config;
use connections::Connections;
use records::Records;
pub use records::{ClientInfo, ReceivedStatusUpdate};
pub(crate) use shared::Shared;
pub use slots::SlotInfo;
pub(crate) use slots::{pid, NewSlot, Slots};
pub(crate) use wal::Wal;

use super::inbox::Inbox;
use super::sent::Unrecorded;
use crate::judge::{Judge, Judges};
use pgoutput_codec::{Lsn, StandbyStatusUpdate};
use pgoutput_wire::Socket;

/// The slots, the clients' records and the log, the live connections and the judges:
/// what one lock guards, since a change to one often changes another (a client that
/// leaves releases its slot; a crash rewinds the slots and cuts the connections).
#[derive(Default)]
pub(crate) struct State {
    slots: Slots,
    records: Records,
    connections: Connections,
    /// How many crashes the server has had: a status update read before a crash must not
    /// move a slot after it.
    epoch: u64,
    /// What each slot's consumer did, judged across its connections.
    judges: Judges,
}

impl State {
    pub(crate) fn slots(&self) -> &Slots {
        &self.slots
    }

    pub(crate) fn slots_mut(&mut self) -> &mut Slots {
        &mut self.slots
    }

    pub(crate) fn records(&self) -> &Records {
        &self.records
    }

    pub(crate) fn records_mut(&mut self) -> &mut Records {
        &mut self.records
    }

    /// How many crashes the server has had.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Tells `slot`'s judge and client `id`'s record of the frames sent since they last
    /// heard, then gives the judge for what comes next.
    pub(crate) fn record_frames(
        &mut self,
        id: usize,
        slot: &str,
        frames: &mut Vec<Unrecorded>,
    ) -> &mut Judge {
        self.records.add_sent(id, frames);
        let judge = self.judges.slot(slot);
        for frame in frames.drain(..) {
            judge.frame_sent(id as u64, frame.frame);
        }
        judge
    }

    /// The judge of `slot`.
    pub(crate) fn judge(&mut self, slot: &str) -> &mut Judge {
        self.judges.slot(slot)
    }

    /// Every slot's judge.
    pub(crate) fn judges(&self) -> &Judges {
        &self.judges
    }

    /// A status update of client `id` streaming `slot`, read in `epoch`: judged,
    /// recorded (with how long the reply request it answers waited), and the slot's new
    /// confirmed position when it moved it (one read before a crash moves nothing).
    pub(crate) fn status_update(
        &mut self,
        id: usize,
        slot: &str,
        update: StandbyStatusUpdate,
        epoch: u64,
    ) -> Option<Lsn> {
        let waited = self
            .judges
            .slot(slot)
            .status_update(id as u64, update.flush_lsn);
        if let Some(waited) = waited {
            self.records.add_reply(id, waited);
        }
        self.records.add_status_update(id, update);
        if epoch != self.epoch {
            return None;
        }
        self.slots.confirm(slot, update.flush_lsn)
    }

    /// A crash and restart: every slot goes back to its persisted position, TEMPORARY
    /// slots are gone, and every connection is cut.
    pub(crate) fn crash(&mut self) {
        self.epoch += 1;
        self.judges.crash();
        self.slots.crash();
        self.connections.shutdown_sockets();
        self.connections.wake_all();
    }

    /// Registers a live connection.
    pub(crate) fn connect(&mut self, id: usize, inbox: Arc<Inbox>, socket: Option<Socket>) {
        self.connections.connect(id, inbox, socket);
    }

    /// Counts a connection as a walsender, if fewer than `max` are.
    pub(crate) fn add_walsender(&mut self, max: usize) -> bool {
        self.connections.add_walsender(max)
    }

    /// Forgets connection `id`: its slots are released, its TEMPORARY slots dropped.
    pub(crate) fn disconnect(&mut self, id: usize, walsender: bool, why: String) {
        self.records.end(id, why);
        let _ = self.slots.clean_up(id);
        self.connections.disconnect(id, walsender);
    }

    /// Wakes every connection (new WAL, or the server stops).
    pub(crate) fn wake_all(&self) {
        self.connections.wake_all();
    }

    /// Shuts down every connection's socket: blocked reads and writes return.
    pub(crate) fn shutdown_sockets(&self) {
        self.connections.shutdown_sockets();
    }

    pub(crate) fn connection_count(&self) -> usize {
        self.connections.count()
    }
}
