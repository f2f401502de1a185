//! What the blocking and the async consumer share: their configuration, what the I/O side
//! hands the consumer side, and the consumer side itself, which runs the
//! [`Replication`] core over those deliveries.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::stream::{
    asks_for_reply, keepalive_wal_end, Event, Feedback, Replication, WholeTransaction,
};
use super::{ClientError, StreamOptions};
use pgoutput_codec::Lsn;

/// What to stream and how: the slot, the pgoutput options, where to start and stop,
/// feedback and reconnecting.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    pub(crate) slot: String,
    pub(crate) options: StreamOptions,
    pub(crate) start_lsn: Lsn,
    pub(crate) end_lsn: Option<Lsn>,
    pub(crate) status_interval: Duration,
    pub(crate) queue: usize,
    pub(crate) auto_confirm: bool,
    pub(crate) reconnect: Option<Duration>,
    pub(crate) notify: Option<Notify>,
    pub(crate) create_slot: bool,
    pub(crate) receive_timeout: Option<Duration>,
}

/// What a consumer tells its owner about reconnecting (to log it).
#[derive(Debug)]
pub enum Reconnecting<'e> {
    /// The connection was lost (`error`), or the server ended the stream (`None`), with
    /// the slot confirmed up to `confirmed`; the next attempt is after `delay`.
    Lost {
        /// What happened.
        error: Option<&'e ClientError>,
        /// The flush position the server last heard of.
        confirmed: Lsn,
        /// The wait before connecting again.
        delay: Duration,
    },
    /// An attempt failed in a way that passes (the server is down or starting, the slot
    /// still held); the next is after `delay`.
    Retrying {
        /// Why the attempt failed.
        error: &'e ClientError,
        /// The wait before the next.
        delay: Duration,
    },
    /// Streaming again, after `after` (the end of the last whole transaction delivered).
    Resumed {
        /// Where the new session starts.
        after: Lsn,
    },
}

/// A callback for [`Reconnecting`] notes, called on the I/O thread.
#[derive(Clone)]
pub(crate) struct Notify(pub(crate) Arc<dyn Fn(&Reconnecting<'_>) + Send + Sync>);

impl std::fmt::Debug for Notify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Notify(..)")
    }
}

impl ConsumerConfig {
    /// Stream `slot` with `options`, from where the slot stands, status updates every 10
    /// seconds (as pg_recvlogical sends them), no reconnecting, confirming only what the
    /// consumer confirms.
    #[must_use]
    pub fn new(slot: &str, options: StreamOptions) -> ConsumerConfig {
        ConsumerConfig {
            slot: slot.to_owned(),
            options,
            start_lsn: Lsn(0),
            end_lsn: None,
            status_interval: Duration::from_secs(10),
            queue: 1024,
            auto_confirm: false,
            reconnect: None,
            notify: None,
            create_slot: false,
            receive_timeout: Some(Duration::from_secs(60)),
        }
    }

    /// How long the server may send nothing before the connection is taken for dead
    /// ([`ClientError::Silent`], which passes: with [`Self::reconnect`], a new
    /// connection resumes the stream). At half of it a status update asks for a reply,
    /// which a walsender sends at once, so a live but quiet server is never taken for
    /// dead. As PostgreSQL's walreceiver with `wal_receiver_timeout`, 60 s by default;
    /// `None` waits for ever (a half-open connection, one whose peer vanished without a
    /// word, then stalls the consumer for good).
    #[must_use]
    pub fn receive_timeout(mut self, timeout: Option<Duration>) -> ConsumerConfig {
        self.receive_timeout = timeout.map(|t| t.max(Duration::from_millis(10)));
        self
    }

    /// Create the slot (pgoutput, two-phase when the options ask for two-phase) before
    /// streaming, unless it exists.
    #[must_use]
    pub fn create_slot(mut self, create: bool) -> ConsumerConfig {
        self.create_slot = create;
        self
    }

