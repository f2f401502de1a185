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
//! so a consumer that leaves its slot behind while idle shows it. [`Hold`] and
//! [`IdleAsks`] decide both for the test server and the proxy, which only send the
//! keepalives and wait.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::MAX_IDLE_ASKS;
use pgoutput_codec::{Lsn, Place};

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

/// A connection's replies: how many it owes (one per keepalive asking for one, less one
/// per status update) and how many status updates it sent. A hold waits until nothing is
/// owed, so that the update ending it answers its own request and not an earlier one still
/// on its way; the idle questions go again once an update came.
#[derive(Debug, Default)]
pub(crate) struct Replies {
    owed: AtomicU64,
    updates: AtomicU64,
}

impl Replies {
    /// A keepalive asking for a reply is about to go.
    pub(crate) fn asked(&self) {
        self.owed.fetch_add(1, Ordering::SeqCst);
    }

    /// A status update came: it answers the oldest request, if any is open (a consumer
    /// may also send updates of its own).
    pub(crate) fn answered(&self) {
        let _ = self
            .owed
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        self.updates.fetch_add(1, Ordering::SeqCst);
    }

    /// Every request so far has had an answer.
    pub(crate) fn settled(&self) -> bool {
        self.owed.load(Ordering::SeqCst) == 0
    }

    /// A hold gave up waiting: the consumer does not answer every request, so the ones
    /// it left are not waited for again.
    pub(crate) fn forgive(&self) {
        self.owed.store(0, Ordering::SeqCst);
    }

    /// How many status updates came.
    pub(crate) fn updates(&self) -> u64 {
        self.updates.load(Ordering::SeqCst)
    }
}

/// The probe's questions at an idle WAL end, as both sides ask them: one each time the
/// stream catches up with a new WAL end with no transaction open (even with an older one
/// unanswered), and again after each answer while it stays there, [`MAX_IDLE_ASKS`] at
/// most while the answers leave the slot at one place: the second answer shows where a
/// consumer with nothing left to do leaves its slot, and one still applying what it was
/// sent is asked again once it moves its slot.
#[derive(Debug, Default)]
pub(crate) struct IdleAsks {
    /// The WAL end asked about, how many times since the answers last moved the slot,
    /// the status updates seen at the last, and the highest flush position they gave.
    at: Option<Lsn>,
    asks: u32,
    updates: u64,
    flush: Lsn,
    /// The stream moved on from `at`: nothing more to ask there.
    moved_on: bool,
}

impl IdleAsks {
    /// The stream caught up with the WAL at `wal_end`, idle: whether to ask.
    pub(crate) fn caught_up(&mut self, wal_end: Lsn, replies: &Replies) -> bool {
        if self.at == Some(wal_end) {
            return false;
        }
        *self = IdleAsks {
            at: Some(wal_end),
            asks: 1,
            updates: replies.updates(),
            flush: self.flush,
            moved_on: false,
        };
        true
    }

    /// Whether an answer may make another question (one that moves the slot may).
    pub(crate) fn asking(&self) -> bool {
        self.at.is_some() && !self.moved_on
    }

    /// Status updates may have come (`replies`, the last of them confirming `flush`), the
    /// stream now at `wal_end`, `idle` or not: whether to ask again.
    pub(crate) fn answered(
        &mut self,
        replies: &Replies,
        wal_end: Lsn,
        idle: bool,
        flush: Lsn,
    ) -> bool {
        let updates = replies.updates();
        if !self.asking() || updates == self.updates {
            return false;
        }
        self.updates = updates;
        if !idle || self.at != Some(wal_end) {
            self.moved_on = true;
            return false;
        }
        if flush > self.flush {
            // The slot moved: where the consumer leaves it is still to be seen.
            self.flush = flush;
            self.asks = 0;
        }
        if self.asks >= MAX_IDLE_ASKS {
            return false;
        }
        self.asks += 1;
        true
    }
}

/// One hold, as both the test server and the proxy run it: a request, then a wait until
/// the consumer owes nothing or the wait is over; twice (see the module's note). Events
/// in, the next step out: the connection only sends the keepalive and waits.
#[derive(Debug)]
pub(crate) struct Hold {
    wait: Duration,
    rounds: u8,
    /// The deadline of the round under way, once its request is out.
    until: Option<Instant>,
    answered: bool,
}

/// What a connection holding a transaction does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldStep {
    /// Send a keepalive asking for a reply.
    Ask,
    /// Send nothing until a status update comes, or this moment.
    WaitUntil(Instant),
    /// The hold is over: whether every round was answered in time.
    Done { answered: bool },
}

impl Hold {
    const ROUNDS: u8 = 2;

