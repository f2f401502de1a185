//! The async driver of a [`Replication`](super::Replication), over tokio: the same
//! consumer as [`client::Consumer`](super::Consumer), for services that run on tokio and
//! should not block one of its threads (no `spawn_blocking`).
//!
//! A task owns the connection (tokio's `TcpStream`, or `UnixStream`; TLS through
//! tokio-rustls with the same `sslmode` rules as the blocking client). It reads frames into
//! a bounded queue, answers reply requests at once and sends status updates on an
//! interval, so feedback flows while the consumer has not asked for the next event; when
//! the queue is full it stops reading but not answering.
//!
//! ```no_run
//! use pgoutput_client::tokio::Consumer;
//! use pgoutput_client::{ConnInfo, ConsumerConfig, StreamOptions};
//! use pgoutput_codec::ProtocolVersion;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let info = ConnInfo::parse(Some("host=localhost user=repl dbname=app"), |v| std::env::var(v).ok())?;
//! let options = StreamOptions::new(ProtocolVersion::V1, &["app"]);
//! let mut consumer = Consumer::connect(&info, ConsumerConfig::new("app_slot", options).auto_confirm(true)).await?;
//! while let Some(event) = consumer.next().await? {
//!     if let Some(row) = event.new_row() {
//!         println!("{}: {:?}", row.relation().name, row.value::<Option<String>>("name")?);
//!     }
//! }
//! # Ok(())
//! # }
//! ```

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ::tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use ::tokio::net::{TcpStream, UnixStream};
use ::tokio::sync::{mpsc, Notify as Wake};
use ::tokio::task::JoinHandle;
use ::tokio::time::{sleep_until, timeout, Instant};
use bytes::BytesMut;
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use rustls_pki_types::ServerName;

use super::consumer::{
    batch, blocked_interval, create_slot_command, lost_or_failed, parse_wal_sender_timeout,
    slot_exists, AfterBatch, ConsumerConfig, Delivery, Fed, Finished, Handled, Handover, Notify,
    Outcome, Quiet, Reconnecting, Silence, BATCH, FINISH_WAIT, TICK,
};
use super::login::{Login, Step};
use super::stream::{Event, Feedback, WholeTransaction};
use super::{
    attempts, buffered_copy_event, keepalives, parse_backend, protocol, server_error, ssl_answer,
    try_the_other_way, Attempt, Backend, ClientError, ConnInfo, CopyEvent, QueryAnswer,
};
use pgoutput_codec::Lsn;

/// What the connection reads and writes: TCP, a Unix-domain socket, or TLS over TCP.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// A logical walsender connection over tokio: the blocking [`Connection`](super::Connection)'s
/// login, queries and copy-both streaming, on async I/O.
struct AsyncConnection {
    socket: Box<dyn Io>,
    input: BytesMut,
}

impl AsyncConnection {
    /// Connects as [`Connection::connect`](super::Connection::connect) does: the same
    /// sslmode attempts, `connect_timeout` over each whole login.
    async fn connect(info: &ConnInfo) -> Result<AsyncConnection, ClientError> {
        let plan = attempts(info);
        let mut last = None;
        for (i, attempt) in plan.iter().enumerate() {
            let tried = match info.connect_timeout {
                Some(limit) => timeout(limit, AsyncConnection::attempt(info, *attempt))
                    .await
                    .unwrap_or_else(|_| {
                        Err(Box::new((
                            ClientError::Connect {
                                target: format!("{}:{}", info.host, info.port),
                                source: io::Error::new(
                                    io::ErrorKind::TimedOut,
                                    "connect_timeout expired",
                                ),
                            },
                            false,
                        )))
                    }),
                None => AsyncConnection::attempt(info, *attempt).await,
            };
            match tried {
                Ok(conn) => return Ok(conn),
                Err(failed) => match *failed {
                    (err, tls) if try_the_other_way(&err, tls, i, plan) => last = Some(err),
                    (err, _) => return Err(err),
                },
            }
        }
        Err(last.unwrap_or(ClientError::Closed))
    }

    async fn attempt(
        info: &ConnInfo,
        attempt: Attempt,
    ) -> Result<AsyncConnection, Box<(ClientError, bool)>> {
        let (socket, tls) = open(info, attempt)
            .await
            .map_err(|err| Box::new((err, false)))?;
        let mut conn = AsyncConnection {
            socket,
            input: BytesMut::with_capacity(64 * 1024),
        };
        conn.login(info).await.map_err(|err| Box::new((err, tls)))?;
        Ok(conn)
    }

