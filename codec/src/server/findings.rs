//! What the server saw a client do wrong, as values a test can assert on: a flush
//! position confirmed for data the client was never sent, a reply request left
//! unanswered past `wal_sender_timeout`, transactions sent again after a crash (and what
//! the client confirmed afterwards), a client that never confirmed anything.
//!
//! A streaming connection keeps a [`Judge`]: it learns what was sent (transaction ends,
//! keepalive positions) and what the client said (status updates, replies), and writes
//! its findings into the client's record.

use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::Lsn;

/// One thing a client did that a correct consumer does not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "finding", rename_all = "snake_case")]
pub enum Finding {
    /// It confirmed `flush`, past the end of everything it had been sent whole (`sent`:
    /// the last transaction's end, or the WAL end a keepalive reported between
    /// transactions): it acknowledged data it never got.
    ConfirmedUnsent {
        /// The position it confirmed.
        flush: Lsn,
        /// How far it had been sent whole.
        sent: Lsn,
    },
    /// A keepalive asked for a reply and none came within `wal_sender_timeout`.
    NoTimelyReply {
        /// How long it waited (until the reply, or until the connection ended).
        #[serde(rename = "waited_ms", serialize_with = "millis")]
        waited: Duration,
    },
    /// After a crash, `count` transactions (ending from `first` to `last`) were sent
    /// again that the slot had confirmed before the crash (up to `confirmed_before`);
    /// `confirmed_after` is the highest position the client confirmed since. A consumer
    /// that applied them twice shows here next to its own state.
    Resent {
        /// How many transactions were sent again.
        count: u64,
        /// The end of the first and of the last of them.
        first: Lsn,
        last: Lsn,
        /// What the slot had confirmed before the crash.
        confirmed_before: Lsn,
        /// The highest flush position the client confirmed on this connection.
        confirmed_after: Lsn,
    },
    /// It was sent transactions (up to `sent`) and never confirmed any of them.
    NeverConfirmed {
        /// The end of the last transaction it was sent.
        sent: Lsn,
    },
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::ConfirmedUnsent { flush, sent } => write!(
                f,
                "confirmed a flush position of {flush}, but had been sent transactions up to {sent} only: it acknowledged data it never received"
            ),
            Finding::NoTimelyReply { waited } => write!(
                f,
                "did not answer a keepalive's reply request within wal_sender_timeout (waited {} ms)",
                waited.as_millis()
            ),
            Finding::Resent {
                count,
                first,
                last,
                confirmed_before,
                confirmed_after,
            } => write!(
                f,
                "was sent {count} transaction(s) again after a crash (ending {first} to {last}), all of which the slot had confirmed before it (up to {confirmed_before}); the client confirmed {confirmed_after} afterwards"
            ),
            Finding::NeverConfirmed { sent } => write!(
                f,
                "was sent transactions up to {sent} and never confirmed any of them"
            ),
        }
    }
}

/// One message a client was sent: its type (the pgoutput tag byte, or `b'k'` for a
/// keepalive) and the WAL position its header carried (a keepalive's WAL end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SentMessage {
    /// The pgoutput tag (`b'B'`, `b'I'`, …), or `b'k'` for a keepalive.
    #[serde(serialize_with = "tag_text")]
    pub tag: u8,
    /// XLogData's `dataStart`, or the keepalive's WAL end.
    pub lsn: Lsn,
}

fn tag_text<S: serde::Serializer>(tag: &u8, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&char::from(*tag))
}

/// How many sent messages a connection keeps before handing them to its record.
const SENT_AHEAD: usize = 10_000;

/// One streaming connection's referee.
#[derive(Debug)]
pub(crate) struct Judge {
    timeout: Option<Duration>,
    /// How far the client has been sent whole.
    sent: Lsn,
    /// Where the slot stood when streaming began (confirming up to it is no news).
    start: Lsn,
    /// The highest flush position confirmed on this connection.
    confirmed: Lsn,
    /// A reply request not answered yet: since when.
    asked: Option<Instant>,
    /// Transactions at or below this were confirmed before a crash.
    resend_below: Lsn,
    resent: Option<(u64, Lsn, Lsn)>,
    /// Findings not yet written into the client's record.
    pub new: Vec<Finding>,
    /// Delays of the replies to reply requests, not yet written.
    pub replies: Vec<Duration>,
    /// Messages sent, not yet written (the oldest dropped beyond [`SENT_AHEAD`]).
    pub sent_messages: Vec<SentMessage>,
}

