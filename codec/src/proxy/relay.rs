//! One client connection and its upstream connection, relayed in both directions.
//!
//! Both directions frame messages (a type byte and an Int32 length) only to find their
//! boundaries, and forward them as they came: what a read brought is written in one
//! write. Downstream, once the upstream answers START_REPLICATION with CopyBothResponse,
//! each CopyData is read as a frame: XLogData's pgoutput message is decoded in the
//! session's context (its stream blocks followed), keepalives are noted, and the fault
//! rules are asked before, within and after each message. Upstream, the client's
//! START_REPLICATION sets that context, and its status updates are noted.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Notify};

use super::records::{Record, Startup};
use super::startup::{self, First};
use super::Shared;
use crate::client::tokio::Io;
use crate::client::{attempts, ClientError, StreamOptions};
use crate::faults::{error_for, frame_matches, Facts, Point, Scope, Tracker};
use crate::server::command::{self, Command, Options};
use crate::server::{Action, Trigger};
use crate::wire::backend;
use crate::wire::error::{error, sqlstate, SqlError};
use crate::{
    decode, encode, ClientMessage, Ctx, Decoder, Lsn, PgTimestamp, PrimaryKeepalive,
    ProtocolVersion, ServerMessage,
};

/// Bytes a read asks for at least: a walsender's messages are small and many.
const READ_AT_LEAST: usize = 64 * 1024;

/// How much of a client's bytes a stalled connection holds before it stops reading it.
const STALLED_AT_MOST: usize = 256 * 1024;

/// How long a client that left is given for its last bytes to reach the upstream.
const CLIENT_LEFT: Duration = Duration::from_secs(1);

/// The envelope's context (it has no protocol version of its own).
fn envelope() -> Ctx {
    Ctx::plain(ProtocolVersion::V1)
}

/// How a pair ended: either way, both connections close (the client's with FIN, or RST
/// after a `reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The client left (or its socket failed).
    ClientLeft,
    /// The upstream closed (or its socket failed); the client saw the same end.
    UpstreamClosed,
    /// A rule ended the connection (a close, a FATAL, a shutdown's end).
    Closed,
    /// A rule reset the client's connection (RST).
    Reset,
    /// A crash cut every connection.
    Crashed,
}

impl End {
    fn describe(self) -> &'static str {
        match self {
            End::ClientLeft => "the client left",
            End::UpstreamClosed => "the upstream closed",
            End::Closed => "a rule closed it",
            End::Reset => "a rule reset it",
            End::Crashed => "a crash cut it",
        }
    }
}

/// Serves one client: the `connect` rules, its first packets (TLS if it asks and the
/// proxy has a certificate), its upstream connection, then the relay until either side
/// ends.
pub(super) async fn serve(mut client: TcpStream, peer: SocketAddr, shared: &Shared) {
    let attempt = shared.attempts.fetch_add(1, Ordering::SeqCst) + 1;
    let fired = shared.faults.fire(
        None,
        |trigger| matches!(trigger, Trigger::Connect { attempt: a } if *a == attempt),
    );
    for (_, action) in fired {
        shared.log(format!(
            "connection {attempt} from {peer}: fault: {action:?} on connect"
        ));
        match action {
            Action::Close => return,
            Action::Reset => return reset(&client),
            Action::Stall { ms: Some(ms) } => tokio::time::sleep(Duration::from_millis(ms)).await,
            Action::Stall { ms: None } => std::future::pending().await,
            Action::Error { code, message } => {
                // Before the start-up packet every error is FATAL, and no slot is known.
                let err = error_for(&code, message, "", 0, 0);
                return fatal(&mut client, &err).await;
            }
            _ => {}
        }
    }
    let first = match startup::read(&mut client, shared.tls.is_some()).await {
        Ok(Some(first)) => first,
        Ok(None) => return,
        Err(err) => return fatal(&mut client, &err).await,
    };
    let Some(config) = shared.tls.as_ref().filter(|_| matches!(first, First::Tls)) else {
        let Some((server, who)) = open_upstream(&mut client, first, peer, attempt, shared).await
        else {
            return;
        };
        let (read, mut write) = client.into_split();
        let end = relay(read, &mut write, server, shared, &who).await;
        if end == End::Reset {
            reset(write.as_ref());
            // Without shutting down the writing side: the close sends RST, not FIN.
            write.forget();
        }
        return ended(shared, &who, end);
    };
    // A second handle on the socket, to reset it under TLS.
    let Ok(raw) = socket2::SockRef::from(&client).try_clone() else {
        return;
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(config));
    let mut client = match acceptor.accept(client).await {
        Ok(tls) => tls,
        Err(err) => {
            return shared.log(format!(
                "connection {attempt} from {peer}: TLS handshake: {err}"
            ))
        }
    };
    let first = match startup::read(&mut client, false).await {
        Ok(Some(first)) => first,
        Ok(None) => return,
        Err(err) => return fatal(&mut client, &err).await,
    };
    let Some((server, who)) = open_upstream(&mut client, first, peer, attempt, shared).await else {
        return;
    };
    let (read, mut write) = tokio::io::split(client);
    let end = relay(read, &mut write, server, shared, &who).await;
    if end == End::Reset {
        let _ = raw.set_linger(Some(Duration::ZERO));
    }
    ended(shared, &who, end);
}