    /// Start after this position instead of where the slot stands.
    #[must_use]
    pub fn start_lsn(mut self, lsn: Lsn) -> ConsumerConfig {
        self.start_lsn = lsn;
        self
    }

    /// Stop where `pg_recvlogical --endpos` stops (see [`Replication::end_at`]).
    #[must_use]
    pub fn end_lsn(mut self, lsn: Lsn) -> ConsumerConfig {
        self.end_lsn = Some(lsn);
        self
    }

    /// How often a status update goes out when nothing else prompts one; keep it below
    /// half the server's `wal_sender_timeout` (60 s by default).
    #[must_use]
    pub fn status_interval(mut self, interval: Duration) -> ConsumerConfig {
        self.status_interval = interval.max(Duration::from_millis(10));
        self
    }

    /// How many frames may wait for the consumer before the I/O thread stops reading.
    #[must_use]
    pub fn queue(mut self, frames: usize) -> ConsumerConfig {
        self.queue = frames.max(1);
        self
    }

    /// Treat each event as processed once the next one is asked for: the slot advances
    /// to the end of every transaction the consumer has moved past. Without it, only
    /// [`Consumer::confirm`](super::Consumer::confirm) moves the slot.
    #[must_use]
    pub fn auto_confirm(mut self, on: bool) -> ConsumerConfig {
        self.auto_confirm = on;
        self
    }

    /// After a lost connection (or the server ending the stream, as a walsender does at
    /// shutdown), connect again after `delay`, as often as the failures are the kind that
    /// pass ([`ClientError::is_transient`]), and resume after the last whole transaction
    /// delivered: nothing is lost, and no whole transaction comes twice; one the consumer
    /// saw only part of comes again in full ([`Event::resumed`]).
    #[must_use]
    pub fn reconnect(mut self, delay: Duration) -> ConsumerConfig {
        self.reconnect = Some(delay);
        self
    }

    /// Calls `notify` (on the I/O thread) as reconnecting goes, to log it.
    #[must_use]
    pub fn on_reconnect(
        mut self,
        notify: impl Fn(&Reconnecting<'_>) + Send + Sync + 'static,
    ) -> ConsumerConfig {
        self.notify = Some(Notify(Arc::new(notify)));
        self
    }

    /// The START_REPLICATION command for a start after `lsn`.
    pub(crate) fn command(&self, lsn: Lsn) -> String {
        self.options.start_replication(&self.slot, lsn)
    }
}

/// Why a consumer's stream is over, when it ended as it should.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// The end position was reached.
    EndPosition,
    /// The server ended the stream (without reconnecting).
    ServerEnded,
    /// [`Consumer::close`](super::Consumer::close) or a drop.
    Closed,
}

/// What the I/O thread hands the consumer, in order.
pub(crate) enum Delivery {
    Frame(Bytes),
    /// Several frames in order: what one read brought (fewer hand-overs between threads).
    Frames(Vec<Bytes>),
    /// The connection is gone; with reconnecting on, the I/O thread waits for the
    /// position to resume after.
    Lost(ClientError),
    /// The server ended the stream.
    Ended,
    /// Reconnecting failed for good, or the stream failed in a way that does not pass.
    Failed(ClientError),
}

/// What a delivery meant to the consumer side.
pub(crate) enum Handled {
    /// An XLogData frame is ready: [`Fed::take_event`] gives its event.
    Frame,
    /// Nothing for the consumer's caller (a keepalive); go on waiting.
    Continue,
    /// The I/O side waits to resume after this position, the old connection's frames
    /// all handled.
    Resume(Lsn),
    /// The stream is over ([`Fed::finished`] says why).
    Over,
}

