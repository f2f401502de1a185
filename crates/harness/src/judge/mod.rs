//! The judge, shared by the test server and the proxy: what happened on a slot
//! ([`Fact`]s: positions requested, connections ended, crashes, transactions sent
//! again) and what its consumer did wrong ([`Finding`]s), judged per slot across all
//! its connections, so a consumer that recovers correctly from every fault has none.
//!
//! Both owners tell a slot's judge the same things: a stream started, a frame or a
//! keepalive went out, a status update came, a stream ended, a crash. What a finding
//! rests on is a position the consumer had been sent (every XLogData `walEnd` and
//! keepalive WAL end: everything that commits before it has been sent whole, as
//! PostgreSQL decodes in commit order), or its answer to a reply request: never a timing.

mod fact;
mod finding;
mod probe;

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use serde::Serialize;

pub use fact::{Ending, Fact, Resent};
pub use finding::{Finding, Harm};
pub use probe::Probe;
pub(crate) use probe::{Hold, HoldStep, IdleAsks, ProbeSwitch, Replies};

use pgoutput_codec::{Lsn, Tagged};

/// How many facts and findings a slot keeps (the oldest go first), and how many
/// transaction spans it remembers for [`Finding::StuckInsideTransaction`].
const MAX_RECORDS: usize = 1_000;
const MAX_SPANS: usize = 1_024;

/// A slot's positions, as the judge saw them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Positions {
    /// The highest position the slot's clients were sent (XLogData `walEnd`, keepalive
    /// WAL end): confirming up to it is always safe.
    pub sent_lsn: Lsn,
    /// The end of the last transaction they were sent whole.
    pub transaction_end_lsn: Lsn,
    /// The highest flush position its consumer confirmed.
    pub confirmed_flush_lsn: Lsn,
    /// Transactions held by the probe, and how many of those holds a status update
    /// ended.
    pub probes: u64,
    pub probes_answered: u64,
}

/// A frame sent to a connection, as the judge hears of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Frame {
    /// XLogData `walEnd`.
    pub position: Lsn,
    /// It opens a transaction (a Begin, a first Stream Start).
    pub opens: bool,
    /// Where the record that decides its transaction starts, if it tells
    /// ([`pgoutput_codec::PgOutputMessage::decision_lsn`]).
    pub decided_at: Option<Lsn>,
    /// The end of the transaction it ends.
    pub end: Option<Lsn>,
}

impl Frame {
    /// The frame of `message` (a message, or its outline) at `position`, which `opens`
    /// a transaction or not.
    pub(crate) fn new<T: Tagged + ?Sized>(position: Lsn, opens: bool, message: &T) -> Frame {
        Frame {
            position,
            opens,
            decided_at: message.decision_lsn(),
            end: message.transaction_end_lsn(),
        }
    }

    /// Whether the judge learns anything from it beyond its position: it opens, decides
    /// or ends a transaction.
    #[cfg(feature = "proxy")]
    pub(crate) fn tells(&self) -> bool {
        self.opens || self.decided_at.is_some() || self.end.is_some()
    }
}

/// A transaction a slot's client was sent whole: its first position, where its commit
/// (or prepare) record starts, its end. A restart from a position after `decided` skips it
/// (`SnapBuildXactNeedsSkip`); from one up to `decided`, PostgreSQL sends it again.
#[derive(Debug, Clone, Copy)]
struct Span {
    first: Lsn,
    decided: Lsn,
    end: Lsn,
}

/// A position confirmed past what the slot's clients had been sent, not judged yet: it
/// loses a transaction only if one commits before it, which the frames to come tell.
#[derive(Debug, Clone, Copy)]
struct Ahead {
    connection: u64,
    flush: Lsn,
    sent: Lsn,
}

