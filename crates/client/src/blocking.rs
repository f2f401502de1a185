//! The blocking driver of a [`Replication`](super::Replication): a consumer that reads a slot in a few lines.
//!
//! An I/O thread owns the connection. It reads frames into a bounded queue, answers reply
//! requests at once and sends status updates on an interval from the positions the
//! consumer has confirmed, so feedback keeps flowing while the consumer works on an event;
//! when the queue is full it stops reading (back-pressure) but not answering. The consumer
//! thread decodes: events borrow from the frames, as the codec does.
//!
//! ```no_run
//! use pgoutput_client::{ConnInfo, Consumer, ConsumerConfig, StreamOptions};
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

use super::consumer::{
    batch, blocked_interval, create_slot_command, lost_or_failed, parse_wal_sender_timeout,
    slot_exists, AfterBatch, ConsumerConfig, Delivery, Fed, Finished, Handled, Handover, Notify,
    Outcome, Quiet, Reconnecting, Silence, BATCH, FINISH_WAIT, TICK,
};
use super::stream::{Event, Feedback, WholeTransaction};
use super::{ClientError, ConnInfo, Connection, CopyEvent};
use pgoutput_codec::Lsn;

/// A replication stream read on the caller's thread: see the [module docs](self).
#[derive(Debug)]
pub struct Consumer {
    fed: Fed,
    deliveries: Receiver<Delivery>,
    resume: Sender<Lsn>,
    stop: Arc<AtomicBool>,
    io: Option<JoinHandle<()>>,
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
        let fed = Fed::new(&config, info.is_some())?;
        let server_timeout = prepare(&mut conn, &config)?;
        conn.start_replication(&config.command(config.start_lsn))?;
        // The queue counts frames; the channel holds batches of up to BATCH of them.
        let (deliver, deliveries) = mpsc::sync_channel(config.queue.div_ceil(BATCH));
        let (resume, resumes) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let pump = Pump {
            deliver,
            resumes,
            stop: Arc::clone(&stop),
            feedback: fed.replication.feedback(),
            info,
            config,
            handover: Handover::default(),
        };
        let io = std::thread::Builder::new()
            .name("pgoutput-consumer".into())
            .spawn(move || pump.run(conn, server_timeout))
            .map_err(ClientError::Io)?;
        Ok(Consumer {
            fed,
            deliveries,
            resume,
            stop,
            io: Some(io),
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
        self.fed.events()?;
        loop {
            if self.fed.finished().is_some() {
                return Ok(None);
            }
            if self.wait_for_frame(Duration::from_secs(3600))? {
                return self.fed.take_event();
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
        self.fed.events()?;
        if self.wait_for_frame(wait)? {
            self.fed.take_event()
        } else {
            Ok(None)
        }
    }

    /// The next whole transaction, waiting as long as it takes; `None` once the stream
    /// is over ([`Self::finished`] says why). Each transaction comes once, in the order
    /// transactions ended, after its end arrived, even across reconnects and a server
    /// that sends again what it sent before a crash (see [`WholeTransaction`]). A
    /// consumer hands out either whole transactions or single events ([`Self::next`]).
    ///
    /// Memory: the transactions being gathered are held whole (a streamed one from its
    /// first block), as PostgreSQL's apply worker holds a streamed one until its end.
    ///
    /// # Errors
    ///
    /// As [`Self::next`]; [`ClientError::Config`] after [`Self::next`] was used.
    pub fn next_transaction(&mut self) -> Result<Option<WholeTransaction<'_>>, ClientError> {
        self.transaction_by(None)
    }

    /// The next whole transaction if its end comes within `wait`; `None` when it did not,
    /// or when the stream is over ([`Self::finished`] tells the two apart).
    ///
    /// # Errors
    ///
    /// As [`Self::next_transaction`].
    pub fn next_transaction_within(
        &mut self,
        wait: Duration,
    ) -> Result<Option<WholeTransaction<'_>>, ClientError> {
        self.transaction_by(Some(Instant::now() + wait))
    }

    fn transaction_by(
        &mut self,
        deadline: Option<Instant>,
    ) -> Result<Option<WholeTransaction<'_>>, ClientError> {
        self.fed.whole()?;
        loop {
            if self.fed.finished().is_some() {
                return Ok(None);
            }
            let wait = deadline.map_or(Duration::from_secs(3600), |deadline| {
                deadline.saturating_duration_since(Instant::now())
            });
            if self.wait_for_frame(wait)? {
                if self.fed.absorb()? {
                    return Ok(Some(self.fed.take_transaction()));
                }
            } else if deadline.is_some() {
                return Ok(None);
            }
        }
    }

