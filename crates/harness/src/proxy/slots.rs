//! Everything the proxy knows of a slot streamed through it, in one place: what its
//! clients were sent and confirmed (and what the consumer did wrong, judged by the
//! shared [`crate::judge`]); states a test sets, answered to START_REPLICATION in PostgreSQL's
//! words without reaching the upstream ("active for PID …" for a while after the client
//! that held the slot left, invalidated, missing); and, with a persistence interval, the
//! flush positions the upstream hears only at the proxy's checkpoints, so that a crash
//! (every connection cut) makes the real server send again what a consumer confirmed since,
//! as PostgreSQL does after a real crash.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::confirmed::Timeout;
use crate::judge::{by_slot, Ending, Fact, Finding, Frame, Judge, Resent};
use crate::slot_hold::Hold;
use pgoutput_codec::Lsn;
use pgoutput_wire::error::{slot_in_use, slot_invalidated, slot_missing, SqlError};

/// A slot streamed through the proxy, as [`Proxy::slots`](super::Proxy::slots) shows it.
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
    /// The highest position its clients were sent (XLogData `walEnd`, keepalive WAL
    /// end): confirming up to it is always safe.
    pub sent_lsn: Lsn,
    /// The end of the last transaction its clients were sent whole.
    pub transaction_end_lsn: Lsn,
    /// The connection streaming it now.
    pub active_connection: Option<u64>,
    /// What was sent again after the last crash that the consumer had confirmed before.
    pub resent: Option<Resent>,
}

/// One slot.
#[derive(Debug, Default)]
struct Slot {
    confirmed: Lsn,
    /// What the last checkpoint let the upstream hear.
    persisted: Lsn,
    /// The connection streaming it, and its walsender's process id.
    active: Option<(u64, u32)>,
    invalidated: bool,
    missing: bool,
    /// Held by a walsender that has not exited yet (its process id; 0: not one of this
    /// proxy's).
    hold: Option<Hold<u32>>,
    judge: Judge,
}

/// Every slot, and whether flush positions are held back to checkpoints.
#[derive(Debug)]
pub(super) struct Slots {
    /// By name, ordered (looked up at each frame that opens or ends a transaction: no
    /// SipHash of the name at each).
    slots: Mutex<BTreeMap<String, Slot>>,
    /// Signalled when a slot's confirmed position moves.
    confirmed: Condvar,
    /// With a persistence interval set: flush positions reach the upstream only at
    /// checkpoints.
    holding: bool,
}

