//! What a consumer did wrong, judged per slot across all its connections (a consumer
//! whose connection a fault cut, and that confirmed everything after it reconnected, has
//! no finding), in the test server's kinds ([`Finding`]):
//!
//! - `confirmed_unsent`: a flush position past everything the slot's clients were sent
//!   whole (the last transaction end, or a keepalive's WAL end between transactions);
//! - `no_timely_reply`: a reply request the upstream sent, unanswered until the upstream
//!   walsender dropped the connection without an error (its `wal_sender_timeout`);
//! - `never_confirmed`: a slot whose clients were sent transactions, none connected now,
//!   that never confirmed any.
//!
//! Transactions sent again after a crash are a fact, not a finding (a correct consumer
//! skips them): [`Resent`], in the slot's record. The facts themselves (what was sent and
//! confirmed) are the slot's, in [`super::slots`]; this module says what they mean.

use std::collections::HashMap;
use std::time::Instant;

use serde::Serialize;

use crate::server::Finding;
use crate::Lsn;

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

/// One slot's judgement so far.
#[derive(Debug, Default)]
pub(super) struct Verdicts {
    /// A reply request the upstream sent, unanswered: on which connection, since when.
    asked: HashMap<u64, Instant>,
    /// What the consumer had confirmed when the last crash came.
    before_crash: Option<Lsn>,
    /// Transactions sent again since.
    resent: Option<Resent>,
    findings: Vec<Finding>,
}

impl Verdicts {
    /// A transaction ending at `end` went out whole.
    pub(super) fn transaction_sent(&mut self, end: Lsn) {
        let Some(before) = self.before_crash.filter(|before| end <= *before) else {
            return;
        };
        let resent = self.resent.get_or_insert(Resent {
            count: 0,
            first: end,
            last: end,
            confirmed_before: before,
        });
        resent.count += 1;
        resent.first = resent.first.min(end);
        resent.last = resent.last.max(end);
    }

    /// The upstream asked `connection` for a reply.
    pub(super) fn reply_requested(&mut self, connection: u64) {
        self.asked.entry(connection).or_insert_with(Instant::now);
    }

    /// `connection` confirmed `flush`, its slot's clients having been sent `sent` whole.
    pub(super) fn status_update(&mut self, connection: u64, flush: Lsn, sent: Lsn) {
        self.asked.remove(&connection);
        if flush > sent {
            self.findings.push(Finding::ConfirmedUnsent { flush, sent });
        }
    }

    /// `connection`'s stream ended; `timed_out`: the upstream dropped it without an
    /// error, as a walsender does at `wal_sender_timeout`.
    pub(super) fn ended(&mut self, connection: u64, timed_out: bool) {
        if let Some(asked) = self.asked.remove(&connection) {
            if timed_out {
                self.findings.push(Finding::NoTimelyReply {
                    waited: asked.elapsed(),
                });
            }
        }
    }

    /// A crash, the consumer having confirmed `confirmed`: what is sent again from now on
    /// up to there is a re-send.
    pub(super) fn crash(&mut self, confirmed: Lsn) {
        self.before_crash = Some(confirmed);
        self.resent = None;
    }

    /// The findings, with `never_confirmed` for a slot nothing streams now whose clients
    /// were sent `sent` and confirmed nothing.
    pub(super) fn findings(&self, streaming: bool, sent: Lsn, confirmed: Lsn) -> Vec<Finding> {
        let mut all = self.findings.clone();
        if !streaming && sent.0 != 0 && confirmed.0 == 0 {
            all.push(Finding::NeverConfirmed { sent });
        }
        all
    }

    pub(super) fn resent(&self) -> Option<Resent> {
        self.resent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_slot_did_wrong() {
        let mut verdicts = Verdicts::default();
        verdicts.status_update(1, Lsn(200), Lsn(200));
        assert_eq!(verdicts.findings(false, Lsn(200), Lsn(200)), []);
        verdicts.status_update(1, Lsn(250), Lsn(200));
        verdicts.reply_requested(2);
        verdicts.ended(2, true);
        let findings = verdicts.findings(true, Lsn(200), Lsn(250));
        assert_eq!(
            findings[0],
            Finding::ConfirmedUnsent {
                flush: Lsn(250),
                sent: Lsn(200)
            }
        );
        assert!(matches!(findings[1], Finding::NoTimelyReply { .. }));
        // A reply that came, or a connection cut by something else, is no finding.
        verdicts.reply_requested(3);
        verdicts.status_update(3, Lsn(200), Lsn(300));
        verdicts.ended(3, true);
        verdicts.reply_requested(4);
        verdicts.ended(4, false);
        assert_eq!(verdicts.findings(true, Lsn(300), Lsn(250)).len(), 2);
        let silent = Verdicts::default();
        assert_eq!(
            silent.findings(false, Lsn(200), Lsn(0)),
            [Finding::NeverConfirmed { sent: Lsn(200) }]
        );
        assert_eq!(silent.findings(true, Lsn(200), Lsn(0)), []);
        verdicts.crash(Lsn(300));
        verdicts.transaction_sent(Lsn(250));
        verdicts.transaction_sent(Lsn(300));
        verdicts.transaction_sent(Lsn(400));
        assert_eq!(
            verdicts.resent(),
            Some(Resent {
                count: 2,
                first: Lsn(250),
                last: Lsn(300),
                confirmed_before: Lsn(300)
            })
        );
    }
}
