//! The replication slots: what `slot.c` keeps for each (its confirmed and persisted
//! positions, who has it) and the errors PostgreSQL gives when a slot cannot be made,
//! taken or dropped.

use std::time::{Duration, Instant};

use crate::slot_hold::Hold;
use pgoutput_codec::Lsn;
use pgoutput_wire::error::{error, setting_name, slot_missing, sqlstate, SqlError};

/// A replication slot of the test server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Held by a walsender that has not exited yet (the client whose process id the
    /// error names; 0: none of ours): START_REPLICATION fails with 55006.
    held: Option<Hold<usize>>,
    /// How many START_REPLICATIONs the slot has had (the fault rules' `connection`).
    starts: u64,
}

impl SlotInfo {
    /// How many START_REPLICATIONs the slot has had, this one included once acquired.
    pub(crate) fn starts(&self) -> u64 {
        self.starts
    }

    /// A slot's client lets it go: a hold waiting for that starts now.
    fn let_go(&mut self) {
        self.active_client = None;
        if let Some(hold) = &mut self.held {
            hold.let_go(Instant::now());
        }
    }
}

/// A new slot, as CREATE_REPLICATION_SLOT asks for it.
pub(crate) struct NewSlot {
    pub name: String,
    pub two_phase: bool,
    /// The creating client, for a TEMPORARY slot.
    pub temporary_owner: Option<usize>,
    /// The consistent point.
    pub at: Lsn,
}

/// Every slot of the server.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    slots: Vec<SlotInfo>,
}

impl Slots {
    /// A copy of every slot.
    pub(crate) fn list(&self) -> Vec<SlotInfo> {
        self.slots.clone()
    }

    pub(crate) fn get(&self, name: &str) -> Option<&SlotInfo> {
        self.slots.iter().find(|s| s.name == name)
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut SlotInfo> {
        self.slots.iter_mut().find(|s| s.name == name)
    }

    /// What `ReplicationSlotCreate` refuses before it makes a slot named `name`
    /// (`ReplicationSlotValidateName`'s order: empty, too long, a character other than
    /// `[a-z0-9_]`), one that exists, and no room left under `max_replication_slots`.
    pub(crate) fn check_new(&self, name: &str, max: usize, major: u32) -> Result<(), SqlError> {
        if name.is_empty() {
            return Err(error(
                sqlstate::INVALID_NAME,
                format!("replication slot name \"{name}\" is too short"),
            ));
        }
        if name.len() >= 64 {
            return Err(error(
                sqlstate::NAME_TOO_LONG,
                format!("replication slot name \"{name}\" is too long"),
            ));
        }
        let valid = name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            return Err(error(
                sqlstate::INVALID_NAME,
                format!("replication slot name \"{name}\" contains invalid character"),
            )
            .with_hint(
                "Replication slot names may only contain lower case letters, numbers, and the underscore character.",
            ));
        }
        if self.get(name).is_some() {
            return Err(error(
                sqlstate::DUPLICATE_OBJECT,
                format!("replication slot \"{name}\" already exists"),
            ));
        }
        if self.slots.len() >= max {
            return Err(error(
                sqlstate::CONFIGURATION_LIMIT_EXCEEDED,
                "all replication slots are in use",
            )
            .with_hint(format!(
                "Free one or increase {}.",
                setting_name("max_replication_slots", major)
            )));
        }
        Ok(())
    }

    /// Makes a slot that [`Slots::check_new`] allowed, under the same lock.
    pub(crate) fn create(&mut self, new: NewSlot) {
        self.slots.push(SlotInfo {
            name: new.name,
            confirmed_flush_lsn: new.at,
            two_phase: new.two_phase,
            active_client: None,
            // CREATE_REPLICATION_SLOT writes the slot to disk (`ReplicationSlotPersist`).
            persisted_lsn: new.at,
            invalidated: false,
            temporary_owner: new.temporary_owner,
            held: None,
            starts: 0,
        });
    }

    /// DROP_REPLICATION_SLOT by client `id`: refused (55006) while another client has it.
    pub(crate) fn drop_slot(&mut self, name: &str, id: usize) -> Result<(), SqlError> {
        match self.holder(name) {
            None => Err(slot_missing(name)),
            Some(Some(other)) if other != id => Err(in_use(name, other)),
            Some(_) => {
                self.slots.retain(|s| s.name != name);
                Ok(())
            }
        }
    }

    /// Drops `slot` whoever has it (`pg_drop_replication_slot` from outside); whether it
    /// existed.
    pub(crate) fn remove(&mut self, name: &str) -> bool {
        let before = self.slots.len();
        self.slots.retain(|s| s.name != name);
        before != self.slots.len()
    }

