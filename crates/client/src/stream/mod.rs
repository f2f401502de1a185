//! A replication stream's protocol without I/O (as rustls and quinn-proto are built):
//! CopyData frames in; events, and the standby status updates to send, out.
//!
//! [`Replication`] decodes the envelope and the pgoutput session, keeps the relation
//! cache, and knows which positions are safe to confirm: the end of the last whole
//! transaction the consumer acknowledged, and, while no transaction is open and the
//! consumer has acknowledged everything it was given, the WAL end the server reports (so
//! a slot whose tables are idle does not hold WAL back). The blocking
//! [`Consumer`](super::Consumer) drives it over a connection; a driver of your own feeds
//! it frames and sends what [`Replication::status_update`] returns.
//!
//! ```
//! use pgoutput_client::{Replication, StreamOptions};
//! use pgoutput_codec::{Lsn, ProtocolVersion};
//!
//! let options = StreamOptions::new(ProtocolVersion::V1, &["app"]);
//! let mut replication = Replication::new(&options)?;
//! // A keepalive asking for a reply (as a walsender sends one), then a Begin.
//! let keepalive = b"k\0\0\0\0\x01\x6b\x37\x48\0\0\0\0\0\0\0\x02\x01";
//! assert!(replication.handle_frame(keepalive)?.is_none());
//! assert!(replication.reply_requested());
//! let begin = b"w\0\0\0\0\x01\x6b\x37\x48\0\0\0\0\x01\x6b\x37\x48\0\0\0\0\0\0\0\x01\
//!               B\0\0\0\0\x01\x6b\x37\x60\0\0\0\0\0\0\0\x01\0\0\x02\xe8";
//! // Nothing was open, so the server's WAL end may be confirmed: the reply says so.
//! assert_eq!(replication.confirmed(), Lsn(0x16B_3748));
//! let answer = replication.status_update();
//! assert_eq!((answer[0], answer.len(), replication.reply_requested()), (b'r', 34, false));
//! let event = replication.handle_frame(begin)?.expect("an event");
//! assert_eq!(event.wal_start, Lsn(0x16B_3748));
//! assert!(matches!(event.message, pgoutput_codec::PgOutputMessage::Begin(_)));
//! // Inside a transaction: only the consumer moves the position, once it has the Commit.
//! assert!(!replication.idle());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod relations;
mod row;
#[cfg(any(
    feature = "with-uuid-1",
    feature = "with-chrono-0_4",
    feature = "with-rust_decimal-1",
    feature = "with-serde_json-1"
))]
mod typed;
mod whole;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

pub use relations::{ColumnInfo, RelationInfo};
pub use row::{Column, FromColumn, Row, ValueError};
use whole::{Assembler, Placed};
pub use whole::{TransactionKind, WholeTransaction};

use super::{Bytes, ClientError, StreamOptions};
use pgoutput_codec::{
    decode, encode, Ctx, Decoder, Follower, Lsn, PgOutputMessage, PgTimestamp, ProtocolVersion,
    ServerMessage, StandbyStatusUpdate, XLogData,
};
use relations::Relations;

/// One pgoutput message of the stream, with its WAL position and its table.
#[derive(Debug)]
pub struct Event<'a> {
    /// `dataStart` of its XLogData frame (0/0 for Relation and Type).
    pub wal_start: Lsn,
    /// `walEnd` of its XLogData frame.
    pub wal_end: Lsn,
    /// The message, borrowing from the frame.
    pub message: PgOutputMessage<'a>,
    relation: Option<&'a RelationInfo>,
    /// The tables known when it was read (a Truncate's are looked up in them).
    relations: Option<&'a Relations>,
    resumed: bool,
}

