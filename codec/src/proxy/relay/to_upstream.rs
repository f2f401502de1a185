//! Client to upstream: the client's messages forwarded as they came, its
//! START_REPLICATION and status updates noted (the slot's record, the `flush` rules, the
//! position the upstream may hear), and the proxy's own answers to a START_REPLICATION of
//! a slot whose state a test set.

use std::sync::atomic::Ordering;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use super::{envelope, whole_message, End, Link, Who, STALLED_AT_MOST};
use crate::client::tokio::Io;
use crate::proxy::Shared;
use crate::server::grammar::{self, Command};
use crate::server::{Action, Trigger};
use crate::wire::backend;
use crate::Lsn;
use crate::{decode, ClientMessage};

/// Client to upstream: forwarded as read, with the START_REPLICATION and status updates
/// noted; held while a rule stalls the connection; bytes a rule injects (a CopyDone
/// after an injected ERROR, a checkpoint's status update) go in between whole messages.
/// A START_REPLICATION of a slot whose state the test set is answered by the
/// downstream, and never reaches the upstream.
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
pub(super) struct FromDown {
    /// Bytes a rule sends the upstream (a CopyDone after an injected ERROR).
    pub(super) injected: mpsc::UnboundedReceiver<Vec<u8>>,
    /// Whether a rule stalls the connection.
    pub(super) stalled: watch::Receiver<bool>,
    /// The `flush` rules a status update met, for the downstream to do.
    pub(super) flush_rules: mpsc::UnboundedSender<(Trigger, Action)>,
    /// Answers the proxy gives the client itself (a START_REPLICATION refused for its
    /// slot's state), for the downstream to write.
    pub(super) answers: mpsc::UnboundedSender<Vec<u8>>,
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
    let Some(Ok(Command::StartLogical { slot, lsn, options })) = grammar::parse(text) else {
        return None;
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
        return Some(out);
    }
    *link.start.lock().unwrap_or_else(|e| e.into_inner()) = Some((slot, lsn, options));
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
        let forwarded = Lsn(link.forwarded.load(Ordering::SeqCst));
        let heard = shared.slots.status_update(
            slot,
            who.attempt,
            update.write_lsn,
            update.flush_lsn,
            forwarded,
        );
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
    link.status_updates.fetch_add(1, Ordering::SeqCst);
    link.replied.notify_one();
}