/// An idle period of one connection: everything sent, the WAL end at `wal_end`.
#[derive(Debug, Clone)]
struct Idle {
    wal_end: Lsn,
    /// The WAL end the last reply requests of this period were made at, how many were
    /// made there, and how many of them a status update has answered since.
    asked_at: Option<Lsn>,
    asks: u32,
    answered: u32,
    /// The flush position the last answer there left, and how many answers in a row
    /// left it the same.
    last_answer: Option<Lsn>,
    same_answers: u32,
    /// Where the answers of this period have left the slot, and since when: kept while
    /// the WAL end moves on (other databases write all the time) and the answers stay.
    stale: Option<(Lsn, Instant)>,
    /// What the answers at an earlier WAL end of this period showed: still the
    /// consumer's word when it leaves before answering at the new one, unless it has
    /// confirmed past it since.
    proven: Option<Finding>,
}

/// How many answers in a row at one idle WAL end must leave the slot at the same place
/// before where the consumer leaves it counts: the answer to the first request may be
/// what it had before it read the keepalive (psycopg2 answers with its old position, then
/// moves it to the keepalive's WAL end), or before it confirmed the last transaction it
/// was still working on; a position that stays is the consumer's word.
pub(crate) const IDLE_ASKS: u32 = 2;

/// How many reply requests the probe makes at one idle WAL end while the answers leave
/// the slot at one place, each once the one before is answered: enough for [`IDLE_ASKS`]
/// equal answers after a consumer's position moved twice (its last transaction
/// confirmed, then the WAL end). An answer that moves the slot starts the count again.
pub(crate) const MAX_IDLE_ASKS: u32 = 4;

/// How long an idle consumer must leave its slot at one place short of the WAL end it was
/// asked at before it is found not to advance, or stuck inside a transaction: one status
/// interval of the field's clients (10 s in pg_recvlogical, psycopg2, pgjdbc and
/// Debezium). A consumer that moves its slot on a timer of its own (Debezium's
/// `heartbeat.action.query` writes a row it then confirms) does within it; one that stops
/// sooner is a stopping consumer, not a finding.
pub(crate) const IDLE_PATIENCE: Duration = Duration::from_secs(10);

/// The wait before an idle finding (a field, so that the judge's own tests need not
/// sleep).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Patience(pub(crate) Duration);

impl Default for Patience {
    fn default() -> Patience {
        Patience(IDLE_PATIENCE)
    }
}

/// One streaming connection of the slot.
#[derive(Debug, Default)]
struct Stream {
    /// A reply request not answered yet: since when, and the end of the last transaction
    /// this connection had been sent whole when it was made.
    asked: Option<Instant>,
    asked_holding: Lsn,
    /// The end of the last transaction this connection was sent whole.
    sent_whole: Lsn,
    /// The highest flush position its status updates gave (0/0 is "unknown").
    flush: Lsn,
    /// The first position of the transaction under way, and where the record that
    /// decides it starts, once a frame told.
    open: Option<Lsn>,
    decided_at: Option<Lsn>,
    idle: Option<Idle>,
    /// What the consumer had confirmed when the stream started (re-sends are up to it).
    resend_below: Lsn,
    resent: Option<usize>,
}

/// One slot's judge.
#[derive(Debug, Default)]
pub(crate) struct Judge {
    positions: Positions,
    /// Where the slot stood when the judge first saw it (confirming up to it is no
    /// news): its consistent point, or the first stream's start.
    start: Option<Lsn>,
    /// Transactions sent whole: their first position and their end.
    spans: VecDeque<Span>,
    /// The end of the first transaction sent whole past the start: a consumer that never
    /// confirmed it confirmed none (a confirmed idle WAL end before it is no confirmation).
    first_whole: Option<Lsn>,
    /// By connection: few, looked up at each frame that opens or ends a transaction
    /// (ordered, not hashed: no SipHash at each).
    streams: BTreeMap<u64, Stream>,
    /// The highest position a ConfirmedUnsent was reported for.
    flagged: Lsn,
    /// A reply request made when its connection had been sent a transaction whole past
    /// the slot's start was answered, or went unanswered until the walsender dropped the
    /// connection for it: the consumer could have confirmed that transaction (one stopped
    /// before anyone asked is a stopping consumer, a fact).
    asked_holding: bool,
    /// A confirmation past what was sent, until a frame shows whether it skipped a
    /// transaction.
    ahead: Option<Ahead>,
    facts: VecDeque<Fact>,
    findings: VecDeque<Finding>,
    pub(crate) patience: Patience,
}