impl<'a> Event<'a> {
    /// The event of `message`, with its table from `relations` (learning a Relation
    /// message's table first); no table without them.
    fn new(
        wal_start: Lsn,
        wal_end: Lsn,
        message: PgOutputMessage<'a>,
        relations: Option<&'a mut Relations>,
    ) -> Event<'a> {
        let relations: Option<&'a Relations> = relations.map(|relations| {
            if let PgOutputMessage::Relation(relation) = &message {
                relations.learn(relation);
            }
            &*relations
        });
        let relation = relations.and_then(|relations| match &message {
            PgOutputMessage::Relation(relation) => relations.get(relation.relation_oid),
            PgOutputMessage::Insert(m) => relations.get(m.relation_oid),
            PgOutputMessage::Update(m) => relations.get(m.relation_oid),
            PgOutputMessage::Delete(m) => relations.get(m.relation_oid),
            _ => None,
        });
        Event {
            wal_start,
            wal_end,
            message,
            relation,
            relations,
            resumed: false,
        }
    }

    /// The table an Insert, Update, Delete or Relation message concerns, from the session's
    /// Relation messages.
    #[must_use]
    pub fn relation(&self) -> Option<&'a RelationInfo> {
        self.relation
    }

    /// The new row of an Insert or Update.
    #[must_use]
    pub fn new_row(&self) -> Option<Row<'_>> {
        let tuple = match &self.message {
            PgOutputMessage::Insert(insert) => &insert.new_tuple,
            PgOutputMessage::Update(update) => &update.new_tuple,
            _ => return None,
        };
        Some(Row::new(self.relation?, tuple))
    }

    /// The tables a Truncate names, as far as their Relation messages came (nothing for
    /// any other message).
    pub fn truncated(&self) -> impl Iterator<Item = &'a RelationInfo> + '_ {
        let oids = match &self.message {
            PgOutputMessage::Truncate(truncate) => Some(truncate.relation_oids.iter()),
            _ => None,
        };
        let relations = self.relations;
        oids.into_iter()
            .flatten()
            .filter_map(move |oid| relations?.get(oid))
    }

    /// The old row (or its key columns) of an Update that carries one, or of a Delete.
    #[must_use]
    pub fn old_row(&self) -> Option<Row<'_>> {
        let old = match &self.message {
            PgOutputMessage::Update(update) => update.old_tuple.as_ref()?,
            PgOutputMessage::Delete(delete) => &delete.old_tuple,
            _ => return None,
        };
        Some(Row::new(self.relation?, old.tuple()))
    }

    /// The position to confirm once this event and everything before it are processed:
    /// the end of a transaction at its Commit (Stream Commit, Prepare, Commit Prepared,
    /// …); `None` inside a transaction.
    #[must_use]
    pub fn confirmable_lsn(&self) -> Option<Lsn> {
        self.message.transaction_end_lsn()
    }

    /// Whether this is the first event after the connection was lost and made again: a
    /// transaction the consumer had not seen the end of comes again in full from its
    /// Begin, so what it kept of it must be dropped.
    #[must_use]
    pub fn resumed(&self) -> bool {
        self.resumed
    }
}

/// The positions a standby status update reports, shared with a driver's I/O thread so
/// that it can answer the server while the consumer is busy.
#[derive(Debug, Default)]
pub struct Feedback {
    written: AtomicU64,
    flushed: AtomicU64,
    reply_requested: AtomicBool,
    /// The consumer asked for its position to be reported now.
    report_now: AtomicBool,
    /// What the consumer side has handled: how many XLogData frames (shifted left by one), and in
    /// bit 0 whether it then stood idle with all it was given confirmed. One atomic, so
    /// that the I/O side never reads the count of one moment with the state of another.
    handled: AtomicU64,
    /// The end position, past which nothing is confirmed (0: none).
    end: AtomicU64,
}

impl Feedback {
    /// A standby status update (a CopyData payload): written up to what the consumer was
    /// given, flushed and applied up to what it confirmed.
    #[must_use]
    pub fn status_update(&self, reply_requested: bool) -> Vec<u8> {
        let flushed = Lsn(self.flushed.load(Ordering::SeqCst));
        let update = StandbyStatusUpdate {
            write_lsn: Lsn(self.written.load(Ordering::SeqCst)).max(flushed),
            flush_lsn: flushed,
            apply_lsn: flushed,
            send_time: PgTimestamp::now(),
            reply_requested,
        };
        encode(&update, ENVELOPE).unwrap_or_default()
    }

