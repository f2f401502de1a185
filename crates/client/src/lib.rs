//! A logical replication client: connection strings, start-up and authentication
//! (cleartext password, MD5, SCRAM-SHA-256), replication commands, and copy-both streaming.
//! Messages are framed and parsed by `postgres-protocol`; pgoutput itself is the codec's
//! business. Blocking `std::net` I/O: it runs on any thread, inside any async runtime's
//! tests too.
//!
//! Most consumers want [`Consumer`]: events with their tables and rows by column name,
//! feedback, resume (its [module](blocking) has an example). [`Replication`] is the same
//! protocol without I/O. [`Connection`] is the framing level underneath:
//!
//! ```no_run
//! use std::time::Duration;
//! use pgoutput_client::{ConnInfo, Connection, CopyEvent};
//!
//! let info = ConnInfo::parse(Some("host=localhost user=repl dbname=app"), |v| std::env::var(v).ok())?;
//! let mut conn = Connection::connect(&info)?;
//! let system = conn.simple_query("IDENTIFY_SYSTEM")?;
//! println!("system {:?} at {:?}", system[0][0], system[0][2]);
//! conn.start_replication(
//!     "START_REPLICATION SLOT \"s\" LOGICAL 0/0 (proto_version '1', publication_names 'p')",
//! )?;
//! while let CopyEvent::Data(frame) = conn.recv_copy_data(Duration::from_secs(1))? {
//!     println!("{} bytes", frame.len()); // an XLogData or keepalive: decode with the codec
//! }
//! # Ok::<(), pgoutput_client::ClientError>(())
//! ```

pub mod blocking;
mod conninfo;
mod consumer;
mod error;
mod login;
mod options;
mod passfile;
pub mod stream;
#[cfg(feature = "tls")]
mod tls;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod tokio;
pub mod values;

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

pub use bytes::Bytes;
use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::{ErrorResponseBody, Header, Message};
use postgres_protocol::message::frontend;

pub use blocking::Consumer;
pub use conninfo::pairs as conninfo_pairs;
pub use conninfo::{ConnInfo, Keepalives, SslMode, TlsSettings};
pub use consumer::{ConsumerConfig, Finished, Reconnecting};
pub use error::{ClientError, ServerError};
pub use options::{parse_identifier_list, quote_identifier, quote_literal, StreamOptions};
pub use stream::{
    Column, ColumnInfo, Event, FromColumn, RelationInfo, Replication, Row, TransactionKind,
    ValueError, WholeTransaction,
};

use login::Login;
use pgoutput_wire::{is_timeout, Socket};

/// Turns on TCP keepalives with the timings asked for.
pub(crate) fn keepalives(tcp: &impl std::os::fd::AsFd, settings: &Keepalives) -> io::Result<()> {
    let socket = socket2::SockRef::from(tcp);
    if !settings.enabled {
        return socket.set_keepalive(false);
    }
    let mut keepalive = socket2::TcpKeepalive::new();
    if let Some(idle) = settings.idle {
        keepalive = keepalive.with_time(idle);
    }
    if let Some(interval) = settings.interval {
        keepalive = keepalive.with_interval(interval);
    }
    if let Some(count) = settings.count {
        keepalive = keepalive.with_retries(count);
    }
    socket.set_tcp_keepalive(&keepalive)
}

/// The longest message PostgreSQL sends or accepts (`PQ_LARGE_MESSAGE_LIMIT`, which is
/// `MaxAllocSize - 1`), its length field included.
const MAX_MESSAGE_LEN: usize = 0x3FFF_FFFE;

