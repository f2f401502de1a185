//! Upstream to client: the upstream's messages forwarded as they came; in copy-both each
//! XLogData decoded in the session's context and counted, and the fault rules asked
//! before, within and after it; what the rules do (a close, a reset, a stall, an error,
//! the shutdown sequence, a reply request, a slow stream), and the rules that fire
//! between frames (time, flush, a crash, the proxy's own answers).

use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use super::{envelope, make_room, whole_message, End, Framed, Link, Who, READ_AT_LEAST};
use crate::faults::{
    Action, Context, Course, Effect, End as Ends, Scope, Shutdown, ShutdownStep, Step,
    StreamFaults, Trigger,
};
use crate::judge::{Ending, Frame, Hold, HoldStep, IdleAsks, Probe};
use crate::proxy::Shared;
use pgoutput_codec::{
    decode, encode, Decoder, Lsn, PgTimestamp, PrimaryKeepalive, ServerMessage, XLogData,
};
use pgoutput_wire::backend;

/// A logical replication stream under way: its decoder and what the rules keep of it.
struct Session {
    /// `None` when the START_REPLICATION options did not parse here (the frames are
    /// forwarded without a meaning).
    decoder: Option<Decoder>,
    faults: StreamFaults,
}

/// Upstream to client, with the fault rules.
pub(super) struct Down<'a, W> {
    shared: &'a Shared,
    who: &'a Who,
    link: &'a Link,
    client: &'a mut W,
    buf: BytesMut,
    /// How many bytes of the message at the start of `buf` are still to come.
    missing: usize,
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
    /// How far the client was sent whole: the highest keepalive WAL end or transaction
    /// end forwarded.
    sent: Lsn,
    /// A `shutdown` action under way.
    shutting_down: Option<Shutdown>,
    /// The probe's questions at an idle WAL end.
    idle_asks: IdleAsks,
    inject: mpsc::Sender<Vec<u8>>,
    stall: watch::Sender<bool>,
}

