//! Client to upstream: the client's messages forwarded as they came, its
//! START_REPLICATION and status updates noted (the slot's record, the `flush` rules, the
//! position the upstream may hear), and the proxy's own answers to a START_REPLICATION of
//! a slot whose state a test set.

use std::sync::atomic::Ordering;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use super::{envelope, make_room, End, Link, Who, STALLED_AT_MOST};
use crate::faults::{Action, Trigger};
use crate::proxy::Shared;
use pgoutput_client::tokio::Io;
use pgoutput_codec::Lsn;
use pgoutput_codec::{decode, encode_into, ClientMessage, StandbyStatusUpdate};
use pgoutput_wire::backend;
use pgoutput_wire::grammar::{self, Command};

/// Client to upstream: each message forwarded as its bytes come, once its header is read
/// (the upstream, PostgreSQL, judges its length and refuses one past its limits as it
/// would from the client itself); only the messages the proxy reads are held until whole:
/// a START_REPLICATION (a query before copy-both, up to [`READ_QUERY_AT_MOST`]) and, in
/// copy-both, the client's standby messages (up to [`READ_STANDBY_AT_MOST`]), which are
/// noted. Held while a rule stalls the connection; bytes a rule injects (a CopyDone
/// after an injected ERROR, a checkpoint's status update) go in between messages. A
/// START_REPLICATION of a slot whose state the test set is answered by the downstream,
/// and never reaches the upstream.
pub(super) async fn run(
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
    let mut framing = Framing::default();
    loop {
        // While a rule stalls the connection nothing goes to the upstream, but the
        // client is still read (up to a socket buffer's worth): its status updates are
        // judged, and a client that leaves ends the pair.
        let held = *stalled.borrow();
        let room = buf.len() < STALLED_AT_MOST;
        if !held {
            // A client sends little: room only for what a message it is reading needs.
            make_room(&mut buf, framing.missing, 0);
        }
        tokio::select! {
            read = client.read_buf(&mut buf), if !held || room => match read {
                Ok(0) | Err(_) => {
                    // What the client sent before it left (its Terminate) still goes,
                    // unless the connection is stalled.
                    if !*stalled.borrow() {
                        let _ = server.write_all(&buf[framing.from..framing.read]).await;
                    }
                    return End::ClientLeft;
                }
                Ok(_) => {}
            },
            // Between messages only: the upstream has none of the client's half-sent.
            Some(bytes) = injected.recv(), if !framing.upstream_inside => {
                if server.write_all(&bytes).await.is_err() {
                    return End::UpstreamClosed;
                }
                continue;
            }
            Ok(()) = stalled.changed(), if held => {}
        }
        while let Some(len) = framing.frame(&buf, link) {
            let at = framing.read;
            let noted = note_client_message(&mut buf[at..at + len], link, shared, who);
            for rule in noted.rules {
                let _ = flush_rules.send(rule).await;
            }
            if let Some(answer) = noted.answer {
                // Answered here: what came before it goes, it does not.
                if server.write_all(&buf[framing.from..at]).await.is_err() {
                    return End::UpstreamClosed;
                }
                framing.from = at + len;
                let _ = answers.send(answer).await;
            }
            framing.read = at + len;
        }
        if *stalled.borrow() {
            continue;
        }
        if framing.read > 0 {
            if server
                .write_all(&buf[framing.from..framing.read])
                .await
                .is_err()
            {
                return End::UpstreamClosed;
            }
            buf.advance(framing.read);
            framing.forwarded();
        }
    }
}

/// The longest query read for a START_REPLICATION (one naming a thousand publications is
/// 64 kB); a longer one goes on unread, as its bytes come.
pub(super) const READ_QUERY_AT_MOST: usize = 1024 * 1024;

/// The longest CopyData read in copy-both (a standby status update is 39 bytes).
pub(super) const READ_STANDBY_AT_MOST: usize = 1024;

/// Where the client's bytes stand: `buf[from..read]` is framed and not forwarded yet;
/// `passing` bytes of a message the proxy does not read are still to come after `read`.
#[derive(Debug, Default)]
struct Framing {
    from: usize,
    read: usize,
    passing: usize,
    /// A length no message can have came: the rest goes on as it comes, for the
    /// upstream to refuse.
    lost: bool,
    /// The upstream was forwarded part of a message only.
    upstream_inside: bool,
    /// How many bytes of the message it reads next are still to come.
    missing: usize,
}

