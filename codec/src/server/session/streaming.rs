//! START_REPLICATION: the checks, then copy-both streaming of the script rendered for the
//! client's options, keepalives, standby status updates, and the closing sequence.

use std::io::{Read, Write};
use std::time::Instant;

use super::{envelope, Closed, Session};
use crate::server::command;
use crate::server::error::{error, sqlstate, SqlError};
use crate::server::render::Renderer;
use crate::server::{Event, StreamOptions};
use crate::wire::backend;
use crate::wire::frontend::Frontend;
use crate::{
    decode, encode, ClientMessage, Lsn, PgTimestamp, PrimaryKeepalive, ServerMessage, XLogData,
};

impl<S: Read + Write> Session<'_, S> {
    /// START_REPLICATION: checks, then streaming until CopyDone (then back to commands).
    pub(super) fn start(
        &mut self,
        slot: &str,
        lsn: Lsn,
        options: &command::Options,
    ) -> Result<(), SqlError> {
        if self.in_transaction {
            return Err(error(
                sqlstate::ACTIVE_SQL_TRANSACTION,
                "START_REPLICATION cannot run inside a transaction block",
            ));
        }
        let from = {
            let mut state = self.shared.lock();
            let Some(info) = state.slots.iter_mut().find(|s| s.name == slot) else {
                return Err(error(
                    sqlstate::UNDEFINED_OBJECT,
                    format!("replication slot \"{slot}\" does not exist"),
                ));
            };
            if let Some(client) = info.active_client.filter(|c| *c != self.id) {
                return Err(error(
                    sqlstate::OBJECT_IN_USE,
                    format!(
                        "replication slot \"{slot}\" is active for PID {}",
                        10_000 + client
                    ),
                ));
            }
            let mut options = StreamOptions::parse(options, self.shared.config.major)?;
            // A slot created with TWO_PHASE decodes prepared transactions whatever the
            // client asks (logical.c), which is how a subscriber whose two-phase state is
            // already enabled gets them without sending `two_phase`.
            options.two_phase |= info.two_phase;
            info.active_client = Some(self.id);
            let from = info.confirmed_flush_lsn.max(lsn);
            state.client(self.id).stream_options.push(options.clone());
            (from, options)
        };
        let (from, options) = from;
        self.shared.log(format!(
            "client {}: streaming slot {slot} from {from} with {options:?}",
            self.id
        ));
        match self.stream(slot, from, &options) {
            Ok(()) => Ok(()),
            Err(Streamed::Refused(err)) => Err(err),
            Err(Streamed::Closed(closed)) => {
                // The connection is over: nothing more is sent on it.
                self.closed = Some(closed);
                Ok(())
            }
        }
    }

    fn keepalive(&mut self, wal_end: Lsn, reply_requested: bool) {
        let keepalive = ServerMessage::PrimaryKeepalive(PrimaryKeepalive {
            wal_end,
            send_time: PgTimestamp::now(),
            reply_requested,
        });
        let payload = encode(&keepalive, envelope()).expect("a keepalive always encodes");
        backend::copy_data(&mut self.out, &payload);
    }

    fn stream(&mut self, slot: &str, from: Lsn, options: &StreamOptions) -> Result<(), Streamed> {
        let (catalog, mut events) = {
            let state = self.shared.lock();
            (state.catalog.clone(), state.events.clone())
        };
        let mut renderer = Renderer::new(&catalog, options);
        backend::copy_response(&mut self.out, b'W', 0, false);
        self.keepalive(from, false);
        self.flush().map_err(Streamed::Closed)?;
        let mut cursor = 0;
        let mut position = from;
        let mut last_sent = Instant::now();
        let interval = self.shared.config.keepalive_interval;
        loop {
            if self.stopping() {
                return Err(Streamed::Closed(Closed::Shutdown));
            }
            match self.reader.next(&mut self.socket) {
                Ok(None) => {}
                Ok(Some(Frontend::CopyData(data))) => {
                    let reply = self
                        .client_copy_data(slot, &data)
                        .map_err(Streamed::Closed)?;
                    if reply {
                        self.keepalive(position, false);
                    }
                }
                Ok(Some(Frontend::CopyDone)) => {
                    backend::copy_done(&mut self.out);
                    backend::command_complete(&mut self.out, "COPY 0");
                    backend::command_complete(&mut self.out, "START_REPLICATION");
                    self.release(slot);
                    return Ok(());
                }
                Ok(Some(Frontend::Terminate)) => return Err(Streamed::Closed(Closed::ByClient)),
                Ok(Some(other)) => {
                    let text = format!("unexpected message in copy-both mode: {other:?}");
                    return Err(Streamed::Closed(
                        self.fatal(sqlstate::PROTOCOL_VIOLATION, &text),
                    ));
                }
                Err(err) => return Err(Streamed::Closed(self.read_failed(err))),
            }
            if cursor == events.len() {
                let state = self.shared.lock();
                // Events are only ever appended: copy just the new ones.
                if state.events.len() > events.len() {
                    events.extend_from_slice(&state.events[events.len()..]);
                }
            }
            if cursor < events.len() {
                let end = events[cursor].end_lsn();
                if end > from {
                    let frames = match renderer.event(&events, cursor) {
                        Ok(frames) => frames,
                        Err(err) => {
                            self.shared
                                .log(format!("client {}: cannot stream: {err}", self.id));
                            self.release(slot);
                            return Err(Streamed::Refused(error(
                                sqlstate::FEATURE_NOT_SUPPORTED,
                                err.0,
                            )));
                        }
                    };
                    for frame in frames {
                        let xlog = XLogData {
                            wal_start: frame.lsn,
                            wal_end: frame.lsn,
                            send_time: PgTimestamp::now(),
                            data: frame.payload.into(),
                        };
                        let payload = encode(&xlog, envelope()).expect("XLogData always encodes");
                        backend::copy_data(&mut self.out, &payload);
                    }
                    // Blocks of a transaction still in progress move no position.
                    if !matches!(events[cursor], Event::StreamProgress { .. }) {
                        position = position.max(end);
                        self.keepalive(position, false);
                    }
                    last_sent = Instant::now();
                }
                cursor += 1;
            } else if last_sent.elapsed() >= interval {
                self.keepalive(position, true);
                last_sent = Instant::now();
            }
            self.flush().map_err(Streamed::Closed)?;
        }
    }

    /// A standby status update (recorded; a non-zero flush position advances the slot) or
    /// hot standby feedback. `Ok(true)` when the client asked for a reply.
    fn client_copy_data(&mut self, slot: &str, data: &[u8]) -> Result<bool, Closed> {
        match decode::<ClientMessage>(data, envelope()) {
            Ok(ClientMessage::StandbyStatusUpdate(update)) => {
                let mut state = self.shared.lock();
                state.add_status_update(self.id, update);
                let mut advanced = None;
                if let Some(info) = state.slots.iter_mut().find(|s| s.name == slot) {
                    if update.flush_lsn > info.confirmed_flush_lsn {
                        info.confirmed_flush_lsn = update.flush_lsn;
                        advanced = Some(update.flush_lsn);
                    }
                }
                drop(state);
                self.shared.changed.notify_all();
                if let Some(lsn) = advanced {
                    self.shared.log(format!(
                        "client {}: slot {slot} confirmed at {lsn}",
                        self.id
                    ));
                }
                Ok(update.reply_requested)
            }
            Ok(ClientMessage::HotStandbyFeedback(_)) => Ok(false),
            Err(err) => Err(self.fatal(
                sqlstate::PROTOCOL_VIOLATION,
                &format!("invalid standby message: {err}"),
            )),
        }
    }

    fn release(&mut self, slot: &str) {
        let mut state = self.shared.lock();
        if let Some(info) = state.slots.iter_mut().find(|s| s.name == slot) {
            if info.active_client == Some(self.id) {
                info.active_client = None;
            }
        }
        drop(state);
        self.shared.changed.notify_all();
    }
}

/// How streaming ended, when not by CopyDone.
enum Streamed {
    /// The stream cannot be sent: an ErrorResponse, then back to commands.
    Refused(SqlError),
    /// The connection is over.
    Closed(Closed),
}