    async fn login(&mut self, info: &ConnInfo) -> Result<(), ClientError> {
        let (mut login, startup) = Login::start(info)?;
        self.send(&startup).await?;
        loop {
            let message = self.recv().await?;
            match login.step(message)? {
                Step::Send(out) => self.send(&out).await?,
                Step::Wait => {}
                Step::Done => return Ok(()),
            }
        }
    }

    async fn send(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.socket.write_all(bytes).await?;
        self.socket.flush().await.map_err(ClientError::Io)
    }

    /// The next backend message, reading as needed (cancel-safe: a read that is dropped
    /// loses nothing, as only whole reads are appended).
    async fn recv_any(&mut self) -> Result<Backend, ClientError> {
        loop {
            if let Some(message) = parse_backend(&mut self.input)? {
                return Ok(message);
            }
            self.read_more().await?;
        }
    }

    /// Appends what the socket has (cancel-safe: only a whole read is appended).
    async fn read_more(&mut self) -> Result<(), ClientError> {
        match self.socket.read_buf(&mut self.input).await {
            Ok(0) => Err(ClientError::Closed),
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(ClientError::Closed),
            Err(e) => Err(ClientError::Io(e)),
        }
    }

    async fn recv(&mut self) -> Result<Message, ClientError> {
        match self.recv_any().await? {
            Backend::Message(message) => Ok(message),
            Backend::CopyBothResponse => Err(protocol("unexpected CopyBothResponse")),
        }
    }

    /// A query's rows, as text.
    async fn simple_query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, ClientError> {
        let mut out = BytesMut::new();
        frontend::query(sql, &mut out)?;
        self.send(&out).await?;
        let mut answer = QueryAnswer::default();
        loop {
            if let Some(rows) = answer.take(self.recv().await?)? {
                return Ok(rows);
            }
        }
    }

    async fn start_replication(&mut self, command: &str) -> Result<(), ClientError> {
        let mut out = BytesMut::new();
        frontend::query(command, &mut out)?;
        self.send(&out).await?;
        loop {
            match self.recv_any().await? {
                Backend::CopyBothResponse => return Ok(()),
                Backend::Message(Message::ErrorResponse(body)) => {
                    let error = server_error(&body);
                    while !matches!(self.recv().await?, Message::ReadyForQuery(_)) {}
                    return Err(error);
                }
                Backend::Message(Message::NoticeResponse(_)) => {}
                Backend::Message(_) => {
                    return Err(protocol("unexpected reply to START_REPLICATION"))
                }
            }
        }
    }

    /// The next CopyData payload or the stream's end (cancel-safe, as [`Self::recv_any`]).
    async fn recv_copy_data(&mut self) -> Result<CopyEvent, ClientError> {
        loop {
            if let Some(event) = buffered_copy_event(&mut self.input)? {
                return Ok(event);
            }
            self.read_more().await?;
        }
    }

    async fn send_copy_data(&mut self, payload: &[u8]) -> Result<(), ClientError> {
        let mut out = BytesMut::new();
        frontend::CopyData::new(payload)?.write(&mut out);
        self.send(&out).await
    }

    /// CopyDone, then up to `wait` for the server's ReadyForQuery, then Terminate.
    async fn finish(mut self, wait: Duration) {
        let mut out = BytesMut::new();
        frontend::copy_done(&mut out);
        if self.send(&out).await.is_err() {
            return;
        }
        let finished = timeout(wait, async {
            loop {
                match self.recv().await {
                    Ok(Message::ReadyForQuery(_)) => return true,
                    Ok(_) => {}
                    Err(_) => return false,
                }
            }
        })
        .await;
        if let Ok(true) = finished {
            let mut out = BytesMut::new();
            frontend::terminate(&mut out);
            let _ = self.send(&out).await;
        }
    }
}