/// The client's upstream connection, opened and sent its start-up packet (or its cancel
/// request, which ends the connection): `None` when the client was answered here.
async fn open_upstream(
    client: &mut (impl AsyncWrite + Unpin),
    first: First,
    peer: SocketAddr,
    attempt: u64,
    shared: &Shared,
) -> Option<(Box<dyn Io>, Who)> {
    let upstream = &shared.upstream;
    let target = format!("{}:{}", upstream.host, upstream.port);
    let record = match &first {
        First::Startup { .. } => Some(shared.records.open(&Startup {
            id: attempt,
            peer,
            parameter: &|name| first.parameter(name).map(str::to_owned),
            upstream: target.clone(),
        })),
        First::Cancel(_) | First::Tls => None,
    };
    let opened = crate::client::tokio::open(upstream, attempts(upstream)[0]).await;
    let mut server = match opened {
        Ok((server, _tls)) => server,
        Err(err) => {
            shared.log(format!(
                "connection {attempt} from {peer}: upstream {target}: {err}"
            ));
            if let Some(record) = &record {
                shared
                    .records
                    .ended(record, &format!("the upstream was unreachable: {err}"));
            }
            let why = match err {
                ClientError::Connect { source, .. } => source.to_string(),
                err => err.to_string(),
            };
            let err = error(
                sqlstate::CONNECTION_FAILURE,
                format!("could not connect to the upstream server at {target}: {why}"),
            );
            fatal(client, &err).await;
            return None;
        }
    };
    if let (First::Startup { .. }, Some(err)) = (&first, shared.refusing()) {
        if let Some(record) = &record {
            shared
                .records
                .ended(record, "refused: the database system is starting up");
        }
        fatal(client, &err).await;
        return None;
    }
    let (bytes, record) = match (first, record) {
        (First::Startup { bytes, parameters }, Some(record)) => {
            let application_name = parameters
                .into_iter()
                .find(|(name, _)| name == "application_name")
                .map(|(_, value)| value)
                .unwrap_or_default();
            (
                bytes,
                Who {
                    attempt,
                    application_name,
                    record,
                },
            )
        }
        (First::Cancel(bytes), _) => {
            // The upstream finds the backend by the key and closes; so do we.
            let _ = server.write_all(&bytes).await;
            let _ = server.flush().await;
            return None;
        }
        _ => return None,
    };
    if server.write_all(&bytes).await.is_err() {
        ended(shared, &record, End::UpstreamClosed);
        return None;
    }
    Some((server, record))
}

/// The connection's record says how it ended; the slot it streamed is free.
fn ended(shared: &Shared, who: &Who, end: End) {
    shared.records.ended(&who.record, end.describe());
}

/// Who a connection is, for the rules' scopes, the log and its record.
#[derive(Debug)]
struct Who {
    attempt: u64,
    application_name: String,
    record: Arc<Record>,
}

/// What the two directions of a pair share.
#[derive(Debug, Default)]
struct Link {
    /// A START_REPLICATION the client sent that the upstream has not answered yet.
    start: Mutex<Option<(String, Options)>>,
    /// Copy-both is under way: the client's CopyData are standby messages.
    streaming: AtomicBool,
    /// The stream's scope, for the `flush` rules the client's status updates meet.
    scope: Mutex<Option<Scope>>,
    /// The flush position of the client's last status update.
    client_flush: AtomicU64,
    /// A status update came.
    replied: Notify,
    /// The upstream's major version, once its `server_version` came.
    major: AtomicU32,
}