    /// The flush position reported.
    #[must_use]
    pub fn flushed(&self) -> Lsn {
        Lsn(self.flushed.load(Ordering::SeqCst))
    }

    /// Whether the server asked for a reply since the last [`Feedback::take_reply`].
    #[must_use]
    pub fn reply_requested(&self) -> bool {
        self.reply_requested.load(Ordering::SeqCst)
    }

    /// Clears the reply request; `true` if there was one.
    pub fn take_reply(&self) -> bool {
        self.reply_requested.swap(false, Ordering::SeqCst)
    }

    /// The consumer side has handled `frames` XLogData frames, and stands `caught_up` (no
    /// transaction open, all it was given confirmed).
    pub(crate) fn publish(&self, frames: u64, caught_up: bool) {
        self.handled
            .store(frames << 1 | u64::from(caught_up), Ordering::SeqCst);
    }

    /// A keepalive's WAL end read by an I/O side that has handed over `frames` XLogData
    /// frames:
    /// when the consumer side has handled them all and stands caught up, the slot moves
    /// there now, as the consumer side would once it reads the keepalive; so the reply
    /// the server asked for says so. `true` when it moved.
    pub(crate) fn caught_up_to(&self, frames: u64, wal_end: Lsn) -> bool {
        let handled = self.handled.load(Ordering::SeqCst);
        if handled != (frames << 1 | 1) || !wal_end.is_valid() {
            return false;
        }
        let end = match self.end.load(Ordering::SeqCst) {
            0 => wal_end,
            end => wal_end.min(Lsn(end)),
        };
        Feedback::advance(&self.written, end);
        Feedback::advance(&self.flushed, end);
        true
    }

    /// Asks the I/O side to send a status update now, not at the next interval.
    pub(crate) fn ask_report(&self) {
        self.report_now.store(true, Ordering::SeqCst);
    }

    /// Clears the ask for a status update now; `true` if there was one.
    pub(crate) fn take_report(&self) -> bool {
        self.report_now.swap(false, Ordering::SeqCst)
    }

    fn advance(slot: &AtomicU64, lsn: Lsn) {
        slot.fetch_max(lsn.0, Ordering::SeqCst);
    }
}

/// The envelope's context (its layout does not depend on the session).
const ENVELOPE: Ctx = Ctx::plain(ProtocolVersion::V1);

/// Whether `frame` is a keepalive that asks for a reply at once: what an I/O thread
/// answers itself, without waiting for the consumer.
#[must_use]
pub fn asks_for_reply(frame: &[u8]) -> bool {
    // The tag first: an XLogData frame is not decoded for it.
    frame.first() == Some(&b'k')
        && matches!(
            decode::<ServerMessage<'_>>(frame, ENVELOPE),
            Ok(ServerMessage::PrimaryKeepalive(keepalive)) if keepalive.reply_requested
        )
}

/// A keepalive's WAL end (`None` for any other frame).
pub(crate) fn keepalive_wal_end(frame: &[u8]) -> Option<Lsn> {
    match decode::<ServerMessage<'_>>(frame, ENVELOPE) {
        Ok(ServerMessage::PrimaryKeepalive(keepalive)) => Some(keepalive.wal_end),
        _ => None,
    }
}

/// An XLogData frame the stream core has handled, decoded again by `decoder` against
/// `relations` (learning the table a Relation message carries): a whole transaction's
/// events as it is handed out.
fn replay<'a>(
    decoder: &mut Decoder,
    relations: &'a mut Relations,
    frame: &'a [u8],
) -> Result<Event<'a>, ClientError> {
    let xlog = match decode::<ServerMessage<'a>>(frame, ENVELOPE) {
        Ok(ServerMessage::XLogData(xlog)) => xlog,
        Ok(ServerMessage::PrimaryKeepalive(_)) => {
            return Err(ClientError::Protocol("a keepalive in a transaction".into()))
        }
        Err(source) => return Err(ClientError::Decode { lsn: None, source }),
    };
    let data: &'a [u8] = frame.get(XLogData::HEADER_LEN..).unwrap_or_default();
    let message = decoder.decode(data).map_err(|source| ClientError::Decode {
        lsn: Some(xlog.wal_start),
        source,
    })?;
    Ok(Event::new(
        xlog.wal_start,
        xlog.wal_end,
        message,
        Some(relations),
    ))
}