impl Slots {
    /// Slots whose flush positions are held back to checkpoints (`holding`), or not.
    pub(super) fn new(holding: bool) -> Slots {
        Slots {
            slots: Mutex::default(),
            confirmed: Condvar::new(),
            holding,
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn with<T>(&self, slot: &str, f: impl FnOnce(&mut Slot) -> T) -> T {
        let mut slots = self.lock();
        // Looked up by the borrowed name first: no allocation for a slot already known.
        if let Some(known) = slots.get_mut(slot) {
            return f(known);
        }
        f(slots.entry(slot.to_owned()).or_default())
    }

    /// The ERROR START_REPLICATION of `slot` gets from the proxy instead of the upstream,
    /// if its state calls for one (for a server of major version `major`).
    pub(super) fn refusal(&self, slot: &str, major: u32) -> Option<SqlError> {
        // Looked up only: a slot the proxy keeps no state of is the upstream's to answer,
        // and a client's made-up name leaves nothing behind.
        let mut slots = self.lock();
        let state = slots.get_mut(slot)?;
        {
            if state.missing {
                return Some(slot_missing(slot));
            }
            if state.invalidated {
                return Some(slot_invalidated(slot, major));
            }
            match state.hold?.holder(Instant::now()) {
                Some(pid) => Some(slot_in_use(slot, pid as usize)),
                None => {
                    state.hold = None;
                    None
                }
            }
        }
    }

    /// How many slots the proxy keeps state of: those a client streamed through it, or a
    /// test set a state of.
    pub(super) fn known(&self) -> usize {
        self.lock().len()
    }

    /// `connection`, whose walsender is process `pid`, streams `slot` now, from the
    /// position it asked for.
    pub(super) fn started(&self, slot: &str, connection: u64, pid: u32, requested: Lsn) {
        self.with(slot, |s| {
            s.active = Some((connection, pid));
            s.judge.started(connection, requested, None);
        });
    }

    /// A frame of a transaction went to `connection` (told for the frames that open or
    /// end one: an opening frame ends an idle period, which the judge must know before
    /// the transaction's status updates come; the other frames only move the position it
    /// was sent, which the status updates bring along).
    pub(super) fn frame(&self, slot: &str, connection: u64, frame: Frame) {
        self.with(slot, |s| s.judge.frame_sent(connection, frame));
    }

    /// A keepalive went to `connection`, reporting `wal_end` with no transaction open
    /// (`idle`) or inside one, asking for a reply or not.
    pub(super) fn keepalive(
        &self,
        slot: &str,
        connection: u64,
        wal_end: Lsn,
        idle: bool,
        reply_requested: bool,
    ) {
        self.with(slot, |s| {
            s.judge
                .keepalive_sent(connection, wal_end, reply_requested, idle);
        });
    }

    /// `connection`, which had been sent up to `forwarded`, confirmed `flush`: judged,
    /// recorded, and the position the upstream hears now returned (held back to the last
    /// checkpoint's with a persistence interval).
    pub(super) fn status_update(
        &self,
        slot: &str,
        connection: u64,
        flush: Lsn,
        forwarded: Lsn,
    ) -> Lsn {
        let heard = self.with(slot, |s| {
            s.judge.reached(forwarded);
            s.judge.status_update(connection, flush);
            s.confirmed = s.confirmed.max(flush);
            if self.holding {
                flush.min(s.persisted)
            } else {
                flush
            }
        });
        self.confirmed.notify_all();
        heard
    }

    /// A probe held a transaction of `slot`; `answered`: a status update ended the hold.
    pub(super) fn probed(&self, slot: &str, answered: bool) {
        self.with(slot, |s| s.judge.probed(answered));
    }

    /// `connection`'s stream of `slot` ended, `how`, having been sent up to `forwarded`:
    /// the slot is free, and a hold waiting for that starts now.
    pub(super) fn ended(&self, slot: &str, connection: u64, how: Ending, forwarded: Lsn) {
        self.with(slot, |s| {
            if s.active.is_some_and(|(c, _)| c == connection) {
                s.active = None;
            }
            if let Some(hold) = &mut s.hold {
                hold.let_go(Instant::now());
            }
            s.judge.reached(forwarded);
            if how == Ending::Timeout {
                s.judge.reply_overdue(connection);
            }
            s.judge.ended(connection, how);
        });
    }

    /// The slot stays "active for PID …" (55006) for `duration` after the client
    /// streaming it leaves (from now, if none does).
    pub(super) fn hold(&self, slot: &str, duration: Duration) {
        self.with(slot, |s| {
            // A walsender that is not one of this proxy's, when none streams it.
            let (pid, streaming) = s.active.map_or((0, false), |(_, pid)| (pid, true));
            s.hold = Some(Hold::new(pid, duration, streaming, Instant::now()));
        });
    }

    /// START_REPLICATION of the slot gets 55000, as for a slot PostgreSQL invalidated.
    pub(super) fn invalidate(&self, slot: &str) {
        self.with(slot, |s| s.invalidated = true);
    }

    /// START_REPLICATION of the slot gets 42704, as for a slot that does not exist (the
    /// real slot is left as it is).
    pub(super) fn forget(&self, slot: &str) {
        self.with(slot, |s| s.missing = true);
    }

    /// A checkpoint: each slot's confirmed position becomes what the upstream may hear.
    /// The slots whose persisted position moved, to where, and the connection streaming
    /// each.
    pub(super) fn checkpoint(&self) -> Vec<(String, Lsn, Option<u64>)> {
        self.lock()
            .iter_mut()
            .filter(|(_, s)| s.confirmed > s.persisted)
            .map(|(name, s)| {
                s.persisted = s.confirmed;
                (name.clone(), s.persisted, s.active.map(|(c, _)| c))
            })
            .collect()
    }

    /// A crash: what each slot's consumer confirmed so far, sent again from now on, is a
    /// re-send.
    pub(super) fn crash(&self) {
        for slot in self.lock().values_mut() {
            slot.judge.crash();
        }
    }

    /// Every slot a client streamed, by name.
    pub(super) fn infos(&self) -> Vec<SlotInfo> {
        let mut infos: Vec<SlotInfo> = self
            .lock()
            .iter()
            .filter(|(_, s)| {
                s.judge.positions().sent_lsn.0 != 0 || s.confirmed.0 != 0 || s.active.is_some()
            })
            .map(|(name, s)| SlotInfo {
                name: name.clone(),
                confirmed_flush_lsn: s.confirmed,
                heard_lsn: if self.holding {
                    s.persisted
                } else {
                    s.confirmed
                },
                sent_lsn: s.judge.positions().sent_lsn,
                transaction_end_lsn: s.judge.positions().transaction_end_lsn,
                active_connection: s.active.map(|(c, _)| c),
                resent: s.judge.resent(),
            })
            .collect();
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        infos
    }

    /// What the consumers did wrong, by slot.
    pub(super) fn findings(&self) -> Vec<(String, Finding)> {
        by_slot(&self.lock(), |s: &Slot| &s.judge, Judge::findings)
    }

    /// What happened on each slot, by slot.
    pub(super) fn facts(&self) -> Vec<(String, Fact)> {
        by_slot(&self.lock(), |s: &Slot| &s.judge, Judge::facts)
    }

    /// The highest position sent to `slot`'s clients.
    pub(super) fn sent_lsn(&self, slot: &str) -> Lsn {
        self.lock()
            .get(slot)
            .map_or(Lsn(0), |s| s.judge.positions().sent_lsn)
    }

    /// Waits until a client confirmed `lsn` (or past it) for `slot` through the proxy.
    pub(super) fn wait_for_confirmed_flush(
        &self,
        slot: &str,
        lsn: Lsn,
        timeout: Duration,
    ) -> Result<Lsn, Timeout> {
        crate::confirmed::wait(self.lock(), &self.confirmed, lsn, timeout, |slots| {
            slots.get(slot).map(|s| s.confirmed).filter(|c| c.0 != 0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_answer_start_replication_in_postgresql_words() {
        let slots = Slots::new(false);
        assert!(slots.refusal("s", 18).is_none());
        slots.started("s", 1, 4242, Lsn(0));
        slots.hold("s", Duration::from_secs(3600));
        // Held from the moment its client leaves.
        let held = slots.refusal("s", 18).unwrap();
        assert_eq!(
            (&*held.code, held.message.as_str()),
            ("55006", "replication slot \"s\" is active for PID 4242")
        );
        slots.ended("s", 1, Ending::Client, Lsn(0));
        assert!(slots.refusal("s", 18).is_some());
        slots.hold("t", Duration::ZERO);
        assert!(slots.refusal("t", 18).is_none());
        slots.invalidate("u");
        assert_eq!(&*slots.refusal("u", 15).unwrap().code, "55000");
        slots.forget("v");
        let missing = slots.refusal("v", 15).unwrap();
        assert_eq!(
            (&*missing.code, missing.message.as_str()),
            ("42704", "replication slot \"v\" does not exist")
        );
    }

    #[test]
    fn with_a_persistence_interval_the_upstream_hears_checkpoints_only() {
        let slots = Slots::new(true);
        slots.started("s", 1, 10, Lsn(0));
        slots.frame(
            "s",
            1,
            Frame {
                position: Lsn(0x200),
                opens: false,
                decided_at: None,
                end: Some(Lsn(0x200)),
            },
        );
        assert_eq!(slots.status_update("s", 1, Lsn(0x100), Lsn(0x200)), Lsn(0));
        assert_eq!(slots.checkpoint(), [("s".to_owned(), Lsn(0x100), Some(1))]);
        assert_eq!(
            slots.status_update("s", 1, Lsn(0x200), Lsn(0x200)),
            Lsn(0x100)
        );
        let info = &slots.infos()[0];
        assert_eq!(
            (info.confirmed_flush_lsn, info.heard_lsn, info.sent_lsn),
            (Lsn(0x200), Lsn(0x100), Lsn(0x200))
        );
        let free = Slots::new(false);
        assert_eq!(
            free.status_update("s", 1, Lsn(0x100), Lsn(0x100)),
            Lsn(0x100)
        );
    }

    #[test]
    fn a_slot_is_judged_across_its_connections() {
        let slots = Slots::new(false);
        // Connection 1 is cut before its first status update; connection 2 confirms all.
        slots.started("s", 1, 10, Lsn(0));
        slots.frame(
            "s",
            1,
            Frame {
                position: Lsn(110),
                opens: true,
                decided_at: None,
                end: None,
            },
        );
        slots.frame(
            "s",
            1,
            Frame {
                position: Lsn(200),
                opens: false,
                decided_at: None,
                end: Some(Lsn(200)),
            },
        );
        slots.ended("s", 1, Ending::Fault, Lsn(200));
        slots.started("s", 2, 11, Lsn(0));
        slots.frame(
            "s",
            2,
            Frame {
                position: Lsn(200),
                opens: false,
                decided_at: None,
                end: Some(Lsn(200)),
            },
        );
        slots.frame(
            "s",
            2,
            Frame {
                position: Lsn(300),
                opens: false,
                decided_at: None,
                end: Some(Lsn(300)),
            },
        );
        slots.status_update("s", 2, Lsn(300), Lsn(300));
        slots.ended("s", 2, Ending::Client, Lsn(300));
        assert_eq!(slots.findings(), []);
        assert_eq!(slots.facts().len(), 4);
        // Never confirmed, once nothing streams it.
        slots.started("u", 3, 12, Lsn(0));
        slots.frame(
            "u",
            3,
            Frame {
                position: Lsn(200),
                opens: false,
                decided_at: None,
                end: Some(Lsn(200)),
            },
        );
        assert_eq!(slots.findings(), []);
        // It answered a reply request holding that transaction, and confirmed nothing.
        slots.keepalive("u", 3, Lsn(200), true, true);
        slots.status_update("u", 3, Lsn(0), Lsn(200));
        slots.ended("u", 3, Ending::Client, Lsn(200));
        assert_eq!(
            slots.findings(),
            [("u".to_owned(), Finding::NeverConfirmed { sent: Lsn(200) })]
        );
        // A position the client was forwarded, though not yet told the judge, is no news.
        slots.started("v", 4, 13, Lsn(0));
        slots.status_update("v", 4, Lsn(150), Lsn(150));
        assert_eq!(slots.findings().len(), 1);
    }
}