/// Relays until either side ends; the caller closes the client's connection as the end
/// says.
async fn relay<W: AsyncWrite + Unpin>(
    client_read: impl AsyncRead + Unpin,
    client_write: &mut W,
    server: Box<dyn Io>,
    shared: &Shared,
    who: &Who,
) -> End {
    let (server_read, server_write) = tokio::io::split(server);
    let link = Link::default();
    let (inject, injected) = mpsc::unbounded_channel();
    let (stall, stalled) = watch::channel(false);
    let (flush_rules, due) = mpsc::unbounded_channel();
    let (answers, answered) = mpsc::unbounded_channel();
    who.record.streams_to(inject.clone());
    let from_down = FromDown {
        injected,
        stalled,
        flush_rules,
        answers,
    };
    let mut down = Down {
        shared,
        who,
        link: &link,
        client: client_write,
        buf: BytesMut::with_capacity(READ_AT_LEAST),
        written: 0,
        major: 0,
        backend_pid: 0,
        upstream_error: false,
        session: None,
        draining: false,
        slow: None,
        sent: Lsn(0),
        shutting_down: None,
        inject,
        stall,
    };
    let end = {
        let downstream = down.run(server_read, due, answered);
        let upstream = up(client_read, server_write, &link, shared, who, from_down);
        tokio::pin!(downstream, upstream);
        tokio::select! {
            end = &mut downstream => {
                if end == End::ClientLeft {
                    // A write to the client failed: it is leaving. What it sent whole
                    // before (its Terminate) still goes, once its side reads the end.
                    let _ = tokio::time::timeout(CLIENT_LEFT, &mut upstream).await;
                }
                end
            }
            end = &mut upstream => end,
        }
    };
    // A stream still under way ends with the connection; a walsender that dropped it
    // without an error timed out.
    if let Some(slot) = down.session.as_ref().and_then(|s| s.scope.slot.as_deref()) {
        let timed_out = end == End::UpstreamClosed && !down.upstream_error;
        shared.slots.ended(slot, who.attempt, timed_out);
    }
    // Both directions' futures are dropped by now (the client's read half with them),
    // and the upstream connection with them: its walsender exits and releases its slot.
    end
}

/// The length of the whole message at the start of `buf` (type byte, Int32 length and
/// body), once it is all there; `Err` for a length no message can have.
fn whole_message(buf: &mut BytesMut, at: usize) -> Result<Option<usize>, ()> {
    let Some(header) = buf.get(at..at + 5) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if len < 4 {
        return Err(());
    }
    let total = len + 1;
    if buf.len() - at < total {
        // Room for what comes next, not for what the length claims: memory follows the
        // bytes that arrive.
        buf.reserve((total - (buf.len() - at)).min(READ_AT_LEAST));
        return Ok(None);
    }
    Ok(Some(total))
}

/// Client to upstream: forwarded as read, with the START_REPLICATION and status updates
/// noted; held while a rule stalls the connection; bytes a rule injects (a CopyDone
/// after an injected ERROR, a checkpoint's status update) go in between whole messages.
/// A START_REPLICATION of a slot whose state the test set is answered by the
/// downstream, and never reaches the upstream.
async fn up(
    mut client: impl AsyncRead + Unpin,
    mut server: tokio::io::WriteHalf<Box<dyn Io>>,
    link: &Link,
    shared: &Shared,
    who: &Who,
    channels: FromDown,
) -> End {
    let FromDown {
        mut injected,
        mut stalled,
        flush_rules,
        answers,
    } = channels;
    let mut buf = BytesMut::with_capacity(8 * 1024);
    // Whole messages end at `whole`; those from `from` on are not forwarded yet.
    let (mut from, mut whole) = (0, 0);
    loop {
        // While a rule stalls the connection nothing goes to the upstream, but the
        // client is still read (up to a socket buffer's worth): its status updates are
        // judged, and a client that leaves ends the pair.
        let held = *stalled.borrow();
        let room = buf.len() < STALLED_AT_MOST;
        tokio::select! {
            read = client.read_buf(&mut buf), if !held || room => match read {
                Ok(0) | Err(_) => {
                    // What the client sent whole before it left (its Terminate) still
                    // goes, unless the connection is stalled.
                    if !*stalled.borrow() {
                        let _ = server.write_all(&buf[from..whole]).await;
                    }
                    return End::ClientLeft;
                }
                Ok(_) => {}
            },
            Some(bytes) = injected.recv() => {
                if server.write_all(&bytes).await.is_err() {
                    return End::UpstreamClosed;
                }
                continue;
            }
            Ok(()) = stalled.changed(), if held => {}
        }
        loop {
            match whole_message(&mut buf, whole) {
                Ok(Some(len)) => {
                    let message = &mut buf[whole..whole + len];
                    if let Some(answer) =
                        note_client_message(message, link, shared, who, &flush_rules)
                    {
                        // Answered here: what came before it goes, it does not.
                        if server.write_all(&buf[from..whole]).await.is_err() {
                            return End::UpstreamClosed;
                        }
                        from = whole + len;
                        let _ = answers.send(answer);
                    }
                    whole += len;
                }
                Ok(None) => break,
                // Not the protocol: passed on for the upstream to refuse.
                Err(()) => {
                    whole = buf.len();
                    break;
                }
            }
        }
        if *stalled.borrow() {
            continue;
        }
        if whole > 0 {
            if server.write_all(&buf[from..whole]).await.is_err() {
                return End::UpstreamClosed;
            }
            buf.advance(whole);
            (from, whole) = (0, 0);
        }
    }
}