/// The protocol state of one replication stream: see the [module docs](self).
#[derive(Debug)]
pub struct Replication {
    options: StreamOptions,
    decoder: Decoder,
    /// The decoder as a session starts.
    fresh: Decoder,
    relations: Relations,
    /// The session's transactions and stream blocks: what is open.
    follower: Follower,
    /// The end of the last whole transaction (or the idle WAL end) handed out.
    delivered: Lsn,
    /// Where the stream started (what a resume may not go back behind).
    start: Lsn,
    confirmed: Lsn,
    end_lsn: Option<Lsn>,
    /// An idle keepalive at or past the end position came, and no data since.
    end_seen: bool,
    /// The WAL end the server last reported (keepalives and XLogData headers).
    server_wal_end: Option<Lsn>,
    finished: bool,
    resumed: bool,
    /// Whole transactions are gathered ([`Self::gather`]): their tables are learnt as
    /// they are replayed.
    whole: Option<Assembler>,
    feedback: Arc<Feedback>,
}

impl Replication {
    /// A stream with these options, from the start of a session.
    ///
    /// # Errors
    ///
    /// [`ClientError::Config`] for options PostgreSQL refuses together (parallel streaming
    /// below protocol 4, say).
    pub fn new(options: &StreamOptions) -> Result<Replication, ClientError> {
        let decoder = Decoder::new(options.proto_version, options.streaming)
            .map_err(|e| ClientError::Config(e.to_string()))?;
        Ok(Replication {
            options: options.clone(),
            decoder,
            fresh: decoder,
            relations: Relations::default(),
            follower: Follower::default(),
            delivered: Lsn(0),
            start: Lsn(0),
            confirmed: Lsn(0),
            end_lsn: None,
            end_seen: false,
            server_wal_end: None,
            finished: false,
            resumed: false,
            whole: None,
            feedback: Arc::new(Feedback::default()),
        })
    }

    /// Ends the stream where `pg_recvlogical --endpos` does: a message at `lsn` is the
    /// last one, one beyond it is not handed out, and an idle server whose WAL end has
    /// reached it ends the stream too (once two keepalives in a row say so, where
    /// pg_recvlogical believes one). Nothing past `lsn` is confirmed.
    #[must_use]
    pub fn end_at(mut self, lsn: Lsn) -> Replication {
        self.end_lsn = Some(lsn);
        self.feedback.end.store(lsn.0.max(1), Ordering::SeqCst);
        self
    }

    /// The options the stream was started with.
    #[must_use]
    pub fn options(&self) -> &StreamOptions {
        &self.options
    }

    /// The positions to report, for a driver's I/O thread.
    #[must_use]
    pub fn feedback(&self) -> Arc<Feedback> {
        Arc::clone(&self.feedback)
    }

    /// Tells the I/O side that `frames` XLogData frames have been handled, and whether
    /// the stream now stands caught up (no transaction open, all it was given
    /// confirmed), for its answers to reply requests.
    pub(crate) fn publish_handled(&self, frames: u64) {
        let caught_up = self.idle() && self.confirmed >= self.delivered();
        self.feedback.publish(frames, caught_up);
    }

    /// Has the I/O side send a status update now.
    pub(crate) fn ask_report(&self) {
        self.feedback.ask_report();
    }