fn push<T>(list: &mut VecDeque<T>, item: T) {
    if list.len() >= MAX_RECORDS {
        list.pop_front();
    }
    list.push_back(item);
}

impl Judge {
    /// `connection` streams the slot from now on, having asked for `requested` (0/0:
    /// the slot's own position) of a slot that stood at `slot_confirmed` (`None` where
    /// that is not known, as for the proxy).
    pub(crate) fn started(&mut self, connection: u64, requested: Lsn, slot_confirmed: Option<Lsn>) {
        let start = *self
            .start
            .get_or_insert(slot_confirmed.unwrap_or(requested).max(requested));
        let confirmed = self.positions.confirmed_flush_lsn.max(start);
        self.sent_up_to(slot_confirmed.unwrap_or(Lsn(0)));
        push(
            &mut self.facts,
            Fact::Started {
                connection,
                requested,
                confirmed: self.positions.confirmed_flush_lsn,
                behind: requested.0 != 0 && requested < self.positions.confirmed_flush_lsn,
            },
        );
        self.streams.insert(
            connection,
            Stream {
                resend_below: confirmed,
                ..Stream::default()
            },
        );
    }

    /// A frame went to `connection`.
    pub(crate) fn frame_sent(&mut self, connection: u64, frame: Frame) {
        let Frame {
            position,
            opens,
            decided_at,
            end,
        } = frame;
        if let Some(decided_at) = decided_at {
            // A transaction decided before a position confirmed when it had not been sent
            // whole (it is being sent now): a restart there skips it.
            self.skipped_by_ahead(decided_at);
        }
        self.sent_up_to(position);
        let Some(stream) = self.streams.get_mut(&connection) else {
            return;
        };
        // New data: an idle period is over (what the consumer confirms next is judged
        // against the new transactions).
        stream.idle = None;
        if opens && position.0 != 0 {
            stream.open = Some(position);
        }
        if decided_at.is_some() {
            stream.decided_at = decided_at;
        }
        let Some(end) = end else {
            return;
        };
        let first = stream.open.take().unwrap_or(end);
        let decided = decided_at.or(stream.decided_at).unwrap_or(end);
        stream.decided_at = None;
        stream.sent_whole = stream.sent_whole.max(end);
        if end > self.start.unwrap_or(Lsn(0)) {
            self.first_whole = Some(self.first_whole.map_or(end, |first| first.min(end)));
        }
        self.positions.transaction_end_lsn = self.positions.transaction_end_lsn.max(end);
        if self.spans.len() >= MAX_SPANS {
            self.spans.pop_front();
        }
        self.spans.push_back(Span {
            first,
            decided,
            end,
        });
        if end > stream.resend_below || stream.resend_below.0 == 0 {
            return;
        }
        let below = stream.resend_below;
        match stream.resent {
            Some(index) => {
                if let Some(Fact::Resent(resent)) = self.facts.get_mut(index) {
                    resent.count += 1;
                    resent.first = resent.first.min(end);
                    resent.last = resent.last.max(end);
                }
            }
            None => {
                push(
                    &mut self.facts,
                    Fact::Resent(Resent {
                        connection,
                        count: 1,
                        first: end,
                        last: end,
                        confirmed_before: below,
                    }),
                );
                stream.resent = Some(self.facts.len() - 1);
            }
        }
    }

    /// The slot's clients were sent up to `position` (a frame the owner tells of in
    /// bulk).
    #[cfg(feature = "proxy")]
    pub(crate) fn reached(&mut self, position: Lsn) {
        self.sent_up_to(position);
    }

    /// The slot's clients were sent everything that commits before `position`: a
    /// confirmation up to it skips nothing.
    fn sent_up_to(&mut self, position: Lsn) {
        self.positions.sent_lsn = self.positions.sent_lsn.max(position);
        if self
            .ahead
            .is_some_and(|ahead| ahead.flush <= self.positions.sent_lsn)
        {
            self.ahead = None;
        }
    }