/// The next complete backend message in `input`, if there is one.
///
/// postgres-protocol parses every backend message but CopyBothResponse (`'W'`), which
/// only replication uses; that one is recognised from its header here.
///
/// A message is parsed only once all of it is in: postgres-protocol reserves room for
/// the length a header announces, and a hostile server's header could announce 1 GiB
/// before sending any of it. A length beyond PostgreSQL's own limit for a message
/// (`PQ_LARGE_MESSAGE_LIMIT`, 1 GiB less one byte) is refused outright; a tag the
/// protocol does not have is a protocol violation, not a lost connection.
pub(crate) fn parse_backend(input: &mut BytesMut) -> Result<Option<Backend>, ClientError> {
    let Some(header) = Header::parse(input).map_err(|e| protocol(&e.to_string()))? else {
        return Ok(None);
    };
    let length = header.len() as usize;
    if length > MAX_MESSAGE_LEN {
        return Err(ClientError::Protocol(format!(
            "the server announced a message of {length} bytes (tag {:?}), more than \
             PostgreSQL sends",
            char::from(header.tag())
        )));
    }
    let total = length + 1;
    if input.len() < total {
        return Ok(None);
    }
    if header.tag() == b'W' {
        let _ = input.split_to(total);
        return Ok(Some(Backend::CopyBothResponse));
    }
    match Message::parse(input) {
        Ok(message) => Ok(message.map(Backend::Message)),
        Err(err) => Err(ClientError::Protocol(format!(
            "backend message {:?}: {err}",
            char::from(header.tag())
        ))),
    }
}

/// The next CopyData payload (or the stream's end) already in `input`, skipping what
/// copy-both mode lets a client ignore (NoticeResponse, ParameterStatus); an ErrorResponse
/// is the server's error. Both the blocking and the async connection read with it.
pub(crate) fn buffered_copy_event(input: &mut BytesMut) -> Result<Option<CopyEvent>, ClientError> {
    while let Some(message) = parse_backend(input)? {
        let Backend::Message(message) = message else {
            continue;
        };
        match message {
            Message::CopyData(body) => return Ok(Some(CopyEvent::Data(body.into_bytes()))),
            Message::CopyDone | Message::CommandComplete(_) | Message::ReadyForQuery(_) => {
                return Ok(Some(CopyEvent::End))
            }
            Message::ErrorResponse(body) => return Err(server_error(&body)),
            _ => {}
        }
    }
    Ok(None)
}

/// A simple query's answer, read message by message (the blocking and the async
/// connection feed it): its rows, or the server's error, once ReadyForQuery comes.
#[derive(Debug, Default)]
pub(crate) struct QueryAnswer {
    rows: Vec<Vec<Option<String>>>,
    error: Option<ClientError>,
}

impl QueryAnswer {
    /// Takes one backend message: the rows at ReadyForQuery, or the error the server
    /// sent before it.
    pub(crate) fn take(
        &mut self,
        message: Message,
    ) -> Result<Option<Vec<Vec<Option<String>>>>, ClientError> {
        match message {
            Message::DataRow(body) => self.rows.push(data_row(&body)?),
            Message::ErrorResponse(body) => self.error = Some(server_error(&body)),
            Message::ReadyForQuery(_) => {
                return match self.error.take() {
                    Some(error) => Err(error),
                    None => Ok(Some(std::mem::take(&mut self.rows))),
                }
            }
            _ => {}
        }
        Ok(None)
    }
}

/// A DataRow's values as text (NULL as `None`).
fn data_row(
    body: &postgres_protocol::message::backend::DataRowBody,
) -> Result<Vec<Option<String>>, ClientError> {
    let buffer = body.buffer();
    let mut ranges = body.ranges();
    let mut row = Vec::new();
    while let Some(range) = ranges.next()? {
        row.push(range.map(|r| String::from_utf8_lossy(&buffer[r]).into_owned()));
    }
    Ok(row)
}

#[cfg(feature = "tls")]
/// What the server's one-byte answer to SSLRequest means for `attempt`: `true` to run
/// the TLS handshake, `false` to go on without TLS.
pub(crate) fn ssl_answer(
    answer: u8,
    info: &ConnInfo,
    attempt: Attempt,
) -> Result<bool, ClientError> {
    match answer {
        b'S' => Ok(true),
        b'N' if attempt == Attempt::TlsIfOffered => Ok(false),
        b'N' => Err(ClientError::Tls(format!(
            "the server at {}:{} does not support TLS, but sslmode={} requires it",
            info.host, info.port, info.tls.mode
        ))),
        other => Err(protocol(&format!(
            "unexpected answer {other:#04x} to SSLRequest"
        ))),
    }
}

/// A backend message: postgres-protocol's, or the CopyBothResponse it does not know.
pub(crate) enum Backend {
    Message(Message),
    CopyBothResponse,
}