    /// Handles deliveries until an XLogData frame is ready (`true`), the wait passes or
    /// the stream is over (`false`).
    fn wait_for_frame(&mut self, wait: Duration) -> Result<bool, ClientError> {
        let deadline = Instant::now() + wait;
        let mut ready = self.fed.before_wait();
        while ready {
            let left = deadline.saturating_duration_since(Instant::now());
            let received = match self.fed.take_pending() {
                Some(delivery) => Ok(delivery),
                None => self.deliveries.recv_timeout(left),
            };
            let delivery = match received {
                Ok(delivery) => delivery,
                Err(RecvTimeoutError::Timeout) => return Ok(false),
                Err(RecvTimeoutError::Disconnected) => {
                    self.fed.finish(Finished::Closed);
                    return Err(ClientError::Closed);
                }
            };
            match self.fed.handle(delivery) {
                Ok(Handled::Frame) => return Ok(true),
                Ok(Handled::Continue) => {}
                Ok(Handled::Resume(at)) => {
                    let _ = self.resume.send(at);
                }
                Ok(Handled::Over) => ready = false,
                Err(err) => {
                    self.stop.store(true, Ordering::SeqCst);
                    return Err(err);
                }
            }
        }
        self.stop.store(true, Ordering::SeqCst);
        Ok(false)
    }

    /// The consumer has processed everything up to `lsn` (an event's
    /// [`Event::confirmable_lsn`]); the next status update reports it.
    pub fn confirm(&mut self, lsn: Lsn) {
        self.fed.confirm(lsn);
    }

    /// Confirms `lsn` and has the I/O thread report it now, as pg_recvlogical reports a
    /// position as soon as it has flushed, rather than at the next status interval: for a
    /// consumer that confirms after a durable write. The update goes out at the I/O
    /// thread's next turn (at once while frames flow, within 100 ms when the server is
    /// quiet).
    pub fn confirm_now(&mut self, lsn: Lsn) {
        self.fed.confirm(lsn);
        self.fed.replication.ask_report();
    }

    /// What has been confirmed.
    #[must_use]
    pub fn confirmed(&self) -> Lsn {
        self.fed.replication.confirmed()
    }

    /// The end of the last whole transaction delivered (or the idle WAL end).
    #[must_use]
    pub fn delivered(&self) -> Lsn {
        self.fed.replication.delivered()
    }

    /// Whether no transaction is open.
    #[must_use]
    pub fn idle(&self) -> bool {
        self.fed.replication.idle()
    }

    /// The WAL end the server last reported (`None` before its first frame).
    #[must_use]
    pub fn server_wal_end(&self) -> Option<Lsn> {
        self.fed.server_wal_end()
    }

    /// Why the stream is over, once it is.
    #[must_use]
    pub fn finished(&self) -> Option<Finished> {
        self.fed.finished()
    }