/// The socket of one attempt, TLS negotiated as `attempt` says (never on a Unix-domain
/// socket), and whether it is encrypted: what a login (or the proxy's relayed one) runs
/// over. A relay that logs in on its client's behalf (the proxy) starts here.
///
/// # Errors
///
/// [`ClientError::Connect`] when the socket does not open, and what TLS negotiation says.
pub async fn open(info: &ConnInfo, attempt: Attempt) -> Result<(Box<dyn Io>, bool), ClientError> {
    if info.is_unix_socket() {
        let path = Path::new(&info.host).join(format!(".s.PGSQL.{}", info.port));
        let unix = UnixStream::connect(&path)
            .await
            .map_err(|source| ClientError::Connect {
                target: path.display().to_string(),
                source,
            })?;
        return Ok((Box::new(unix), false));
    }
    let tcp = open_tcp(info).await?;
    if attempt == Attempt::Plain {
        return Ok((Box::new(tcp), false));
    }
    Ok(match negotiate_tls(tcp, info, attempt).await? {
        Negotiated::Tls(tls) => (tls, true),
        Negotiated::Plain(tcp) => (Box::new(tcp), false),
    })
}

/// A TCP connection to `info`'s host, keepalives on.
async fn open_tcp(info: &ConnInfo) -> Result<TcpStream, ClientError> {
    let target = format!("{}:{}", info.host, info.port);
    let failed = |source| ClientError::Connect {
        target: target.clone(),
        source,
    };
    let tcp = TcpStream::connect((info.host.as_str(), info.port))
        .await
        .map_err(failed)?;
    tcp.set_nodelay(true).map_err(failed)?;
    keepalives(&tcp, &info.keepalives).map_err(failed)?;
    Ok(tcp)
}

enum Negotiated {
    Tls(Box<dyn Io>),
    Plain(TcpStream),
}

/// PostgreSQL's SSLRequest, then the TLS handshake if the server answers `S`: the
/// blocking client's rules and rustls configuration, on tokio-rustls.
async fn negotiate_tls(
    mut tcp: TcpStream,
    info: &ConnInfo,
    attempt: Attempt,
) -> Result<Negotiated, ClientError> {
    let mut out = BytesMut::new();
    frontend::ssl_request(&mut out);
    tcp.write_all(&out).await?;
    // Exactly one byte: anything after it would be unencrypted data injected ahead of
    // the handshake (CVE-2021-23222), so none is buffered.
    let mut answer = [0; 1];
    tcp.read_exact(&mut answer).await?;
    if !ssl_answer(answer[0], info, attempt)? {
        return Ok(Negotiated::Plain(tcp));
    }
    let config = super::tls::config(info)?;
    let name = ServerName::try_from(info.host.clone())
        .map_err(|e| ClientError::Tls(format!("host {:?}: {e}", info.host)))?;
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| {
            match e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            {
                Some(err) => ClientError::Tls(format!("handshake with {}: {err}", info.host)),
                None => ClientError::Io(e),
            }
        })?;
    Ok(Negotiated::Tls(Box::new(tls)))
}

/// Before START_REPLICATION: the slot if asked for, and the server's
/// `wal_sender_timeout`.
async fn prepare(
    conn: &mut AsyncConnection,
    config: &ConsumerConfig,
) -> Result<Option<Duration>, ClientError> {
    if config.create_slot {
        let command = create_slot_command(&config.slot, config.options.two_phase);
        match conn.simple_query(&command).await {
            Err(err) if !slot_exists(&err) => return Err(err),
            _ => {}
        }
    }
    Ok(conn
        .simple_query("SHOW wal_sender_timeout")
        .await
        .ok()
        .and_then(|rows| rows.first()?.first()?.clone())
        .and_then(|text| parse_wal_sender_timeout(&text)))
}

/// The stop signal: a flag, and a wake-up for the task waiting on it; and the wake-up
/// for a status update asked for now.
#[derive(Debug, Default)]
struct Stop {
    flag: AtomicBool,
    wake: Wake,
    report: Wake,
}