/// What arrived in copy-both mode.
#[derive(Debug)]
pub enum CopyEvent {
    /// A CopyData payload: a slice of the connection's read buffer, handed over without a
    /// copy (it derefs to `[u8]`).
    Data(Bytes),
    /// Nothing arrived within the wait.
    Idle,
    /// The server ended the stream (CopyDone, or the end of the command). A connection
    /// that is lost instead is [`ClientError::Closed`].
    End,
}

/// A connection in logical walsender mode (`replication=database`).
#[derive(Debug)]
pub struct Connection {
    socket: Socket,
    input: BytesMut,
    /// How long a blocking read may wait: `connect_timeout` while logging in, then
    /// forever (streaming reads set their own).
    read_timeout: Option<Duration>,
}

pub(crate) fn server_error(body: &ErrorResponseBody) -> ClientError {
    let mut err = ServerError {
        severity: String::new(),
        code: String::new(),
        message: String::new(),
        detail: None,
        hint: None,
    };
    let mut fields = body.fields();
    while let Ok(Some(field)) = fields.next() {
        let value = String::from_utf8_lossy(field.value_bytes()).into_owned();
        match field.type_() {
            b'S' => err.severity = value,
            b'C' => err.code = value,
            b'M' => err.message = value,
            b'D' => err.detail = Some(value),
            b'H' => err.hint = Some(value),
            _ => {}
        }
    }
    ClientError::Server(err)
}

pub(crate) fn protocol(text: &str) -> ClientError {
    ClientError::Protocol(text.to_owned())
}

/// The attempts libpq makes for `info`'s sslmode: `allow` tries without TLS and then
/// with it, `prefer` the other way round; never TLS on a Unix-domain socket.
#[must_use]
pub fn attempts(info: &ConnInfo) -> &'static [Attempt] {
    use Attempt::*;
    match info.tls.mode {
        _ if info.is_unix_socket() => &[Plain],
        SslMode::Disable => &[Plain],
        _ if !cfg!(feature = "tls") => &[Plain],
        SslMode::Allow => &[Plain, TlsRequired],
        SslMode::Prefer => &[TlsIfOffered, Plain],
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => &[TlsRequired],
    }
}

/// Whether attempt `i` of `plan`, which failed with `err` (over TLS or not), is worth a
/// second try the other way: only a login the server refused, and only when this try went
/// the first way (prefer's TLS, allow's plain).
pub(crate) fn try_the_other_way(err: &ClientError, tls: bool, i: usize, plan: &[Attempt]) -> bool {
    matches!(err, ClientError::Server(_))
        && i + 1 < plan.len()
        && tls == (plan[i] != Attempt::Plain)
}

/// How one connection attempt treats TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// No SSLRequest.
    Plain,
    /// SSLRequest; go on without TLS if the server declines.
    TlsIfOffered,
    /// SSLRequest; fail if the server declines.
    TlsRequired,
}

impl Connection {
    /// Connects, negotiates TLS as `info.tls.mode` asks, starts a logical replication
    /// session and authenticates.
    ///
    /// As libpq does, `allow` tries without TLS and then with it if the server refuses
    /// the login, `prefer` the other way round; TLS is never used on a Unix-domain socket.
    ///
    /// # Errors
    ///
    /// [`ClientError::Connect`] when the server cannot be reached (or `connect_timeout`
    /// passes), [`ClientError::Tls`] when TLS cannot be set up as asked,
    /// [`ClientError::Auth`] and [`ClientError::Server`] when the login fails.
    pub fn connect(info: &ConnInfo) -> Result<Connection, ClientError> {
        let plan = attempts(info);
        let mut last = None;
        for (i, attempt) in plan.iter().enumerate() {
            match Connection::attempt(info, *attempt) {
                Ok(conn) => return Ok(conn),
                Err(failed) => match *failed {
                    (err, tls) if try_the_other_way(&err, tls, i, plan) => last = Some(err),
                    (err, _) => return Err(err),
                },
            }
        }
        Err(last.unwrap_or(ClientError::Closed))
    }