/// The downstream's ends of the channels to the upstream direction.
struct FromDown {
    /// Bytes a rule sends the upstream (a CopyDone after an injected ERROR).
    injected: mpsc::UnboundedReceiver<Vec<u8>>,
    /// Whether a rule stalls the connection.
    stalled: watch::Receiver<bool>,
    /// The `flush` rules a status update met, for the downstream to do.
    flush_rules: mpsc::UnboundedSender<(Trigger, Action)>,
    /// Answers the proxy gives the client itself (a START_REPLICATION refused for its
    /// slot's state), for the downstream to write.
    answers: mpsc::UnboundedSender<Vec<u8>>,
}

/// A client's message, read for what the downstream needs to know: its
/// START_REPLICATION, and in copy-both its status updates (with the `flush` rules they
/// meet, for the downstream to do; their flush position held back to the last checkpoint
/// with a persistence interval). The answer the proxy gives itself instead of forwarding
/// the message, if any.
fn note_client_message(
    message: &mut [u8],
    link: &Link,
    shared: &Shared,
    who: &Who,
    flush_rules: &mpsc::UnboundedSender<(Trigger, Action)>,
) -> Option<Vec<u8>> {
    if link.streaming.load(Ordering::Relaxed) {
        if message[0] == b'd' {
            status_update(message, link, shared, who, flush_rules);
        }
        return None;
    }
    if message[0] != b'Q' {
        return None;
    }
    let text = &message[5..];
    let text = text.strip_suffix(b"\0").unwrap_or(text);
    let text = std::str::from_utf8(text).ok()?;
    let Some(Ok(Command::StartLogical { slot, options, .. })) = command::parse(text) else {
        return None;
    };
    let major = link.major.load(Ordering::Relaxed);
    if let Some(err) = shared.slots.refusal(&slot, major) {
        shared.log(format!(
            "connection {}: START_REPLICATION of slot {slot} answered by the proxy: {} {}",
            who.attempt, err.code, err.message
        ));
        let mut out = Vec::new();
        error_response(&mut out, "ERROR", &err);
        backend::ready_for_query(&mut out, b'I');
        return Some(out);
    }
    *link.start.lock().unwrap_or_else(|e| e.into_inner()) = Some((slot, options));
    None
}

/// A CopyData from a streaming client: a standby status update is recorded, meets the
/// `flush` rules, and reports to the upstream what the slot's persistence lets it hear.
fn status_update(
    message: &mut [u8],
    link: &Link,
    shared: &Shared,
    who: &Who,
    flush_rules: &mpsc::UnboundedSender<(Trigger, Action)>,
) {
    let Ok(ClientMessage::StandbyStatusUpdate(update)) =
        decode::<ClientMessage>(&message[5..], envelope())
    else {
        return;
    };
    link.client_flush
        .fetch_max(update.flush_lsn.0, Ordering::SeqCst);
    let scope = link.scope.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(slot) = scope.as_ref().and_then(|s| s.slot.as_deref()) {
        shared.records.status_update(&who.record, update.flush_lsn);
        let heard = shared
            .slots
            .status_update(slot, who.attempt, update.flush_lsn);
        if heard != update.flush_lsn {
            // 'd', Int32 length, 'r', write position, then the flush position.
            message[14..22].copy_from_slice(&heard.0.to_be_bytes());
        }
    }
    let met = shared.faults.fire(
        scope.as_ref(),
        |trigger| matches!(trigger, Trigger::Flush { lsn } if update.flush_lsn >= *lsn),
    );
    for rule in met {
        let _ = flush_rules.send(rule);
    }
    link.replied.notify_one();
}

/// A `slow` action in force.
#[derive(Debug, Clone, Copy)]
enum Slow {
    Delay(Duration),
    Rate(u64),
}

/// A logical replication stream under way: its decoder and what the rules count.
struct Session {
    /// `None` when the START_REPLICATION options did not parse here (the frames are
    /// forwarded without a meaning).
    decoder: Option<Decoder>,
    tracker: Tracker,
    scope: Scope,
    /// When the stream started, and how far its `time` rules have been looked at.
    started: tokio::time::Instant,
    time_checked: Option<u64>,
}