impl Stop {
    fn set(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    fn is_set(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }
}

/// A replication stream read in a tokio task: see the [module docs](self).
#[derive(Debug)]
pub struct Consumer {
    fed: Fed,
    deliveries: mpsc::Receiver<Delivery>,
    resume: mpsc::UnboundedSender<Lsn>,
    stop: Arc<Stop>,
    io: Option<JoinHandle<()>>,
}

impl Consumer {
    /// Connects with `info` and starts streaming; the I/O task runs on the current tokio
    /// runtime.
    ///
    /// # Errors
    ///
    /// The connection's errors (as the blocking [`Connection::connect`](super::Connection::connect)),
    /// START_REPLICATION's, and [`ClientError::Config`] for options that cannot go
    /// together.
    pub async fn connect(info: &ConnInfo, config: ConsumerConfig) -> Result<Consumer, ClientError> {
        let fed = Fed::new(&config, true)?;
        let mut conn = AsyncConnection::connect(info).await?;
        let server_timeout = prepare(&mut conn, &config).await?;
        conn.start_replication(&config.command(config.start_lsn))
            .await?;
        // The queue counts frames; the channel holds batches of up to BATCH of them.
        let (deliver, deliveries) = mpsc::channel(config.queue.div_ceil(BATCH));
        let (resume, resumes) = mpsc::unbounded_channel();
        let stop = Arc::new(Stop::default());
        let pump = Pump {
            deliver,
            resumes,
            stop: Arc::clone(&stop),
            feedback: fed.replication.feedback(),
            info: info.clone(),
            config,
            handover: Handover::default(),
        };
        let io = ::tokio::spawn(pump.run(conn, server_timeout));
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
    pub async fn next(&mut self) -> Result<Option<Event<'_>>, ClientError> {
        self.fed.events()?;
        if self.wait_for_frame(None).await? {
            self.fed.take_event()
        } else {
            Ok(None)
        }
    }

    /// The next event if one comes within `wait`; `None` when none did, or when the
    /// stream is over ([`Self::finished`] tells the two apart).
    ///
    /// # Errors
    ///
    /// As [`Self::next`].
    pub async fn next_within(&mut self, wait: Duration) -> Result<Option<Event<'_>>, ClientError> {
        self.fed.events()?;
        if self.wait_for_frame(Some(Instant::now() + wait)).await? {
            self.fed.take_event()
        } else {
            Ok(None)
        }
    }

    /// The next whole transaction, as the blocking
    /// [`Consumer::next_transaction`](super::Consumer::next_transaction) hands it out.
    ///
    /// # Errors
    ///
    /// As [`Self::next`]; [`ClientError::Config`] after [`Self::next`] was used.
    pub async fn next_transaction(&mut self) -> Result<Option<WholeTransaction<'_>>, ClientError> {
        self.transaction_by(None).await
    }

    /// The next whole transaction if its end comes within `wait`; `None` when it did not,
    /// or when the stream is over ([`Self::finished`] tells the two apart).
    ///
    /// # Errors
    ///
    /// As [`Self::next_transaction`].
    pub async fn next_transaction_within(
        &mut self,
        wait: Duration,
    ) -> Result<Option<WholeTransaction<'_>>, ClientError> {
        self.transaction_by(Some(Instant::now() + wait)).await
    }

    async fn transaction_by(
        &mut self,
        deadline: Option<Instant>,
    ) -> Result<Option<WholeTransaction<'_>>, ClientError> {
        self.fed.whole()?;
        loop {
            if self.fed.finished().is_some() {
                return Ok(None);
            }
            if self.wait_for_frame(deadline).await? {
                if self.fed.absorb()? {
                    return Ok(Some(self.fed.take_transaction()));
                }
            } else if deadline.is_some() {
                return Ok(None);
            }
        }
    }

    /// Handles deliveries until an XLogData frame is ready (`true`), the deadline
    /// passes or the stream is over (`false`).
    async fn wait_for_frame(&mut self, deadline: Option<Instant>) -> Result<bool, ClientError> {
        let mut ready = self.fed.before_wait();
        while ready {
            let pending = self.fed.take_pending();
            let delivery = match (pending, deadline) {
                (Some(delivery), _) => Some(delivery),
                (None, deadline) => match deadline {
                    Some(deadline) => {
                        match ::tokio::time::timeout_at(deadline, self.deliveries.recv()).await {
                            Ok(delivery) => delivery,
                            Err(_) => return Ok(false),
                        }
                    }
                    None => self.deliveries.recv().await,
                },
            };
            let Some(delivery) = delivery else {
                self.fed.finish(Finished::Closed);
                return Err(ClientError::Closed);
            };
            match self.fed.handle(delivery) {
                Ok(Handled::Frame) => return Ok(true),
                Ok(Handled::Continue) => {}
                Ok(Handled::Resume(at)) => {
                    let _ = self.resume.send(at);
                }
                Ok(Handled::Over) => ready = false,
                Err(err) => {
                    self.stop.set();
                    return Err(err);
                }
            }
        }
        self.stop.set();
        Ok(false)
    }

    /// The consumer has processed everything up to `lsn` (an event's
    /// [`Event::confirmable_lsn`]); the next status update reports it.
    pub fn confirm(&mut self, lsn: Lsn) {
        self.fed.confirm(lsn);
    }

    /// Confirms `lsn` and has the I/O task report it at once, as pg_recvlogical reports
    /// a position as soon as it has flushed, rather than at the next status interval:
    /// for a consumer that confirms after a durable write.
    pub fn confirm_now(&mut self, lsn: Lsn) {
        self.fed.confirm(lsn);
        self.fed.replication.ask_report();
        self.stop.report.notify_one();
    }

    /// Whether no transaction is open.
    #[must_use]
    pub fn idle(&self) -> bool {
        self.fed.replication.idle()
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
    /// wait for the server's answer, Terminate; returns once the I/O task is done.
    pub async fn close(mut self) {
        self.fed.closing();
        self.stop.set();
        // The I/O task may wait for room in the queue or for a resume position: with the
        // other ends gone, neither wait holds it.
        drop(std::mem::replace(&mut self.deliveries, mpsc::channel(1).1));
        drop(std::mem::replace(
            &mut self.resume,
            mpsc::unbounded_channel().0,
        ));
        if let Some(io) = self.io.take() {
            let _ = io.await;
        }
    }
}