/// The consumer side: the protocol core fed by the I/O side's deliveries.
#[derive(Debug)]
pub(crate) struct Fed {
    pub(crate) replication: Replication,
    /// The frame the last event borrows from.
    frame: Bytes,
    /// Frames of a batch not handled yet.
    pending: std::collections::VecDeque<Bytes>,
    finished: Option<Finished>,
    auto_confirm: bool,
    reconnect: bool,
    /// Events one by one, or whole transactions: fixed by the first call for either.
    mode: Mode,
    /// XLogData frames handled so far (what the I/O side compares with what it handed
    /// over).
    frames: u64,
}

/// How a consumer hands the stream out.
#[derive(Debug)]
enum Mode {
    /// Nothing asked for yet.
    Unset,
    /// Event by event ([`Consumer::next`](super::Consumer::next)).
    Events,
    /// Whole transactions ([`Consumer::next_transaction`](super::Consumer::next_transaction)).
    Whole,
}

impl Fed {
    /// The core for `config`, or the error of options that cannot go together.
    pub(crate) fn new(config: &ConsumerConfig, can_reconnect: bool) -> Result<Fed, ClientError> {
        let mut replication = Replication::new(&config.options)?;
        if let Some(end) = config.end_lsn {
            replication = replication.end_at(end);
        }
        if config.reconnect.is_some() && !can_reconnect {
            return Err(ClientError::Config(
                "reconnecting needs the connection's ConnInfo".into(),
            ));
        }
        // Resuming after the start position confirms nothing the consumer has not seen.
        replication.resume_from(config.start_lsn);
        Ok(Fed {
            replication,
            frame: Bytes::new(),
            pending: std::collections::VecDeque::new(),
            finished: None,
            auto_confirm: config.auto_confirm,
            reconnect: config.reconnect.is_some(),
            mode: Mode::Unset,
            frames: 0,
        })
    }

    /// Events are handed out one by one from now on.
    ///
    /// # Errors
    ///
    /// [`ClientError::Config`] when whole transactions were asked for before.
    pub(crate) fn events(&mut self) -> Result<(), ClientError> {
        match self.mode {
            Mode::Unset => self.mode = Mode::Events,
            Mode::Events => {}
            Mode::Whole => {
                return Err(ClientError::Config(
                    "this consumer hands out whole transactions (next_transaction): it \
                     cannot also hand out single events"
                        .into(),
                ))
            }
        }
        Ok(())
    }

    /// Whole transactions are handed out from now on.
    ///
    /// # Errors
    ///
    /// [`ClientError::Config`] when single events were asked for before.
    pub(crate) fn whole(&mut self) -> Result<(), ClientError> {
        match self.mode {
            Mode::Unset => self.mode = Mode::Whole,
            Mode::Whole => {}
            Mode::Events => {
                return Err(ClientError::Config(
                    "this consumer hands out single events (next): it cannot also hand out \
                     whole transactions"
                        .into(),
                ))
            }
        }
        Ok(())
    }

    /// Gathers the XLogData frame [`Handled::Frame`] announced into its transaction;
    /// `true` when a transaction is ready ([`Fed::take_transaction`]).
    pub(crate) fn absorb(&mut self) -> Result<bool, ClientError> {
        self.replication.absorb(self.frame.clone())
    }