impl<'a, W: AsyncWrite + Unpin> Down<'a, W> {
    /// The downstream of a pair that has just started up.
    pub(super) fn new(
        shared: &'a Shared,
        who: &'a Who,
        link: &'a Link,
        client: &'a mut W,
        inject: mpsc::Sender<Vec<u8>>,
        stall: watch::Sender<bool>,
    ) -> Down<'a, W> {
        Down {
            shared,
            who,
            link,
            client,
            buf: BytesMut::with_capacity(READ_AT_LEAST),
            missing: 0,
            written: 0,
            major: 0,
            backend_pid: 0,
            upstream_error: false,
            session: None,
            draining: false,
            sent: Lsn(0),
            shutting_down: None,
            idle_asks: IdleAsks::default(),
            inject,
            stall,
        }
    }

    /// The stream under way at the end: its slot, and whether the upstream sent an
    /// ErrorResponse (a walsender that times out sends none).
    pub(super) fn open_stream(&self) -> Option<(&str, bool)> {
        let slot = self.session.as_ref()?.faults.scope.slot.as_deref()?;
        Some((slot, self.upstream_error))
    }

    pub(super) async fn run(
        &mut self,
        mut server: impl AsyncRead + Unpin,
        mut due: mpsc::Receiver<(Trigger, Action)>,
        mut answered: mpsc::Receiver<Vec<u8>>,
    ) -> End {
        let mut crashes = self.shared.crashes.subscribe();
        loop {
            // A walsender's messages are small and many: reads of a quarter at least.
            make_room(&mut self.buf, self.missing, READ_AT_LEAST / 4);
            let waiting = self.shutting_down == Some(Shutdown::Waiting);
            let asking = self.idle_asks.asking();
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
                () = self.link.replied.notified(), if waiting || asking => {
                    if waiting {
                        self.shutdown_step().await
                    } else {
                        self.ask_idle_again().await
                    }
                }
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
        let effect = match &mut self.session {
            Some(session) => session.faults.fire(&action, self.major),
            None => action.effect(&Context::none(self.major)),
        };
        let at = self.written;
        self.carry_out(effect, at, 0).await
    }

    /// When the next `time` rule of this stream is due.
    fn next_time(&mut self) -> Option<tokio::time::Instant> {
        let at = self
            .session
            .as_mut()?
            .faults
            .next_time(&self.shared.faults)?;
        Some(tokio::time::Instant::from_std(at))
    }

    /// The `time` rules whose moment has come.
    async fn time_rules(&mut self) -> Result<(), End> {
        let Some(session) = &mut self.session else {
            return Ok(());
        };
        let fired = session.faults.due(&self.shared.faults, Instant::now());
        for (trigger, action) in fired {
            self.fire(trigger, action).await?;
        }
        Ok(())
    }

    /// The shutdown's next step: done once the client confirmed what it was sent, else
    /// another keepalive asking for a reply.
    async fn shutdown_step(&mut self) -> Result<(), End> {
        let Some(shutdown) = self.shutting_down else {
            return Ok(());
        };
        let flushed = Lsn(self.link.client_flush.load(Ordering::SeqCst));
        let written = Lsn(self.link.client_write.load(Ordering::SeqCst));
        // Asked when the wait begins and at each reply: no request of its own is out.
        match shutdown.next(self.sent, written, flushed, false) {
            Some(ShutdownStep::Done) => {
                let mut out = Vec::new();
                backend::command_complete(&mut out, "COPY 0");
                self.write_own(self.written, &out).await?;
                self.shared.log(format!(
                    "connection {}: shut down: the client confirmed {flushed}",
                    self.who.attempt
                ));
                Err(End::ShutDown)
            }
            Some(ShutdownStep::Ask) => self.keepalive(true).await,
            Some(ShutdownStep::Await) | None => Ok(()),
        }
    }

    /// The probe holds the transaction here (see [`Hold`]): the frame goes (up to
    /// `end`), then nothing more of the upstream's until the client has answered the
    /// hold's requests (the upstream's own included), or each has waited the probe's
    /// `wait_ms`.
    async fn probe_hold(&mut self, probe: Probe, end: usize) -> Result<(), End> {
        self.write_upto(end).await?;
        let mut hold = Hold::new(&probe);
        let answered = loop {
            match hold.next(&self.link.replies, Instant::now()) {
                HoldStep::Ask => self.keepalive(true).await?,
                HoldStep::WaitUntil(until) => tokio::select! {
                    () = self.link.replied.notified() => {}
                    () = tokio::time::sleep_until(tokio::time::Instant::from_std(until)) => {}
                },
                HoldStep::Done { answered } => break answered,
            }
        };
        if let Some(slot) = self
            .session
            .as_ref()
            .and_then(|s| s.faults.scope.slot.as_deref())
        {
            self.shared.slots.probed(slot, answered);
        }
        Ok(())
    }

    /// A status update came while the probe waits for an idle answer (see [`IdleAsks`]).
    async fn ask_idle_again(&mut self) -> Result<(), End> {
        let idle = self
            .session
            .as_ref()
            .is_some_and(|s| s.faults.tracker.idle());
        let flush = Lsn(self.link.client_flush.load(Ordering::SeqCst));
        if self
            .idle_asks
            .answered(&self.link.replies, self.sent, idle, flush)
        {
            self.keepalive(true).await?;
        }
        Ok(())
    }

    /// A keepalive reporting what the client was sent.
    async fn keepalive(&mut self, reply_requested: bool) -> Result<(), End> {
        if let Some(session) = &self.session {
            if let Some(slot) = &session.faults.scope.slot {
                self.shared.slots.keepalive(
                    slot,
                    self.who.attempt,
                    self.sent,
                    session.faults.tracker.idle(),
                    reply_requested,
                );
            }
        }
        let keepalive = ServerMessage::PrimaryKeepalive(PrimaryKeepalive {
            wal_end: self.sent,
            send_time: PgTimestamp::now(),
            reply_requested,
        });
        if reply_requested {
            self.link.replies.asked();
        }
        let payload = encode(&keepalive, envelope()).expect("a keepalive always encodes");
        let mut out = Vec::new();
        backend::copy_data(&mut out, &payload);
        self.write_own(self.written, &out).await
    }

    /// Every whole message in the buffer, then the bytes written.
    async fn process(&mut self) -> Result<(), End> {
        let mut at = 0;
        loop {
            match whole_message(&self.buf, at) {
                Framed::Whole(len) => {
                    self.message(at, len).await?;
                    at += len;
                }
                Framed::Missing(missing) => {
                    self.missing = missing;
                    break;
                }
                Framed::Lost => {
                    // Not the protocol: forwarded, and nothing more is read into it.
                    self.missing = 0;
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
            // ReadyForQuery: the client is logged in (before, what it sends is the
            // upstream's to judge, and the proxy reads none of it).
            b'Z' => self.link.logged_in.store(true, Ordering::SeqCst),
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
                // The upstream's CopyDone answers the client's.
                self.end_session(if tag == b'c' {
                    Ending::Client
                } else {
                    Ending::Server
                });
            }
            b'E' => self.upstream_error = true,
            _ => {}
        }
        Ok(())
    }

    /// The stream is over (the connection may go on): its slot is free.
    fn end_session(&mut self, how: Ending) {
        let session = self.session.take();
        if let Some(slot) = session
            .as_ref()
            .and_then(|s| s.faults.scope.slot.as_deref())
        {
            let forwarded = Lsn(self.link.forwarded.load(Ordering::SeqCst));
            self.shared
                .slots
                .ended(slot, self.who.attempt, how, forwarded);
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
            self.shared
                .upstream_major
                .store(self.major, Ordering::Relaxed);
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
        let Some((slot, requested, options)) = start else {
            // Physical replication: passed through without a meaning.
            return;
        };
        let decoder = match crate::plugin_options::parse(&options, self.major.max(15)) {
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
            .started(&slot, self.who.attempt, self.backend_pid, requested);
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
        let ctx = decoder.as_ref().map(Decoder::ctx);
        self.link.client_flush.store(0, Ordering::SeqCst);
        self.link.client_write.store(0, Ordering::SeqCst);
        self.link.forwarded.store(0, Ordering::SeqCst);
        self.idle_asks = IdleAsks::default();
        self.session = Some(Session {
            decoder,
            faults: StreamFaults::new(scope, ctx, Instant::now()),
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
                    let idle = session.faults.tracker.idle();
                    if idle {
                        self.sent = self.sent.max(k.wal_end);
                    }
                    self.link.forwarded.fetch_max(k.wal_end.0, Ordering::SeqCst);
                    if k.reply_requested {
                        self.link.replies.asked();
                    }
                    if let Some(slot) = &session.faults.scope.slot {
                        self.shared.slots.keepalive(
                            slot,
                            self.who.attempt,
                            k.wal_end,
                            idle,
                            k.reply_requested,
                        );
                    }
                    // The probe's question at an idle WAL end (where the upstream asks
                    // itself, its question does instead).
                    if idle
                        && !k.reply_requested
                        && self.shared.probe.armed()
                        && self.idle_asks.caught_up(k.wal_end, &self.link.replies)
                    {
                        self.write_upto(at + len).await?;
                        self.keepalive(true).await?;
                    }
                }
                Ok(())
            }
            Some(b'w') => {
                let Some(decoder) = &mut session.decoder else {
                    return Ok(());
                };
                let Ok((wal_start, wal_end, data)) = XLogData::split(payload) else {
                    return Ok(());
                };
                self.who.record.frame();
                // This direction alone moves it: a load and a store, not a locked
                // read-modify-write per frame.
                if wal_end.0 > self.link.forwarded.load(Ordering::Relaxed) {
                    self.link.forwarded.store(wal_end.0, Ordering::Relaxed);
                }
                // What the frame is, not what its row holds: no rule asks for values.
                let facts = match decoder.outline(data) {
                    Ok(message) => {
                        let facts = session.faults.tracker.frame(wal_start, &message);
                        let frame = Frame::new(wal_end, facts.place.opens, &message);
                        if let Some(end) = frame.end {
                            self.sent = self.sent.max(end);
                        }
                        if frame.tells() {
                            if let Some(slot) = &session.faults.scope.slot {
                                self.shared.slots.frame(slot, self.who.attempt, frame);
                            }
                        }
                        facts
                    }
                    Err(err) => {
                        self.who.record.undecodable();
                        self.shared.log(format!(
                            "connection {}: the frame at {} did not decode, forwarded as it came: {err}",
                            self.who.attempt, wal_start
                        ));
                        return Ok(());
                    }
                };
                let probe = self.shared.probe.get();
                let plan = &self.shared.faults;
                let Some(mut course) =
                    Course::new(&mut session.faults, plan, probe, facts, len, self.major)
                else {
                    // Nothing happens at it: the frame goes as it came.
                    if self.shutting_down.is_none() {
                        return Ok(());
                    }
                    return self.finish_shutdown(at + len).await;
                };
                while let Some(step) = self.next_step(&mut course) {
                    match step {
                        Step::Act(fired, effect) => {
                            self.write_upto(at + fired.upto).await?;
                            self.shared.log(format!(
                                "connection {}: fault: {:?} at {:?}",
                                self.who.attempt, fired.action, fired.trigger
                            ));
                            self.carry_out(effect, at, len).await?;
                        }
                        Step::Wait(wait) => {
                            self.write_upto(at).await?;
                            tokio::time::sleep(wait).await;
                        }
                        // The frame is in the buffer: it goes with what follows.
                        Step::Frame => {}
                        Step::Hold(probe) => self.probe_hold(probe, at + len).await?,
                    }
                }
                self.finish_shutdown(at + len).await
            }
            _ => Ok(()),
        }
    }

    /// The next step of a frame's course; none once an ERROR a rule sent has ended the
    /// stream (and the session) here.
    fn next_step(&mut self, course: &mut Course) -> Option<Step> {
        let session = self.session.as_mut()?;
        course.next(&mut session.faults, &self.shared.faults)
    }

    /// Does what an action asks of this connection (its `effect`), at the frame of `len`
    /// bytes at `at` of the buffer; an action that ends it returns how.
    async fn carry_out(&mut self, effect: Effect, at: usize, len: usize) -> Result<(), End> {
        match effect {
            Effect::End(Ends::Fin) => Err(End::Closed),
            Effect::End(Ends::Rst) => Err(End::Reset),
            Effect::End(Ends::Crash) => {
                self.shared.crash();
                Err(End::Crashed)
            }
            Effect::Pause(how_long) => {
                let _ = self.stall.send(true);
                self.who.record.stalled(true);
                match how_long {
                    Some(how_long) => tokio::time::sleep(how_long).await,
                    None => std::future::pending().await,
                }
                self.who.record.stalled(false);
                let _ = self.stall.send(false);
                Ok(())
            }
            Effect::Error { error, fatal: true } => {
                let mut out = Vec::new();
                backend::error_response(&mut out, "FATAL", &error);
                self.write_own(self.written, &out).await?;
                Err(End::Closed)
            }
            Effect::Error {
                error,
                fatal: false,
            } => {
                // An ERROR ends the streaming, and the walsender goes back to its
                // command loop: the client gets the ERROR and ReadyForQuery, the upstream
                // a CopyDone, and the upstream's rest of the copy is dropped.
                let mut out = Vec::new();
                backend::error_response(&mut out, "ERROR", &error);
                backend::ready_for_query(&mut out, b'I');
                self.write_own(self.written, &out).await?;
                self.drop_upto(at + len);
                let mut copy_done = Vec::new();
                backend::copy_done(&mut copy_done);
                if self.inject.try_send(copy_done).is_err() {
                    self.shared.log(format!(
                        "connection {}: the CopyDone after the injected ERROR found no room for the upstream",
                        self.who.attempt
                    ));
                }
                self.end_session(Ending::Fault);
                self.draining = true;
                Ok(())
            }
            Effect::RequestReply => self.keepalive(true).await,
            Effect::Send(bytes) => self.write_own(self.written, &bytes).await,
            // The stream's faults keep it.
            Effect::Pace(_) => Ok(()),
            Effect::Shutdown => {
                self.shutting_down.get_or_insert(Shutdown::Finishing);
                self.finish_shutdown(at + len).await
            }
        }
    }

    /// A shutdown that was finishing the transaction under way starts waiting once no
    /// transaction is open (the frame ending at `end` is the last that goes).
    async fn finish_shutdown(&mut self, end: usize) -> Result<(), End> {
        if self.shutting_down != Some(Shutdown::Finishing) {
            return Ok(());
        }
        let idle = self
            .session
            .as_ref()
            .is_none_or(|s| s.faults.tracker.idle());
        if !idle {
            return Ok(());
        }
        if let Some(shutdown) = &mut self.shutting_down {
            shutdown.caught_up();
        }
        self.write_upto(end).await?;
        self.shared.log(format!(
            "connection {}: shutting down: waiting for the client to confirm {}",
            self.who.attempt, self.sent
        ));
        self.shutdown_step().await
    }
}

/// Sleeps until `at`, or forever without one (a `select!` branch guarded by `is_some`).
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