impl Drop for Consumer {
    /// Tells the I/O task to end the stream; it finishes on its own.
    fn drop(&mut self) {
        self.fed.closing();
        self.stop.set();
    }
}

/// The I/O task's side.
struct Pump {
    deliver: mpsc::Sender<Delivery>,
    resumes: mpsc::UnboundedReceiver<Lsn>,
    stop: Arc<Stop>,
    feedback: Arc<Feedback>,
    info: ConnInfo,
    config: ConsumerConfig,
    /// What was handed over to the consumer side, for the answers to the server.
    handover: Handover,
}

impl Pump {
    async fn run(mut self, mut conn: AsyncConnection, mut server_timeout: Option<Duration>) {
        loop {
            let outcome = self.stream(&mut conn, server_timeout).await;
            let (lost, delivery) = match outcome {
                Outcome::Stop => {
                    let _ = conn
                        .send_copy_data(&self.handover.last_update(&self.feedback))
                        .await;
                    conn.finish(FINISH_WAIT).await;
                    return;
                }
                Outcome::Failed(err) => {
                    let _ = self.deliver.send(Delivery::Failed(err)).await;
                    return;
                }
                Outcome::Lost(err) => (err, None),
                Outcome::Ended => (ClientError::Closed, Some(Delivery::Ended)),
            };
            let Some(delay) = self.config.reconnect else {
                let _ = self
                    .deliver
                    .send(delivery.unwrap_or(Delivery::Lost(lost)))
                    .await;
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
                .await
                .is_err()
            {
                return;
            }
            // The consumer answers once it has handled all the old connection sent.
            let Some(resume) = self.resumes.recv().await else {
                return;
            };
            // The lost connection is closed first: a walsender still serving it (one
            // gone silent) lets go of the slot once its socket closes.
            drop(conn);
            match self.reconnect(delay, resume).await {
                Some(Ok((new, timeout))) => {
                    conn = new;
                    server_timeout = timeout;
                    self.note(&Reconnecting::Resumed { after: resume });
                }
                Some(Err(err)) => {
                    let _ = self.deliver.send(Delivery::Failed(err)).await;
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

    /// Connects again after `delay`, as often as the failures pass; `None` when stopped.
    async fn reconnect(
        &self,
        delay: Duration,
        resume: Lsn,
    ) -> Option<Result<(AsyncConnection, Option<Duration>), ClientError>> {
        loop {
            ::tokio::select! {
                () = ::tokio::time::sleep(delay) => {}
                () = self.stop.wake.notified() => return None,
            }
            if self.stop.is_set() {
                return None;
            }
            let attempt = async {
                let mut conn = AsyncConnection::connect(&self.info).await?;
                let timeout = prepare(&mut conn, &self.config).await?;
                conn.start_replication(&self.config.command(resume)).await?;
                Ok::<_, ClientError>((conn, timeout))
            };
            match attempt.await {
                Ok(connected) => return Some(Ok(connected)),
                Err(err) if err.is_transient() => {
                    self.note(&Reconnecting::Retrying { error: &err, delay })
                }
                Err(err) => return Some(Err(err)),
            }
        }
    }

    /// One connection's copy-both loop (see the blocking driver's, which this mirrors).
    async fn stream(
        &self,
        conn: &mut AsyncConnection,
        server_timeout: Option<Duration>,
    ) -> Outcome {
        let interval = self.config.status_interval;
        let blocked = blocked_interval(interval, server_timeout);
        let mut next_status = Instant::now() + interval;
        let mut waiting: Option<Delivery> = None;
        let mut silence = Silence::new(self.config.receive_timeout, std::time::Instant::now());
        loop {
            if self.stop.is_set() {
                return Outcome::Stop;
            }
            // Not reading (back-pressure) is not the server's silence.
            if waiting.is_some() {
                silence.heard(std::time::Instant::now());
            }
            let quiet_until = silence.next().map(Instant::from_std);
            ::tokio::select! {
                // (The deadline is only awaited when there is one.)
                () = sleep_until(quiet_until.unwrap_or(next_status)), if quiet_until.is_some() => {
                    match silence.check(std::time::Instant::now()) {
                        Quiet::Fine => {}
                        Quiet::Ask => {
                            if let Err(err) = conn.send_copy_data(&self.feedback.status_update(true)).await {
                                return lost_or_failed(err);
                            }
                        }
                        Quiet::Dead(err) => return Outcome::Lost(err),
                    }
                }
                () = self.stop.wake.notified() => {}
                () = self.stop.report.notified() => {
                    if self.feedback.take_report() {
                        if let Err(err) = conn.send_copy_data(&self.feedback.status_update(false)).await {
                            return lost_or_failed(err);
                        }
                        next_status = Instant::now() + if waiting.is_some() { blocked } else { interval };
                    }
                }
                () = sleep_until(next_status) => {
                    if let Err(err) = conn.send_copy_data(&self.feedback.status_update(false)).await {
                        return lost_or_failed(err);
                    }
                    next_status = Instant::now() + if waiting.is_some() { blocked } else { interval };
                }
                permit = self.deliver.reserve(), if waiting.is_some() => match permit {
                    Ok(permit) => {
                        if let Some(delivery) = waiting.take() {
                            permit.send(delivery);
                        }
                    }
                    Err(_) => return Outcome::Stop,
                },
                copy = conn.recv_copy_data(), if waiting.is_none() => match copy {
                    Ok(CopyEvent::Data(frame)) => {
                        silence.heard(std::time::Instant::now());
                        let (frames, after) = batch(frame, || buffered_copy_event(&mut conn.input));
                        if let Some(reply) = self.handover.read(&self.feedback, &frames) {
                            if let Err(err) = conn.send_copy_data(&reply).await {
                                return lost_or_failed(err);
                            }
                            next_status = Instant::now() + interval;
                        }
                        let delivery = Delivery::Frames(frames);
                        // Counted as handed over now: never fewer than the consumer side has.
                        self.handover.handed(&delivery);
                        if let AfterBatch::More = after {
                            waiting = Some(delivery);
                        } else {
                            // What came before the end or the error is the consumer's first.
                            if self.deliver.send(delivery).await.is_err() {
                                return Outcome::Stop;
                            }
                            return match after {
                                AfterBatch::Failed(err) => lost_or_failed(err),
                                _ => Outcome::Ended,
                            };
                        }
                        // While the frames wait for room, status updates go out as often
                        // as the server would ask for them.
                        next_status = next_status.min(Instant::now() + blocked);
                    }
                    Ok(CopyEvent::End) => return Outcome::Ended,
                    // Only the blocking read times out.
                    Ok(CopyEvent::Idle) => {}
                    Err(err) => return lost_or_failed(err),
                },
                // An answer at the idle WAL end owed until the consumer side catches up.
                () = ::tokio::time::sleep(TICK), if self.handover.owes() => {
                    if let Some(update) = self.handover.owed_update(&self.feedback) {
                        if let Err(err) = conn.send_copy_data(&update).await {
                            return lost_or_failed(err);
                        }
                        next_status = Instant::now() + interval;
                    }
                }
                // Quiet while waiting for an end position: ask where the server is.
                () = ::tokio::time::sleep(TICK), if self.config.end_lsn.is_some() && waiting.is_none() => {
                    if let Err(err) = conn.send_copy_data(&self.feedback.status_update(true)).await {
                        return lost_or_failed(err);
                    }
                }
            }
        }
    }
}