    /// The transaction [`Fed::absorb`] made ready.
    pub(crate) fn take_transaction(&mut self) -> WholeTransaction<'_> {
        self.replication.take_transaction()
    }

    /// Before waiting for the next event: the previous one is processed (auto-confirm),
    /// and the stream may be over. `false` when it is.
    pub(crate) fn before_wait(&mut self) -> bool {
        if self.auto_confirm {
            self.replication.confirm(self.replication.delivered());
        }
        self.publish();
        if self.finished.is_none() && self.replication.is_finished() {
            self.finished = Some(Finished::EndPosition);
        }
        self.finished.is_none()
    }

    /// The consumer has processed everything up to `lsn`.
    pub(crate) fn confirm(&mut self, lsn: Lsn) {
        self.replication.confirm(lsn);
        self.publish();
    }

    /// Tells the I/O side how far the consumer side is, for its answers to reply requests.
    fn publish(&self) {
        self.replication.publish_handled(self.frames);
    }

    /// The next frame of a batch, if one is waiting: handle it before the next delivery.
    pub(crate) fn take_pending(&mut self) -> Option<Delivery> {
        self.pending.pop_front().map(Delivery::Frame)
    }

    /// One delivery from the I/O side.
    pub(crate) fn handle(&mut self, delivery: Delivery) -> Result<Handled, ClientError> {
        match delivery {
            Delivery::Frames(frames) => {
                self.pending.extend(frames);
                Ok(Handled::Continue)
            }
            Delivery::Frame(frame) if frame.first() == Some(&b'w') => {
                self.frames += 1;
                self.frame = frame;
                Ok(Handled::Frame)
            }
            Delivery::Frame(frame) => {
                self.replication.handle_frame(&frame)?;
                Ok(if self.before_wait() {
                    Handled::Continue
                } else {
                    Handled::Over
                })
            }
            // Everything the old connection delivered has been handled: resume after its
            // last whole transaction.
            Delivery::Lost(_) | Delivery::Ended if self.reconnect => {
                self.replication.resume();
                Ok(Handled::Resume(self.replication.delivered()))
            }
            Delivery::Ended => {
                self.finish(Finished::ServerEnded);
                Ok(Handled::Over)
            }
            Delivery::Lost(err) | Delivery::Failed(err) => {
                self.finish(Finished::Closed);
                Err(err)
            }
        }
    }

    /// The event of the XLogData frame [`Handled::Frame`] announced.
    pub(crate) fn take_event(&mut self) -> Result<Option<Event<'_>>, ClientError> {
        self.replication.handle_frame(&self.frame)
    }

    pub(crate) fn finish(&mut self, why: Finished) {
        self.finished.get_or_insert(why);
    }

    pub(crate) fn finished(&self) -> Option<Finished> {
        self.finished
    }

    pub(crate) fn server_wal_end(&self) -> Option<Lsn> {
        self.replication.server_wal_end()
    }

    /// At the end: what was handed out counts as processed with auto-confirm.
    pub(crate) fn closing(&mut self) {
        if self.auto_confirm {
            self.replication.confirm(self.replication.delivered());
        }
        self.publish();
        self.finish(Finished::Closed);
    }
}

/// How one connection's streaming ended.
pub(crate) enum Outcome {
    Stop,
    Lost(ClientError),
    Ended,
    Failed(ClientError),
}

/// How long the server has been silent, against the receive timeout: what the I/O side
/// does about it next.
#[derive(Debug)]
pub(crate) struct Silence {
    timeout: Option<Duration>,
    heard: Instant,
    asked: bool,
}

/// What a silence calls for now.
#[derive(Debug)]
pub(crate) enum Quiet {
    /// Nothing yet.
    Fine,
    /// Half the timeout gone: a status update asking for a reply.
    Ask,
    /// The whole of it: the connection is dead.
    Dead(ClientError),
}

impl Silence {
    pub(crate) fn new(timeout: Option<Duration>, now: Instant) -> Silence {
        Silence {
            timeout,
            heard: now,
            asked: false,
        }
    }

    /// The server sent something (or the I/O side was not listening: back-pressure).
    pub(crate) fn heard(&mut self, now: Instant) {
        self.heard = now;
        self.asked = false;
    }

    /// What is due now; `Ask` once per silence.
    pub(crate) fn check(&mut self, now: Instant) -> Quiet {
        let Some(timeout) = self.timeout else {
            return Quiet::Fine;
        };
        let quiet = now.saturating_duration_since(self.heard);
        if quiet >= timeout {
            Quiet::Dead(ClientError::Silent(timeout))
        } else if !self.asked && quiet >= timeout / 2 {
            self.asked = true;
            Quiet::Ask
        } else {
            Quiet::Fine
        }
    }