/// Upstream to client, with the fault rules.
struct Down<'a, W> {
    shared: &'a Shared,
    who: &'a Who,
    link: &'a Link,
    client: &'a mut W,
    buf: BytesMut,
    /// How much of `buf` has been written to the client.
    written: usize,
    /// The upstream's major version (from its `server_version`).
    major: u32,
    /// The upstream backend's process id (from its BackendKeyData).
    backend_pid: u32,
    /// The upstream sent an ErrorResponse (a walsender that times out sends none).
    upstream_error: bool,
    session: Option<Session>,
    /// An injected ERROR ended the stream for the client: the upstream's rest of it is
    /// dropped up to its ReadyForQuery.
    draining: bool,
    slow: Option<Slow>,
    /// How far the client was sent whole: the highest keepalive WAL end or transaction
    /// end forwarded.
    sent: Lsn,
    /// A `shutdown` action under way.
    shutting_down: Option<Shutdown>,
    inject: mpsc::UnboundedSender<Vec<u8>>,
    stall: watch::Sender<bool>,
}

/// PostgreSQL's walsender shutdown (`WalSndDone`), as the proxy plays it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shutdown {
    /// The transaction under way still goes to the client.
    Finishing,
    /// Nothing more of the upstream's goes: keepalives asking for a reply until the
    /// client has confirmed what it was sent, then `COPY 0` and the close.
    Waiting,
}