    /// Ends the stream: a last status update with what is confirmed, CopyDone, a short
    /// wait for the server's answer, Terminate.
    pub fn close(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        self.fed.closing();
        self.stop.store(true, Ordering::SeqCst);
        // The I/O thread may wait for room in the queue or for a resume position: with
        // the other ends gone, neither wait holds it.
        drop(std::mem::replace(
            &mut self.deliveries,
            mpsc::sync_channel(0).1,
        ));
        drop(std::mem::replace(&mut self.resume, mpsc::channel().0));
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

/// Before START_REPLICATION: the slot if asked for, and the server's
/// `wal_sender_timeout`.
fn prepare(
    conn: &mut Connection,
    config: &ConsumerConfig,
) -> Result<Option<Duration>, ClientError> {
    if config.create_slot {
        match conn.simple_query(&create_slot_command(&config.slot, config.options.two_phase)) {
            Err(err) if !slot_exists(&err) => return Err(err),
            _ => {}
        }
    }
    Ok(conn
        .simple_query("SHOW wal_sender_timeout")
        .ok()
        .and_then(|rows| rows.first()?.first()?.clone())
        .and_then(|text| parse_wal_sender_timeout(&text)))
}

/// The I/O thread's side.
struct Pump {
    deliver: SyncSender<Delivery>,
    resumes: Receiver<Lsn>,
    stop: Arc<AtomicBool>,
    feedback: Arc<Feedback>,
    info: Option<ConnInfo>,
    config: ConsumerConfig,
    /// What was handed over to the consumer side, for the answers to the server.
    handover: Handover,
}

impl Pump {
    fn run(self, mut conn: Connection, mut server_timeout: Option<Duration>) {
        loop {
            let outcome = self.stream(&mut conn, server_timeout);
            let (lost, delivery) = match outcome {
                Outcome::Stop => {
                    let _ = conn.send_copy_data(&self.handover.last_update(&self.feedback));
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
            // The lost connection is closed first: a walsender still serving it (one
            // gone silent) lets go of the slot once its socket closes.
            drop(conn);
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
                let timeout = prepare(&mut conn, &self.config)?;
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
        let blocked_interval = blocked_interval(interval, server_timeout);
        let mut last_status = Instant::now();
        let mut waiting: Option<Delivery> = None;
        let mut silence = Silence::new(self.config.receive_timeout, Instant::now());
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return Outcome::Stop;
            }
            // Not reading (back-pressure) is not the server's silence.
            let now = Instant::now();
            if waiting.is_some() {
                silence.heard(now);
            }
            match silence.check(now) {
                Quiet::Fine => {}
                Quiet::Ask => {
                    if let Err(err) = conn.send_copy_data(&self.feedback.status_update(true)) {
                        return lost_or_failed(err);
                    }
                    last_status = Instant::now();
                }
                Quiet::Dead(err) => return Outcome::Lost(err),
            }
            let due = if waiting.is_some() {
                blocked_interval
            } else {
                interval
            };
            if self.feedback.take_report() || last_status.elapsed() >= due {
                if let Err(err) = conn.send_copy_data(&self.feedback.status_update(false)) {
                    return lost_or_failed(err);
                }
                last_status = Instant::now();
            }
            if let Some(update) = self.handover.owed_update(&self.feedback) {
                if let Err(err) = conn.send_copy_data(&update) {
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
                        std::thread::sleep(Duration::from_micros(100));
                        continue;
                    }
                    Err(TrySendError::Disconnected(_)) => return Outcome::Stop,
                }
            }
            let wait = TICK.min(interval.saturating_sub(last_status.elapsed()));
            match conn.recv_copy_data(wait.max(Duration::from_millis(1))) {
                Ok(CopyEvent::Data(frame)) => {
                    silence.heard(Instant::now());
                    let (frames, after) = batch(frame, || conn.buffered_copy_data());
                    if let Some(reply) = self.handover.read(&self.feedback, &frames) {
                        if let Err(err) = conn.send_copy_data(&reply) {
                            return lost_or_failed(err);
                        }
                        last_status = Instant::now();
                    }
                    let delivery = Delivery::Frames(frames);
                    // Counted as handed over now: never fewer than the consumer side has.
                    self.handover.handed(&delivery);
                    if let AfterBatch::More = after {
                        waiting = Some(delivery);
                    } else {
                        // What came before the end or the error is the consumer's first.
                        if self.deliver.send(delivery).is_err() {
                            return Outcome::Stop;
                        }
                        return match after {
                            AfterBatch::Failed(err) => lost_or_failed(err),
                            _ => Outcome::Ended,
                        };
                    }
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