    /// When [`Self::check`] next has something to say (the async driver waits on it; the
    /// blocking one looks each tick).
    #[cfg(any(feature = "tokio", test))]
    pub(crate) fn next(&self) -> Option<Instant> {
        let timeout = self.timeout?;
        Some(self.heard + if self.asked { timeout } else { timeout / 2 })
    }
}

/// How long a read waits before the thread looks at its clock and the stop flag.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// How long a stopping consumer waits for the server to answer CopyDone.
/// The most frames one batch holds.
pub(crate) const BATCH: usize = 64;

pub(crate) const FINISH_WAIT: Duration = Duration::from_secs(1);

/// How a batch ended.
pub(crate) enum AfterBatch {
    /// Full, or the buffer is empty: the stream goes on.
    More,
    /// The server ended the stream after it.
    Ended,
    /// The connection failed after it.
    Failed(ClientError),
}

/// What one read brought in: `first` and the frames after it already buffered (`next`
/// gives them without reading), up to [`BATCH`], handed over as one delivery so that the
/// consumer thread is woken once per read, not once per frame.
pub(crate) fn batch(
    first: Bytes,
    mut next: impl FnMut() -> Result<Option<super::CopyEvent>, ClientError>,
) -> (Vec<Bytes>, AfterBatch) {
    let mut frames = vec![first];
    while frames.len() < BATCH {
        match next() {
            Ok(Some(super::CopyEvent::Data(frame))) => frames.push(frame),
            Ok(Some(super::CopyEvent::End)) => return (frames, AfterBatch::Ended),
            Ok(_) => break,
            Err(err) => return (frames, AfterBatch::Failed(err)),
        }
    }
    (frames, AfterBatch::More)
}

/// What an I/O side knows of the frames it hands over, for its answers to the server:
/// how many XLogData frames it has handed over (over every connection), and the WAL end
/// of the last keepalive read after the last XLogData frame.
#[derive(Debug, Default)]
pub(crate) struct Handover {
    data_sent: AtomicU64,
    idle_end: AtomicU64,
    /// A reply request at an idle WAL end came while the consumer side was still behind:
    /// the answer moves the slot there once the consumer side stands caught up, as its
    /// own would after reading the keepalive in turn ([`Handover::owed_update`]).
    owed: AtomicBool,
}

impl Handover {
    /// A batch just read: its answer, a status update when one of its frames asks for a
    /// reply. When nothing but keepalives comes before that one, and every XLogData frame
    /// handed over before has been handled by a consumer side that stands caught up, the
    /// keepalive's WAL end is confirmed first, so the answer says the slot may move there
    /// (as the consumer side would say once it reads the keepalive).
    pub(crate) fn read(&self, feedback: &Feedback, batch: &[Bytes]) -> Option<Vec<u8>> {
        // The last frame that says where the stream stands: an XLogData frame (the
        // stream is not idle) or a keepalive (its WAL end); one store for the batch.
        let last = batch.iter().rev().find_map(|frame| match frame.first() {
            Some(b'w') => Some(0),
            _ => keepalive_wal_end(frame).map(|wal_end| wal_end.0),
        });
        if let Some(idle_end) = last {
            self.idle_end.store(idle_end, Ordering::SeqCst);
        }
        let asking = batch.iter().position(|frame| asks_for_reply(frame))?;
        let only_keepalives = batch[..asking]
            .iter()
            .all(|frame| frame.first() == Some(&b'k'));
        let moved = match (only_keepalives, keepalive_wal_end(&batch[asking])) {
            (true, Some(wal_end)) => {
                feedback.caught_up_to(self.data_sent.load(Ordering::SeqCst), wal_end)
            }
            _ => false,
        };
        // Data before the request (in this batch, or not yet handled by the consumer
        // side): the consumer side would answer after handling it, so an answer at the
        // idle end is owed until then.
        self.owed.store(!moved, Ordering::SeqCst);
        Some(feedback.status_update(false))
    }