    /// A transaction not sent whole when a position past what was sent was confirmed,
    /// decided at `decided_at`: PostgreSQL skips it on a restart from that position if
    /// its record starts before it (`SnapBuildXactNeedsSkip`).
    fn skipped_by_ahead(&mut self, decided_at: Lsn) {
        let Some(ahead) = self.ahead else {
            return;
        };
        if decided_at < ahead.flush {
            self.ahead = None;
            self.flagged = self.flagged.max(ahead.flush);
            push(
                &mut self.findings,
                Finding::ConfirmedUnsent {
                    connection: ahead.connection,
                    flush: ahead.flush,
                    sent: ahead.sent,
                },
            );
        }
    }

    /// A keepalive went to `connection` reporting `wal_end`, with no transaction open
    /// (`idle`) or inside one.
    pub(crate) fn keepalive_sent(
        &mut self,
        connection: u64,
        wal_end: Lsn,
        reply_requested: bool,
        idle: bool,
    ) {
        self.sent_up_to(wal_end);
        // Asked at a new WAL end of the same idle period: what the answers at the last
        // one showed stands.
        let proven = self.streams.get(&connection).and_then(|stream| {
            let period = stream.idle.as_ref()?;
            let moves = period.asked_at != Some(period.wal_end.max(wal_end));
            (reply_requested && idle && moves)
                .then(|| self.idle_finding(connection, stream))
                .flatten()
        });
        let Some(stream) = self.streams.get_mut(&connection) else {
            return;
        };
        if reply_requested {
            stream.asked.get_or_insert_with(Instant::now);
            stream.asked_holding = stream.sent_whole;
        }
        if !idle {
            return;
        }
        let period = stream.idle.get_or_insert(Idle {
            wal_end,
            asked_at: None,
            asks: 0,
            answered: 0,
            last_answer: None,
            same_answers: 0,
            stale: None,
            proven: None,
        });
        period.wal_end = period.wal_end.max(wal_end);
        if reply_requested {
            if period.asked_at == Some(period.wal_end) {
                period.asks += 1;
            } else {
                period.asked_at = Some(period.wal_end);
                period.proven = proven;
                period.asks = 1;
                period.answered = 0;
                period.last_answer = None;
                period.same_answers = 0;
            }
        }
    }

    /// `connection` sent a status update; how long its reply request had waited, if one
    /// was out.
    pub(crate) fn status_update(&mut self, connection: u64, flush: Lsn) -> Option<Duration> {
        let sent = self.positions.sent_lsn;
        let start = self.start.unwrap_or(Lsn(0));
        if flush > sent && flush > start && flush > self.flagged {
            // Past what was sent: harmless unless a transaction not sent whole commits
            // before it, as the one under way may have told, or the frames to come will.
            let ahead = Ahead {
                connection,
                flush,
                sent,
            };
            if self.ahead.is_none_or(|a| a.flush < flush) {
                self.ahead = Some(ahead);
            }
            let open = self.streams.get(&connection).and_then(|s| s.decided_at);
            if let Some(decided_at) = open {
                self.skipped_by_ahead(decided_at);
            }
        }
        if flush > self.positions.confirmed_flush_lsn {
            self.positions.confirmed_flush_lsn = flush;
            // A later connection confirmed past what an idle finding said was left
            // behind: the WAL was kept a while, not for good.
            self.findings
                .retain(|finding| !finding.left_behind_up_to(flush));
        }
        let stream = self.streams.get_mut(&connection)?;
        // PostgreSQL never moves a slot's confirmed position back
        // (`LogicalConfirmReceivedLocation`): a flush before it, such as
        // pg-logical-replication's "0/0 + 1" for a Relation's 0/0, says nothing, and the
        // write position does nothing to the slot.
        stream.flush = stream.flush.max(flush);
        if let Some(period) = &mut stream.idle {
            if period.answered < period.asks {
                if period.stale.is_none_or(|(at, _)| at != stream.flush) {
                    period.stale = Some((stream.flush, Instant::now()));
                }
                if period.last_answer == Some(stream.flush) {
                    period.same_answers += 1;
                } else {
                    period.last_answer = Some(stream.flush);
                    period.same_answers = 1;
                }
            }
            period.answered = period.asks;
        }
        let asked = stream.asked.take()?;
        let holding = stream.asked_holding > start;
        self.asked_holding |= holding;
        Some(asked.elapsed())
    }

