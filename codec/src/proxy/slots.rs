//! What the proxy makes of a real server's slots: states a test sets, answered to
//! START_REPLICATION in PostgreSQL's words without reaching the upstream ("active for
//! PID …" for a while after the client that held the slot left, invalidated, missing);
//! and, with a persistence interval, the flush positions the upstream hears only at the
//! proxy's checkpoints, so that a crash (every connection cut) makes the real server send
//! again what a consumer confirmed since, as PostgreSQL does after a real crash.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::wire::error::{error, slot_in_use, slot_invalidated, sqlstate, SqlError};
use crate::Lsn;

/// A hold: the slot stays "active for PID …" this long after its client leaves.
#[derive(Debug, Clone, Copy)]
struct Hold {
    duration: Duration,
    /// When it ends: set when the client holding the slot leaves (or at once if none
    /// does).
    until: Option<Instant>,
    /// The walsender's process id the error names.
    pid: u32,
}

/// One slot's state.
#[derive(Debug, Default)]
struct State {
    invalidated: bool,
    missing: bool,
    hold: Option<Hold>,
    /// Streamed now, by a walsender with this process id.
    active_pid: Option<u32>,
    /// The highest flush position a client confirmed through the proxy.
    confirmed: Lsn,
    /// What the last checkpoint let the upstream hear.
    persisted: Lsn,
}

/// Every slot's state, and whether flush positions are held back to checkpoints.
#[derive(Debug, Default)]
pub(super) struct Slots {
    states: Mutex<HashMap<String, State>>,
    /// With a persistence interval set: flush positions reach the upstream only at
    /// checkpoints.
    holding: bool,
}

impl Slots {
    /// Slots whose flush positions are held back to checkpoints (`holding`), or not.
    pub(super) fn new(holding: bool) -> Slots {
        Slots {
            states: Mutex::default(),
            holding,
        }
    }

    fn with<T>(&self, slot: &str, f: impl FnOnce(&mut State) -> T) -> T {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        // Looked up by the borrowed name first: no allocation for a slot already known.
        if let Some(known) = states.get_mut(slot) {
            return f(known);
        }
        f(states.entry(slot.to_owned()).or_default())
    }

    /// The ERROR START_REPLICATION of `slot` gets from the proxy instead of the upstream,
    /// if its state calls for one (for a server of major version `major`).
    pub(super) fn refusal(&self, slot: &str, major: u32) -> Option<SqlError> {
        self.with(slot, |state| {
            if state.missing {
                return Some(error(
                    sqlstate::UNDEFINED_OBJECT,
                    format!("replication slot \"{slot}\" does not exist"),
                ));
            }
            if state.invalidated {
                return Some(slot_invalidated(slot, major));
            }
            let hold = state.hold?;
            match hold.until {
                Some(until) if Instant::now() >= until => {
                    state.hold = None;
                    None
                }
                _ => Some(slot_in_use(slot, hold.pid as usize)),
            }
        })
    }

    /// A walsender of process `pid` streams `slot` now.
    pub(super) fn acquired(&self, slot: &str, pid: u32) {
        self.with(slot, |state| state.active_pid = Some(pid));
    }

    /// Its client left: a hold waiting for that starts now.
    pub(super) fn released(&self, slot: &str) {
        self.with(slot, |state| {
            state.active_pid = None;
            if let Some(hold) = &mut state.hold {
                hold.until.get_or_insert(Instant::now() + hold.duration);
            }
        });
    }

    /// The slot stays "active for PID …" (55006) for `duration` after the client
    /// streaming it leaves (from now, if none does).
    pub(super) fn hold(&self, slot: &str, duration: Duration) {
        self.with(slot, |state| {
            let until = match state.active_pid {
                Some(_) => None,
                None => Some(Instant::now() + duration),
            };
            state.hold = Some(Hold {
                duration,
                until,
                // A walsender that is not one of this proxy's, when none streams it.
                pid: state.active_pid.unwrap_or(0),
            });
        });
    }

    /// START_REPLICATION of the slot gets 55000, as for a slot PostgreSQL invalidated.
    pub(super) fn invalidate(&self, slot: &str) {
        self.with(slot, |state| state.invalidated = true);
    }

    /// START_REPLICATION of the slot gets 42704, as for a slot that does not exist (the
    /// real slot is left as it is).
    pub(super) fn forget(&self, slot: &str) {
        self.with(slot, |state| state.missing = true);
    }

    /// A client confirmed `flush`: the position the upstream hears now (held back to
    /// the last checkpoint's with a persistence interval).
    pub(super) fn heard(&self, slot: &str, flush: Lsn) -> Lsn {
        self.with(slot, |state| {
            state.confirmed = state.confirmed.max(flush);
            if self.holding {
                flush.min(state.persisted)
            } else {
                flush
            }
        })
    }

    /// A checkpoint: each slot's confirmed position becomes what the upstream may hear.
    /// The slots whose persisted position moved, and to where.
    pub(super) fn checkpoint(&self) -> Vec<(String, Lsn)> {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        states
            .iter_mut()
            .filter(|(_, state)| state.confirmed > state.persisted)
            .map(|(name, state)| {
                state.persisted = state.confirmed;
                (name.clone(), state.persisted)
            })
            .collect()
    }

    /// Where `slot` stands: what clients confirmed, and what the upstream was let hear.
    pub(super) fn positions(&self, slot: &str) -> (Lsn, Lsn) {
        self.with(slot, |state| {
            let heard = if self.holding {
                state.persisted
            } else {
                state.confirmed
            };
            (state.confirmed, heard)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_answer_start_replication_in_postgresql_words() {
        let slots = Slots::default();
        assert!(slots.refusal("s", 18).is_none());
        slots.acquired("s", 4242);
        slots.hold("s", Duration::from_secs(3600));
        // Held from the moment its client leaves.
        let held = slots.refusal("s", 18).unwrap();
        assert_eq!(
            (&*held.code, held.message.as_str()),
            ("55006", "replication slot \"s\" is active for PID 4242")
        );
        slots.released("s");
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
        assert_eq!(slots.heard("s", Lsn(0x100)), Lsn(0));
        assert_eq!(slots.checkpoint(), [("s".to_owned(), Lsn(0x100))]);
        assert_eq!(slots.heard("s", Lsn(0x200)), Lsn(0x100));
        assert_eq!(slots.positions("s"), (Lsn(0x200), Lsn(0x100)));
        let free = Slots::default();
        assert_eq!(free.heard("s", Lsn(0x100)), Lsn(0x100));
    }
}