impl Judge {
    pub(crate) fn new(timeout: Option<Duration>, start: Lsn, resend_below: Lsn) -> Judge {
        Judge {
            timeout,
            sent: start,
            start,
            confirmed: start,
            asked: None,
            resend_below,
            resent: None,
            new: Vec::new(),
            replies: Vec::new(),
            sent_messages: Vec::new(),
        }
    }

    /// A message went out.
    pub(crate) fn message_sent(&mut self, tag: u8, lsn: Lsn) {
        if self.sent_messages.len() >= SENT_AHEAD {
            self.sent_messages.drain(..SENT_AHEAD / 10);
        }
        self.sent_messages.push(SentMessage { tag, lsn });
    }

    /// A transaction's end went out at `lsn`: `true` when it was sent again after a
    /// crash (the client's record should show it at once).
    pub(crate) fn transaction_sent(&mut self, lsn: Lsn) -> bool {
        self.sent = self.sent.max(lsn);
        if lsn > self.resend_below {
            return false;
        }
        let (count, first, _) = self.resent.get_or_insert((0, lsn, lsn));
        *count += 1;
        *first = (*first).min(lsn);
        self.resent.as_mut().expect("just set").2 = lsn;
        true
    }

    /// A keepalive went out between transactions reporting `wal_end`.
    pub(crate) fn keepalive_sent(&mut self, wal_end: Lsn, reply_requested: bool) {
        self.message_sent(b'k', wal_end);
        self.sent = self.sent.max(wal_end);
        if reply_requested && self.asked.is_none() {
            self.asked = Some(Instant::now());
        }
    }

    /// The client sent a status update confirming `flush`.
    pub(crate) fn status_update(&mut self, flush: Lsn) {
        if let Some(asked) = self.asked.take() {
            let waited = asked.elapsed();
            self.replies.push(waited);
            if self.timeout.is_some_and(|t| waited > t) {
                self.new.push(Finding::NoTimelyReply { waited });
            }
        }
        if flush > self.sent && flush > self.start {
            self.new.push(Finding::ConfirmedUnsent {
                flush,
                sent: self.sent,
            });
        }
        self.confirmed = self.confirmed.max(flush);
    }

    /// The transactions sent again after a crash so far (one finding that grows while
    /// the connection streams).
    pub(crate) fn resent(&self) -> Option<Finding> {
        self.resent.map(|(count, first, last)| Finding::Resent {
            count,
            first,
            last,
            confirmed_before: self.resend_below,
            confirmed_after: self.confirmed,
        })
    }

    /// The server drops the client for `wal_sender_timeout`: a reply request still
    /// unanswered was not answered in time.
    pub(crate) fn timed_out(&mut self) {
        if let Some(asked) = self.asked.take() {
            self.new.push(Finding::NoTimelyReply {
                waited: asked.elapsed(),
            });
        }
    }

    /// Streaming ended: what only the end can tell.
    pub(crate) fn ended(&mut self) {
        if let Some(asked) = self.asked.take() {
            let waited = asked.elapsed();
            if self.timeout.is_some_and(|t| waited >= t) {
                self.new.push(Finding::NoTimelyReply { waited });
            }
        }
        if self.confirmed <= self.start && self.sent > self.start {
            self.new.push(Finding::NeverConfirmed { sent: self.sent });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_judge_finds_what_a_correct_consumer_does_not_do() {
        let mut judge = Judge::new(Some(Duration::from_millis(10)), Lsn(100), Lsn(300));
        judge.transaction_sent(Lsn(200));
        judge.status_update(Lsn(200));
        assert!(judge.new.is_empty());
        judge.status_update(Lsn(250));
        assert_eq!(
            judge.new,
            [Finding::ConfirmedUnsent {
                flush: Lsn(250),
                sent: Lsn(200)
            }]
        );
        judge.keepalive_sent(Lsn(260), true);
        std::thread::sleep(Duration::from_millis(20));
        judge.status_update(Lsn(260));
        assert!(matches!(judge.new[1], Finding::NoTimelyReply { .. }));
        judge.transaction_sent(Lsn(300));
        judge.transaction_sent(Lsn(400));
        judge.ended();
        assert_eq!(
            judge.resent().unwrap(),
            Finding::Resent {
                count: 2,
                first: Lsn(200),
                last: Lsn(300),
                confirmed_before: Lsn(300),
                confirmed_after: Lsn(260)
            }
        );
        let mut silent = Judge::new(None, Lsn(100), Lsn(0));
        silent.transaction_sent(Lsn(200));
        silent.ended();
        assert_eq!(silent.new, [Finding::NeverConfirmed { sent: Lsn(200) }]);
        assert!(silent.new[0].to_string().contains("never confirmed"));
    }
}
