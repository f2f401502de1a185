//! Turning the script into one client's stream: the pgoutput messages PostgreSQL would
//! send for that client's options, with the XLogData header LSN of each.
//!
//! The rules follow pgoutput and the walsender: changes only for tables in the client's
//! publications, Relation before a table's first change in a session (and in each
//! streamed transaction), empty transactions skipped, aborted (sub)transactions invisible
//! unless streamed, prepared transactions sent whole at `COMMIT PREPARED` to clients
//! without `two_phase`, logical decoding messages only with `messages`, and values in
//! the text or binary form the client asked for.

use std::collections::{HashMap, HashSet};
use std::fmt;

use super::catalog::Catalog;
use super::script::{relations_of, End, Event, Step, Transaction};
use super::values::{binary_to_text, text_to_binary};
use super::StreamOptions;
use crate::{
    Begin, BeginPrepare, ColumnValue, Commit, CommitPrepared, Encoder, Lsn, Oid, OldTuple, Origin,
    PgOutputMessage, PgStr, Prepare, RollbackPrepared, StreamAbort, StreamCommit, StreamPrepare,
    StreamStart, StreamStop, Streaming, TupleData, Xid,
};

/// One XLogData payload and the WAL position its frame header carries (`0/0` for
/// Relation and Type, as PostgreSQL sends them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// `dataStart` and `walEnd` of the XLogData header.
    pub lsn: Lsn,
    /// The pgoutput message.
    pub payload: Vec<u8>,
}

/// Why a script event cannot be sent to a client with its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderError(pub String);

impl fmt::Display for RenderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RenderError {}

/// The state of one client's stream: its encoder and the relations it has seen.
#[derive(Debug)]
pub(crate) struct Renderer<'a> {
    catalog: &'a Catalog,
    options: &'a StreamOptions,
    published: HashSet<Oid>,
    encoder: Encoder,
    relations_sent: HashSet<Oid>,
    /// Streamed transactions with blocks out but no end yet.
    streams: HashMap<Xid, StreamState>,
}

/// How far a streamed transaction has gone out to this client.
#[derive(Debug, Default)]
struct StreamState {
    /// Steps rendered so far.
    steps_done: usize,
    /// Whether any block went out.
    block_sent: bool,
    /// Whether a block boundary was passed (so no later block is the first segment).
    streamed_before: bool,
    /// Relations sent within the transaction.
    relations: HashSet<Oid>,
    /// Subtransactions with changes sent.
    subtransactions: HashSet<usize>,
}