    /// The walsender dropped `connection` for `wal_sender_timeout`: a reply request
    /// still out was not answered in time.
    pub(crate) fn reply_overdue(&mut self, connection: u64) {
        let start = self.start.unwrap_or(Lsn(0));
        let Some(stream) = self.streams.get_mut(&connection) else {
            return;
        };
        if let Some(asked) = stream.asked.take() {
            self.asked_holding |= stream.asked_holding > start;
            push(
                &mut self.findings,
                Finding::NoTimelyReply {
                    connection,
                    waited: asked.elapsed(),
                },
            );
        }
    }

    /// `connection`'s stream ended, `how`. An idle period the consumer itself ended
    /// there, unconfirmed after it answered a reply request, is judged now.
    pub(crate) fn ended(&mut self, connection: u64, how: Ending) {
        let Some(stream) = self.streams.remove(&connection) else {
            return;
        };
        push(&mut self.facts, Fact::Ended { connection, how });
        if !how.by_client() {
            return;
        }
        if let Some(finding) = self.idle_finding(connection, &stream) {
            push(&mut self.findings, finding);
        }
        let start = self.start.unwrap_or(Lsn(0));
        let confirmed = self.positions.confirmed_flush_lsn.max(start);
        let transaction_end = self.positions.transaction_end_lsn;
        if confirmed < transaction_end {
            push(
                &mut self.facts,
                Fact::StoppedBehind {
                    connection,
                    confirmed,
                    transaction_end,
                },
            );
        }
    }

    /// A crash: every connection is cut (each is told [`Judge::ended`] by its owner).
    pub(crate) fn crash(&mut self) {
        push(
            &mut self.facts,
            Fact::Crash {
                confirmed: self.positions.confirmed_flush_lsn,
            },
        );
    }

    /// A probe held a transaction; `answered`: a status update ended the hold.
    pub(crate) fn probed(&mut self, answered: bool) {
        self.positions.probes += 1;
        self.positions.probes_answered += u64::from(answered);
    }

    /// What an idle period shows: [`IDLE_ASKS`] answers in a row to reply requests made
    /// at the WAL end left the slot at the same place, short of it (and, for WAL nothing
    /// published, had left it there for [`IDLE_PATIENCE`], however the WAL end moved).
    fn idle_finding(&self, connection: u64, stream: &Stream) -> Option<Finding> {
        let period = stream.idle.as_ref()?;
        self.answered_finding(connection, period).or_else(|| {
            let confirmed = self.positions.confirmed_flush_lsn;
            period
                .proven
                .clone()
                .filter(|finding| !finding.left_behind_up_to(confirmed))
        })
    }

    /// What the answers at the WAL end `period` last asked at show, once they have left
    /// the slot where it is for the judge's patience: a consumer still applying its last
    /// transaction answers with where it stood before (its client library answers a
    /// keepalive for it), and one that stops sooner is a stopping consumer, not a finding.
    fn answered_finding(&self, connection: u64, period: &Idle) -> Option<Finding> {
        let asked_at = period.asked_at?;
        let patient = period
            .stale
            .is_some_and(|(_, since)| since.elapsed() >= self.patience.0);
        if period.same_answers < IDLE_ASKS || !patient {
            return None;
        }
        let confirmed = self.positions.confirmed_flush_lsn;
        if confirmed >= asked_at {
            return None;
        }
        let inside = self
            .spans
            .iter()
            .rev()
            .find(|span| span.first < confirmed && confirmed <= span.decided);
        if let Some(&Span {
            end: transaction_end,
            ..
        }) = inside
        {
            // A position inside a transaction it had whole, not past its commit record's
            // start: PostgreSQL sends all of it again from there, which no boundary it
            // could have confirmed would do. (Past that start, up to the end, it skips the
            // transaction: pg-logical-replication's commit LSN + 1 is such a position.)
            return Some(Finding::StuckInsideTransaction {
                connection,
                confirmed,
                transaction_end,
            });
        }
        // Only WAL that nothing published, past every transaction it was sent, left
        // unconfirmed is the idle consumer's bug; short of that it has not applied what it
        // was sent yet, or stopped before (a lagging or stopping consumer: a fact).
        (asked_at > self.positions.transaction_end_lsn).then_some(Finding::NotAdvancedWhileIdle {
            connection,
            confirmed,
            wal_end: asked_at,
        })
    }