    /// The socket, with keepalives on and within `connect_timeout`.
    fn open(info: &ConnInfo) -> Result<Socket, ClientError> {
        if info.is_unix_socket() {
            let path = Path::new(&info.host).join(format!(".s.PGSQL.{}", info.port));
            return UnixStream::connect(&path)
                .map(Socket::Unix)
                .map_err(|source| ClientError::Connect {
                    target: path.display().to_string(),
                    source,
                });
        }
        let target = format!("{}:{}", info.host, info.port);
        let failed = |source| ClientError::Connect {
            target: target.clone(),
            source,
        };
        let addresses = (info.host.as_str(), info.port)
            .to_socket_addrs()
            .map_err(failed)?;
        let mut last = io::Error::new(io::ErrorKind::NotFound, "the host name has no address");
        for address in addresses {
            let connected = match info.connect_timeout {
                Some(timeout) => TcpStream::connect_timeout(&address, timeout),
                None => TcpStream::connect(address),
            };
            match connected {
                Ok(tcp) => {
                    tcp.set_nodelay(true).map_err(failed)?;
                    keepalives(&tcp, &info.keepalives).map_err(failed)?;
                    return Ok(Socket::Tcp(tcp));
                }
                Err(e) => last = e,
            }
        }
        Err(failed(last))
    }

    /// One connection attempt, start-up and login included.
    /// On failure, also says whether TLS was in use.
    fn attempt(info: &ConnInfo, attempt: Attempt) -> Result<Connection, Box<(ClientError, bool)>> {
        let plain = |err| Box::new((err, false));
        // A read that waited out connect_timeout: say so, not "would block".
        let timed_out = |err| match err {
            ClientError::Io(e) if is_timeout(&e) => ClientError::Connect {
                target: format!("{}:{}", info.host, info.port),
                source: io::Error::new(io::ErrorKind::TimedOut, "connect_timeout expired"),
            },
            err => err,
        };
        let mut socket = Connection::open(info).map_err(plain)?;
        // connect_timeout covers the whole login, as in libpq.
        socket
            .set_read_timeout(info.connect_timeout)
            .map_err(|e| plain(e.into()))?;
        if attempt != Attempt::Plain {
            socket = Connection::negotiate_tls(socket, info, attempt)
                .map_err(|err| plain(timed_out(err)))?;
        }
        let tls = socket.is_tls();
        let mut conn = Connection {
            socket,
            input: BytesMut::with_capacity(64 * 1024),
            read_timeout: info.connect_timeout,
        };
        conn.login(info)
            .map_err(|err| Box::new((timed_out(err), tls)))?;
        conn.read_timeout = None;
        Ok(conn)
    }

    /// PostgreSQL's SSLRequest, then the TLS handshake if the server answers `S`.
    #[cfg(feature = "tls")]
    fn negotiate_tls(
        socket: Socket,
        info: &ConnInfo,
        attempt: Attempt,
    ) -> Result<Socket, ClientError> {
        let Socket::Tcp(mut tcp) = socket else {
            return Ok(socket);
        };
        let mut out = BytesMut::new();
        frontend::ssl_request(&mut out);
        tcp.write_all(&out)?;
        // Exactly one byte: anything the server sent after it would be unencrypted
        // data injected ahead of the handshake (CVE-2021-23222), so none is buffered.
        let mut answer = [0; 1];
        tcp.read_exact(&mut answer)?;
        if ssl_answer(answer[0], info, attempt)? {
            tls::handshake(tcp, info, tls::config(info)?)
        } else {
            Ok(Socket::Tcp(tcp))
        }
    }

    #[cfg(not(feature = "tls"))]
    fn negotiate_tls(socket: Socket, _: &ConnInfo, _: Attempt) -> Result<Socket, ClientError> {
        Ok(socket)
    }

    /// Start-up and authentication, up to the first ReadyForQuery.
    fn login(&mut self, info: &ConnInfo) -> Result<(), ClientError> {
        let (mut login, startup) = Login::start(info)?;
        self.send(&startup)?;
        loop {
            let message = self.recv()?;
            match login.step(message)? {
                login::Step::Send(out) => self.send(&out)?,
                login::Step::Wait => {}
                login::Step::Done => return Ok(()),
            }
        }
    }

    /// Whether the connection is encrypted with TLS.
    #[must_use]
    pub fn is_tls(&self) -> bool {
        self.socket.is_tls()
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.socket.write_all(bytes).map_err(ClientError::Io)
    }