impl<W: AsyncWrite + Unpin> Down<'_, W> {
    async fn run(
        &mut self,
        mut server: impl AsyncRead + Unpin,
        mut due: mpsc::UnboundedReceiver<(Trigger, Action)>,
        mut answered: mpsc::UnboundedReceiver<Vec<u8>>,
    ) -> End {
        let mut crashes = self.shared.crashes.subscribe();
        loop {
            if self.buf.capacity() - self.buf.len() < READ_AT_LEAST / 4 {
                self.buf.reserve(READ_AT_LEAST);
            }
            let waiting = self.shutting_down == Some(Shutdown::Waiting);
            let next_time = self.next_time();
            let outcome = tokio::select! {
                read = server.read_buf(&mut self.buf), if !waiting => match read {
                    Ok(0) | Err(_) => {
                        // The client sees the same end: what came whole, then the close.
                        let _ = self.process().await;
                        let _ = self.client.shutdown().await;
                        return End::UpstreamClosed;
                    }
                    Ok(_) => self.process().await,
                },
                Some((trigger, action)) = due.recv() => self.fire(trigger, action).await,
                () = sleep_until(next_time), if next_time.is_some() => self.time_rules().await,
                () = self.link.replied.notified(), if waiting => self.shutdown_step().await,
                Some(answer) = answered.recv() => {
                    let at = self.written;
                    self.write_own(at, &answer).await
                }
                _ = crashes.changed() => Err(End::Crashed),
            };
            if let Err(end) = outcome {
                return end;
            }
        }
    }

    /// A rule that fired between frames (a `flush` or `time` rule).
    async fn fire(&mut self, trigger: Trigger, action: Action) -> Result<(), End> {
        self.shared.log(format!(
            "connection {}: fault: {action:?} at {trigger:?}",
            self.who.attempt
        ));
        let at = self.written;
        self.act(action, at, 0).await
    }

    /// When the next `time` rule of this stream is due.
    fn next_time(&self) -> Option<tokio::time::Instant> {
        let session = self.session.as_ref()?;
        let ms = self
            .shared
            .faults
            .next_time(&session.scope, session.time_checked)?;
        Some(session.started + Duration::from_millis(ms))
    }

    /// The `time` rules whose moment has come.
    async fn time_rules(&mut self) -> Result<(), End> {
        let Some(session) = &mut self.session else {
            return Ok(());
        };
        let elapsed = u64::try_from(session.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let checked = session.time_checked.replace(elapsed);
        let fired = self.shared.faults.fire(Some(&session.scope), |trigger| {
            matches!(trigger, Trigger::Time { ms } if *ms <= elapsed && checked.is_none_or(|c| *ms > c))
        });
        for (trigger, action) in fired {
            self.fire(trigger, action).await?;
        }
        Ok(())
    }

    /// The shutdown's next step: done once the client confirmed what it was sent, else
    /// another keepalive asking for a reply.
    async fn shutdown_step(&mut self) -> Result<(), End> {
        let flushed = Lsn(self.link.client_flush.load(Ordering::SeqCst));
        if flushed >= self.sent {
            let mut out = Vec::new();
            backend::command_complete(&mut out, "COPY 0");
            self.write_own(self.written, &out).await?;
            self.shared.log(format!(
                "connection {}: shut down: the client confirmed {flushed}",
                self.who.attempt
            ));
            return Err(End::Closed);
        }
        self.keepalive(true).await
    }

    /// A keepalive reporting what the client was sent.
    async fn keepalive(&mut self, reply_requested: bool) -> Result<(), End> {
        let keepalive = ServerMessage::PrimaryKeepalive(PrimaryKeepalive {
            wal_end: self.sent,
            send_time: PgTimestamp::now(),
            reply_requested,
        });
        let payload = encode(&keepalive, envelope()).expect("a keepalive always encodes");
        let mut out = Vec::new();
        backend::copy_data(&mut out, &payload);
        self.write_own(self.written, &out).await
    }

    /// Every whole message in the buffer, then the bytes written.
    async fn process(&mut self) -> Result<(), End> {
        let mut at = 0;
        loop {
            match whole_message(&mut self.buf, at) {
                Ok(Some(len)) => {
                    self.message(at, len).await?;
                    at += len;
                }
                Ok(None) => break,
                Err(()) => {
                    // Not the protocol: forwarded, and nothing more is read into it.
                    at = self.buf.len();
                    self.session = None;
                    break;
                }
            }
        }
        self.write_upto(at).await?;
        self.buf.advance(at);
        self.written = 0;
        Ok(())
    }

    /// Writes the buffer up to `end` (what is not written yet of it).
    async fn write_upto(&mut self, end: usize) -> Result<(), End> {
        if end > self.written {
            self.client
                .write_all(&self.buf[self.written..end])
                .await
                .map_err(|_| End::ClientLeft)?;
            self.written = end;
        }
        Ok(())
    }

    /// Bytes of the proxy's own (what a rule sends), after what came before them.
    async fn write_own(&mut self, at: usize, bytes: &[u8]) -> Result<(), End> {
        self.write_upto(at).await?;
        self.client
            .write_all(bytes)
            .await
            .map_err(|_| End::ClientLeft)
    }

    /// Drops the buffer from `written` up to `end`: never sent.
    /// Drops what is not written yet of the buffer up to `end` (what of it a rule let
    /// through before, say the frame an ERROR followed, stays sent).
    fn drop_upto(&mut self, end: usize) {
        self.written = self.written.max(end);
    }

    async fn message(&mut self, at: usize, len: usize) -> Result<(), End> {
        let tag = self.buf[at];
        if self.draining {
            self.write_upto(at).await?;
            self.drop_upto(at + len);
            self.draining = tag != b'Z';
            return Ok(());
        }
        if self.shutting_down == Some(Shutdown::Waiting) {
            // The walsender is shutting down for the client: nothing more of it goes.
            self.write_upto(at).await?;
            self.drop_upto(at + len);
            return Ok(());
        }
        match tag {
            b'S' => self.parameter_status(at, len),
            // BackendKeyData: the walsender's process id, which "active for PID" names.
            b'K' if len >= 9 => {
                let pid = &self.buf[at + 5..at + 9];
                self.backend_pid = u32::from_be_bytes([pid[0], pid[1], pid[2], pid[3]]);
            }
            b'W' => self.copy_both(),
            b'd' if self.session.is_some() => self.frame(at, len).await?,
            // The copy ends (CopyDone, or an ERROR inside it).
            b'c' | b'E' if self.session.is_some() => {
                self.upstream_error |= tag == b'E';
                self.end_session();
            }
            b'E' => self.upstream_error = true,
            _ => {}
        }
        Ok(())
    }

    /// The stream is over (the connection may go on): its slot is free.
    fn end_session(&mut self) {
        if let Some(slot) = self.session.take().and_then(|s| s.scope.slot) {
            self.shared.slots.ended(&slot, self.who.attempt, false);
        }
        self.link.streaming.store(false, Ordering::Relaxed);
    }

    /// `server_version`, for wordings that depend on it.
    fn parameter_status(&mut self, at: usize, len: usize) {
        let body = &self.buf[at + 5..at + len];
        let mut parts = body.split(|b| *b == 0);
        if parts.next() == Some(b"server_version") {
            let value = parts.next().unwrap_or_default();
            let digits: Vec<u8> = value
                .iter()
                .copied()
                .take_while(u8::is_ascii_digit)
                .collect();
            self.major = std::str::from_utf8(&digits)
                .ok()
                .and_then(|d| d.parse().ok())
                .unwrap_or(0);
            self.link.major.store(self.major, Ordering::Relaxed);
        }
    }

    /// CopyBothResponse: the START_REPLICATION the client sent is under way.
    fn copy_both(&mut self) {
        let start = self
            .link
            .start
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some((slot, options)) = start else {
            // Physical replication: passed through without a meaning.
            return;
        };
        let decoder = match StreamOptions::parse(&options, self.major.max(15)) {
            Ok(options) => Decoder::new(options.proto_version, options.streaming).ok(),
            Err(err) => {
                self.shared.log(format!(
                    "connection {}: START_REPLICATION options not understood here ({}); its frames pass without a meaning",
                    self.who.attempt, err.message
                ));
                None
            }
        };
        let (of_slot, of_server) = self.shared.count_start(&slot);
        self.shared.records.streaming(&self.who.record, &slot);
        self.shared
            .slots
            .started(&slot, self.who.attempt, self.backend_pid);
        self.shared.log(format!(
            "connection {}: streaming from slot {slot} (START_REPLICATION {of_slot} of the slot)",
            self.who.attempt
        ));
        let scope = Scope {
            slot: Some(slot),
            application_name: self.who.application_name.clone(),
            of_slot,
            of_server,
        };
        *self.link.scope.lock().unwrap_or_else(|e| e.into_inner()) = Some(scope.clone());
        self.link.client_flush.store(0, Ordering::SeqCst);
        self.session = Some(Session {
            decoder,
            tracker: Tracker::default(),
            scope,
            started: tokio::time::Instant::now(),
            time_checked: None,
        });
        self.link.streaming.store(true, Ordering::Relaxed);
    }

    /// A CopyData of the stream: XLogData with its rules, or a keepalive.
    async fn frame(&mut self, at: usize, len: usize) -> Result<(), End> {
        let payload = &self.buf[at + 5..at + len];
        let session = self.session.as_mut().expect("a frame of a session");
        match payload.first() {
            Some(b'k') => {
                if let Ok(ServerMessage::PrimaryKeepalive(k)) =
                    decode::<ServerMessage<'_>>(payload, envelope())
                {
                    // Between transactions, the client may confirm the WAL end it reports.
                    let idle = session.tracker.idle();
                    if idle {
                        self.sent = self.sent.max(k.wal_end);
                    }
                    if let Some(slot) = &session.scope.slot {
                        self.shared.slots.keepalive(
                            slot,
                            self.who.attempt,
                            idle.then_some(k.wal_end),
                            k.reply_requested,
                        );
                    }
                }
                Ok(())
            }
            Some(b'w') if payload.len() >= 25 => {
                let Some(decoder) = &mut session.decoder else {
                    return Ok(());
                };
                self.who.record.frame();
                let facts = match decoder.decode(&payload[25..]) {
                    Ok(message) => {
                        if let Some(end) = message.transaction_end_lsn() {
                            self.sent = self.sent.max(end);
                            if let Some(slot) = &session.scope.slot {
                                self.shared.slots.transaction_sent(slot, end);
                            }
                        }
                        session.tracker.frame(&message)
                    }
                    Err(err) => {
                        self.who.record.undecodable();
                        let wal_start =
                            u64::from_be_bytes(payload[1..9].try_into().expect("8 bytes"));
                        self.shared.log(format!(
                            "connection {}: the frame at {} did not decode, forwarded as it came: {err}",
                            self.who.attempt,
                            Lsn(wal_start)
                        ));
                        return Ok(());
                    }
                };
                if !self.shared.faults.armed() && self.slow.is_none() {
                    // Nothing to ask (one atomic load): the frame goes as it came.
                    return self.finish_shutdown(at + len).await;
                }
                // An ERROR a rule sent ends the stream (and the session) at any point.
                self.rules(Point::Before, &facts, at, len).await?;
                if self.session.is_none() {
                    return Ok(());
                }
                self.pace(at, len).await?;
                self.rules(Point::Within(0), &facts, at, len).await?;
                if self.session.is_none() {
                    return Ok(());
                }
                self.rules(Point::After, &facts, at, len).await?;
                self.finish_shutdown(at + len).await
            }
            _ => Ok(()),
        }
    }

    /// The rules at `point` of the frame at `at`: what comes before the point is written
    /// first, then each action is done.
    async fn rules(
        &mut self,
        point: Point,
        facts: &Facts,
        at: usize,
        len: usize,
    ) -> Result<(), End> {
        let Some(session) = self.session.as_ref() else {
            return Ok(());
        };
        let mut fired = self
            .shared
            .faults
            .fire(Some(&session.scope), |trigger| match point {
                Point::Within(_) => match trigger {
                    Trigger::Message { byte: Some(b), .. } => {
                        frame_matches(trigger, Point::Within(*b), facts)
                    }
                    _ => false,
                },
                point => frame_matches(trigger, point, facts),
            });
        fired.sort_by_key(|(trigger, _)| match trigger {
            Trigger::Message { byte: Some(b), .. } => *b,
            _ => 0,
        });
        for (trigger, action) in fired {
            let upto = match (point, &trigger) {
                (Point::Before, _) => at,
                (Point::Within(_), Trigger::Message { byte: Some(b), .. }) => at + (*b).min(len),
                _ => at + len,
            };
            self.write_upto(upto).await?;
            self.shared.log(format!(
                "connection {}: fault: {action:?} at {trigger:?}",
                self.who.attempt
            ));
            self.act(action, at, len).await?;
        }
        Ok(())
    }

    /// Does `action`; an action that ends the connection returns how.
    async fn act(&mut self, action: Action, at: usize, len: usize) -> Result<(), End> {
        match action {
            Action::Close => Err(End::Closed),
            Action::Reset => Err(End::Reset),
            Action::Stall { ms } => {
                let _ = self.stall.send(true);
                match ms {
                    Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                    None => std::future::pending().await,
                }
                let _ = self.stall.send(false);
                Ok(())
            }
            Action::Error { code, message } => {
                let (slot, xid) = self.session.as_ref().map_or((String::new(), 0), |s| {
                    (s.scope.slot.clone().unwrap_or_default(), s.tracker.xid().0)
                });
                let err = error_for(&code, message, &slot, self.major, xid);
                if code.starts_with("57P0") {
                    let mut out = Vec::new();
                    error_response(&mut out, "FATAL", &err);
                    self.write_own(self.written, &out).await?;
                    return Err(End::Closed);
                }
                // An ERROR ends the streaming, and the walsender goes back to its
                // command loop: the client gets the ERROR and ReadyForQuery, the upstream
                // a CopyDone, and the upstream's rest of the copy is dropped.
                let mut out = Vec::new();
                error_response(&mut out, "ERROR", &err);
                backend::ready_for_query(&mut out, b'I');
                self.write_own(self.written, &out).await?;
                self.drop_upto(at + len);
                let mut copy_done = Vec::new();
                backend::copy_done(&mut copy_done);
                let _ = self.inject.send(copy_done);
                self.end_session();
                self.draining = true;
                Ok(())
            }
            Action::RequestReply => self.keepalive(true).await,
            Action::Slow {
                delay_ms,
                bytes_per_second,
            } => {
                self.slow = match (delay_ms, bytes_per_second) {
                    (Some(ms), _) => Some(Slow::Delay(Duration::from_millis(ms))),
                    (None, Some(rate)) => Some(Slow::Rate(rate)),
                    (None, None) => None,
                };
                Ok(())
            }
            Action::Shutdown => {
                self.shutting_down = Some(Shutdown::Finishing);
                self.finish_shutdown(at + len).await
            }
            // Refused when the rule is added.
            Action::Crash => Ok(()),
        }
    }

    /// A shutdown that was finishing the transaction under way starts waiting once no
    /// transaction is open (the frame ending at `end` is the last that goes).
    async fn finish_shutdown(&mut self, end: usize) -> Result<(), End> {
        let idle = self.session.as_ref().is_none_or(|s| s.tracker.idle());
        if self.shutting_down != Some(Shutdown::Finishing) || !idle {
            return Ok(());
        }
        self.shutting_down = Some(Shutdown::Waiting);
        self.write_upto(end).await?;
        self.shared.log(format!(
            "connection {}: shutting down: waiting for the client to confirm {}",
            self.who.attempt, self.sent
        ));
        self.shutdown_step().await
    }

    /// Paces the frame at `at` for a `slow` action: what came before it goes, then the
    /// wait.
    async fn pace(&mut self, at: usize, len: usize) -> Result<(), End> {
        let wait = match self.slow {
            None => return Ok(()),
            Some(Slow::Delay(delay)) => delay,
            Some(Slow::Rate(rate)) => Duration::from_secs_f64(len as f64 / rate as f64),
        };
        self.write_upto(at).await?;
        tokio::time::sleep(wait).await;
        Ok(())
    }
}

/// Sleeps until `at`, or forever without one (a `select!` branch guarded by `is_some`).
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// An ErrorResponse of `severity` for `err`.
fn error_response(out: &mut Vec<u8>, severity: &str, err: &SqlError) {
    backend::error_or_notice(
        out,
        b'E',
        severity,
        &err.code,
        &err.message,
        err.detail.as_deref(),
        None,
    );
}

/// A FATAL to a client that has not started up, then the close.
async fn fatal(client: &mut (impl AsyncWrite + Unpin), err: &SqlError) {
    let mut out = Vec::new();
    error_response(&mut out, "FATAL", err);
    let _ = client.write_all(&out).await;
    let _ = client.shutdown().await;
}

/// Closes `client` with RST.
fn reset(client: &TcpStream) {
    let _ = socket2::SockRef::from(client).set_linger(Some(Duration::ZERO));
}