    /// Takes `slot` for client `id`, as `ReplicationSlotAcquire` and
    /// `StartLogicalReplication` do: refused while another client has it (a TEMPORARY slot
    /// is its creator's for its whole life, a held one its old walsender's), and when it
    /// was invalidated.
    pub(crate) fn acquire(
        &mut self,
        slot: &str,
        id: usize,
        major: u32,
    ) -> Result<&SlotInfo, SqlError> {
        let Some(holder) = self.holder(slot) else {
            return Err(slot_missing(slot));
        };
        if let Some(other) = holder.filter(|other| *other != id) {
            return Err(in_use(slot, other));
        }
        let info = self.get_mut(slot).expect("the slot exists");
        if info.invalidated {
            return Err(pgoutput_wire::error::slot_invalidated(slot, major));
        }
        info.active_client = Some(id);
        info.starts += 1;
        Ok(info)
    }

    /// Whose `slot` is: `None` when there is no such slot, `Some(None)` when it is free,
    /// else the client streaming from it, owning it (TEMPORARY) or holding it.
    fn holder(&mut self, slot: &str) -> Option<Option<usize>> {
        let info = self.get_mut(slot)?;
        let now = Instant::now();
        if info.held.is_some_and(|hold| hold.holder(now).is_none()) {
            info.held = None;
        }
        let held = info.held.and_then(|hold| hold.holder(now));
        Some(info.active_client.or(info.temporary_owner).or(held))
    }

    /// Holds `slot` for `duration`: from now, or, while a client streams from it, from
    /// when that client leaves (as when its walsender has not exited yet).
    pub(crate) fn hold(&mut self, slot: &str, duration: Duration) -> bool {
        let Some(info) = self.get_mut(slot) else {
            return false;
        };
        let (client, streaming) = info.active_client.map_or((0, false), |c| (c, true));
        info.held = Some(Hold::new(client, duration, streaming, Instant::now()));
        true
    }

    /// Invalidates `slot` (START_REPLICATION fails with 55000 from then on); whether it
    /// exists.
    pub(crate) fn invalidate(&mut self, slot: &str) -> bool {
        match self.get_mut(slot) {
            Some(info) => {
                info.invalidated = true;
                true
            }
            None => false,
        }
    }

    /// A checkpoint: every slot's confirmed position is persisted.
    pub(crate) fn checkpoint(&mut self) {
        for slot in &mut self.slots {
            slot.persisted_lsn = slot.confirmed_flush_lsn;
        }
    }

    /// A crash and restart: every slot goes back to its persisted position, free, and
    /// TEMPORARY slots are gone.
    pub(crate) fn crash(&mut self) {
        self.slots.retain(|s| s.temporary_owner.is_none());
        for slot in &mut self.slots {
            slot.confirmed_flush_lsn = slot.persisted_lsn;
            slot.active_client = None;
            slot.held = None;
        }
    }

    /// Gives `slot` back, unless it is client `id`'s TEMPORARY slot (which stays its own).
    pub(crate) fn release(&mut self, slot: &str, id: usize) {
        if let Some(info) = self.get_mut(slot) {
            if info.active_client == Some(id) && info.temporary_owner != Some(id) {
                info.let_go();
            }
        }
    }

    /// Moves `slot`'s confirmed position forward (never back); the new position when it
    /// moved.
    pub(crate) fn confirm(&mut self, slot: &str, flush: Lsn) -> Option<Lsn> {
        let info = self.get_mut(slot)?;
        (flush > info.confirmed_flush_lsn).then(|| {
            info.confirmed_flush_lsn = flush;
            flush
        })
    }

    /// What `ReplicationSlotRelease` and `ReplicationSlotCleanup` do for client `id`
    /// when its walsender's command fails with an ERROR (`WalSndErrorCleanup`) or it
    /// leaves: the slot it streams is released, its TEMPORARY slots are dropped.
    /// Returns the names of the slots dropped.
    pub(crate) fn clean_up(&mut self, id: usize) -> Vec<String> {
        for slot in &mut self.slots {
            if slot.active_client == Some(id) {
                slot.let_go();
            }
        }
        let (dropped, kept) = std::mem::take(&mut self.slots)
            .into_iter()
            .partition(|s| s.temporary_owner == Some(id));
        self.slots = kept;
        dropped.into_iter().map(|s: SlotInfo| s.name).collect()
    }
}

/// The error for a slot another client holds.
fn in_use(slot: &str, client: usize) -> SqlError {
    pgoutput_wire::error::slot_in_use(slot, pid(client))
}

/// A client's process id, as BackendKeyData and "active for PID" report it.
pub(crate) fn pid(client: usize) -> usize {
    10_000 + client
}