    /// Whether an answer at the idle WAL end is owed: the I/O side then looks again
    /// ([`Handover::owed_update`]) each tick.
    pub(crate) fn owes(&self) -> bool {
        self.owed.load(Ordering::SeqCst)
    }

    /// The answer owed to a reply request that came while the consumer side was behind,
    /// once it stands caught up with everything handed over: a status update at the idle
    /// WAL end. Nothing is owed once data came after the request (its own keepalives
    /// ask again).
    pub(crate) fn owed_update(&self, feedback: &Feedback) -> Option<Vec<u8>> {
        if !self.owes() {
            return None;
        }
        let idle_end = Lsn(self.idle_end.load(Ordering::SeqCst));
        if idle_end == Lsn(0) {
            self.owed.store(false, Ordering::SeqCst);
            return None;
        }
        if !feedback.caught_up_to(self.data_sent.load(Ordering::SeqCst), idle_end) {
            return None;
        }
        self.owed.store(false, Ordering::SeqCst);
        Some(feedback.status_update(false))
    }

    /// `batch` went to the consumer side.
    pub(crate) fn handed(&self, batch: &Delivery) {
        if let Delivery::Frames(frames) = batch {
            let data = frames
                .iter()
                .filter(|frame| frame.first() == Some(&b'w'))
                .count();
            self.data_sent.fetch_add(data as u64, Ordering::SeqCst);
        }
    }

    /// The last status update, as the stream stops: the idle WAL end last reported is
    /// confirmed when the consumer side has handled everything and stands caught up.
    pub(crate) fn last_update(&self, feedback: &Feedback) -> Vec<u8> {
        let idle_end = Lsn(self.idle_end.load(Ordering::SeqCst));
        feedback.caught_up_to(self.data_sent.load(Ordering::SeqCst), idle_end);
        feedback.status_update(false)
    }
}

/// How often a status update goes out while the consumer's queue is full and nothing is
/// read (so the server's reply requests go unseen): at half the server's
/// `wal_sender_timeout`, as often as the walsender would ask.
pub(crate) fn blocked_interval(interval: Duration, server_timeout: Option<Duration>) -> Duration {
    server_timeout
        .map_or(interval, |timeout| (timeout / 2).min(interval))
        .max(Duration::from_millis(50))
}

/// `CREATE_REPLICATION_SLOT` for `slot`.
pub(crate) fn create_slot_command(slot: &str, two_phase: bool) -> String {
    let two_phase = if two_phase { " TWO_PHASE" } else { "" };
    format!(
        "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput{two_phase}",
        super::quote_identifier(slot)
    )
}

/// Whether creating a slot failed only because it exists (42710).
pub(crate) fn slot_exists(err: &ClientError) -> bool {
    matches!(err, ClientError::Server(e) if e.code == pgoutput_wire::sqlstate::DUPLICATE_OBJECT)
}

/// `SHOW wal_sender_timeout`'s answer as a duration; `None` for 0 (no timeout) or a form
/// not understood.
pub(crate) fn parse_wal_sender_timeout(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let millis = match unit.trim() {
        "ms" => number,
        "" | "s" => number * 1000,
        "min" => number * 60_000,
        "h" => number * 3_600_000,
        "d" => number * 86_400_000,
        _ => return None,
    };
    (millis > 0).then(|| Duration::from_millis(millis))
}

