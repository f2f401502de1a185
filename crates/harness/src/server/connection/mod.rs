//! One client connection, as an explicit sequence of states:
//! start-up → authentication → commands → streaming → closing.
//!
//! Each state is a method that ends in a typed outcome: the next state, an error the
//! client is told about ([`Failure::Error`], the connection goes on), or the end of the
//! connection ([`Closed`], with why). Whatever the client sends ends in an answer, an
//! ErrorResponse, or a closed connection; never a panic or a hang.
//!
//! [`inbox`] reads the client's messages on a thread of its own; [`startup`] and [`auth`]
//! let the client in; [`commands`] runs replication commands and SQL; [`slots`] creates and
//! drops slots; [`streaming`] runs START_REPLICATION.

mod auth;
mod commands;
mod injector;
mod slots;
mod startup;
mod streaming;

use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::inbox::{read_into, Inbox, Incoming, Wait};

use super::state::Shared;
use pgoutput_codec::{Ctx, ProtocolVersion};
use pgoutput_wire::backend;
use pgoutput_wire::error::{sqlstate, SqlError};
use pgoutput_wire::frontend::{Frontend, ReadError, Startup};
use pgoutput_wire::is_timeout;
use pgoutput_wire::Socket;

/// How long a blocked write waits before the connection looks at its clock (a client's
/// timeout, shutdown) and at what the client sent meanwhile.
const WRITE_TICK: Duration = Duration::from_millis(200);
/// The reader thread needs little stack: one 8 KiB buffer and the parser.
const READER_STACK: usize = 128 * 1024;

/// Why a connection ends.
#[derive(Debug)]
pub(crate) enum Closed {
    /// The client said Terminate or closed its socket.
    ByClient,
    /// A FATAL error, sent to the client where it could be.
    Fatal(String),
    /// Closed without a word to the client, as PostgreSQL does on its timeouts.
    Silently(String),
    /// The socket failed.
    Io(String),
    /// The server is shutting down.
    Shutdown,
    /// A fault rule resets the connection (RST).
    Reset,
}

/// How a command failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// An ERROR: reported, then ReadyForQuery; the connection goes on.
    Error(SqlError),
    /// The connection is over.
    Closed(Closed),
}

impl From<SqlError> for Failure {
    fn from(err: SqlError) -> Failure {
        Failure::Error(err)
    }
}

impl From<Closed> for Failure {
    fn from(closed: Closed) -> Failure {
        Failure::Closed(closed)
    }
}

/// The replication envelope's context (XLogData, keepalives, status updates).
fn envelope() -> Ctx {
    Ctx::plain(ProtocolVersion::V1)
}

/// One connection's state.
struct Connection<'s, W> {
    shared: &'s Shared,
    inbox: &'s Inbox,
    writer: W,
    out: Vec<u8>,
    id: usize,
    in_transaction: bool,
    /// Counted against `max_wal_senders`.
    walsender: bool,
    /// A stream of this session ended with the client's CopyDone: walsender.c's
    /// `streamingDoneReceiving` and `streamingDoneSending` stay set for the session, so
    /// every later START_REPLICATION ends its copy at once, sending nothing.
    copy_done: bool,
    /// When the current state must be over (start-up and authentication).
    deadline: Option<Instant>,
    /// While streaming: the walsender's timers and positions.
    walsnd: Option<streaming::WalSnd>,
}

/// Serves one TCP connection on the calling thread (with a reader thread beside it),
/// after what the fault rules' `connect` triggers do to it.
pub(crate) fn serve_tcp(
    shared: &Shared,
    stream: TcpStream,
    id: usize,
    peer: SocketAddr,
    on_connect: Vec<(crate::faults::Action, crate::faults::OnConnect)>,
) {
    if !injector::on_connect(shared, &stream, on_connect) {
        return;
    }
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(WRITE_TICK));
    let (Ok(reader), Ok(handle)) = (stream.try_clone(), stream.try_clone()) else {
        return;
    };
    let inbox = Arc::new(Inbox::default());
    shared
        .lock()
        .connect(id, Arc::clone(&inbox), Some(Socket::Tcp(handle)));
    std::thread::scope(|scope| {
        let reading = std::thread::Builder::new()
            .name(format!("pgoutput-test-reader-{id}"))
            .stack_size(READER_STACK)
            .spawn_scoped(scope, || read_into(&inbox, reader));
        let mut reset = false;
        if reading.is_ok() {
            reset = run(shared, &inbox, &stream, id, peer);
        } else {
            shared.log(format!("client {id}: no thread to read it: closed"));
            shared
                .lock()
                .disconnect(id, false, "no thread to read it".into());
        }
        // The reader blocks in read until the socket is shut down.
        inbox.close();
        if reset {
            injector::reset(&stream);
        } else {
            let _ = stream.shutdown(Shutdown::Both);
        }
    });
}

