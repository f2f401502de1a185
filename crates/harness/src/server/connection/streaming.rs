//! The streaming state: START_REPLICATION's checks, then copy-both streaming as
//! PostgreSQL's walsender does it (`WalSndLoop`, `XLogSendLogical`, `WalSndWaitForWal`):
//! messages written as fast as the client's socket takes them, rendered one at a time from
//! the shared WAL, the client's replies read all the while, keepalives with a reply
//! request once half of `wal_sender_timeout` has passed since the client's last reply,
//! and the client dropped without a word once all of it has.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use super::{envelope, Closed, Connection, Failure};
use crate::faults::{Action, Course, Facts, Scope, Shutdown, ShutdownStep, StreamFaults, Trigger};
use crate::judge::{Ending, Frame, Hold, HoldStep, IdleAsks, Probe, Replies};
use crate::server::inbox::{Incoming, Wait};
use crate::server::render::{Halt, Renderer, Sink};
use crate::server::sent::Unrecorded;
use crate::server::state::State;
use crate::server::Event;
use pgoutput_client::StreamOptions;
use pgoutput_codec::{
    decode, encode, ClientMessage, Ctx, Lsn, PgOutputMessage, PgTimestamp, PrimaryKeepalive,
    ServerMessage, StandbyStatusUpdate, Tagged, XLogData,
};
use pgoutput_wire::backend;
use pgoutput_wire::error::{error, sqlstate, SqlError};
use pgoutput_wire::frontend::Frontend;
use pgoutput_wire::grammar;

/// Output is written to the socket once this much is buffered (and when the WAL is
/// read to its end): large enough for few system calls, small enough that memory does
/// not follow the size of a transaction.
const FLUSH_AT: usize = 64 * 1024;
/// How many WAL events a connection takes from the shared WAL per lock.
const BATCH: usize = 64;
/// A CopyData frame's bytes before its XLogData's payload: 'd', the Int32 length, then
/// 'w', dataStart, walEnd and sendTime.
const FRAME_HEADER: usize = 1 + 4 + 1 + 8 + 8 + 8;
/// A standby status update's length: type, three positions, a time, the reply flag.
const STATUS_UPDATE_LEN: usize = 1 + 8 * 4 + 1;
/// Hot standby feedback's: type, a time, xmin and epoch, catalog xmin and epoch.
const HOT_STANDBY_FEEDBACK_LEN: usize = 1 + 8 + 4 * 4;

/// Why the connection stopped a rendering half way: the client's CopyDone, or what ends
/// the stream.
#[derive(Debug)]
pub(super) enum Stop {
    CopyDone,
    Failed(Failure),
}

/// A streaming connection's walsender state (walsender.c's statics of the same names).
#[derive(Debug)]
pub(super) struct WalSnd {
    slot: String,
    /// `sentPtr`: how far the WAL has been read for this client (what keepalives say).
    sent: Lsn,
    /// Transactions that end at or before this are not sent (the slot's confirmed
    /// position, or the client's requested start if later).
    from: Lsn,
    /// The positions the client last reported as written and flushed.
    client_write: Lsn,
    client_flush: Lsn,
    /// `last_reply_timestamp`: when the client last sent a reply (or streaming began).
    last_reply: Instant,
    /// `waiting_for_ping_response`: a reply request is out and unanswered.
    waiting_for_ping: bool,
    /// When anything was last written to the socket (for our idle keepalive).
    pub(super) last_sent: Instant,
    /// The client sent CopyDone.
    pub(super) done: bool,
    /// An ERROR read while a write waited: it ends the stream once the write is done
    /// (a write cannot stop half way).
    pub(super) pending_failure: Option<Failure>,
    /// The crash epoch streaming began in: after a crash its updates move no slot.
    epoch: u64,
    /// What the fault rules keep of this stream.
    pub(super) faults: StreamFaults,
    /// Rules a status update met, done at the next point where only whole frames are
    /// buffered.
    pub(super) pending_faults: Vec<(Trigger, Action)>,
    /// A `shutdown` action or the server's fast shutdown: `WalSndDone`'s sequence.
    pub(super) shutting_down: Option<Shutdown>,
    /// Frames sent that the judge and the client's record have not heard of yet.
    unrecorded: Vec<Unrecorded>,
    /// The client's replies to keepalives that asked, and its status updates.
    replies: Replies,
    /// How the stream ended, where its cause said so (a fault rule, the timeout).
    pub(super) ending: Option<Ending>,
    /// The probe's questions at an idle WAL end.
    idle_asks: IdleAsks,
}