    /// Every finding so far: those recorded, the idle periods under way that already
    /// show one, and `never_confirmed` once nothing streams the slot (and its consumer had
    /// answered a reply request holding a transaction it never confirmed).
    pub(crate) fn findings(&self) -> Vec<Finding> {
        let mut all: Vec<Finding> = self.findings.iter().cloned().collect();
        let mut live: Vec<(&u64, &Stream)> = self.streams.iter().collect();
        live.sort_by_key(|(connection, _)| **connection);
        all.extend(
            live.into_iter()
                .filter_map(|(c, s)| self.idle_finding(*c, s)),
        );
        let sent = self.positions.transaction_end_lsn;
        let confirmed_none = self
            .first_whole
            .is_some_and(|first| self.positions.confirmed_flush_lsn < first);
        if self.streams.is_empty() && self.asked_holding && confirmed_none {
            all.push(Finding::NeverConfirmed { sent });
        }
        all
    }

    pub(crate) fn facts(&self) -> Vec<Fact> {
        self.facts.iter().cloned().collect()
    }

    pub(crate) fn positions(&self) -> Positions {
        self.positions
    }

    /// The last re-send recorded.
    #[cfg(any(feature = "proxy", test))]
    pub(crate) fn resent(&self) -> Option<Resent> {
        self.facts.iter().rev().find_map(|f| match f {
            Fact::Resent(r) => Some(*r),
            _ => None,
        })
    }
}

/// Every slot's judge, by name.
#[derive(Debug, Default)]
#[cfg(any(feature = "server", test))]
pub(crate) struct Judges(BTreeMap<String, Judge>);

#[cfg(any(feature = "server", test))]
impl Judges {
    /// The judge of `slot` (made when first asked for).
    pub(crate) fn slot(&mut self, slot: &str) -> &mut Judge {
        // Looked up by the borrowed name first: no allocation for a slot already known.
        if self.0.contains_key(slot) {
            return self.0.get_mut(slot).expect("present");
        }
        self.0.entry(slot.to_owned()).or_default()
    }

    pub(crate) fn get(&self, slot: &str) -> Option<&Judge> {
        self.0.get(slot)
    }

    /// A crash on every slot.
    pub(crate) fn crash(&mut self) {
        for judge in self.0.values_mut() {
            judge.crash();
        }
    }

    pub(crate) fn findings(&self) -> Vec<(String, Finding)> {
        by_slot(&self.0, |judge| judge, Judge::findings)
    }

    pub(crate) fn facts(&self) -> Vec<(String, Fact)> {
        by_slot(&self.0, |judge| judge, Judge::facts)
    }
}

/// `what` of the judge (`judge` finds it in each slot's entry) of every slot, each with
/// the slot's name, in the order of the names: findings and facts, for the server's
/// judges and the proxy's slots alike.
pub(crate) fn by_slot<S, T>(
    slots: &BTreeMap<String, S>,
    judge: impl Fn(&S) -> &Judge,
    what: impl Fn(&Judge) -> Vec<T>,
) -> Vec<(String, T)> {
    slots
        .iter()
        .flat_map(|(name, slot)| what(judge(slot)).into_iter().map(|t| (name.clone(), t)))
        .collect()
}

/// Fails with a readable account of `findings`, if there is any.
#[track_caller]
pub(crate) fn assert_none(findings: &[(String, Finding)], who: impl Fn(&str, &Finding) -> String) {
    let account: Vec<String> = findings
        .iter()
        .map(|(slot, finding)| format!("{}: {finding}", who(slot, finding)))
        .collect();
    assert!(
        account.is_empty(),
        "the consumer under test misbehaved:\n  {}",
        account.join("\n  ")
    );
}

#[cfg(test)]
mod tests;
