//! Streamed transactions: the blocks of a transaction still in progress (Stream Start,
//! its changes, Stream Stop), then its Stream Commit, Abort or Prepare.

use std::collections::HashSet;

use crate::server::script::{End, Step, Transaction};
use pgoutput_codec::{
    Lsn, PgOutputMessage, PgStr, StreamAbort, StreamCommit, StreamPrepare, StreamStart, StreamStop,
    Streaming,
};

use super::change::is_table_change;
use super::transaction::Ending;
use super::{Halt, Renderer, Sink};

/// Where a block starting at step `index` of `t` starts: its first change (visible to
/// the client or not, as PostgreSQL's Stream Start carries the first change it decodes),
/// else the last change before it.
fn block_start(t: &Transaction, index: usize) -> Lsn {
    let lsn_of = |step: &Step| match step {
        Step::Change { lsn, .. } => Some(*lsn),
        _ => None,
    };
    t.steps[index.min(t.steps.len())..]
        .iter()
        .take_while(|s| {
            !matches!(
                s,
                Step::StreamBlock { .. } | Step::SubtransactionAbort { .. }
            )
        })
        .find_map(lsn_of)
        .or_else(|| {
            t.steps[..index.min(t.steps.len())]
                .iter()
                .rev()
                .find_map(lsn_of)
        })
        .unwrap_or(t.first_change_lsn())
}

/// How far a streamed transaction has gone out to this client.
#[derive(Debug, Default)]
pub(super) struct StreamState {
    /// Steps rendered so far.
    steps_done: usize,
    /// Whether any block went out.
    block_sent: bool,
    /// Subtransactions with changes sent.
    subtransactions: HashSet<usize>,
}

/// The stream block open while rendering: where its Stream Stop goes.
#[derive(Debug, Clone, Copy)]
struct OpenBlock {
    /// The Stream Stop position the script gives (zero: the last change so far).
    stop_lsn: Lsn,
    last_lsn: Lsn,
}

