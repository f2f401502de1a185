//! The blocking driver of a [`Replication`]: a consumer that reads a slot in a few lines.
//!
//! An I/O thread owns the connection. It reads frames into a bounded queue, answers reply
//! requests at once and sends status updates on an interval from the positions the
//! consumer has confirmed, so feedback keeps flowing while the consumer works on an event;
//! when the queue is full it stops reading (back-pressure) but not answering. The consumer
//! thread decodes: events borrow from the frames, as the codec does.
//!
//! ```no_run
//! use pgoutput_codec::client::{ConnInfo, Consumer, ConsumerConfig, StreamOptions};
//! use pgoutput_codec::ProtocolVersion;
//!
//! let info = ConnInfo::parse(Some("host=localhost user=repl dbname=app"), |v| std::env::var(v).ok())?;
//! let options = StreamOptions::new(ProtocolVersion::V1, &["app"]);
//! let mut consumer = Consumer::connect(&info, ConsumerConfig::new("app_slot", options))?;
//! while let Some(event) = consumer.next()? {
//!     if let (Some(row), Some(table)) = (event.new_row(), event.relation()) {
//!         println!("{}: id {:?}", table.name, row.value::<Option<i64>>("id")?);
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::stream::{asks_for_reply, Event, Feedback, Replication};
use super::{ClientError, ConnInfo, Connection, CopyEvent, StreamOptions};
use crate::Lsn;