pub(crate) fn lost_or_failed(err: ClientError) -> Outcome {
    if err.is_transient() {
        Outcome::Lost(err)
    } else {
        Outcome::Failed(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_asks_for_a_reply_at_half_the_timeout_and_gives_up_at_all_of_it() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut silence = Silence::new(Some(Duration::from_secs(10)), t0);
        assert_eq!(silence.next(), Some(at(5000)));
        assert!(matches!(silence.check(at(4999)), Quiet::Fine));
        assert!(matches!(silence.check(at(5000)), Quiet::Ask));
        // Asked once per silence.
        assert!(matches!(silence.check(at(6000)), Quiet::Fine));
        assert_eq!(silence.next(), Some(at(10_000)));
        assert!(matches!(
            silence.check(at(10_000)),
            Quiet::Dead(ClientError::Silent(d)) if d == Duration::from_secs(10)
        ));
        // Something came: a new silence, asked again at its half.
        silence.heard(at(9000));
        assert_eq!(silence.next(), Some(at(14_000)));
        assert!(matches!(silence.check(at(14_000)), Quiet::Ask));
        // None waits for ever.
        let mut never = Silence::new(None, t0);
        assert_eq!(never.next(), None);
        assert!(matches!(never.check(at(u64::from(u32::MAX))), Quiet::Fine));
    }
    use pgoutput_codec::{encode, Ctx, PgTimestamp, PrimaryKeepalive, ProtocolVersion};

    fn keepalive(wal_end: u64, reply_requested: bool) -> Bytes {
        let keepalive = PrimaryKeepalive {
            wal_end: Lsn(wal_end),
            send_time: PgTimestamp::now(),
            reply_requested,
        };
        encode(&keepalive, Ctx::plain(ProtocolVersion::V1))
            .unwrap()
            .into()
    }

    /// A reply request read in one batch with the data before it: the answer then says
    /// where the consumer side stands, and the idle WAL end follows once it has handled
    /// and confirmed that data, as a consumer reading the frames in turn would say.
    #[test]
    fn a_reply_request_behind_unhandled_data_is_answered_at_the_idle_end_once_caught_up() {
        let feedback = Feedback::default();
        let handover = Handover::default();
        let data = Bytes::from_static(b"w (not decoded here)");
        let batch = Delivery::Frames(vec![data, keepalive(0x200, true)]);
        let Delivery::Frames(frames) = &batch else {
            unreachable!()
        };
        assert!(handover.read(&feedback, frames).is_some());
        handover.handed(&batch);
        assert!(handover.owes());
        // Handled, not yet confirmed: still owed.
        feedback.publish(1, false);
        assert_eq!(handover.owed_update(&feedback), None);
        feedback.publish(1, true);
        assert!(handover.owed_update(&feedback).is_some());
        assert_eq!(feedback.flushed(), Lsn(0x200));
        assert!(!handover.owes());
    }

    /// Data after the request: nothing is owed at the old idle end (the keepalives after
    /// that data ask again).
    #[test]
    fn data_after_a_reply_request_ends_what_is_owed() {
        let feedback = Feedback::default();
        let handover = Handover::default();
        let data = || Bytes::from_static(b"w");
        let first = Delivery::Frames(vec![data(), keepalive(0x200, true)]);
        let Delivery::Frames(frames) = &first else {
            unreachable!()
        };
        handover.read(&feedback, frames);
        handover.handed(&first);
        let second = Delivery::Frames(vec![data()]);
        let Delivery::Frames(frames) = &second else {
            unreachable!()
        };
        assert_eq!(handover.read(&feedback, frames), None);
        handover.handed(&second);
        feedback.publish(2, true);
        assert_eq!(handover.owed_update(&feedback), None);
        assert_eq!(feedback.flushed(), Lsn(0));
        assert!(!handover.owes());
    }

    #[test]
    fn wal_sender_timeouts_as_show_prints_them() {
        assert_eq!(
            parse_wal_sender_timeout("1min"),
            Some(Duration::from_secs(60))
        );
        assert_eq!(parse_wal_sender_timeout("2s"), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_wal_sender_timeout("500ms"),
            Some(Duration::from_millis(500))
        );
        assert_eq!(parse_wal_sender_timeout("0"), None);
        assert_eq!(parse_wal_sender_timeout("soon"), None);
        assert_eq!(
            blocked_interval(Duration::from_secs(10), Some(Duration::from_secs(60))),
            Duration::from_secs(10)
        );
        assert_eq!(
            blocked_interval(Duration::from_secs(10), Some(Duration::from_secs(2))),
            Duration::from_secs(1)
        );
    }
}