impl Renderer<'_> {
    /// Whether this client gets `t` as stream blocks.
    pub(super) fn streams(&self, t: &Transaction) -> bool {
        t.streamed
            && self.options.streaming != Streaming::Off
            && !(t.origin.is_some() && self.options.origin_none)
    }

    /// The blocks of `t` up to step `upto` that this client has not had yet. Each block
    /// goes out, also one with nothing for this client, as PostgreSQL sends it; each call
    /// ends with its block closed.
    pub(super) fn stream_steps<S>(
        &mut self,
        t: &Transaction,
        upto: usize,
        sink: &mut dyn Sink<Stop = S>,
    ) -> Result<(), Halt<S>> {
        let parallel = self.options.streaming == Streaming::Parallel;
        let mut state = self.streams.remove(&t.xid).unwrap_or_default();
        let mut block: Option<OpenBlock> = None;
        let from = state.steps_done;
        for (index, step) in t.steps.iter().enumerate().take(upto).skip(from) {
            // A change or schema outside a block (the transaction's first steps, those
            // after a subtransaction abort) opens one, as the reorder buffer's stream
            // start precedes the callbacks of the changes it streams.
            if block.is_none() && matches!(step, Step::Change { .. } | Step::Schema { .. }) {
                let start = block_start(t, index);
                block = Some(self.start_block(t, &mut state, start, Lsn(0), sink)?);
            }
            match step {
                Step::StreamBlock {
                    start_lsn,
                    stop_lsn,
                } => {
                    if let Some(open) = block.take() {
                        self.stop_block(sink, open)?;
                    }
                    let start = match start_lsn.0 {
                        0 => block_start(t, index + 1),
                        _ => *start_lsn,
                    };
                    block = Some(self.start_block(t, &mut state, start, *stop_lsn, sink)?);
                }
                Step::Change {
                    lsn,
                    subtransaction,
                    message,
                } => {
                    if is_table_change(message) {
                        self.load_publications(sink)?;
                    }
                    if let Some(open) = &mut block {
                        open.last_lsn = *lsn;
                    }
                    if !self.visible(message) {
                        self.invalidated_by(step);
                        continue;
                    }
                    state.subtransactions.insert(*subtransaction);
                    self.change(
                        sink,
                        *lsn,
                        message,
                        Some(t.xid_of(*subtransaction)),
                        Some(t.xid),
                    )?;
                    self.invalidated_by(step);
                }
                Step::Schema { .. } => {
                    // Sent with the xid of the change after it, as pgoutput sends it (or
                    // the one recorded, where no change follows).
                    let sub = t.steps[index..].iter().find_map(|s| match s {
                        Step::Change { subtransaction, .. } => Some(t.xid_of(*subtransaction)),
                        _ => None,
                    });
                    let recorded = match step {
                        Step::Schema { relation, .. } => relation.xid,
                        _ => None,
                    };
                    let xid = sub.or(recorded).unwrap_or(t.xid);
                    self.schema_step(step, sink, Some(xid), Some(t.xid))?;
                }
                Step::SubtransactionAbort {
                    subtransaction,
                    lsn,
                    timestamp,
                } => {
                    if let Some(open) = block.take() {
                        self.stop_block(sink, open)?;
                    }
                    // A subtransaction whose changes went out needs undoing; so does one
                    // the script gives no changes at all (its abort is all it says).
                    let scripted_bare = !t.steps.iter().any(|s| {
                        matches!(s, Step::Change { subtransaction: sub, .. } if sub == subtransaction)
                    });
                    if state.subtransactions.contains(subtransaction) || scripted_bare {
                        self.emit(
                            sink,
                            *lsn,
                            &PgOutputMessage::StreamAbort(StreamAbort {
                                xid: t.xid,
                                subtransaction_xid: t.xid_of(*subtransaction),
                                abort_lsn: parallel.then_some(*lsn),
                                abort_timestamp: parallel.then_some(*timestamp),
                            }),
                        )?;
                        self.schemas.stream_aborted(t.xid);
                    }
                }
            }
        }
        if let Some(open) = block {
            self.stop_block(sink, open)?;
        }
        state.steps_done = state.steps_done.max(upto);
        self.streams.insert(t.xid, state);
        Ok(())
    }

    /// The blocks of `t` not sent yet, its stream state done with; whether any block of
    /// it went out.
    pub(super) fn stream_rest<S>(
        &mut self,
        t: &Transaction,
        sink: &mut dyn Sink<Stop = S>,
    ) -> Result<bool, Halt<S>> {
        self.stream_steps(t, t.steps.len(), sink)?;
        let state = self.streams.remove(&t.xid).unwrap_or_default();
        Ok(state.block_sent)
    }

    /// Stream Start (with the Origin after the transaction's first one).
    fn start_block<S>(
        &mut self,
        t: &Transaction,
        state: &mut StreamState,
        start_lsn: Lsn,
        stop_lsn: Lsn,
        sink: &mut dyn Sink<Stop = S>,
    ) -> Result<OpenBlock, Halt<S>> {
        let first_block = !state.block_sent;
        let with_origin = first_block && t.origin.is_some();
        self.emit(
            sink,
            if with_origin { Lsn(0) } else { start_lsn },
            &PgOutputMessage::StreamStart(StreamStart {
                xid: t.xid,
                first_segment: first_block && !t.streamed_before,
            }),
        )?;
        if with_origin {
            self.origin(t, start_lsn, sink)?;
        }
        state.block_sent = true;
        Ok(OpenBlock {
            stop_lsn,
            last_lsn: start_lsn,
        })
    }

    fn stop_block<S>(
        &mut self,
        sink: &mut dyn Sink<Stop = S>,
        block: OpenBlock,
    ) -> Result<(), Halt<S>> {
        let lsn = match block.stop_lsn.0 {
            0 => block.last_lsn,
            _ => block.stop_lsn,
        };
        self.emit(sink, lsn, &PgOutputMessage::StreamStop(StreamStop))
    }

    /// A transaction as Stream Start/Stop blocks (those not sent at an earlier
    /// [`Event::StreamProgress`]), then its Stream Commit, Abort or Prepare.
    pub(super) fn streamed<S>(
        &mut self,
        t: &Transaction,
        sink: &mut dyn Sink<Stop = S>,
    ) -> Result<(), Halt<S>> {
        let parallel = self.options.streaming == Streaming::Parallel;
        if !self.stream_rest(t, sink)? {
            // Nothing of it was streamed (it has no steps): it ends like a whole one.
            return match t.end {
                End::Abort => Ok(()),
                _ => self.whole(t, Ending::of(t), sink),
            };
        }
        let end = match &t.end {
            End::Commit => PgOutputMessage::StreamCommit(StreamCommit {
                xid: t.xid,
                flags: 0,
                commit_lsn: t.commit_lsn,
                end_lsn: t.end_lsn,
                commit_timestamp: t.timestamp,
            }),
            End::Abort => PgOutputMessage::StreamAbort(StreamAbort {
                xid: t.xid,
                subtransaction_xid: t.xid,
                abort_lsn: parallel.then_some(t.commit_lsn),
                abort_timestamp: parallel.then_some(t.timestamp),
            }),
            End::Prepare { gid } => PgOutputMessage::StreamPrepare(StreamPrepare {
                flags: 0,
                prepare_lsn: t.commit_lsn,
                end_lsn: t.end_lsn,
                prepare_timestamp: t.timestamp,
                xid: t.xid,
                gid: PgStr::from(gid.as_str()),
            }),
        };
        let lsn = if t.end == End::Abort {
            t.commit_lsn
        } else {
            t.end_lsn
        };
        self.emit(sink, lsn, &end)?;
        match t.end {
            End::Commit => self.schemas.stream_committed(t.xid),
            End::Abort => self.schemas.stream_aborted(t.xid),
            // pgoutput keeps a prepared transaction's schemas as its own.
            End::Prepare { .. } => {}
        }
        Ok(())
    }
}