    /// The next complete message in the input buffer (see [`parse_backend`]).
    fn parse(&mut self) -> Result<Option<Backend>, ClientError> {
        parse_backend(&mut self.input)
    }

    /// The next message, waiting as long as it takes.
    fn recv_any(&mut self) -> Result<Backend, ClientError> {
        self.socket.set_read_timeout(self.read_timeout)?;
        loop {
            if let Some(message) = self.parse()? {
                return Ok(message);
            }
            if !self.fill()? {
                return Err(ClientError::Closed);
            }
        }
    }

    /// The next message other than CopyBothResponse.
    fn recv(&mut self) -> Result<Message, ClientError> {
        match self.recv_any()? {
            Backend::Message(message) => Ok(message),
            Backend::CopyBothResponse => Err(protocol("unexpected CopyBothResponse")),
        }
    }

    /// Reads more bytes; `false` at end of stream.
    fn fill(&mut self) -> Result<bool, ClientError> {
        let mut chunk = [0; 16 * 1024];
        loop {
            match self.socket.read(&mut chunk) {
                Ok(n) => {
                    self.input.extend_from_slice(&chunk[..n]);
                    return Ok(n > 0);
                }
                // A signal (Ctrl-C) interrupted the read: nothing was lost, read again.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(false),
                Err(e) => return Err(ClientError::Io(e)),
            }
        }
    }

    /// Runs a replication command (or query) and returns the rows of its result, as text.
    ///
    /// # Errors
    ///
    /// [`ClientError::Server`] when the server rejects the command, [`ClientError::Closed`]
    /// or [`ClientError::Io`] when the connection fails.
    pub fn simple_query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, ClientError> {
        let mut out = BytesMut::new();
        frontend::query(sql, &mut out)?;
        self.send(&out)?;
        let mut answer = QueryAnswer::default();
        loop {
            if let Some(rows) = answer.take(self.recv()?)? {
                return Ok(rows);
            }
        }
    }

    /// Sends START_REPLICATION and waits for copy-both mode.
    ///
    /// # Errors
    ///
    /// [`ClientError::Server`] when the server refuses (no such slot, bad options), and the
    /// connection errors.
    pub fn start_replication(&mut self, command: &str) -> Result<(), ClientError> {
        let mut out = BytesMut::new();
        frontend::query(command, &mut out)?;
        self.send(&out)?;
        loop {
            let message = match self.recv_any()? {
                Backend::CopyBothResponse => return Ok(()),
                Backend::Message(message) => message,
            };
            match message {
                Message::ErrorResponse(body) => {
                    let error = server_error(&body);
                    // Drain to ReadyForQuery so the connection stays consistent.
                    while !matches!(self.recv()?, Message::ReadyForQuery(_)) {}
                    return Err(error);
                }
                Message::NoticeResponse(_) => {}
                _ => return Err(protocol("unexpected reply to START_REPLICATION")),
            }
        }
    }