impl<W: Write> Connection<'_, W> {
    /// START_REPLICATION: checks, then streaming until CopyDone (then back to commands).
    pub(super) fn start(
        &mut self,
        slot: &str,
        lsn: Lsn,
        options: &grammar::Options,
    ) -> Result<(), Failure> {
        if self.in_transaction {
            return Err(error(
                sqlstate::ACTIVE_SQL_TRANSACTION,
                "START_REPLICATION cannot run inside a transaction block",
            )
            .into());
        }
        let major = self.shared.config.major;
        let (confirmed, options, scope, epoch) = {
            let mut state = self.shared.lock();
            let info = state.slots_mut().acquire(slot, self.id, major)?;
            let confirmed = info.confirmed_flush_lsn;
            let two_phase = info.two_phase;
            let of_slot = info.starts();
            let epoch = state.epoch();
            let scope = Scope {
                slot: Some(slot.to_owned()),
                application_name: state.records().application_name(self.id),
                of_slot,
                of_server: self.shared.next_start(),
            };
            match crate::plugin_options::parse(options, major) {
                Ok(mut options) => {
                    // A slot created with TWO_PHASE decodes prepared transactions
                    // whatever the client asks (logical.c), which is how a subscriber
                    // whose two-phase state is already enabled gets them without
                    // sending `two_phase`.
                    options.two_phase |= two_phase;
                    state
                        .records_mut()
                        .add_stream_options(self.id, options.clone());
                    state
                        .judge(slot)
                        .started(self.id as u64, lsn, Some(confirmed));
                    (confirmed, options, scope, epoch)
                }
                Err(err) => {
                    state.slots_mut().release(slot, self.id);
                    return Err(err.into());
                }
            }
        };
        // CreateDecodingContext: an earlier start is forwarded to the confirmed position;
        // a later one only skips what commits before it.
        let from = confirmed.max(lsn);
        self.shared.log(format!(
            "client {}: streaming slot {slot} from {from} with {options:?}",
            self.id
        ));
        let now = Instant::now();
        let walsnd = WalSnd {
            slot: slot.to_owned(),
            // StartLogicalReplication: "sentPtr = MyReplicationSlot->data.confirmed_flush".
            sent: confirmed,
            from,
            client_write: Lsn(0),
            client_flush: Lsn(0),
            last_reply: now,
            waiting_for_ping: false,
            last_sent: now,
            done: false,
            pending_failure: None,
            epoch,
            faults: StreamFaults::new(
                scope,
                Ctx::new(options.proto_version, options.streaming).ok(),
                now,
            ),
            pending_faults: Vec::new(),
            shutting_down: None,
            unrecorded: Vec::new(),
            replies: Replies::default(),
            ending: None,
            idle_asks: IdleAsks::default(),
        };
        let result = self.stream(walsnd, &options);
        self.shared.lock().slots_mut().release(slot, self.id);
        self.shared.notify();
        result?;
        backend::command_complete(&mut self.out, "START_REPLICATION");
        Ok(())
    }

    fn stream(&mut self, walsnd: WalSnd, options: &StreamOptions) -> Result<(), Failure> {
        let catalog = Arc::clone(&self.shared.catalog);
        let mut renderer = Renderer::new(&catalog, options, self.shared.config.major);
        backend::copy_response(&mut self.out, b'W', 0, false);
        self.walsnd = Some(walsnd);
        let result = if self.copy_done {
            // WalSndLoop leaves at once: both sides' CopyDone were seen already.
            backend::command_complete(&mut self.out, "COPY 0");
            Ok(())
        } else {
            self.keepalive(false)
                .map_err(Failure::from)
                .and_then(|()| self.stream_loop(&mut renderer))
        };
        let how = self.ending(&result);
        self.record(|state, slot, id| state.judge(slot).ended(id, how));
        self.walsnd = None;
        result
    }

    /// How the stream ended, for the judge.
    fn ending(&mut self, result: &Result<(), Failure>) -> Ending {
        let epoch = self.shared.lock().epoch();
        let walsnd = self.walsnd();
        if walsnd.epoch != epoch {
            return Ending::Crash;
        }
        if let Some(how) = walsnd.ending {
            return how;
        }
        match result {
            Ok(()) | Err(Failure::Closed(Closed::ByClient | Closed::Io(_))) => Ending::Client,
            Err(_) => Ending::Server,
        }
    }

    /// Tells the slot's judge and the client's record of the frames sent since they last
    /// heard, then does `f` with the state, the slot and the client's number.
    pub(super) fn record<T>(&mut self, f: impl FnOnce(&mut State, &str, u64) -> T) -> T {
        let (shared, id) = (self.shared, self.id);
        let walsnd = self.walsnd.as_mut().expect("streaming");
        let mut state = shared.lock();
        state.record_frames(id, &walsnd.slot, &mut walsnd.unrecorded);
        f(&mut state, &walsnd.slot, id as u64)
    }

    pub(super) fn walsnd(&mut self) -> &mut WalSnd {
        self.walsnd.as_mut().expect("streaming")
    }

    fn stream_loop(&mut self, renderer: &mut Renderer<'_>) -> Result<(), Failure> {
        let mut cursor = 0;
        loop {
            self.receive_pending()?;
            if let Some(failure) = self.walsnd().pending_failure.take() {
                return Err(failure);
            }
            if self.walsnd().done {
                return self.end_copy();
            }
            self.check_timeout()?;
            self.keepalive_if_necessary()?;
            self.due_faults()?;
            if self.shared.finishing() {
                self.walsnd()
                    .shutting_down
                    .get_or_insert(Shutdown::Finishing);
            }
            let batch = self.shared.wal().entries(cursor, BATCH);
            if batch.is_empty() {
                if let Some(shutdown) = &mut self.walsnd().shutting_down {
                    shutdown.caught_up();
                    self.walsnd_done()?;
                }
                self.wait_for_wal()?;
                continue;
            }
            for entry in batch {
                cursor += 1;
                let end = entry.event.end_lsn();
                if !entry.event.skipped_from(self.walsnd().from) {
                    match renderer.event(&entry.event, entry.partner.as_deref(), self) {
                        Ok(()) => {}
                        Err(Halt::Sink(Stop::CopyDone)) => return self.end_copy(),
                        Err(Halt::Sink(Stop::Failed(failure))) => return Err(failure),
                        Err(Halt::Render(err)) => {
                            self.shared
                                .log(format!("client {}: cannot stream: {err}", self.id));
                            return Err(
                                error(sqlstate::FEATURE_NOT_SUPPORTED, err.to_string()).into()
                            );
                        }
                        Err(Halt::Sql(err)) => return Err(err.into()),
                    }
                }
                // Blocks of a transaction still in progress move no position.
                if !matches!(*entry.event, Event::StreamProgress { .. }) {
                    let walsnd = self.walsnd();
                    walsnd.sent = walsnd.sent.max(end);
                }
                if self.walsnd().done {
                    break;
                }
            }
        }
    }

    /// Caught up with the WAL: what `WalSndWaitForWal` does. A keepalive tells a client
    /// that has not confirmed everything where the WAL stands; then the connection sleeps
    /// until the client sends something, new WAL comes, or a timer is due.
    fn wait_for_wal(&mut self) -> Result<(), Failure> {
        let probing = self.shared.probe.armed();
        let walsnd = self.walsnd();
        if probing
            && walsnd.faults.tracker.idle()
            && walsnd.idle_asks.caught_up(walsnd.sent, &walsnd.replies)
        {
            self.keepalive(true)?;
        } else if walsnd.client_flush < walsnd.sent
            && walsnd.client_write < walsnd.sent
            && !walsnd.waiting_for_ping
        {
            self.keepalive(false)?;
        }
        if !self.walsnd().unrecorded.is_empty() {
            self.record(|_, _, _| ());
        }
        self.flush()?;
        let deadline = self.next_timer();
        match self.inbox.wait(Some(deadline)) {
            Wait::Incoming(item) => self.receive(item),
            Wait::Woken if self.shared.stopping() => Err(Closed::Shutdown.into()),
            Wait::Woken => Ok(()),
            Wait::TimedOut => {
                let interval = self.shared.config.keepalive_interval;
                if self.walsnd().last_sent.elapsed() >= interval {
                    self.keepalive(false)?;
                }
                Ok(())
            }
        }
    }

    /// `WalSndDone`, caught up after a `shutdown` action: once the client has
    /// confirmed everything sent, CommandComplete and the end; until then, keepalives
    /// asking for a reply.
    fn walsnd_done(&mut self) -> Result<(), Failure> {
        let walsnd = self.walsnd();
        let Some(shutdown) = walsnd.shutting_down else {
            return Ok(());
        };
        let (sent, write, flush) = (walsnd.sent, walsnd.client_write, walsnd.client_flush);
        match shutdown.next(sent, write, flush, walsnd.waiting_for_ping) {
            // (A logical walsender is let go before the shutdown checkpoint is written:
            // PostgreSQL 15 ends at once for a client that has confirmed the last commit,
            // the twins test shows.)
            Some(ShutdownStep::Done) => {
                backend::command_complete(&mut self.out, "COPY 0");
                self.flush()?;
                Err(Closed::Silently(
                    "walsender shut down: the client confirmed all it was sent".into(),
                )
                .into())
            }
            Some(ShutdownStep::Ask) => Ok(self.keepalive(true)?),
            Some(ShutdownStep::Await) | None => Ok(()),
        }
    }

    /// When the next timer is due: the reply request, the timeout, our idle keepalive
    /// (`WalSndComputeSleeptime`, plus ours), or a fault rule's moment.
    fn next_timer(&mut self) -> Instant {
        let interval = self.shared.config.keepalive_interval;
        let timeout = self.shared.config.wal_sender_timeout;
        let fault = self.next_fault_time();
        let walsnd = self.walsnd();
        let idle = walsnd.last_sent + interval;
        let next = match timeout {
            Some(timeout) if walsnd.waiting_for_ping => idle.min(walsnd.last_reply + timeout),
            Some(timeout) => idle.min(walsnd.last_reply + timeout / 2),
            None => idle,
        };
        fault.map_or(next, |fault| next.min(fault))
    }

    /// `WalSndCheckTimeOut`: a client silent for `wal_sender_timeout` is dropped, with
    /// nothing sent ("we don't send the error message to the standby").
    pub(super) fn check_timeout(&mut self) -> Result<(), Closed> {
        let Some(timeout) = self.shared.config.wal_sender_timeout else {
            return Ok(());
        };
        let Some(walsnd) = &mut self.walsnd else {
            return Ok(());
        };
        if walsnd.last_reply.elapsed() >= timeout {
            walsnd.ending = Some(Ending::Timeout);
            self.record(|state, slot, id| state.judge(slot).reply_overdue(id));
            return Err(Closed::Silently(
                "terminating walsender process due to replication timeout".into(),
            ));
        }
        Ok(())
    }

    /// `WalSndKeepaliveIfNecessary`: once half of `wal_sender_timeout` has passed since
    /// the client's last reply, one keepalive asks for a reply.
    fn keepalive_if_necessary(&mut self) -> Result<(), Closed> {
        let Some(timeout) = self.shared.config.wal_sender_timeout else {
            return Ok(());
        };
        let walsnd = self.walsnd();
        if !walsnd.waiting_for_ping && walsnd.last_reply.elapsed() >= timeout / 2 {
            self.keepalive(true)?;
            self.flush()?;
        }
        Ok(())
    }

    /// A keepalive reporting how far the WAL has been read for this client.
    pub(super) fn keepalive(&mut self, reply_requested: bool) -> Result<(), Closed> {
        let walsnd = self.walsnd();
        walsnd.last_sent = Instant::now();
        if reply_requested {
            walsnd.waiting_for_ping = true;
            walsnd.replies.asked();
        }
        let (wal_end, idle) = (walsnd.sent, walsnd.faults.tracker.idle());
        self.record(|state, slot, id| {
            state
                .judge(slot)
                .keepalive_sent(id, wal_end, reply_requested, idle);
            state.records_mut().add_keepalive(id as usize, wal_end);
        });
        let keepalive = ServerMessage::PrimaryKeepalive(PrimaryKeepalive {
            wal_end,
            send_time: PgTimestamp::now(),
            reply_requested,
        });
        let payload = encode(&keepalive, envelope()).expect("a keepalive always encodes");
        backend::copy_data(&mut self.out, &payload);
        if self.out.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    /// The client's CopyDone is answered with ours and the copy's CommandComplete.
    fn end_copy(&mut self) -> Result<(), Failure> {
        self.copy_done = true;
        backend::copy_done(&mut self.out);
        backend::command_complete(&mut self.out, "COPY 0");
        Ok(())
    }

    /// `ProcessRepliesIfAny`: everything the client has sent, without waiting; after its
    /// CopyDone, what follows belongs to the next command and stays in the inbox.
    pub(super) fn receive_pending(&mut self) -> Result<(), Failure> {
        while !self.walsnd().done {
            match self.inbox.try_next() {
                Some(item) => self.receive(item)?,
                None => break,
            }
        }
        Ok(())
    }

    fn receive(&mut self, item: Incoming) -> Result<(), Failure> {
        let message = match item {
            Incoming::Message(message) => message,
            Incoming::End(err) => return Err(self.read_failed(err).into()),
            Incoming::Startup(_) => {
                return Err(self
                    .fatal(sqlstate::PROTOCOL_VIOLATION, "unexpected start-up packet")
                    .into())
            }
        };
        match message {
            Frontend::CopyData(data) => self.standby_message(&data)?,
            Frontend::CopyDone => self.walsnd().done = true,
            Frontend::Terminate => return Err(Closed::ByClient.into()),
            other => {
                let text = format!(
                    "invalid standby message type \"{}\"",
                    char::from(other.type_byte())
                );
                return Err(self.fatal(sqlstate::PROTOCOL_VIOLATION, &text).into());
            }
        }
        let walsnd = self.walsnd();
        walsnd.last_reply = Instant::now();
        walsnd.waiting_for_ping = false;
        Ok(())
    }

    /// `ProcessStandbyMessage`: a status update (recorded; its flush position advances
    /// the slot) or hot standby feedback. Like PostgreSQL, bytes after the fields are
    /// ignored, too few are an ERROR, and an unknown type closes the connection.
    fn standby_message(&mut self, data: &[u8]) -> Result<(), Failure> {
        let Some(&kind) = data.first() else {
            return Err(short("no data left in message").into());
        };
        let len = match kind {
            b'r' => STATUS_UPDATE_LEN,
            b'h' => HOT_STANDBY_FEEDBACK_LEN,
            other => {
                return Err(Closed::Silently(format!(
                    "unexpected message type \"{}\"",
                    char::from(other)
                ))
                .into())
            }
        };
        let Some(fields) = data.get(..len) else {
            return Err(short("insufficient data left in message").into());
        };
        match decode::<ClientMessage>(fields, envelope()) {
            Ok(ClientMessage::StandbyStatusUpdate(update)) => self.status_update(update),
            Ok(ClientMessage::HotStandbyFeedback(_)) => Ok(()),
            Err(err) => Err(short(&format!("invalid standby message: {err}")).into()),
        }
    }

    fn status_update(&mut self, update: StandbyStatusUpdate) -> Result<(), Failure> {
        let walsnd = self.walsnd();
        walsnd.client_write = update.write_lsn;
        walsnd.client_flush = update.flush_lsn;
        walsnd.replies.answered();
        let slot = walsnd.slot.clone();
        let epoch = walsnd.epoch;
        let advanced =
            self.record(|state, slot, id| state.status_update(id as usize, slot, update, epoch));
        let scope = self.scope();
        let met = self.shared.faults.flushed(Some(&scope), update.flush_lsn);
        self.walsnd().pending_faults.extend(met);
        self.shared.notify();
        if let Some(lsn) = advanced {
            self.shared.log(format!(
                "client {}: slot {slot} confirmed at {lsn}",
                self.id
            ));
        }
        if update.reply_requested {
            self.keepalive(false)?;
        }
        let walsnd = self.walsnd();
        let idle = walsnd.faults.tracker.idle();
        if walsnd
            .idle_asks
            .answered(&walsnd.replies, walsnd.sent, idle, walsnd.client_flush)
        {
            self.keepalive(true)?;
        }
        Ok(())
    }
}