/// Runs one whole connection in memory: `input` is everything the client sends (then it
/// closes its side); what the server sends is appended to `output`.
pub(crate) fn serve_in_memory(shared: &Shared, input: &[u8], output: &mut Vec<u8>, id: usize) {
    let inbox = Arc::new(Inbox::default());
    shared.lock().connect(id, Arc::clone(&inbox), None);
    std::thread::scope(|scope| {
        let reading = std::thread::Builder::new()
            .stack_size(READER_STACK)
            .spawn_scoped(scope, || read_into(&inbox, input));
        if reading.is_ok() {
            run(
                shared,
                &inbox,
                &mut *output,
                id,
                SocketAddr::from(([127, 0, 0, 1], 0)),
            );
        } else {
            shared
                .lock()
                .disconnect(id, false, "no thread to read it".into());
        }
        inbox.close();
    });
}

/// A whole connection: its states in order, then closing, which frees its slots and
/// records that it left. `true` when a fault rule resets it.
fn run<'s, W: Write>(
    shared: &'s Shared,
    inbox: &'s Inbox,
    writer: W,
    id: usize,
    peer: SocketAddr,
) -> bool {
    let mut connection = Connection {
        shared,
        inbox,
        writer,
        out: Vec::new(),
        id,
        in_transaction: false,
        walsender: false,
        copy_done: false,
        deadline: None,
        walsnd: None,
    };
    let why = connection.states(peer);
    let reset = matches!(why, Closed::Reset);
    connection.close(why);
    reset
}