/// What to stream and how: the slot, the pgoutput options, where to start and stop,
/// feedback and reconnecting.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    slot: String,
    options: StreamOptions,
    start_lsn: Lsn,
    end_lsn: Option<Lsn>,
    status_interval: Duration,
    queue: usize,
    auto_confirm: bool,
    reconnect: Option<Duration>,
    notify: Option<Notify>,
    create_slot: bool,
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
struct Notify(Arc<dyn Fn(&Reconnecting<'_>) + Send + Sync>);

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
        }
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
    /// [`Consumer::confirm`] moves the slot.
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
    fn command(&self, lsn: Lsn) -> String {
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
    /// [`Consumer::close`] or a drop.
    Closed,
}

/// What the I/O thread hands the consumer, in order.
enum Delivery {
    Frame(Bytes),
    /// The connection is gone; with reconnecting on, the I/O thread waits for the
    /// position to resume after.
    Lost(ClientError),
    /// The server ended the stream.
    Ended,
    /// Reconnecting failed for good, or the stream failed in a way that does not pass.
    Failed(ClientError),
}

/// A replication stream read on the caller's thread: see the [module docs](self).
#[derive(Debug)]
pub struct Consumer {
    replication: Replication,
    /// The frame the last event borrows from.
    frame: Bytes,
    deliveries: Receiver<Delivery>,
    resume: Sender<Lsn>,
    stop: Arc<AtomicBool>,
    io: Option<JoinHandle<()>>,
    finished: Option<Finished>,
    auto_confirm: bool,
    reconnect: bool,
    server_wal_end: Option<Lsn>,
}

impl Consumer {
    /// Connects with `info` and starts streaming.
    ///
    /// # Errors
    ///
    /// What [`Connection::connect`] and [`Connection::start_replication`] return, and
    /// [`ClientError::Config`] for options that cannot go together.
    pub fn connect(info: &ConnInfo, config: ConsumerConfig) -> Result<Consumer, ClientError> {
        let conn = Connection::connect(info)?;
        Consumer::start(conn, Some(info.clone()), config)
    }

    /// Starts streaming on a connection made already (after `CREATE_REPLICATION_SLOT`,
    /// say); `info` is what reconnecting connects with.
    ///
    /// # Errors
    ///
    /// What [`Connection::start_replication`] returns; [`ClientError::Config`] for
    /// options that cannot go together, or reconnecting asked for without `info`.
    pub fn start(
        mut conn: Connection,
        info: Option<ConnInfo>,
        config: ConsumerConfig,
    ) -> Result<Consumer, ClientError> {
        let mut replication = Replication::new(&config.options)?;
        if let Some(end) = config.end_lsn {
            replication = replication.end_at(end);
        }
        if config.reconnect.is_some() && info.is_none() {
            return Err(ClientError::Config(
                "reconnecting needs the connection's ConnInfo".into(),
            ));
        }
        // Resuming after the start position confirms nothing the consumer has not seen.
        replication.resume_from(config.start_lsn);
        if config.create_slot {
            create_slot(&mut conn, &config.slot, config.options.two_phase)?;
        }
        let server_timeout = wal_sender_timeout(&mut conn);
        conn.start_replication(&config.command(config.start_lsn))?;
        let (deliver, deliveries) = mpsc::sync_channel(config.queue);
        let (resume, resumes) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let pump = Pump {
            deliver,
            resumes,
            stop: Arc::clone(&stop),
            feedback: replication.feedback(),
            info,
            config: config.clone(),
        };
        let io = std::thread::Builder::new()
            .name("pgoutput-consumer".into())
            .spawn(move || pump.run(conn, server_timeout))
            .map_err(ClientError::Io)?;
        Ok(Consumer {
            replication,
            frame: Bytes::new(),
            deliveries,
            resume,
            stop,
            io: Some(io),
            finished: None,
            auto_confirm: config.auto_confirm,
            reconnect: config.reconnect.is_some(),
            server_wal_end: None,
        })
    }

    /// The next event, waiting as long as it takes; `None` once the stream is over
    /// ([`Self::finished`] says why).
    ///
    /// # Errors
    ///
    /// The connection's errors (with reconnecting on, only those that do not pass), and
    /// [`ClientError::Decode`] for a message that does not decode.
    #[allow(clippy::should_implement_trait)] // events borrow from the consumer
    pub fn next(&mut self) -> Result<Option<Event<'_>>, ClientError> {
        loop {
            // `next_within` returns None also when the wait passes: wait again then.
            if self.finished.is_some() {
                return Ok(None);
            }
            if self.wait_for_delivery(Duration::from_secs(3600))? {
                return self.take_event();
            }
        }
    }

    /// The next event if one comes within `wait`; `None` when none did, or when the
    /// stream is over ([`Self::finished`] tells the two apart).
    ///
    /// # Errors
    ///
    /// As [`Self::next`].
    pub fn next_within(&mut self, wait: Duration) -> Result<Option<Event<'_>>, ClientError> {
        if self.wait_for_delivery(wait)? {
            self.take_event()
        } else {
            Ok(None)
        }
    }

    /// Handles deliveries until an XLogData frame is in `self.frame` (`true`), the wait
    /// passes or the stream is over (`false`).
    fn wait_for_delivery(&mut self, wait: Duration) -> Result<bool, ClientError> {
        if self.auto_confirm {
            self.replication.confirm(self.replication.delivered());
        }
        let deadline = Instant::now() + wait;
        loop {
            if self.finished.is_some() {
                return Ok(false);
            }
            if self.replication.is_finished() {
                self.finish(Finished::EndPosition);
                return Ok(false);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let delivery = match self.deliveries.recv_timeout(left) {
                Ok(delivery) => delivery,
                Err(RecvTimeoutError::Timeout) => return Ok(false),
                Err(RecvTimeoutError::Disconnected) => {
                    self.finish(Finished::Closed);
                    return Err(ClientError::Closed);
                }
            };
            match delivery {
                Delivery::Frame(frame) if frame.first() == Some(&b'w') => {
                    self.frame = frame;
                    return Ok(true);
                }
                Delivery::Frame(frame) => {
                    self.replication.handle_frame(&frame)?;
                    if let Some(end) = keepalive_wal_end(&frame) {
                        self.server_wal_end = Some(end);
                    }
                    if self.auto_confirm {
                        self.replication.confirm(self.replication.delivered());
                    }
                }
                // Everything the old connection delivered has been handled: resume after
                // its last whole transaction.
                Delivery::Lost(_) | Delivery::Ended if self.reconnect => {
                    self.replication.resume();
                    let _ = self.resume.send(self.replication.delivered());
                }
                Delivery::Ended => {
                    self.finish(Finished::ServerEnded);
                    return Ok(false);
                }
                Delivery::Lost(err) | Delivery::Failed(err) => {
                    self.finish(Finished::Closed);
                    return Err(err);
                }
            }
        }
    }

    /// The event of the XLogData frame in `self.frame`.
    fn take_event(&mut self) -> Result<Option<Event<'_>>, ClientError> {
        if let Some(end) = xlog_wal_end(&self.frame) {
            self.server_wal_end = Some(end);
        }
        self.replication.handle_frame(&self.frame)
    }

    /// The consumer has processed everything up to `lsn` (an event's
    /// [`Event::confirmable_lsn`]); the next status update reports it.
    pub fn confirm(&mut self, lsn: Lsn) {
        self.replication.confirm(lsn);
    }

    /// What has been confirmed.
    #[must_use]
    pub fn confirmed(&self) -> Lsn {
        self.replication.confirmed()
    }

    /// The end of the last whole transaction delivered (or the idle WAL end).
    #[must_use]
    pub fn delivered(&self) -> Lsn {
        self.replication.delivered()
    }

    /// Whether no transaction is open.
    #[must_use]
    pub fn idle(&self) -> bool {
        self.replication.idle()
    }

    /// The WAL end the server last reported (`None` before its first frame).
    #[must_use]
    pub fn server_wal_end(&self) -> Option<Lsn> {
        self.server_wal_end
    }

    /// Why the stream is over, once it is.
    #[must_use]
    pub fn finished(&self) -> Option<Finished> {
        self.finished
    }

    fn finish(&mut self, why: Finished) {
        self.finished.get_or_insert(why);
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Ends the stream: a last status update with what is confirmed, CopyDone, a short
    /// wait for the server's answer, Terminate.
    pub fn close(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if self.auto_confirm {
            self.replication.confirm(self.replication.delivered());
        }
        self.finish(Finished::Closed);
        if let Some(io) = self.io.take() {
            let _ = io.join();
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// A keepalive's WAL end.
fn keepalive_wal_end(frame: &[u8]) -> Option<Lsn> {
    (frame.first() == Some(&b'k'))
        .then(|| frame.get(1..9))
        .flatten()
        .map(|bytes| Lsn(u64::from_be_bytes(bytes.try_into().unwrap_or_default())))
}

/// An XLogData frame's `walEnd`.
fn xlog_wal_end(frame: &[u8]) -> Option<Lsn> {
    frame
        .get(9..17)
        .map(|bytes| Lsn(u64::from_be_bytes(bytes.try_into().unwrap_or_default())))
}

/// The I/O thread's side.
struct Pump {
    deliver: SyncSender<Delivery>,
    resumes: Receiver<Lsn>,
    stop: Arc<AtomicBool>,
    feedback: Arc<Feedback>,
    info: Option<ConnInfo>,
    config: ConsumerConfig,
}

/// How one connection's streaming ended.
enum Outcome {
    Stop,
    Lost(ClientError),
    Ended,
    Failed(ClientError),
}

/// How long a read waits before the thread looks at its clock and the stop flag.
const TICK: Duration = Duration::from_millis(100);

/// How long a stopping consumer waits for the server to answer CopyDone.
const FINISH_WAIT: Duration = Duration::from_secs(1);

impl Pump {
    fn run(self, mut conn: Connection, mut server_timeout: Option<Duration>) {
        loop {
            let outcome = self.stream(&mut conn, server_timeout);
            let (lost, delivery) = match outcome {
                Outcome::Stop => {
                    let _ = conn.send_copy_data(&self.feedback.status_update(false));
                    if let Ok(true) = conn.finish_copy(FINISH_WAIT) {
                        let _ = conn.close();
                    }
                    return;
                }
                Outcome::Failed(err) => {
                    let _ = self.deliver.send(Delivery::Failed(err));
                    return;
                }
                Outcome::Lost(err) => (err, None),
                Outcome::Ended => (ClientError::Closed, Some(Delivery::Ended)),
            };
            let (Some(delay), Some(info)) = (self.config.reconnect, self.info.as_ref()) else {
                let _ = self.deliver.send(delivery.unwrap_or(Delivery::Lost(lost)));
                return;
            };
            self.note(&Reconnecting::Lost {
                error: delivery.is_none().then_some(&lost),
                confirmed: self.feedback.flushed(),
                delay,
            });
            if self
                .deliver
                .send(delivery.unwrap_or(Delivery::Lost(lost)))
                .is_err()
            {
                return;
            }
            // The consumer answers once it has handled all the old connection sent.
            let Ok(resume) = self.resumes.recv() else {
                return;
            };
            match self.reconnect(info, delay, resume) {
                Some(Ok((new, timeout))) => {
                    conn = new;
                    server_timeout = timeout;
                    self.note(&Reconnecting::Resumed { after: resume });
                }
                Some(Err(err)) => {
                    let _ = self.deliver.send(Delivery::Failed(err));
                    return;
                }
                None => return,
            }
        }
    }

    fn note(&self, what: &Reconnecting<'_>) {
        if let Some(Notify(notify)) = &self.config.notify {
            notify(what);
        }
    }

    /// Connects again after `delay` (watching the stop flag), as often as the failures
    /// pass. `None` when stopped.
    fn reconnect(
        &self,
        info: &ConnInfo,
        delay: Duration,
        resume: Lsn,
    ) -> Option<Result<(Connection, Option<Duration>), ClientError>> {
        loop {
            let until = Instant::now() + delay;
            while Instant::now() < until {
                if self.stop.load(Ordering::SeqCst) {
                    return None;
                }
                std::thread::sleep(Duration::from_millis(20).min(delay));
            }
            let attempt = Connection::connect(info).and_then(|mut conn| {
                let timeout = wal_sender_timeout(&mut conn);
                conn.start_replication(&self.config.command(resume))?;
                Ok((conn, timeout))
            });
            match attempt {
                Ok(connected) => return Some(Ok(connected)),
                Err(err) if err.is_transient() => {
                    self.note(&Reconnecting::Retrying { error: &err, delay })
                }
                Err(err) => return Some(Err(err)),
            }
        }
    }

    /// One connection's copy-both loop. While the consumer's queue is full nothing is
    /// read, so the server's reply requests go unseen: status updates then go out at
    /// half the server's `wal_sender_timeout`, as often as the walsender would ask.
    fn stream(&self, conn: &mut Connection, server_timeout: Option<Duration>) -> Outcome {
        let interval = self.config.status_interval;
        let blocked_interval = server_timeout
            .map_or(interval, |timeout| (timeout / 2).min(interval))
            .max(Duration::from_millis(50));
        let mut last_status = Instant::now();
        let mut waiting: Option<Delivery> = None;
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return Outcome::Stop;
            }
            let due = if waiting.is_some() {
                blocked_interval
            } else {
                interval
            };
            if last_status.elapsed() >= due {
                if let Err(err) = conn.send_copy_data(&self.feedback.status_update(false)) {
                    return lost_or_failed(err);
                }
                last_status = Instant::now();
            }
            // Back-pressure: the consumer's queue is full, so read nothing more; the
            // status updates above keep the server content meanwhile.
            if let Some(delivery) = waiting.take() {
                match self.deliver.try_send(delivery) {
                    Ok(()) => {}
                    Err(TrySendError::Full(delivery)) => {
                        waiting = Some(delivery);
                        std::thread::sleep(Duration::from_millis(2));
                        continue;
                    }
                    Err(TrySendError::Disconnected(_)) => return Outcome::Stop,
                }
            }
            let wait = TICK.min(interval.saturating_sub(last_status.elapsed()));
            match conn.recv_copy_data(wait.max(Duration::from_millis(1))) {
                Ok(CopyEvent::Data(frame)) => {
                    if asks_for_reply(&frame) {
                        if let Err(err) = conn.send_copy_data(&self.feedback.status_update(false)) {
                            return lost_or_failed(err);
                        }
                        last_status = Instant::now();
                    }
                    waiting = Some(Delivery::Frame(frame));
                }
                Ok(CopyEvent::Idle) => {
                    // Waiting for an end position: ask where the server is.
                    if self.config.end_lsn.is_some() {
                        if let Err(err) = conn.send_copy_data(&self.feedback.status_update(true)) {
                            return lost_or_failed(err);
                        }
                        last_status = Instant::now();
                    }
                }
                Ok(CopyEvent::End) => {
                    // Hand over what is waiting before saying the stream ended.
                    if let Some(delivery) = waiting.take() {
                        if self.deliver.send(delivery).is_err() {
                            return Outcome::Stop;
                        }
                    }
                    return Outcome::Ended;
                }
                Err(err) => return lost_or_failed(err),
            }
        }
    }
}

/// `CREATE_REPLICATION_SLOT`, content when the slot exists already (42710).
fn create_slot(conn: &mut Connection, slot: &str, two_phase: bool) -> Result<(), ClientError> {
    let two_phase = if two_phase { " TWO_PHASE" } else { "" };
    let command = format!(
        "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput{two_phase}",
        super::quote_identifier(slot)
    );
    match conn.simple_query(&command) {
        Ok(_) => Ok(()),
        Err(ClientError::Server(err)) if err.code == "42710" => Ok(()),
        Err(err) => Err(err),
    }
}

/// The server's `wal_sender_timeout` (`SHOW` works on a replication connection), or
/// `None` when it cannot be told or is 0 (no timeout).
fn wal_sender_timeout(conn: &mut Connection) -> Option<Duration> {
    let rows = conn.simple_query("SHOW wal_sender_timeout").ok()?;
    let text = rows.first()?.first()?.as_deref()?.trim().to_owned();
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

fn lost_or_failed(err: ClientError) -> Outcome {
    if err.is_transient() {
        Outcome::Lost(err)
    } else {
        Outcome::Failed(err)
    }
}
