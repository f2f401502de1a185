//! What the proxy saw a consumer do wrong, judged per slot across all its connections (a
//! consumer whose connection a fault cut, and that confirmed everything after it
//! reconnected, has no finding), in the test server's kinds ([`Finding`]):
//!
//! - `confirmed_unsent`: a flush position past everything the slot's clients were sent
//!   whole (the last transaction end, or a keepalive's WAL end between transactions);
//! - `no_timely_reply`: a reply request the upstream sent, unanswered until the upstream
//!   walsender dropped the connection without an error (its `wal_sender_timeout`);
//! - `never_confirmed`: a slot whose clients were sent transactions, none connected now,
//!   that never confirmed any.
//!
//! Transactions sent again after a crash are a fact, not a finding (a correct consumer
//! skips them): [`Resent`], in the slot's record.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;

use crate::server::Finding;
use crate::Lsn;

/// One slot, over every connection that streamed it.
#[derive(Debug, Default)]
struct Slot {
    /// How far its clients were sent whole.
    sent: Lsn,
    /// The highest flush position its clients confirmed.
    confirmed: Lsn,
    /// Connections streaming it now.
    active: u64,
    /// A reply request the upstream sent, unanswered: on which connection, since when.
    asked: HashMap<u64, Instant>,
    /// What the consumer had confirmed when the last crash came.
    before_crash: Option<Lsn>,
    /// Transactions sent again since: how many, the first and last end.
    resent: Option<(u64, Lsn, Lsn)>,
    findings: Vec<Finding>,
}

/// Every slot's record.
#[derive(Debug, Default)]
pub(super) struct Judge {
    slots: Mutex<HashMap<String, Slot>>,
}

impl Judge {
    fn with<T>(&self, slot: &str, f: impl FnOnce(&mut Slot) -> T) -> T {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        // Looked up by the borrowed name first: no allocation for a slot already known.
        if let Some(known) = slots.get_mut(slot) {
            return f(known);
        }
        f(slots.entry(slot.to_owned()).or_default())
    }

    /// A connection started streaming `slot`.
    pub(super) fn started(&self, slot: &str) {
        self.with(slot, |s| s.active += 1);
    }

    /// A transaction ending at `end` went to a client of `slot` whole.
    pub(super) fn transaction_sent(&self, slot: &str, end: Lsn) {
        self.with(slot, |s| {
            s.sent = s.sent.max(end);
            if s.before_crash.is_some_and(|before| end <= before) {
                let (count, first, last) = s.resent.get_or_insert((0, end, end));
                *count += 1;
                *first = (*first).min(end);
                *last = (*last).max(end);
            }
        });
    }

    /// A keepalive reported `wal_end` to a client of `slot` while no transaction was
    /// open: the client may confirm it. `reply_requested`: it asked for a reply.
    pub(super) fn keepalive(
        &self,
        slot: &str,
        connection: u64,
        wal_end: Option<Lsn>,
        reply_requested: bool,
    ) {
        self.with(slot, |s| {
            if let Some(wal_end) = wal_end {
                s.sent = s.sent.max(wal_end);
            }
            if reply_requested {
                s.asked.entry(connection).or_insert_with(Instant::now);
            }
        });
    }

    /// A client of `slot` confirmed `flush`.
    pub(super) fn status_update(&self, slot: &str, connection: u64, flush: Lsn) {
        self.with(slot, |s| {
            s.asked.remove(&connection);
            if flush > s.sent {
                s.findings.push(Finding::ConfirmedUnsent {
                    flush,
                    sent: s.sent,
                });
            }
            s.confirmed = s.confirmed.max(flush);
        });
    }

    /// A connection of `slot` ended; `timed_out`: the upstream dropped it without an
    /// error, as a walsender does at `wal_sender_timeout`.
    pub(super) fn ended(&self, slot: &str, connection: u64, timed_out: bool) {
        self.with(slot, |s| {
            s.active = s.active.saturating_sub(1);
            if let Some(asked) = s.asked.remove(&connection) {
                if timed_out {
                    s.findings.push(Finding::NoTimelyReply {
                        waited: asked.elapsed(),
                    });
                }
            }
        });
    }

    /// A crash: what each slot's consumer confirmed so far, and sent again from now on,
    /// is a re-send.
    pub(super) fn crash(&self) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        for slot in slots.values_mut() {
            slot.before_crash = Some(slot.confirmed);
            slot.resent = None;
        }
    }

    /// Every slot's findings, by slot name.
    pub(super) fn findings(&self) -> Vec<(String, Finding)> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let mut all = Vec::new();
        let mut names: Vec<&String> = slots.keys().collect();
        names.sort();
        for name in names {
            let slot = &slots[name];
            all.extend(slot.findings.iter().map(|f| (name.clone(), f.clone())));
            if slot.active == 0 && slot.sent.0 != 0 && slot.confirmed.0 == 0 {
                all.push((name.clone(), Finding::NeverConfirmed { sent: slot.sent }));
            }
        }
        all
    }

    /// What was sent again of `slot` after the last crash.
    pub(super) fn resent(&self, slot: &str) -> Option<Resent> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let slot = slots.get(slot)?;
        let (count, first, last) = slot.resent?;
        Some(Resent {
            count,
            first,
            last,
            confirmed_before: slot.before_crash?,
        })
    }
}

/// Transactions sent again after a crash that the consumer had confirmed before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Resent {
    /// How many.
    pub count: u64,
    /// The end of the first and of the last of them.
    pub first: Lsn,
    pub last: Lsn,
    /// What the consumer had confirmed when the crash came.
    pub confirmed_before: Lsn,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_judged_across_its_connections() {
        let judge = Judge::default();
        // Connection 1 is cut before its first status update; connection 2 confirms all.
        judge.started("s");
        judge.transaction_sent("s", Lsn(200));
        judge.ended("s", 1, false);
        judge.started("s");
        judge.transaction_sent("s", Lsn(200));
        judge.transaction_sent("s", Lsn(300));
        judge.status_update("s", 2, Lsn(300));
        judge.ended("s", 2, false);
        assert_eq!(judge.findings(), []);
        // A confirmation past what was sent; a reply request left until the timeout.
        judge.started("t");
        judge.transaction_sent("t", Lsn(200));
        judge.status_update("t", 3, Lsn(250));
        judge.keepalive("t", 3, None, true);
        judge.ended("t", 3, true);
        let findings = judge.findings();
        assert_eq!(
            findings[0],
            (
                "t".to_owned(),
                Finding::ConfirmedUnsent {
                    flush: Lsn(250),
                    sent: Lsn(200)
                }
            )
        );
        assert!(matches!(findings[1].1, Finding::NoTimelyReply { .. }));
        // Never confirmed, once nothing streams it.
        judge.started("u");
        judge.transaction_sent("u", Lsn(200));
        assert_eq!(judge.findings().len(), 2);
        judge.ended("u", 4, false);
        assert_eq!(
            judge.findings()[2],
            ("u".to_owned(), Finding::NeverConfirmed { sent: Lsn(200) })
        );
        // Re-sent after a crash: a fact of the slot's, not a finding.
        judge.crash();
        judge.started("s");
        judge.transaction_sent("s", Lsn(300));
        assert_eq!(
            judge.resent("s"),
            Some(Resent {
                count: 1,
                first: Lsn(300),
                last: Lsn(300),
                confirmed_before: Lsn(300)
            })
        );
        assert_eq!(judge.findings().len(), 3);
    }
}