impl<W: Write> Connection<'_, W> {
    fn states(&mut self, peer: SocketAddr) -> Closed {
        let user = match self.startup(peer) {
            Ok(Some(user)) => user,
            Ok(None) => return Closed::ByClient,
            Err(closed) => return closed,
        };
        if let Err(closed) = self.authenticate(&user) {
            return closed;
        }
        self.commands()
    }

    /// The closing state: the goodbye PostgreSQL sends on a fast shutdown, then the
    /// records.
    fn close(&mut self, why: Closed) {
        if let Closed::Shutdown = why {
            self.fatal(
                sqlstate::ADMIN_SHUTDOWN,
                "terminating connection due to administrator command",
            );
        }
        let id = self.id;
        let account = match &why {
            Closed::ByClient => "the client disconnected".to_owned(),
            Closed::Fatal(text) => format!("FATAL: {text}"),
            Closed::Silently(text) => format!("closed: {text}"),
            Closed::Io(text) => format!("the socket failed: {text}"),
            Closed::Reset => "reset by a fault rule".to_owned(),
            Closed::Shutdown => "the server shut down".to_owned(),
        };
        self.shared
            .lock()
            .disconnect(id, self.walsender, account.clone());
        self.shared.notify();
        if !matches!(why, Closed::Shutdown) {
            self.shared.log(format!("client {id}: {account}"));
        }
    }

    /// Sends what is buffered, however slowly the client reads: a blocked write wakes
    /// every [`WRITE_TICK`] to handle what the client sent meanwhile and to check the
    /// state's deadline and the server's stop.
    fn flush(&mut self) -> Result<(), Closed> {
        self.flush_upto(self.out.len())
    }

    /// Sends the first `upto` bytes of what is buffered (a fault rule's cut in the middle
    /// of a frame); the rest stays buffered.
    fn flush_upto(&mut self, upto: usize) -> Result<(), Closed> {
        let mut written = 0;
        let result = loop {
            if written == upto {
                break Ok(());
            }
            match self.writer.write(&self.out[written..upto]) {
                Ok(0) => break Err(Closed::Io("the connection accepts no more bytes".into())),
                Ok(n) => written += n,
                Err(err) if is_timeout(&err) => {
                    if let Err(closed) = self.write_stalled() {
                        break Err(closed);
                    }
                }
                Err(err) => break Err(Closed::Io(format!("write failed: {err}"))),
            }
        };
        if written > 0 {
            // One clock read per write, not per message.
            if let Some(walsnd) = &mut self.walsnd {
                walsnd.last_sent = Instant::now();
            }
        }
        self.out.drain(..upto);
        result
    }

    /// A write that has waited a tick: what a walsender checks while its socket is full.
    fn write_stalled(&mut self) -> Result<(), Closed> {
        if self.shared.stopping() {
            return Err(Closed::Shutdown);
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Closed::Silently(
                "canceling authentication due to timeout".into(),
            ));
        }
        if self.walsnd.is_some() {
            match self.receive_pending() {
                Ok(()) => {}
                Err(Failure::Closed(closed)) => return Err(closed),
                // An ERROR ends the streaming once the write is done.
                Err(failure) => {
                    if let Some(walsnd) = &mut self.walsnd {
                        walsnd.pending_failure.get_or_insert(failure);
                    }
                }
            }
            self.check_timeout()?;
        }
        Ok(())
    }

    /// The next item from the client, waiting until the state's deadline.
    fn next_item(&mut self) -> Result<Incoming, Closed> {
        loop {
            // A fast shutdown ends a session waiting for its next command.
            if self.shared.stopping() || self.shared.finishing() {
                return Err(Closed::Shutdown);
            }
            match self.inbox.wait(self.deadline) {
                Wait::Incoming(item) => return Ok(item),
                Wait::Woken => {}
                Wait::TimedOut => {
                    return Err(Closed::Silently(
                        "canceling authentication due to timeout".into(),
                    ))
                }
            }
        }
    }

    /// The next typed message.
    fn next(&mut self) -> Result<Frontend, Closed> {
        match self.next_item()? {
            Incoming::Message(message) => Ok(message),
            Incoming::End(err) => Err(self.read_failed(err)),
            Incoming::Startup(_) => {
                Err(self.fatal(sqlstate::PROTOCOL_VIOLATION, "unexpected start-up packet"))
            }
        }
    }

    /// The next start-up packet; `None` when the client closed first.
    fn next_startup(&mut self) -> Result<Option<Startup>, Closed> {
        match self.next_item()? {
            Incoming::Startup(startup) => Ok(Some(startup)),
            Incoming::End(ReadError::Closed) => Ok(None),
            Incoming::End(err) => Err(self.read_failed(err)),
            Incoming::Message(_) => {
                Err(self.fatal(sqlstate::PROTOCOL_VIOLATION, "expected a start-up packet"))
            }
        }
    }

    fn read_failed(&mut self, err: ReadError) -> Closed {
        match err {
            ReadError::Closed => Closed::ByClient,
            ReadError::Io(e) => Closed::Io(e.to_string()),
            ReadError::Malformed(text) => self.fatal(sqlstate::PROTOCOL_VIOLATION, &text),
            ReadError::Unanswered(text) => Closed::Silently(text.to_owned()),
        }
    }

    /// A FATAL error: reported, then the connection closes.
    fn fatal(&mut self, code: &str, text: &str) -> Closed {
        self.fatal_with(&SqlError {
            code: code.to_owned().into(),
            message: text.to_owned(),
            detail: None,
            hint: None,
        })
    }

    /// [`Self::fatal`] with a DETAIL.
    fn fatal_with(&mut self, err: &SqlError) -> Closed {
        let text = &err.message;
        backend::error_response(&mut self.out, "FATAL", err);
        // Only the goodbye is left to send: a client that does not read gets no more
        // time than a tick of the server's stop allows.
        let _ = self.flush();
        Closed::Fatal(text.to_owned())
    }

    fn error(&mut self, err: &SqlError) {
        backend::error_response(&mut self.out, "ERROR", err);
    }

    fn ready(&mut self) -> Result<(), Closed> {
        backend::ready_for_query(&mut self.out, if self.in_transaction { b'T' } else { b'I' });
        self.flush()
    }
}