impl Framing {
    /// Frames what `buf` holds past `read`: the bytes of messages the proxy does not read
    /// are counted in as they come; the length of the next message it reads, once that
    /// message is all there (`None`: more bytes are needed).
    fn frame(&mut self, buf: &BytesMut, link: &Link) -> Option<usize> {
        self.missing = 0;
        loop {
            let available = buf.len() - self.read;
            if self.passing > 0 || self.lost {
                let n = if self.lost {
                    available
                } else {
                    self.passing.min(available)
                };
                self.read += n;
                self.passing -= n.min(self.passing);
                if self.passing > 0 || self.lost || available == n {
                    return None;
                }
                continue;
            }
            let header = buf.get(self.read..self.read + 5)?;
            let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
            if len < 4 {
                self.lost = true;
                continue;
            }
            let total = len + 1;
            let streaming = link.streaming.load(Ordering::Relaxed);
            // Nothing a client sends before it logged in is read: it makes no state.
            let logged_in = link.logged_in.load(Ordering::SeqCst);
            if header[0] == b'X' && logged_in {
                link.terminated.store(true, Ordering::SeqCst);
            }
            let read = match header[0] {
                b'd' if streaming => total <= READ_STANDBY_AT_MOST,
                b'Q' if logged_in && !streaming => total <= READ_QUERY_AT_MOST,
                _ => false,
            };
            if !read {
                self.passing = total;
                continue;
            }
            if available < total {
                // Room is made once what is framed has gone (`make_room`).
                self.missing = total - available;
                return None;
            }
            return Some(total);
        }
    }

    /// `buf[..read]` went to the upstream and was dropped.
    fn forwarded(&mut self) {
        self.upstream_inside = self.passing > 0 || self.lost;
        (self.from, self.read) = (0, 0);
    }
}

/// The downstream's ends of the channels to the upstream direction.
pub(super) struct FromDown {
    /// Bytes a rule sends the upstream (a CopyDone after an injected ERROR).
    pub(super) injected: mpsc::Receiver<Vec<u8>>,
    /// Whether a rule stalls the connection.
    pub(super) stalled: watch::Receiver<bool>,
    /// The `flush` rules a status update met, for the downstream to do.
    pub(super) flush_rules: mpsc::Sender<(Trigger, Action)>,
    /// Answers the proxy gives the client itself (a START_REPLICATION refused for its
    /// slot's state), for the downstream to write.
    pub(super) answers: mpsc::Sender<Vec<u8>>,
}

/// What the downstream is to do about a client's message: the `flush` rules its status
/// update met, and the answer the proxy gives itself instead of forwarding it.
#[derive(Debug, Default)]
struct Noted {
    rules: Vec<(Trigger, Action)>,
    answer: Option<Vec<u8>>,
}

/// A client's message, read for what the downstream needs to know: its
/// START_REPLICATION, and in copy-both its status updates (with the `flush` rules they
/// meet; their flush position held back to the last checkpoint with a persistence
/// interval).
fn note_client_message(message: &mut [u8], link: &Link, shared: &Shared, who: &Who) -> Noted {
    let mut noted = Noted::default();
    if link.streaming.load(Ordering::Relaxed) {
        if message[0] == b'd' {
            noted.rules = status_update(message, link, shared, who);
        }
        return noted;
    }
    if message[0] != b'Q' {
        return noted;
    }
    let text = &message[5..];
    let text = text.strip_suffix(b"\0").unwrap_or(text);
    let Ok(text) = std::str::from_utf8(text) else {
        return noted;
    };
    let Some(Ok(Command::StartLogical { slot, lsn, options })) = grammar::parse(text) else {
        return noted;
    };
    let major = link.major.load(Ordering::Relaxed);
    if let Some(err) = shared.slots.refusal(&slot, major) {
        shared.log(format!(
            "connection {}: START_REPLICATION of slot {slot} answered by the proxy: {} {}",
            who.attempt, err.code, err.message
        ));
        let mut out = Vec::new();
        backend::error_response(&mut out, "ERROR", &err);
        backend::ready_for_query(&mut out, b'I');
        noted.answer = Some(out);
        return noted;
    }
    *link.start.lock().unwrap_or_else(|e| e.into_inner()) = Some((slot, lsn, options));
    noted
}

/// A CopyData from a streaming client: a standby status update is recorded, meets the
/// `flush` rules, and reports to the upstream what the slot's persistence lets it hear.
fn status_update(
    message: &mut [u8],
    link: &Link,
    shared: &Shared,
    who: &Who,
) -> Vec<(Trigger, Action)> {
    let Ok(ClientMessage::StandbyStatusUpdate(update)) =
        decode::<ClientMessage>(&message[5..], envelope())
    else {
        return Vec::new();
    };
    link.client_flush
        .fetch_max(update.flush_lsn.0, Ordering::SeqCst);
    link.client_write
        .fetch_max(update.write_lsn.0, Ordering::SeqCst);
    let scope = link.scope.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(slot) = scope.as_ref().and_then(|s| s.slot.as_deref()) {
        shared.records.status_update(&who.record, update.flush_lsn);
        let forwarded = Lsn(link.forwarded.load(Ordering::SeqCst));
        let heard = shared
            .slots
            .status_update(slot, who.attempt, update.flush_lsn, forwarded);
        if heard != update.flush_lsn {
            // The same update with the flush position the upstream may hear, written by
            // the codec over the old one (the same length: every field is fixed).
            let held = ClientMessage::StandbyStatusUpdate(StandbyStatusUpdate {
                flush_lsn: heard,
                ..update
            });
            let mut body = Vec::with_capacity(message.len() - 5);
            if encode_into(&held, envelope(), &mut body).is_ok() && body.len() == message.len() - 5
            {
                message[5..].copy_from_slice(&body);
            }
        }
    }
    let met = shared.faults.flushed(scope.as_ref(), update.flush_lsn);
    link.replies.answered();
    link.replied.notify_one();
    met
}
