//! What the client sends, read by a thread of its own into an inbox.
//!
//! A walsender reads its client's replies while it writes (`WalSndLoop` waits on the
//! socket and its latch at once). With blocking sockets that takes a reader beside the
//! writer: the reader blocks in `read` and fills the inbox, the connection waits on the
//! inbox with a deadline and is woken by new messages, new WAL or shutdown. So a quiet
//! client is streamed without pauses, an idle connection costs nothing until it has work,
//! and every timeout is a deadline on one wait, whatever the client trickles in.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

use pgoutput_wire::frontend::{Frontend, FrontendReader, ReadError, Startup};

/// What the reader read.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A start-up packet (SSLRequest, GSSENCRequest, CancelRequest or StartupMessage).
    Startup(Startup),
    /// A typed message.
    Message(Frontend),
    /// Nothing more will come: the client closed, the socket failed, or the bytes broke
    /// the protocol.
    End(ReadError),
}

/// What a wait on the inbox ended with.
#[derive(Debug)]
pub(crate) enum Wait {
    Incoming(Incoming),
    /// Woken: new WAL, or the server stops.
    Woken,
    /// The deadline passed.
    TimedOut,
}

/// How many messages the reader may read ahead of the connection: beyond, it stops
/// reading, and TCP's flow control holds the client back.
const CAPACITY: usize = 256;

#[derive(Debug, Default)]
struct Queue {
    items: VecDeque<Incoming>,
    woken: bool,
    /// The connection is over: the reader stops.
    closed: bool,
    /// The reader read the client's end (queued or not yet, behind a full queue).
    client_left: bool,
}

/// The messages one connection has received and not yet handled.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    queue: Mutex<Queue>,
    /// Signalled for the connection: an item, a wake-up, or closing.
    ready: Condvar,
    /// Signalled for the reader: room in the queue, or closing.
    room: Condvar,
}

impl Inbox {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues an item, waiting for room. `false` once the connection is over.
    fn push(&self, item: Incoming) -> bool {
        let mut queue = self.lock();
        while queue.items.len() >= CAPACITY && !queue.closed {
            queue = self.room.wait(queue).unwrap_or_else(|e| e.into_inner());
        }
        if queue.closed {
            return false;
        }
        queue.items.push_back(item);
        drop(queue);
        self.ready.notify_one();
        true
    }

    /// Whether the client has gone (closed its socket, or broke the protocol), whatever
    /// is still queued before its end: a stalled connection, which reads nothing, ends
    /// on it as PostgreSQL's walsender does when its socket closes.
    pub(crate) fn client_left(&self) -> bool {
        self.lock().client_left
    }

    /// Wakes the connection's wait (new WAL, shutdown).
    pub(crate) fn wake(&self) {
        self.lock().woken = true;
        self.ready.notify_one();
    }

    /// Ends the reader's work: it pushes nothing more.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.room.notify_one();
    }

    /// The next item if one is there, without waiting.
    pub(crate) fn try_next(&self) -> Option<Incoming> {
        let item = self.lock().items.pop_front();
        if item.is_some() {
            self.room.notify_one();
        }
        item
    }

    /// The next item, a wake-up, or the deadline (`None`: no deadline).
    pub(crate) fn wait(&self, deadline: Option<Instant>) -> Wait {
        let mut queue = self.lock();
        loop {
            if let Some(item) = queue.items.pop_front() {
                drop(queue);
                self.room.notify_one();
                return Wait::Incoming(item);
            }
            if std::mem::take(&mut queue.woken) {
                return Wait::Woken;
            }
            queue = match deadline {
                None => self.ready.wait(queue).unwrap_or_else(|e| e.into_inner()),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Wait::TimedOut;
                    }
                    self.ready
                        .wait_timeout(queue, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }
}

/// The reader: start-up packets until the StartupMessage (or CancelRequest), then typed
/// messages, until the client closes, the bytes break the protocol, or the connection is
/// over. It blocks in `read`; the connection ends it by shutting the socket down.
pub(crate) fn read_into(inbox: &Inbox, mut input: impl Read) {
    let mut reader = FrontendReader::default();
    let mut in_startup = true;
    loop {
        let item = if in_startup {
            match reader.startup(&mut input) {
                Ok(None) => continue,
                Ok(Some(startup)) => {
                    in_startup = matches!(startup, Startup::SslRequest | Startup::GssEncRequest);
                    Incoming::Startup(startup)
                }
                Err(err) => Incoming::End(err),
            }
        } else {
            match reader.next(&mut input) {
                Ok(None) => continue,
                Ok(Some(message)) => Incoming::Message(message),
                Err(err) => Incoming::End(err),
            }
        };
        let end = matches!(item, Incoming::End(_));
        if end {
            inbox.lock().client_left = true;
        }
        if !inbox.push(item) || end {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_wait_ends_with_an_item_a_wake_up_or_the_deadline() {
        let inbox = Inbox::default();
        let soon = Instant::now() + Duration::from_millis(20);
        assert!(matches!(inbox.wait(Some(soon)), Wait::TimedOut));
        inbox.wake();
        assert!(matches!(inbox.wait(None), Wait::Woken));
        let input: &[u8] = b"\0\0\0\x08\x04\xd2\x16\x2f";
        read_into(&inbox, input);
        assert!(matches!(
            inbox.try_next(),
            Some(Incoming::Startup(Startup::SslRequest))
        ));
        assert!(matches!(
            inbox.wait(None),
            Wait::Incoming(Incoming::End(ReadError::Closed))
        ));
    }
}
