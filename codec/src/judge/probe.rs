//! The probe: catching an early confirmation by design rather than by luck. A server
//! that sends faster than its consumer answers has sent a transaction whole before any
//! status update about it arrives, so a consumer that confirms a transaction before it
//! has it looks correct. Probed, a transaction is held after its first change with a
//! keepalive asking for a reply, until the consumer has answered every request made so
//! far, twice (an update that settles the count may still have left before the consumer
//! read what was held; each wait `wait_ms` at most): what it confirms then, it confirmed
//! without the rest. Counting requests rather than updates keeps an answer to an earlier
//! request (an idle one, say) from ending a hold before the consumer saw it. Each
//! time the stream catches up with the WAL, a probed connection is asked for a reply too,
//! and again once answered, until two answers in a row leave the slot at the same place,
//! so a consumer that leaves its slot behind while idle shows it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Place;

/// Which transactions are held, after how many changes, for how long at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Probe {
    /// One transaction in `every` of each connection is held, from its first (1: each).
    #[serde(default = "one")]
    pub every: u64,
    /// Held after this many of its changes.
    #[serde(default = "one")]
    pub after: u64,
    /// How long a hold waits for a status update, in milliseconds.
    #[serde(default = "default_wait_ms")]
    pub wait_ms: u64,
}

fn one() -> u64 {
    1
}

fn default_wait_ms() -> u64 {
    1_000
}

impl Default for Probe {
    fn default() -> Probe {
        Probe::every(1)
    }
}

impl Probe {
    /// One transaction in `n` held after its first change, each hold waiting up to 1 s
    /// (`n` of 0 counts as 1).
    #[must_use]
    pub fn every(n: u64) -> Probe {
        Probe {
            every: n.max(1),
            after: 1,
            wait_ms: default_wait_ms(),
        }
    }

    /// Held after `changes` changes instead of one.
    #[must_use]
    pub fn after(mut self, changes: u64) -> Probe {
        self.after = changes.max(1);
        self
    }

    /// A hold waits at most `wait` for the consumer's status update.
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Probe {
        self.wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// How long a hold waits.
    #[must_use]
    pub fn wait_time(&self) -> Duration {
        Duration::from_millis(self.wait_ms)
    }

    /// Whether the message just sent at `place` is where a transaction is held.
    pub(crate) fn holds(&self, place: &Place) -> bool {
        place.change == Some(self.after.max(1))
            && place
                .transaction
                .is_some_and(|k| (k - 1) % self.every.max(1) == 0)
    }
}

/// The probe of a running server or proxy: armed, changed and disarmed while it runs,
/// one atomic load a frame while it is off.
#[derive(Debug, Default)]
pub(crate) struct ProbeSwitch {
    armed: AtomicBool,
    probe: Mutex<Probe>,
}

impl ProbeSwitch {
    pub(crate) fn set(&self, probe: Option<Probe>) {
        if let Some(probe) = probe {
            *self.probe.lock().unwrap_or_else(|e| e.into_inner()) = probe;
        }
        self.armed.store(probe.is_some(), Ordering::SeqCst);
    }

    /// The probe, if armed.
    pub(crate) fn get(&self) -> Option<Probe> {
        if !self.armed.load(Ordering::Relaxed) {
            return None;
        }
        Some(*self.probe.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub(crate) fn armed(&self) -> bool {
        self.armed.load(Ordering::Relaxed)
    }
}

/// How many replies a connection owes: one per keepalive asking for one, less one per
/// status update. A hold waits until nothing is owed, so that the update ending it
/// answers its own request and not an earlier one still on its way.
#[derive(Debug, Default)]
pub(crate) struct Owed(AtomicU64);

impl Owed {
    /// A keepalive asking for a reply is about to go.
    pub(crate) fn asked(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    /// A status update came: it answers the oldest request, if any is open (a consumer
    /// may also send updates of its own).
    pub(crate) fn answered(&self) {
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }

    /// Every request so far has had an answer.
    pub(crate) fn settled(&self) -> bool {
        self.0.load(Ordering::SeqCst) == 0
    }

    /// A hold gave up waiting: the consumer does not answer every request, so the ones
    /// it left are not waited for again.
    pub(crate) fn forgive(&self) {
        self.0.store(0, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(transaction: u64, change: u64) -> Place {
        Place {
            transaction: Some(transaction),
            change: Some(change),
            ..Place::default()
        }
    }

    #[test]
    fn a_probe_holds_one_transaction_in_n_after_m_changes() {
        let probe = Probe::every(3).after(2);
        let held: Vec<u64> = (1..=7).filter(|k| probe.holds(&change(*k, 2))).collect();
        assert_eq!(held, [1, 4, 7]);
        assert!(!probe.holds(&change(1, 1)));
        assert!(Probe::every(1).holds(&change(5, 1)));
        let json: Probe = serde_json::from_str(r#"{"every": 2}"#).unwrap();
        assert_eq!(json, Probe::every(2));
        assert!(serde_json::from_str::<Probe>(r#"{"evry": 2}"#).is_err());
        let switch = ProbeSwitch::default();
        assert_eq!(switch.get(), None);
        switch.set(Some(Probe::every(4)));
        assert_eq!(switch.get(), Some(Probe::every(4)));
        switch.set(None);
        assert!(!switch.armed());
    }

    #[test]
    fn replies_owed_count_requests_less_answers() {
        let owed = Owed::default();
        assert!(owed.settled());
        owed.answered();
        assert!(
            owed.settled(),
            "an update of the consumer's own owes nothing back"
        );
        owed.asked();
        owed.asked();
        owed.answered();
        assert!(!owed.settled());
        owed.answered();
        assert!(owed.settled());
        owed.asked();
        owed.forgive();
        assert!(owed.settled());
    }
}