impl<'a> Renderer<'a> {
    pub(crate) fn new(catalog: &'a Catalog, options: &'a StreamOptions) -> Renderer<'a> {
        let published = catalog
            .published(&options.publication_names)
            .into_iter()
            .map(|t| t.oid)
            .collect();
        Renderer {
            catalog,
            options,
            published,
            encoder: Encoder::new(options.proto_version, options.streaming)
                .expect("options were validated"),
            relations_sent: HashSet::new(),
            streams: HashMap::new(),
        }
    }

    /// The frames for `events[index]` (earlier events are looked at for the transaction a
    /// `COMMIT PREPARED` finishes).
    pub(crate) fn event(
        &mut self,
        events: &[Event],
        index: usize,
    ) -> Result<Vec<Frame>, RenderError> {
        let mut out = Out::default();
        match &events[index] {
            Event::Transaction(t) => self.transaction(t, &mut out)?,
            Event::StreamProgress { xid, steps, .. } => {
                let later = events[index + 1..].iter().find_map(|e| match e {
                    Event::Transaction(t) if t.xid == *xid => Some(t),
                    _ => None,
                });
                if let Some(t) = later.filter(|t| self.streams(t)) {
                    self.stream_steps(t, *steps, &mut out)?;
                }
            }
            Event::CommitPrepared {
                gid,
                commit_lsn,
                end_lsn,
                timestamp,
            } => {
                let prepared = find_prepared(&events[..index], gid)?;
                if self.options.two_phase {
                    self.emit(
                        &mut out,
                        *end_lsn,
                        PgOutputMessage::CommitPrepared(CommitPrepared {
                            flags: 0,
                            commit_lsn: *commit_lsn,
                            end_lsn: *end_lsn,
                            commit_timestamp: *timestamp,
                            xid: prepared.xid,
                            gid: PgStr::from(gid.clone()),
                        }),
                    )?;
                } else {
                    // Without two_phase, PostgreSQL decodes a prepared transaction only
                    // when it commits, as an ordinary one.
                    let mut whole = prepared.clone();
                    whole.end = End::Commit;
                    whole.streamed = false;
                    whole.commit_lsn = *commit_lsn;
                    whole.end_lsn = *end_lsn;
                    whole.timestamp = *timestamp;
                    self.transaction(&whole, &mut out)?;
                }
            }
            Event::RollbackPrepared {
                gid,
                end_lsn,
                timestamp,
            } => {
                let prepared = find_prepared(&events[..index], gid)?;
                if self.options.two_phase {
                    self.emit(
                        &mut out,
                        *end_lsn,
                        PgOutputMessage::RollbackPrepared(RollbackPrepared {
                            flags: 0,
                            prepare_end_lsn: prepared.end_lsn,
                            rollback_end_lsn: *end_lsn,
                            prepare_timestamp: prepared.timestamp,
                            rollback_timestamp: *timestamp,
                            xid: prepared.xid,
                            gid: PgStr::from(gid.clone()),
                        }),
                    )?;
                }
            }
            Event::Message(message) => {
                if self.options.messages {
                    self.emit(
                        &mut out,
                        message.lsn,
                        PgOutputMessage::Message(message.clone()),
                    )?;
                }
            }
        }
        Ok(out.frames)
    }

    fn transaction(&mut self, t: &Transaction, out: &mut Out) -> Result<(), RenderError> {
        if t.origin.is_some() && self.options.origin_none {
            return Ok(());
        }
        let prepared = matches!(t.end, End::Prepare { .. });
        if prepared && !self.options.two_phase {
            // Sent at COMMIT PREPARED instead.
            return Ok(());
        }
        if self.streams(t) {
            return self.streamed(t, out);
        }
        if t.end == End::Abort {
            return Ok(());
        }
        // Changes of aborted subtransactions never reach a client that gets the
        // transaction whole.
        let aborted: HashSet<usize> = t
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::SubtransactionAbort { subtransaction, .. } => Some(*subtransaction),
                _ => None,
            })
            .collect();
        let changes: Vec<(Lsn, PgOutputMessage<'static>)> = t
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Change {
                    lsn,
                    subtransaction,
                    message,
                } if !aborted.contains(subtransaction) => self.visible(message).map(|m| (*lsn, m)),
                _ => None,
            })
            .collect();
        let scripted_empty = !t.steps.iter().any(|s| matches!(s, Step::Change { .. }));
        if changes.is_empty() && !prepared && !scripted_empty {
            // PostgreSQL 15 and later skip transactions with nothing for this client. One
            // the script leaves empty is sent as it is (older servers send them, and a
            // replayed capture may hold one).
            return Ok(());
        }
        // A Begin that an Origin follows carries 0/0, as PostgreSQL sends it.
        let first_lsn = match t.origin {
            Some(_) => Lsn(0),
            None => changes.first().map_or(t.commit_lsn, |(lsn, _)| *lsn),
        };
        match &t.end {
            End::Prepare { gid } => self.emit(
                out,
                first_lsn,
                PgOutputMessage::BeginPrepare(BeginPrepare {
                    prepare_lsn: t.commit_lsn,
                    end_lsn: t.end_lsn,
                    prepare_timestamp: t.timestamp,
                    xid: t.xid,
                    gid: PgStr::from(gid.clone()),
                }),
            )?,
            _ => self.emit(
                out,
                first_lsn,
                PgOutputMessage::Begin(Begin {
                    final_lsn: t.commit_lsn,
                    commit_timestamp: t.timestamp,
                    xid: t.xid,
                }),
            )?,
        }
        self.origin(t, out)?;
        for (lsn, change) in changes {
            self.change(out, lsn, change, None, None)?;
        }
        match &t.end {
            End::Prepare { gid } => self.emit(
                out,
                t.end_lsn,
                PgOutputMessage::Prepare(Prepare {
                    flags: 0,
                    prepare_lsn: t.commit_lsn,
                    end_lsn: t.end_lsn,
                    prepare_timestamp: t.timestamp,
                    xid: t.xid,
                    gid: PgStr::from(gid.clone()),
                }),
            ),
            _ => self.emit(
                out,
                t.end_lsn,
                PgOutputMessage::Commit(Commit {
                    flags: 0,
                    commit_lsn: t.commit_lsn,
                    end_lsn: t.end_lsn,
                    commit_timestamp: t.timestamp,
                }),
            ),
        }
    }

    /// Whether this client gets `t` as stream blocks.
    fn streams(&self, t: &Transaction) -> bool {
        t.streamed
            && self.options.streaming != Streaming::Off
            && (self.options.two_phase || !matches!(t.end, End::Prepare { .. }))
            && !(t.origin.is_some() && self.options.origin_none)
    }

    /// The blocks of `t` up to step `upto` that this client has not had yet. Each call
    /// ends with its block closed.
    fn stream_steps(
        &mut self,
        t: &Transaction,
        upto: usize,
        out: &mut Out,
    ) -> Result<(), RenderError> {
        let parallel = self.options.streaming == Streaming::Parallel;
        let mut state = self.streams.remove(&t.xid).unwrap_or_default();
        let mut block_open = false;
        let mut last_lsn = t.first_lsn();
        for step in t.steps.iter().take(upto).skip(state.steps_done) {
            match step {
                Step::Change {
                    lsn,
                    subtransaction,
                    message,
                } => {
                    let Some(change) = self.visible(message) else {
                        continue;
                    };
                    if !block_open {
                        let first = !state.block_sent && !state.streamed_before;
                        // A Stream Start that an Origin follows carries 0/0.
                        let start_lsn = match t.origin {
                            Some(_) if !state.block_sent => Lsn(0),
                            _ => *lsn,
                        };
                        self.emit(
                            out,
                            start_lsn,
                            PgOutputMessage::StreamStart(StreamStart {
                                xid: t.xid,
                                first_segment: first,
                            }),
                        )?;
                        if !state.block_sent {
                            self.origin(t, out)?;
                        }
                        state.block_sent = true;
                        block_open = true;
                    }
                    state.subtransactions.insert(*subtransaction);
                    last_lsn = *lsn;
                    self.change(
                        out,
                        *lsn,
                        change,
                        Some(t.xid_of(*subtransaction)),
                        Some(&mut state.relations),
                    )?;
                }
                Step::StreamBoundary => {
                    // A block ended here, seen by this client or not: the next one is
                    // not the transaction's first segment.
                    state.streamed_before = true;
                    if block_open {
                        self.emit(out, last_lsn, PgOutputMessage::StreamStop(StreamStop))?;
                        block_open = false;
                    }
                }
                Step::SubtransactionAbort {
                    subtransaction,
                    lsn,
                    timestamp,
                } => {
                    if block_open {
                        self.emit(out, last_lsn, PgOutputMessage::StreamStop(StreamStop))?;
                        block_open = false;
                    }
                    // A subtransaction whose changes went out needs undoing; so does one
                    // the script gives no changes at all (its abort is all it says).
                    let scripted_bare = !t.steps.iter().any(|s| {
                        matches!(s, Step::Change { subtransaction: sub, .. } if sub == subtransaction)
                    });
                    if state.subtransactions.contains(subtransaction) || scripted_bare {
                        self.emit(
                            out,
                            *lsn,
                            PgOutputMessage::StreamAbort(StreamAbort {
                                xid: t.xid,
                                subtransaction_xid: t.xid_of(*subtransaction),
                                abort_lsn: parallel.then_some(*lsn),
                                abort_timestamp: parallel.then_some(*timestamp),
                            }),
                        )?;
                    }
                }
            }
        }
        if block_open {
            self.emit(out, last_lsn, PgOutputMessage::StreamStop(StreamStop))?;
        }
        state.steps_done = state.steps_done.max(upto);
        self.streams.insert(t.xid, state);
        Ok(())
    }

    /// A transaction as Stream Start/Stop blocks (those not sent at an earlier
    /// [`Event::StreamProgress`]), then its Stream Commit, Abort or Prepare.
    fn streamed(&mut self, t: &Transaction, out: &mut Out) -> Result<(), RenderError> {
        let parallel = self.options.streaming == Streaming::Parallel;
        self.stream_steps(t, t.steps.len(), out)?;
        let state = self.streams.remove(&t.xid).unwrap_or_default();
        if !state.block_sent {
            // Nothing of it was streamed to this client: it ends like a whole one.
            let mut whole = t.clone();
            whole.streamed = false;
            return match t.end {
                End::Abort => Ok(()),
                _ => self.transaction(&whole, out),
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
                gid: PgStr::from(gid.clone()),
            }),
        };
        let lsn = if t.end == End::Abort {
            t.commit_lsn
        } else {
            t.end_lsn
        };
        self.emit(out, lsn, end)
    }

    fn origin(&mut self, t: &Transaction, out: &mut Out) -> Result<(), RenderError> {
        match &t.origin {
            Some((name, lsn)) => self.emit(
                out,
                Lsn(0),
                PgOutputMessage::Origin(Origin {
                    origin_lsn: *lsn,
                    name: PgStr::from(name.clone()),
                }),
            ),
            None => Ok(()),
        }
    }

    /// The change as this client gets it (its tables filtered to the publications, values
    /// in the client's form), or `None` if the client gets nothing of it.
    fn visible(&self, message: &PgOutputMessage<'static>) -> Option<PgOutputMessage<'static>> {
        let mut message = message.clone();
        match &mut message {
            PgOutputMessage::Truncate(truncate) => {
                truncate
                    .relation_oids
                    .to_mut()
                    .retain(|oid| self.published.contains(oid));
                if truncate.relation_oids.is_empty() {
                    return None;
                }
            }
            PgOutputMessage::Message(_) if !self.options.messages => return None,
            PgOutputMessage::Relation(relation) => {
                if !self.published.contains(&relation.relation_oid) {
                    return None;
                }
            }
            other => {
                let relations = relations_of(other);
                if relations.iter().any(|oid| !self.published.contains(oid)) {
                    return None;
                }
            }
        }
        Some(message)
    }

    /// A change, after the Relation messages of the tables it touches when this client
    /// has not had them yet, with the streamed xid set.
    fn change(
        &mut self,
        out: &mut Out,
        lsn: Lsn,
        mut change: PgOutputMessage<'static>,
        xid: Option<Xid>,
        relations_in_txn: Option<&mut HashSet<Oid>>,
    ) -> Result<(), RenderError> {
        let sent = match relations_in_txn {
            Some(set) => set,
            None => &mut self.relations_sent,
        };
        if let PgOutputMessage::Relation(relation) = &change {
            // The script sends the schema again here.
            sent.insert(relation.relation_oid);
        }
        let mut relations = Vec::new();
        for oid in relations_of(&change) {
            if sent.insert(oid) {
                if let Some(table) = self.catalog.table(oid) {
                    relations.push(table.relation(xid));
                }
            }
        }
        for relation in relations {
            self.emit(out, Lsn(0), PgOutputMessage::Relation(relation))?;
        }
        self.convert_values(&mut change)?;
        match &mut change {
            PgOutputMessage::Insert(m) => m.xid = xid,
            PgOutputMessage::Update(m) => m.xid = xid,
            PgOutputMessage::Delete(m) => m.xid = xid,
            PgOutputMessage::Truncate(m) => m.xid = xid,
            PgOutputMessage::Message(m) => m.xid = xid,
            PgOutputMessage::Type(m) => m.xid = xid,
            PgOutputMessage::Relation(m) => m.xid = xid,
            _ => {}
        }
        let lsn = if matches!(
            change,
            PgOutputMessage::Type(_) | PgOutputMessage::Relation(_)
        ) {
            Lsn(0)
        } else {
            lsn
        };
        self.emit(out, lsn, change)
    }

    /// Puts every column value of `change` in the form the client asked for.
    fn convert_values(&self, change: &mut PgOutputMessage<'static>) -> Result<(), RenderError> {
        let (oid, tuples): (Oid, Vec<&mut TupleData<'static>>) = match change {
            PgOutputMessage::Insert(m) => (m.relation_oid, vec![&mut m.new_tuple]),
            PgOutputMessage::Update(m) => {
                let mut tuples = vec![&mut m.new_tuple];
                if let Some(OldTuple::Key(t) | OldTuple::Old(t)) = &mut m.old_tuple {
                    tuples.push(t);
                }
                (m.relation_oid, tuples)
            }
            PgOutputMessage::Delete(m) => match &mut m.old_tuple {
                OldTuple::Key(t) | OldTuple::Old(t) => (m.relation_oid, vec![t]),
            },
            _ => return Ok(()),
        };
        let Some(table) = self.catalog.table(oid) else {
            return Ok(());
        };
        for tuple in tuples {
            for (column, value) in table.columns.iter().zip(tuple.columns.to_mut().iter_mut()) {
                match value {
                    ColumnValue::Binary(bytes) if !self.options.binary => {
                        let text = binary_to_text(column.type_oid, bytes).ok_or_else(|| {
                            RenderError(format!(
                                "column \"{}\" of table {} holds a binary value of type {} that has no text form here, and the client did not ask for binary values",
                                column.name,
                                table.qualified_name(),
                                column.type_oid.0
                            ))
                        })?;
                        *value = ColumnValue::Text(text.into());
                    }
                    ColumnValue::Text(text) if self.options.binary => {
                        if let Some(binary) = text_to_binary(column.type_oid, text) {
                            *value = ColumnValue::Binary(binary.into());
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    fn emit(
        &mut self,
        out: &mut Out,
        lsn: Lsn,
        message: PgOutputMessage<'_>,
    ) -> Result<(), RenderError> {
        let payload = self
            .encoder
            .encode(&message)
            .map_err(|e| RenderError(format!("cannot encode {message:?} for this client: {e}")))?;
        out.frames.push(Frame { lsn, payload });
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Out {
    frames: Vec<Frame>,
}

fn find_prepared<'e>(events: &'e [Event], gid: &str) -> Result<&'e Transaction, RenderError> {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            Event::Transaction(t) if matches!(&t.end, End::Prepare { gid: g } if g == gid) => {
                Some(t)
            }
            _ => None,
        })
        .ok_or_else(|| {
            RenderError(format!(
                "no prepared transaction with gid {gid:?} before its COMMIT/ROLLBACK PREPARED"
            ))
        })
}