fn short(text: &str) -> SqlError {
    error(sqlstate::PROTOCOL_VIOLATION, text)
}

/// Rendered messages go straight into the connection's output, each in its CopyData
/// and XLogData frame, and out to the socket every [`FLUSH_AT`] bytes; between writes the
/// client's replies are read, so a long transaction neither waits for its end nor
/// starves the client's feedback.
impl<W: Write> Sink for Connection<'_, W> {
    type Stop = Stop;

    fn frame(
        &mut self,
        lsn: Lsn,
        message: &PgOutputMessage<'_>,
        payload: &[u8],
    ) -> Result<(), Stop> {
        self.faulty_frame(lsn, message, payload)
            .map_err(Stop::Failed)?;
        let walsnd = self.walsnd();
        if let Some(failure) = walsnd.pending_failure.take() {
            return Err(Stop::Failed(failure));
        }
        if walsnd.done {
            return Err(Stop::CopyDone);
        }
        Ok(())
    }

    fn warning(&mut self, code: &'static str, text: &str, detail: &str, hint: &str) {
        backend::error_or_notice(
            &mut self.out,
            b'N',
            "WARNING",
            code,
            text,
            Some(detail),
            Some(hint),
        );
    }
}

impl<W: Write> Connection<'_, W> {
    /// One frame, with the fault rules asked before, within and after it when there are
    /// any (one atomic load when there are none).
    fn faulty_frame(
        &mut self,
        lsn: Lsn,
        message: &PgOutputMessage<'_>,
        payload: &[u8],
    ) -> Result<(), Failure> {
        // Followed always: the judge hears whether a transaction is open from it.
        let facts = self.walsnd().faults.tracker.frame(lsn, message);
        let probe = self.shared.probe.get();
        let len = FRAME_HEADER + payload.len();
        let major = self.shared.config.major;
        let plan = &self.shared.faults;
        let held = match Course::new(&mut self.walsnd().faults, plan, probe, facts, len, major) {
            None => {
                self.push_frame(lsn, message, &facts, payload);
                None
            }
            Some(course) => {
                self.frame_course(course, |c| c.push_frame(lsn, message, &facts, payload))?
            }
        };
        // While rules are armed, `time` and `flush` ones are asked after every frame.
        if self.shared.faults.armed() {
            self.due_faults()?;
        }
        if let Some(probe) = held {
            self.probe_hold(probe)?;
        }
        self.after_frame()
    }

    /// The probe holds the transaction here (see [`Hold`]): nothing more is sent until
    /// the client has answered the hold's requests, or each has waited the probe's
    /// `wait_ms`. What it confirms meanwhile, it confirmed without the rest.
    pub(super) fn probe_hold(&mut self, probe: Probe) -> Result<(), Failure> {
        let mut hold = Hold::new(&probe);
        let answered = loop {
            let walsnd = self.walsnd();
            if walsnd.done || walsnd.pending_failure.is_some() {
                hold.give_up();
            }
            match hold.next(&walsnd.replies, Instant::now()) {
                HoldStep::Ask => {
                    self.keepalive(true)?;
                    self.flush()?;
                }
                HoldStep::WaitUntil(until) => {
                    match self.inbox.wait(Some(until)) {
                        Wait::Incoming(item) => self.receive(item)?,
                        Wait::Woken if self.shared.stopping() => {
                            return Err(Closed::Shutdown.into())
                        }
                        Wait::Woken | Wait::TimedOut => {}
                    }
                    self.check_timeout()?;
                }
                HoldStep::Done { answered } => break answered,
            }
        };
        self.record(|state, slot, _| state.judge(slot).probed(answered));
        Ok(())
    }

    /// CopyData 'd', its Int32 length, then XLogData 'w': dataStart, walEnd, sendTime.
    fn push_frame(
        &mut self,
        lsn: Lsn,
        message: &PgOutputMessage<'_>,
        facts: &Facts,
        payload: &[u8],
    ) {
        let walsnd = self.walsnd();
        walsnd.unrecorded.push(Unrecorded {
            tag: message.tag(),
            lsn,
            frame: Frame::new(lsn, facts.place.opens, message),
        });
        let xlog = XLogData {
            wal_start: lsn,
            // A logical walsender's `walEnd` is the frame's own position.
            wal_end: lsn,
            send_time: PgTimestamp::now(),
            data: payload.into(),
        };
        backend::xlog_data(&mut self.out, &xlog);
    }

    /// Every [`FLUSH_AT`] bytes: out to the socket, then the client's replies and the
    /// timers.
    fn after_frame(&mut self) -> Result<(), Failure> {
        if self.out.len() < FLUSH_AT {
            return Ok(());
        }
        self.flush()?;
        self.record(|_, _, _| ());
        self.receive_pending()?;
        self.check_timeout()?;
        self.keepalive_if_necessary()?;
        Ok(())
    }
}
