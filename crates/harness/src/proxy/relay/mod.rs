//! One client connection and its upstream connection, relayed in both directions.
//!
//! Both directions frame messages (a type byte and an Int32 length) only to find their
//! boundaries, and forward them as they came: what a read brought is written in one
//! write. The client's messages go on as their bytes come, once their header is read;
//! only those the proxy reads are held until whole (the upstream's messages, from
//! PostgreSQL, are framed whole). Downstream, once the upstream answers START_REPLICATION with CopyBothResponse,
//! each CopyData is read as a frame: XLogData's pgoutput message is decoded in the
//! session's context (its stream blocks followed), keepalives are noted, and the fault
//! rules are asked before, within and after each message. Upstream, the client's
//! START_REPLICATION sets that context, and its status updates are noted.
//!
//! This module holds the pair (start-up, the upstream connection, how it ends); each
//! direction has a module of its own: [`to_upstream`] and [`to_client`].

mod to_client;
mod to_upstream;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::{timeout_at, Instant};

use super::records::{Record, Startup};
use super::startup::{self, Asked, First};
use super::Shared;
use crate::faults::{End as Ends, OnConnect, Scope};
use crate::judge::{Ending, Replies};
use pgoutput_client::tokio::Io;
use pgoutput_client::{attempts, ClientError};
use pgoutput_codec::{Ctx, Lsn, ProtocolVersion};
use pgoutput_wire::backend;
use pgoutput_wire::error::{error, no_hba_entry, sqlstate, SqlError};
use pgoutput_wire::grammar::Options;
use to_client::Down;
use to_upstream::FromDown;

/// Bytes a read asks for at least: a walsender's messages are small and many.
const READ_AT_LEAST: usize = 64 * 1024;

/// A read buffer larger than this (grown for one large message) is given back once it
/// holds less than [`READ_AT_LEAST`].
const SHRINK_ABOVE: usize = 4 * READ_AT_LEAST;

/// How much of a client's bytes a stalled connection holds before it stops reading it.
const STALLED_AT_MOST: usize = 256 * 1024;