    /// One CopyData payload from the server. An XLogData frame gives its event; a
    /// keepalive gives `None` (one asking for a reply makes [`Self::reply_requested`]
    /// true until the next status update). After the end position, `None` for everything.
    ///
    /// # Errors
    ///
    /// [`ClientError::Decode`] for a frame that does not decode, with its position.
    pub fn handle_frame<'a>(
        &'a mut self,
        frame: &'a [u8],
    ) -> Result<Option<Event<'a>>, ClientError> {
        if self.finished {
            return Ok(None);
        }
        let message = decode::<ServerMessage<'a>>(frame, ENVELOPE)
            .map_err(|source| ClientError::Decode { lsn: None, source })?;
        match message {
            ServerMessage::PrimaryKeepalive(keepalive) => {
                self.saw_wal_end(keepalive.wal_end);
                if keepalive.reply_requested {
                    self.feedback.reply_requested.store(true, Ordering::SeqCst);
                }
                self.keepalive(keepalive.wal_end);
                Ok(None)
            }
            ServerMessage::XLogData(xlog) => {
                self.saw_wal_end(xlog.wal_end);
                self.end_seen = false;
                if let Some(end) = self.end_lsn {
                    // Relation and Type frames carry 0/0 and belong to what follows.
                    if xlog.wal_start.is_valid() && xlog.wal_start > end {
                        self.finished = true;
                        return Ok(None);
                    }
                }
                // The payload, borrowed from the frame itself: after the 25-byte header.
                let data: &'a [u8] = frame.get(XLogData::HEADER_LEN..).unwrap_or_default();
                debug_assert_eq!(data, xlog.data.as_bytes());
                let message = self
                    .decoder
                    .decode(data)
                    .map_err(|source| ClientError::Decode {
                        lsn: Some(xlog.wal_start),
                        source,
                    })?;
                if self.resumed {
                    self.follower = Follower::default();
                }
                self.track(&message);
                if self.end_lsn == Some(xlog.wal_start) {
                    self.finished = true;
                }
                let resumed = std::mem::take(&mut self.resumed);
                // Whole transactions learn their tables when they are handed out.
                let relations = self.whole.is_none().then_some(&mut self.relations);
                let mut event = Event::new(xlog.wal_start, xlog.wal_end, message, relations);
                event.resumed = resumed;
                Ok(Some(event))
            }
        }
    }

    /// One CopyData payload from the server, gathered into whole transactions: the
    /// transaction it ends, if it ends one (see [`WholeTransaction`]); `None` for
    /// everything else (a keepalive, a message of a transaction still open, one aborted,
    /// one handed out before). Once it is used, every frame goes through it, keepalives
    /// too, and not through [`Self::handle_frame`]: tables are learnt as the
    /// transactions carrying them are replayed.
    ///
    /// # Errors
    ///
    /// As [`Self::handle_frame`].
    pub fn gather(&mut self, frame: Bytes) -> Result<Option<WholeTransaction<'_>>, ClientError> {
        if self.absorb(frame)? {
            Ok(Some(self.take_transaction()))
        } else {
            Ok(None)
        }
    }

    /// [`Self::gather`] in two steps: `true` when a transaction is ready for
    /// [`Self::take_transaction`].
    pub(crate) fn absorb(&mut self, frame: Bytes) -> Result<bool, ClientError> {
        let (start, fresh) = (self.start, self.fresh);
        // The one handed out before is done with: learn what it carries.
        self.whole
            .get_or_insert_with(|| Assembler::new(start, fresh))
            .finish(&mut self.relations);
        let placed = match self.handle_frame(&frame)? {
            Some(event) => Placed::of(&event),
            None => return Ok(false),
        };
        Ok(self
            .whole
            .as_mut()
            .is_some_and(|whole| whole.absorb(frame, placed, &mut self.relations)))
    }

    /// The transaction [`Self::absorb`] made ready.
    pub(crate) fn take_transaction(&mut self) -> WholeTransaction<'_> {
        let whole = self
            .whole
            .as_mut()
            .expect("whole transactions are gathered");
        whole.take(&mut self.relations)
    }

    /// Relation and Type frames carry 0/0: they say nothing about the server's position.
    fn saw_wal_end(&mut self, wal_end: Lsn) {
        if wal_end.is_valid() {
            self.server_wal_end = self.server_wal_end.max(Some(wal_end));
        }
    }

    /// The WAL end the server last reported (`None` before it reported one).
    #[must_use]
    pub fn server_wal_end(&self) -> Option<Lsn> {
        self.server_wal_end
    }

    /// Follows transactions and stream blocks: where the stream may be confirmed.
    fn track(&mut self, message: &PgOutputMessage<'_>) {
        self.follower.follow(message);
        if let Some(end) = message.transaction_end_lsn() {
            self.deliver(end);
        }
    }

    fn cap(&self, lsn: Lsn) -> Lsn {
        self.end_lsn.map_or(lsn, |end| lsn.min(end))
    }

    fn deliver(&mut self, lsn: Lsn) {
        self.delivered = self.delivered.max(self.cap(lsn));
        Feedback::advance(&self.feedback.written, self.delivered);
    }

    /// A keepalive's WAL end: while nothing is open and the consumer has confirmed all it
    /// was given, the slot may move there.
    fn keepalive(&mut self, wal_end: Lsn) {
        if !self.idle() {
            return;
        }
        let caught_up = self.confirmed >= self.delivered;
        self.deliver(wal_end);
        if caught_up {
            self.confirm(self.delivered);
        }
        if let Some(end) = self.end_lsn {
            // Two keepalives at or past the end with nothing between them: PostgreSQL 18
            // was seen sending one that reported the end position and then ~700 more
            // messages of transactions committed before it (the live tail check, with
            // streaming on), which pg_recvlogical's single-keepalive rule would lose.
            if wal_end >= end {
                self.finished = self.end_seen;
                self.end_seen = true;
            }
        }
    }

    /// Whether no transaction and no streamed transaction is open.
    #[must_use]
    pub fn idle(&self) -> bool {
        self.follower.idle()
    }

    /// The consumer has processed (and made durable, as far as it needs) everything up to
    /// `lsn`, typically an event's [`Event::confirmable_lsn`]. Positions only move forward.
    pub fn confirm(&mut self, lsn: Lsn) {
        self.confirmed = self.confirmed.max(self.cap(lsn));
        Feedback::advance(&self.feedback.flushed, self.confirmed);
    }

    /// What the consumer has confirmed: the flush position the server hears.
    #[must_use]
    pub fn confirmed(&self) -> Lsn {
        self.confirmed
    }

    /// The end of the last whole transaction handed out (or the start position, before
    /// any): where a new session resumes so that no transaction is lost or repeated.
    #[must_use]
    pub fn delivered(&self) -> Lsn {
        self.delivered.max(self.start)
    }

    /// The stream starts after `lsn` (START_REPLICATION's position), not at the
    /// beginning of the slot: a resume never goes back behind it.
    pub fn resume_from(&mut self, lsn: Lsn) {
        self.start = self.start.max(lsn);
    }

    /// Whether the server asked for a reply that has not been sent yet.
    #[must_use]
    pub fn reply_requested(&self) -> bool {
        self.feedback.reply_requested()
    }

    /// A standby status update to send now (a CopyData payload); it answers any reply
    /// request.
    #[must_use]
    pub fn status_update(&mut self) -> Vec<u8> {
        self.feedback.take_reply();
        self.feedback.status_update(false)
    }

    /// Whether the end position has been reached.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// A new session on a new connection: the server starts again after
    /// [`Self::delivered`], with Relation messages again, so decoding and the relation
    /// cache start afresh; the next event says [`Event::resumed`]. Until then the stream
    /// is not [idle](Self::idle) if a transaction was open.
    pub fn resume(&mut self) {
        self.decoder = self.fresh;
        self.relations.clear();
        if let Some(whole) = &mut self.whole {
            whole.resume();
        }
        // What was open stays open (not idle) until the new session's first message: the
        // consumer still holds part of a transaction that is coming again.
        self.resumed = true;
    }
}