    /// The next CopyData payload, or `Idle` when none arrives within `wait`: this blocks
    /// for up to `wait` (as `std::sync::mpsc::Receiver::recv_timeout` does).
    ///
    /// # Errors
    ///
    /// [`ClientError::Server`] for an ErrorResponse in the stream, [`ClientError::Closed`]
    /// when the connection is lost, [`ClientError::Io`] otherwise.
    pub fn recv_copy_data(&mut self, wait: Duration) -> Result<CopyEvent, ClientError> {
        loop {
            if let Some(event) = self.buffered_copy_data()? {
                return Ok(event);
            }
            self.socket.set_read_timeout(Some(wait))?;
            let mut chunk = [0; 64 * 1024];
            match self.socket.read(&mut chunk) {
                // The socket closed without the server ending the stream: the connection
                // is lost, which is not the same as a clean end.
                Ok(0) => return Err(ClientError::Closed),
                Ok(n) => self.input.extend_from_slice(&chunk[..n]),
                // Nothing arrived in time, or a signal (Ctrl-C) interrupted the wait: let
                // the caller look at its clock and its stop flag.
                Err(e) if is_timeout(&e) => return Ok(CopyEvent::Idle),
                // A TLS peer gone without close_notify: the connection is lost.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return Err(ClientError::Closed)
                }
                Err(e) => return Err(ClientError::Io(e)),
            }
        }
    }

    /// The next CopyData payload if one is already in the input buffer, without reading
    /// the socket: what a reader batches after a read.
    ///
    /// # Errors
    ///
    /// As [`Self::recv_copy_data`].
    pub(crate) fn buffered_copy_data(&mut self) -> Result<Option<CopyEvent>, ClientError> {
        buffered_copy_event(&mut self.input)
    }

    /// Sends a CopyData payload (a standby status update).
    ///
    /// # Errors
    ///
    /// [`ClientError::Io`] when the socket cannot be written.
    pub fn send_copy_data(&mut self, payload: &[u8]) -> Result<(), ClientError> {
        let mut out = BytesMut::new();
        frontend::CopyData::new(payload)?.write(&mut out);
        self.send(&out)
    }

    /// Ends copy-both mode and waits up to `wait` for the server to finish (its
    /// ReadyForQuery), ignoring data still in flight. `Ok(false)` when the server has not
    /// finished in time: a server gone silent must not hold a client that is stopping
    /// (pg_recvlogical does not wait at all).
    ///
    /// # Errors
    ///
    /// [`ClientError::Server`] when the server ends with an error, and the connection
    /// errors.
    pub fn finish_copy(&mut self, wait: Duration) -> Result<bool, ClientError> {
        let mut out = BytesMut::new();
        frontend::copy_done(&mut out);
        self.send(&out)?;
        let deadline = std::time::Instant::now() + wait;
        loop {
            match self.parse()? {
                Some(Backend::Message(Message::ReadyForQuery(_))) => return Ok(true),
                Some(Backend::Message(Message::ErrorResponse(body))) => {
                    return Err(server_error(&body))
                }
                Some(_) => continue,
                None => {}
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            self.socket.set_read_timeout(Some(left))?;
            match self.fill() {
                Ok(true) => {}
                Ok(false) => return Err(ClientError::Closed),
                Err(ClientError::Io(e)) if is_timeout(&e) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends Terminate and closes the connection.
    ///
    /// # Errors
    ///
    /// [`ClientError::Io`] when Terminate cannot be sent.
    pub fn close(mut self) -> Result<(), ClientError> {
        let mut out = BytesMut::new();
        frontend::terminate(&mut out);
        self.send(&out)
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::time::Instant;

    use super::*;

    #[test]
    fn keepalive_timings_reach_the_socket() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let mut settings = Keepalives {
            idle: Some(Duration::from_secs(30)),
            interval: Some(Duration::from_secs(5)),
            count: Some(3),
            ..Keepalives::default()
        };
        keepalives(&tcp, &settings).unwrap();
        let socket = socket2::SockRef::from(&tcp);
        assert!(socket.keepalive().unwrap());
        assert_eq!(
            socket.tcp_keepalive_time().unwrap(),
            Duration::from_secs(30)
        );
        assert_eq!(
            socket.tcp_keepalive_interval().unwrap(),
            Duration::from_secs(5)
        );
        assert_eq!(socket.tcp_keepalive_retries().unwrap(), 3);
        settings.enabled = false;
        keepalives(&tcp, &settings).unwrap();
        assert!(!socket.keepalive().unwrap());
    }

    /// A server that accepts the connection and then says nothing.
    #[test]
    fn connect_timeout_covers_a_silent_server() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        for mode in ["disable", "prefer"] {
            let info = ConnInfo::parse(
                Some(&format!(
                    "host=127.0.0.1 port={port} user=u connect_timeout=2 sslmode={mode}"
                )),
                |_| None,
            )
            .unwrap();
            let started = Instant::now();
            let err = Connection::connect(&info).unwrap_err();
            let waited = started.elapsed();
            assert!(
                matches!(&err, ClientError::Connect { source, .. } if source.kind() == io::ErrorKind::TimedOut),
                "sslmode={mode}: {err}"
            );
            assert!(err.to_string().contains("connect_timeout expired"), "{err}");
            assert!(
                waited >= Duration::from_secs(2) && waited < Duration::from_secs(10),
                "sslmode={mode}: {waited:?}"
            );
        }
    }
}