/// What a channel between the two directions holds at most: the client's direction
/// waits for room (it reads the client no further meanwhile); the other side's bytes for
/// the upstream (a CopyDone, a checkpoint's status update) are never more than a few.
const CHANNEL: usize = 16;

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
    /// A rule ended the connection (a close, a FATAL).
    Closed,
    /// A `shutdown` rule's sequence finished: the walsender's own end, as the test
    /// server reports it.
    ShutDown,
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
            End::ShutDown => "a shutdown rule ended it",
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
    let major = shared.upstream_major.load(Ordering::Relaxed);
    for (action, effect) in shared.faults.connecting(attempt, major) {
        shared.log(format!(
            "connection {attempt} from {peer}: fault: {action:?} on connect"
        ));
        match effect {
            OnConnect::End(Ends::Fin) => return,
            OnConnect::End(Ends::Rst) => return reset(&client),
            OnConnect::End(Ends::Crash) => return shared.crash(),
            OnConnect::Pause(Some(how_long)) => tokio::time::sleep(how_long).await,
            OnConnect::Pause(None) => std::future::pending().await,
            OnConnect::Fatal(err) => return fatal(&mut client, &err).await,
        }
    }
    // One deadline over the start-up, as PostgreSQL's authentication_timeout: the first
    // packets, the TLS handshake, and the upstream connection.
    let deadline = Instant::now() + shared.guard.authentication_timeout;
    let timed_out = || {
        shared.log(format!(
            "connection {attempt} from {peer}: no start-up within authentication_timeout ({} s): closed",
            shared.guard.authentication_timeout.as_secs_f64()
        ));
    };
    let major = shared.upstream_major.load(Ordering::Relaxed);
    let log = |line: String| shared.log(format!("connection {attempt} from {peer}: {line}"));
    let reading = startup::read(&mut client, shared.tls.is_some(), Asked::default(), major);
    let Some(first) = first_packets(timeout_at(deadline, reading).await, &log, &timed_out) else {
        return;
    };
    let first = match first {
        Ok(first) => first,
        Err(err) => return fatal(&mut client, &err).await,
    };
    let Some(config) = shared.tls.as_ref().filter(|_| matches!(first, First::Tls)) else {
        if let Some(err) = plain_refused(&first, peer, shared) {
            return fatal(&mut client, &err).await;
        }
        let opened = open_upstream(&mut client, first, peer, attempt, deadline, shared).await;
        let Some((server, who)) = opened else {
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
    let mut client = match timeout_at(deadline, acceptor.accept(client)).await {
        Err(_) => return timed_out(),
        Ok(Ok(tls)) => tls,
        Ok(Err(err)) => {
            return shared.log(format!(
                "connection {attempt} from {peer}: TLS handshake: {err}"
            ))
        }
    };
    let reading = startup::read(&mut client, false, Asked::TLS, major);
    let Some(first) = first_packets(timeout_at(deadline, reading).await, &log, &timed_out) else {
        return;
    };
    let first = match first {
        Ok(first) => first,
        Err(err) => return fatal(&mut client, &err).await,
    };
    let opened = open_upstream(&mut client, first, peer, attempt, deadline, shared).await;
    let Some((server, who)) = opened else {
        return;
    };
    who.record.client_tls();
    let (read, mut write) = tokio::io::split(client);
    let end = relay(read, &mut write, server, shared, &who).await;
    if end == End::Reset {
        let _ = raw.set_linger(Some(Duration::ZERO));
    }
    ended(shared, &who, end);
}

/// What the client's first packets came to: `None` when nothing more is to be done (it
/// left, the start-up took too long, or PostgreSQL would close without a word: logged);
/// else the packet to go on with, or the FATAL PostgreSQL would answer.
fn first_packets(
    read: Result<Result<Option<First>, SqlError>, tokio::time::error::Elapsed>,
    log: &impl Fn(String),
    timed_out: &impl Fn(),
) -> Option<Result<First, SqlError>> {
    match read {
        Err(_) => {
            timed_out();
            None
        }
        // PostgreSQL logs it and closes: the client hears nothing.
        Ok(Ok(Some(First::Unanswered(why)))) => {
            log(format!("{why}: closed without an answer"));
            None
        }
        Ok(Ok(Some(first))) => Some(Ok(first)),
        Ok(Ok(None)) => None,
        Ok(Err(err)) => Some(Err(err)),
    }
}

/// The FATAL a client starting up without TLS gets when the proxy requires it, as from
/// a server whose `pg_hba.conf` lines all say `hostssl`.
fn plain_refused(first: &First, peer: SocketAddr, shared: &Shared) -> Option<SqlError> {
    if !shared.guard.require_tls || !matches!(first, First::Startup { .. }) {
        return None;
    }
    let user = first.parameter("user").unwrap_or_default();
    // A physical replication connection names no database.
    let physical = matches!(
        first.parameter("replication"),
        Some("true" | "on" | "yes" | "1")
    );
    let database = (!physical).then(|| first.parameter("database").unwrap_or(user));
    let host = peer.ip().to_string();
    shared.log(format!(
        "connection from {peer}: refused, no TLS (clients must use it)"
    ));
    Some(no_hba_entry(&host, user, database))
}

/// The client's upstream connection, opened and sent its start-up packet (or its cancel
/// request, which ends the connection): `None` when the client was answered here.
async fn open_upstream(
    client: &mut (impl AsyncWrite + Unpin),
    first: First,
    peer: SocketAddr,
    attempt: u64,
    deadline: Instant,
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
        First::Cancel(_) | First::Tls | First::Unanswered(_) => None,
    };
    // Within the start-up's deadline, and the upstream's connect_timeout.
    let deadline = match upstream.connect_timeout {
        Some(limit) => deadline.min(Instant::now() + limit),
        None => deadline,
    };
    let opening = pgoutput_client::tokio::open(upstream, attempts(upstream)[0]);
    let opened = timeout_at(deadline, opening).await.unwrap_or_else(|_| {
        Err(ClientError::Connect {
            target: target.clone(),
            source: std::io::Error::new(std::io::ErrorKind::TimedOut, "timeout expired"),
        })
    });
    let (mut server, upstream_tls) = match opened {
        Ok(opened) => opened,
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
    if upstream_tls {
        record.record.upstream_tls();
    }
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
    /// A START_REPLICATION the client sent that the upstream has not answered yet: its
    /// slot, the position it asked for, its options.
    start: Mutex<Option<(String, Lsn, Options)>>,
    /// The upstream sent its first ReadyForQuery: the client logged in.
    logged_in: AtomicBool,
    /// Copy-both is under way: the client's CopyData are standby messages.
    streaming: AtomicBool,
    /// The stream's scope, for the `flush` rules the client's status updates meet.
    scope: Mutex<Option<Scope>>,
    /// The flush and write positions of the client's status updates (the highest).
    client_flush: AtomicU64,
    client_write: AtomicU64,
    /// A status update came.
    replied: Notify,
    /// The client's replies to keepalives that asked, and its status updates.
    replies: Replies,
    /// The highest position the client was forwarded in this stream (XLogData
    /// `walEnd`, keepalive WAL end): the judge hears of each frame's only in bulk.
    forwarded: AtomicU64,
    /// The upstream's major version, once its `server_version` came.
    major: AtomicU32,
    /// The client sent a Terminate: the upstream closing after it is the client's doing.
    terminated: AtomicBool,
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
    let (inject, injected) = mpsc::channel(CHANNEL);
    let (stall, stalled) = watch::channel(false);
    let (flush_rules, due) = mpsc::channel(CHANNEL);
    let (answers, answered) = mpsc::channel(CHANNEL);
    who.record.streams_to(inject.clone());
    let from_down = FromDown {
        injected,
        stalled,
        flush_rules,
        answers,
    };
    let mut down = Down::new(shared, who, &link, client_write, inject, stall);
    let end = {
        let downstream = down.run(server_read, due, answered);
        let upstream = to_upstream::run(client_read, server_write, &link, shared, who, from_down);
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
    // without an error, and not after the client's Terminate (which the upstream may act
    // on before this side sees the client's end), timed out.
    if let Some((slot, upstream_error)) = down.open_stream() {
        let how = match end {
            End::ClientLeft => Ending::Client,
            End::UpstreamClosed if link.terminated.load(Ordering::SeqCst) => Ending::Client,
            End::UpstreamClosed if !upstream_error => Ending::Timeout,
            End::UpstreamClosed | End::ShutDown => Ending::Server,
            End::Closed | End::Reset => Ending::Fault,
            End::Crashed => Ending::Crash,
        };
        let forwarded = Lsn(link.forwarded.load(Ordering::SeqCst));
        shared.slots.ended(slot, who.attempt, how, forwarded);
    }
    // Both directions' futures are dropped by now (the client's read half with them),
    // and the upstream connection with them: its walsender exits and releases its slot.
    end
}

/// What `buf` holds of the message at `at` (type byte, Int32 length and body).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framed {
    /// All of it: its length.
    Whole(usize),
    /// Part of it: how many of its bytes are still to come (0 while its header is not
    /// whole).
    Missing(usize),
    /// A length no message can have.
    Lost,
}

fn whole_message(buf: &[u8], at: usize) -> Framed {
    let Some(header) = buf.get(at..at + 5) else {
        return Framed::Missing(0);
    };
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if len < 4 {
        return Framed::Lost;
    }
    let (total, have) = (len + 1, buf.len() - at);
    if have < total {
        Framed::Missing(total - have)
    } else {
        Framed::Whole(total)
    }
}

/// Room in `buf` for the next read, once the bytes handled are dropped from it (room
/// made before that would count them in, and a buffer filled by each read would double
/// at each: 50 slow clients at once took the proxy to 238 MiB). `missing` bytes of a
/// message begun are made room for, at most [`READ_AT_LEAST`] a read (memory follows the
/// bytes that arrive, not what a length claims), and never less than `at_least`; a
/// buffer grown for a large message goes back to [`READ_AT_LEAST`] once it is gone.
fn make_room(buf: &mut BytesMut, missing: usize, at_least: usize) {
    if buf.capacity() > SHRINK_ABOVE && buf.len() + missing <= READ_AT_LEAST {
        let mut fresh = BytesMut::with_capacity(READ_AT_LEAST);
        fresh.extend_from_slice(buf);
        *buf = fresh;
    }
    let room = missing.min(READ_AT_LEAST).max(at_least);
    if buf.capacity() - buf.len() < room {
        buf.reserve(room);
    }
}

/// A FATAL to a client that has not started up, then the close.
async fn fatal(client: &mut (impl AsyncWrite + Unpin), err: &SqlError) {
    let mut out = Vec::new();
    backend::error_response(&mut out, "FATAL", err);
    let _ = client.write_all(&out).await;
    let _ = client.shutdown().await;
}

/// Closes `client` with RST.
fn reset(client: &TcpStream) {
    let _ = socket2::SockRef::from(client).set_linger(Some(Duration::ZERO));
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;

    /// A CopyData message of `len` bytes in all.
    fn message(len: usize) -> Vec<u8> {
        let mut m = vec![b'd'];
        m.extend_from_slice(&u32::try_from(len - 1).unwrap().to_be_bytes());
        m.resize(len, b'x');
        m
    }

    /// What the client direction does with each read: the whole messages at the start
    /// handled and dropped, then room made for the next read; the bytes missing of the
    /// message left begun.
    fn handle(buf: &mut BytesMut) -> usize {
        let mut at = 0;
        let missing = loop {
            match whole_message(buf, at) {
                Framed::Whole(len) => at += len,
                Framed::Missing(missing) => break missing,
                Framed::Lost => unreachable!("the test's messages are well formed"),
            }
        };
        buf.advance(at);
        make_room(buf, missing, READ_AT_LEAST / 4);
        missing
    }

    #[test]
    fn a_buffer_filled_by_every_read_does_not_grow() {
        // A fast upstream and a slow client: each read fills all the room there is and
        // ends inside a message (the buffer doubled at each such read when room was made
        // before the handled bytes were dropped).
        let stream: Vec<u8> = (0..20_000).flat_map(|_| message(137)).collect();
        let mut buf = BytesMut::with_capacity(READ_AT_LEAST);
        let mut from = 0;
        while from < stream.len() {
            let n = (buf.capacity() - buf.len()).min(stream.len() - from);
            buf.extend_from_slice(&stream[from..from + n]);
            from += n;
            handle(&mut buf);
            assert!(buf.capacity() <= 2 * READ_AT_LEAST, "{}", buf.capacity());
        }
        assert!(buf.is_empty());
    }

    #[test]
    fn a_large_message_is_made_room_for_as_it_comes_then_given_back() {
        let big = message(3 * 1024 * 1024);
        let mut buf = BytesMut::with_capacity(READ_AT_LEAST);
        let mut from = 0;
        let mut largest = 0;
        while from < big.len() {
            let n = (buf.capacity() - buf.len())
                .min(big.len() - from)
                .min(READ_AT_LEAST);
            buf.extend_from_slice(&big[from..from + n]);
            from += n;
            handle(&mut buf);
            // What the bytes held need and a read more, within the allocator's doubling.
            assert!(
                buf.capacity() <= 2 * (buf.len() + READ_AT_LEAST),
                "{}",
                buf.capacity()
            );
            largest = largest.max(buf.capacity());
        }
        assert!(largest >= big.len());
        assert!(buf.is_empty());
        assert!(buf.capacity() <= READ_AT_LEAST, "{}", buf.capacity());
    }
}