    pub(crate) fn new(probe: &Probe) -> Hold {
        Hold {
            wait: probe.wait_time(),
            rounds: 0,
            until: None,
            answered: true,
        }
    }

    /// The next step, with the consumer's `replies`, at `now`.
    pub(crate) fn next(&mut self, replies: &Replies, now: Instant) -> HoldStep {
        if let Some(until) = self.until {
            if replies.settled() {
                self.until = None;
            } else if now >= until {
                // It does not answer every request: what it left is not waited for again.
                replies.forgive();
                self.answered = false;
                self.until = None;
            } else {
                return HoldStep::WaitUntil(until);
            }
        }
        if self.rounds == Hold::ROUNDS {
            return HoldStep::Done {
                answered: self.answered,
            };
        }
        self.rounds += 1;
        self.until = Some(now + self.wait);
        HoldStep::Ask
    }

    /// The stream is ending (the client's CopyDone, an error to send): no more rounds,
    /// and this one unanswered.
    #[cfg(any(feature = "server", test))]
    pub(crate) fn give_up(&mut self) {
        self.rounds = Hold::ROUNDS;
        self.until = None;
        self.answered = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(transaction: u64, change: u64) -> Place {
        // Place is non-exhaustive: made as the codec's Follower would leave it.
        let mut place = Place::default();
        place.transaction = Some(transaction);
        place.change = Some(change);
        place
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
    fn a_hold_asks_twice_and_each_round_ends_when_nothing_is_owed() {
        let probe = Probe::every(1).wait(Duration::from_secs(1));
        let (replies, start) = (Replies::default(), Instant::now());
        let mut hold = Hold::new(&probe);
        assert_eq!(hold.next(&replies, start), HoldStep::Ask);
        replies.asked();
        // An update answering an earlier request (an idle one) does not end the round.
        replies.asked();
        replies.answered();
        let until = start + Duration::from_secs(1);
        assert_eq!(hold.next(&replies, start), HoldStep::WaitUntil(until));
        replies.answered();
        assert_eq!(hold.next(&replies, start), HoldStep::Ask);
        replies.asked();
        // The second round times out: unanswered, and what is owed forgiven.
        let late = start + Duration::from_secs(2);
        assert_eq!(
            hold.next(&replies, late),
            HoldStep::Done { answered: false }
        );
        assert!(replies.settled());
        let mut ended = Hold::new(&probe);
        assert_eq!(ended.next(&replies, start), HoldStep::Ask);
        ended.give_up();
        assert_eq!(
            ended.next(&replies, start),
            HoldStep::Done { answered: false }
        );
    }

    #[test]
    fn idle_questions_go_at_each_new_wal_end_and_again_after_each_answer() {
        let (replies, mut idle) = (Replies::default(), IdleAsks::default());
        let at = Lsn(0x10);
        assert!(idle.caught_up(at, &replies));
        assert!(!idle.caught_up(at, &replies), "asked there already");
        assert!(!idle.answered(&replies, at, true, Lsn(0)), "no update yet");
        for _ in 1..MAX_IDLE_ASKS {
            replies.answered();
            assert!(idle.answered(&replies, at, true, Lsn(0)));
        }
        replies.answered();
        assert!(!idle.answered(&replies, at, true, Lsn(0)), "asked enough");
        // A consumer that was still applying what it was sent moves its slot: its word
        // is still to come.
        replies.answered();
        assert!(idle.answered(&replies, at, true, Lsn(0x8)));
        for _ in 1..MAX_IDLE_ASKS {
            replies.answered();
            assert!(idle.answered(&replies, at, true, Lsn(0x8)));
        }
        replies.answered();
        assert!(!idle.answered(&replies, at, true, Lsn(0x8)), "asked enough");
        // A new WAL end is a new question; a stream that moved on is asked no more.
        assert!(idle.caught_up(Lsn(0x20), &replies));
        replies.answered();
        assert!(!idle.answered(&replies, Lsn(0x30), true, Lsn(0x9)));
        assert!(!idle.asking());
        replies.answered();
        assert!(!idle.answered(&replies, Lsn(0x20), true, Lsn(0xa)));
    }

    #[test]
    fn replies_owed_are_requests_less_answers() {
        let replies = Replies::default();
        assert!(replies.settled());
        replies.answered();
        assert!(
            replies.settled(),
            "an update of the consumer's own owes nothing back"
        );
        replies.asked();
        replies.asked();
        replies.answered();
        assert!(!replies.settled());
        replies.answered();
        assert!(replies.settled());
        replies.asked();
        replies.forgive();
        assert!(replies.settled());
    }
}
