//! Turning the script into one client's stream: the pgoutput messages PostgreSQL would
//! send for that client's options, with the XLogData header LSN of each.
//!
//! The rules follow pgoutput and the walsender: changes only for tables in the client's
//! publications, Relation before a table's first change in a session (and in each
//! streamed transaction), empty transactions skipped, aborted (sub)transactions invisible
//! unless streamed, prepared transactions sent whole at `COMMIT PREPARED` to clients
//! without `two_phase`, logical decoding messages only with `messages`, and values in
//! the text or binary form the client asked for.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;

use super::catalog::{Catalog, Column, Table, ValueForm};
use super::schema_cache::SchemaCache;
use super::script::{relations_of, End, Event, Step, Transaction};
use super::StreamOptions;
use crate::values::{binary_to_text, text_to_binary};
use crate::wire::error::{error, sqlstate, SqlError};
use crate::{
    Begin, BeginPrepare, ColumnValue, Commit, CommitPrepared, Encoder, Lsn, Oid, OldTuple, Origin,
    PgOutputMessage, PgStr, Prepare, RollbackPrepared, StreamAbort, StreamCommit, StreamPrepare,
    StreamStart, StreamStop, Streaming, TupleData, Xid,
};

/// One XLogData payload and the WAL position its frame header carries (`0/0` for
/// Relation and Type, as PostgreSQL sends them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedMessage {
    /// `dataStart` and `walEnd` of the XLogData header.
    pub lsn: Lsn,
    /// The pgoutput message.
    pub payload: Vec<u8>,
}

/// Where a renderer puts each message as soon as it is made: a connection's socket, or
/// a list of frames.
pub(crate) trait Sink {
    /// Why the sink may stop the rendering (the client said CopyDone, the connection is
    /// over), handed back to whoever rendered in [`Halt::Sink`].
    type Stop;

    /// One XLogData payload (`message`, encoded), with the WAL position its frame header
    /// carries. An error ends the rendering.
    fn frame(
        &mut self,
        lsn: Lsn,
        message: &PgOutputMessage<'_>,
        payload: &[u8],
    ) -> Result<(), Self::Stop>;

    /// A WARNING for the client (a NoticeResponse on a connection).
    fn warning(&mut self, code: &'static str, text: &str, detail: &str, hint: &str);
}

/// Frames collected in a list (what [`TestServer::render`](super::TestServer::render)
/// returns).
impl Sink for Vec<RenderedMessage> {
    /// A list takes every frame.
    type Stop = std::convert::Infallible;

    fn frame(
        &mut self,
        lsn: Lsn,
        _: &PgOutputMessage<'_>,
        payload: &[u8],
    ) -> Result<(), Self::Stop> {
        self.push(RenderedMessage {
            lsn,
            payload: payload.to_vec(),
        });
        Ok(())
    }

    fn warning(&mut self, _: &'static str, _: &str, _: &str, _: &str) {}
}

/// Why rendering stopped before the event's end.
#[derive(Debug)]
pub(crate) enum Halt<S> {
    /// The event cannot be sent with this client's options.
    Render(RenderError),
    /// An ERROR PostgreSQL's pgoutput raises here (a publication that does not exist).
    Sql(SqlError),
    /// The sink stopped it, for its reason.
    Sink(S),
}

impl<S> From<RenderError> for Halt<S> {
    fn from(err: RenderError) -> Halt<S> {
        Halt::Render(err)
    }
}

/// How a transaction sent whole ends (its own end, or the `COMMIT PREPARED` that sends
/// a prepared transaction to a client without `two_phase`).
#[derive(Debug, Clone, Copy)]
struct Ending<'t> {
    prepare_gid: Option<&'t str>,
    commit_lsn: Lsn,
    end_lsn: Lsn,
    timestamp: crate::PgTimestamp,
}

impl<'t> Ending<'t> {
    fn of(t: &'t Transaction) -> Ending<'t> {
        Ending {
            prepare_gid: match &t.end {
                End::Prepare { gid } => Some(gid),
                _ => None,
            },
            commit_lsn: t.commit_lsn,
            end_lsn: t.end_lsn,
            timestamp: t.timestamp,
        }
    }
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

/// The state of one client's stream: its encoder and the schemas it has had.
#[derive(Debug)]
pub(crate) struct Renderer<'a> {
    catalog: &'a Catalog,
    options: &'a StreamOptions,
    published: HashSet<Oid>,
    encoder: Encoder,
    /// Which tables' Relations this client has had, by pgoutput's rules.
    schemas: SchemaCache,
    /// Tables whose schema a [`Step::Schema`] changed: the definition sent from then on.
    definitions: HashMap<Oid, Definition>,
    /// Streamed transactions with blocks out but no end yet.
    streams: HashMap<Xid, StreamState>,
    /// Publications the client named that do not exist, and whether pgoutput has looked
    /// them up yet (it does at the first change, as `LoadPublications`).
    missing_publications: Vec<String>,
    publications_loaded: bool,
    /// The server's major version: PostgreSQL 18 skips a missing publication with a
    /// WARNING where older releases fail.
    major: u32,
    /// The message being encoded (one buffer for the whole stream).
    scratch: Vec<u8>,
}

/// A table's definition after a [`Step::Schema`]: the messages as the script gives them,
/// and the table they define (for its values' forms).
#[derive(Debug)]
struct Definition {
    types: Vec<crate::Type<'static>>,
    relation: crate::Relation<'static>,
    table: Table,
}

/// How far a streamed transaction has gone out to this client.
#[derive(Debug, Default)]
struct StreamState {
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

impl<'a> Renderer<'a> {
    pub(crate) fn new(
        catalog: &'a Catalog,
        options: &'a StreamOptions,
        major: u32,
    ) -> Renderer<'a> {
        let missing_publications = options
            .publication_names
            .iter()
            .filter(|name| catalog.publication(name).is_none())
            .cloned()
            .collect();
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
            schemas: SchemaCache::default(),
            definitions: HashMap::new(),
            streams: HashMap::new(),
            missing_publications,
            publications_loaded: false,
            major,
            scratch: Vec::new(),
        }
    }

    /// pgoutput looks the client's publications up at the first change it decodes
    /// (`get_rel_sync_entry`): one that does not exist is an ERROR before PostgreSQL 18
    /// and a WARNING (then skipped) from 18 on.
    fn load_publications<S>(&mut self, sink: &mut dyn Sink<Stop = S>) -> Result<(), Halt<S>> {
        if self.publications_loaded {
            return Ok(());
        }
        self.publications_loaded = true;
        for name in &self.missing_publications {
            if self.major < 18 {
                return Err(Halt::Sql(error(
                    sqlstate::UNDEFINED_OBJECT,
                    format!("publication \"{name}\" does not exist"),
                )));
            }
            sink.warning(
                sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
                &format!("skipped loading publication \"{name}\""),
                "The publication does not exist at this point in the WAL.",
                "Create the publication if it does not exist.",
            );
        }
        Ok(())
    }

    /// Renders one event into `sink`, message by message. `partner` is the transaction
    /// the event needs: for stream progress the streamed transaction (`None` while it has
    /// not ended: nothing is sent yet), for `COMMIT` / `ROLLBACK PREPARED` the prepared
    /// one.
    pub(crate) fn event<S>(
        &mut self,
        event: &Event,
        partner: Option<&Event>,
        sink: &mut dyn Sink<Stop = S>,
    ) -> Result<(), Halt<S>> {
        let partner = match partner {
            Some(Event::Transaction(t)) => Some(t),
            _ => None,
        };
        match event {
            Event::Transaction(t) => self.transaction(t, sink)?,
            Event::StreamProgress { steps, .. } => {
                if let Some(t) = partner.filter(|t| self.streams(t)) {
                    self.stream_steps(t, *steps, sink)?;
                }
            }
            Event::CommitPrepared {
                gid,
                commit_lsn,
                end_lsn,
                timestamp,
            } => {
                let prepared = prepared(partner, gid)?;
                if self.options.two_phase {
                    self.emit(
                        sink,
                        *end_lsn,
                        &PgOutputMessage::CommitPrepared(CommitPrepared {
                            flags: 0,
                            commit_lsn: *commit_lsn,
                            end_lsn: *end_lsn,
                            commit_timestamp: *timestamp,
                            xid: prepared.xid,
                            gid: PgStr::from(gid.as_str()),
                        }),
                    )?;
                } else if self.streams(prepared) && self.stream_rest(prepared, sink)? {
                    // Without two_phase, PostgreSQL skips the PREPARE and finishes a
                    // streamed transaction at COMMIT PREPARED, as an ordinary one.
                    self.emit(
                        sink,
                        *end_lsn,
                        &PgOutputMessage::StreamCommit(StreamCommit {
                            xid: prepared.xid,
                            flags: 0,
                            commit_lsn: *commit_lsn,
                            end_lsn: *end_lsn,
                            commit_timestamp: *timestamp,
                        }),
                    )?;
                    self.schemas.stream_committed(prepared.xid);
                } else {
                    // Without two_phase, PostgreSQL decodes a prepared transaction only
                    // when it commits, as an ordinary one.
                    let ending = Ending {
                        prepare_gid: None,
                        commit_lsn: *commit_lsn,
                        end_lsn: *end_lsn,
                        timestamp: *timestamp,
                    };
                    self.whole(prepared, ending, sink)?;
                }
            }
            Event::RollbackPrepared {
                gid,
                end_lsn,
                timestamp,
            } => {
                let prepared = prepared(partner, gid)?;
                if self.options.two_phase {
                    self.emit(
                        sink,
                        *end_lsn,
                        &PgOutputMessage::RollbackPrepared(RollbackPrepared {
                            flags: 0,
                            prepare_end_lsn: prepared.end_lsn,
                            rollback_end_lsn: *end_lsn,
                            prepare_timestamp: prepared.timestamp,
                            rollback_timestamp: *timestamp,
                            xid: prepared.xid,
                            gid: PgStr::from(gid.as_str()),
                        }),
                    )?;
                } else if self.streams(prepared) && self.stream_rest(prepared, sink)? {
                    // A streamed transaction whose PREPARE was skipped is aborted as an
                    // ordinary one, at the end of the rollback record.
                    let parallel = self.options.streaming == Streaming::Parallel;
                    self.emit(
                        sink,
                        *end_lsn,
                        &PgOutputMessage::StreamAbort(StreamAbort {
                            xid: prepared.xid,
                            subtransaction_xid: prepared.xid,
                            abort_lsn: parallel.then_some(*end_lsn),
                            abort_timestamp: parallel.then_some(*timestamp),
                        }),
                    )?;
                    self.schemas.stream_aborted(prepared.xid);
                }
            }
            // Nothing to send: the WAL end it moves is the walsender's to report.
            Event::WalPosition { .. } => {}
            Event::Message(message) => {
                if self.options.messages {
                    self.emit(
                        sink,
                        message.lsn,
                        &PgOutputMessage::Message(message.clone()),
                    )?;
                }
            }
        }
        Ok(())
    }

    fn transaction<S>(
        &mut self,
        t: &Transaction,
        sink: &mut dyn Sink<Stop = S>,
    ) -> Result<(), Halt<S>> {
        if t.origin.is_some() && self.options.origin_none {
            return Ok(());
        }
        let prepared = matches!(t.end, End::Prepare { .. });
        if prepared && !self.options.two_phase {
            // Sent at COMMIT PREPARED instead.
            return Ok(());
        }
        if self.streams(t) {
            return self.streamed(t, sink);
        }
        if t.end == End::Abort {
            return Ok(());
        }
        self.whole(t, Ending::of(t), sink)
    }

    /// A transaction sent whole: Begin (or Begin Prepare), its changes that this client
    /// gets, then Commit (or Prepare). Its changes are looked at twice (is there any, and
    /// where is the first) rather than collected, so memory does not grow with it.
    fn whole<S>(
        &mut self,
        t: &Transaction,
        ending: Ending<'_>,
        sink: &mut dyn Sink<Stop = S>,
    ) -> Result<(), Halt<S>> {
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
        let kept = |step: &Step| match step {
            Step::Change { subtransaction, .. } => !aborted.contains(subtransaction),
            _ => true,
        };
        // A transaction the script leaves with no steps at all is sent as it is (older
        // servers send empty ones, and a replayed capture may hold one); one whose
        // changes are all for others, or that is stream blocks of DDL alone, is not.
        let scripted_empty = t.steps.is_empty();
        if t.steps
            .iter()
            .any(|s| matches!(s, Step::Change { message, .. } if is_table_change(message)))
        {
            self.load_publications(sink)?;
        }
        let first_change = t
            .steps
            .iter()
            .filter(|step| kept(step))
            .find_map(|step| match step {
                Step::Change { lsn, message, .. } if self.visible(message) => Some(*lsn),
                _ => None,
            });
        let prepared = ending.prepare_gid.is_some();
        if first_change.is_none() && !prepared && !scripted_empty {
            // PostgreSQL 15 and later skip transactions with nothing for this client. What
            // changed the schema still did.
            for step in t.steps.iter().filter(|step| kept(step)) {
                self.schema_changed(step);
                self.invalidated_by(step);
            }
            return Ok(());
        }
        // pgoutput sends Begin at the first change it publishes, so the frame carries
        // that change's position; Begin Prepare goes out at once, with the transaction's
        // first record. With an Origin after it, the Begin's frame carries 0/0 and the
        // Origin's the position.
        let position = match ending.prepare_gid {
            Some(_) if t.first_lsn.0 != 0 => t.first_lsn,
            _ => first_change.unwrap_or(ending.commit_lsn),
        };
        let begin = match ending.prepare_gid {
            Some(gid) => PgOutputMessage::BeginPrepare(BeginPrepare {
                prepare_lsn: ending.commit_lsn,
                end_lsn: ending.end_lsn,
                prepare_timestamp: ending.timestamp,
                xid: t.xid,
                gid: PgStr::from(gid),
            }),
            None => PgOutputMessage::Begin(Begin {
                final_lsn: ending.commit_lsn,
                commit_timestamp: ending.timestamp,
                xid: t.xid,
            }),
        };
        let begin_lsn = if t.origin.is_some() { Lsn(0) } else { position };
        self.emit(sink, begin_lsn, &begin)?;
        self.origin(t, position, sink)?;
        for step in t.steps.iter().filter(|step| kept(step)) {
            match step {
                Step::Change { lsn, message, .. } if self.visible(message) => {
                    self.change(sink, *lsn, message, None, None)?;
                }
                Step::Schema { .. } => self.schema_step(step, sink, None, None)?,
                _ => {}
            }
            self.invalidated_by(step);
        }
        let end = match ending.prepare_gid {
            Some(gid) => PgOutputMessage::Prepare(Prepare {
                flags: 0,
                prepare_lsn: ending.commit_lsn,
                end_lsn: ending.end_lsn,
                prepare_timestamp: ending.timestamp,
                xid: t.xid,
                gid: PgStr::from(gid),
            }),
            None => PgOutputMessage::Commit(Commit {
                flags: 0,
                commit_lsn: ending.commit_lsn,
                end_lsn: ending.end_lsn,
                commit_timestamp: ending.timestamp,
            }),
        };
        self.emit(sink, ending.end_lsn, &end)
    }

    /// A [`Step::Schema`] where this client gets it: the table's definition from here
    /// on, sent now (with the xid `xid` in a block of `stream`) if the table is
    /// published, and again in every other context before its next change there.
    fn schema_step<S>(
        &mut self,
        step: &Step,
        sink: &mut dyn Sink<Stop = S>,
        xid: Option<Xid>,
        stream: Option<Xid>,
    ) -> Result<(), Halt<S>> {
        let Some(oid) = self.schema_changed(step) else {
            return Ok(());
        };
        if self.published.contains(&oid) {
            self.schemas.sent(oid, stream);
            self.send_schema(sink, oid, xid)?;
        }
        Ok(())
    }

    /// The definition a [`Step::Schema`] gives holds from here on, and every context
    /// sends it again before the table's next change; the table's OID.
    fn schema_changed(&mut self, step: &Step) -> Option<Oid> {
        let Step::Schema { types, relation } = step else {
            return None;
        };
        let oid = relation.relation_oid;
        self.schemas.invalidate(oid);
        let mut table = Table::from_relation(relation);
        table.types.clone_from(types);
        // Which of its types are enums does not change with its columns.
        table.enums = self.table(oid).map(|t| t.enums.clone()).unwrap_or_default();
        self.definitions.insert(
            oid,
            Definition {
                types: types.clone(),
                relation: relation.clone(),
                table,
            },
        );
        Some(oid)
    }

    /// The table's definition at this point of the stream.
    fn table(&self, oid: Oid) -> Option<&Table> {
        match self.definitions.get(&oid) {
            Some(definition) => Some(&definition.table),
            None => self.catalog.table(oid),
        }
    }

    /// A TRUNCATE gives its tables new storage, which invalidates pgoutput's entries for
    /// them: their schema goes out again before their next change, in every context.
    fn invalidated_by(&mut self, step: &Step) {
        if let Step::Change {
            message: PgOutputMessage::Truncate(truncate),
            ..
        } = step
        {
            for oid in truncate.relation_oids.iter() {
                self.schemas.invalidate(oid);
            }
        }
    }

    /// Whether this client gets `t` as stream blocks.
    fn streams(&self, t: &Transaction) -> bool {
        t.streamed
            && self.options.streaming != Streaming::Off
            && !(t.origin.is_some() && self.options.origin_none)
    }

    /// The blocks of `t` up to step `upto` that this client has not had yet. Each block
    /// goes out, also one with nothing for this client, as PostgreSQL sends it; each call
    /// ends with its block closed.
    fn stream_steps<S>(
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
    fn stream_rest<S>(
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
    fn streamed<S>(
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

    /// The Origin message after Begin or the first Stream Start, at `lsn` (the position
    /// the Begin's frame would have carried).
    fn origin<S>(
        &mut self,
        t: &Transaction,
        lsn: Lsn,
        sink: &mut dyn Sink<Stop = S>,
    ) -> Result<(), Halt<S>> {
        match &t.origin {
            Some((name, origin_lsn)) => self.emit(
                sink,
                lsn,
                &PgOutputMessage::Origin(Origin {
                    origin_lsn: *origin_lsn,
                    name: PgStr::from(name.as_str()),
                }),
            ),
            None => Ok(()),
        }
    }

    /// The table's Type messages and Relation, as its latest definition has them.
    fn send_schema<S>(
        &mut self,
        sink: &mut dyn Sink<Stop = S>,
        oid: Oid,
        xid: Option<Xid>,
    ) -> Result<(), Halt<S>> {
        let (types, mut relation) = match self.definitions.get(&oid) {
            Some(definition) => (definition.types.clone(), definition.relation.clone()),
            None => match self.catalog.table(oid) {
                Some(table) => (table.types.clone(), table.relation(None)),
                None => return Ok(()),
            },
        };
        // Relation and Type frames carry 0/0: pgoutput writes them as not the last
        // message of the change.
        for mut t in types {
            t.xid = xid;
            self.emit(sink, Lsn(0), &PgOutputMessage::Type(t))?;
        }
        relation.xid = xid;
        self.emit(sink, Lsn(0), &PgOutputMessage::Relation(relation))
    }

    /// Whether this client gets (some of) the change: its tables are in the client's
    /// publications, a Message only with `messages`.
    fn visible(&self, message: &PgOutputMessage<'_>) -> bool {
        let published = |oid: &Oid| self.published.contains(oid);
        match message {
            PgOutputMessage::Insert(m) => published(&m.relation_oid),
            PgOutputMessage::Update(m) => published(&m.relation_oid),
            PgOutputMessage::Delete(m) => published(&m.relation_oid),
            PgOutputMessage::Relation(m) => published(&m.relation_oid),
            PgOutputMessage::Truncate(m) => m.relation_oids.iter().any(|oid| published(&oid)),
            PgOutputMessage::Message(_) => self.options.messages,
            _ => true,
        }
    }

    /// A visible change, after the Relation messages of the tables it touches when this
    /// client needs them (pgoutput's rules: [`SchemaCache`]), with the xid `xid` set in a
    /// block of the streamed transaction `stream`, and its values in the client's form.
    /// The message is a view of the script's (its values borrowed), so a change costs one
    /// small allocation, not a copy of the row.
    fn change<S>(
        &mut self,
        sink: &mut dyn Sink<Stop = S>,
        lsn: Lsn,
        message: &PgOutputMessage<'_>,
        xid: Option<Xid>,
        stream: Option<Xid>,
    ) -> Result<(), Halt<S>> {
        if is_table_change(message) {
            self.load_publications(sink)?;
        }
        if let PgOutputMessage::Relation(relation) = message {
            // A script's own Relation change: the schema goes out here.
            self.schemas.sent(relation.relation_oid, stream);
        }
        for oid in relations_of(message) {
            if self.published.contains(&oid) && self.schemas.needs(oid, stream) {
                self.schemas.sent(oid, stream);
                self.send_schema(sink, oid, xid)?;
            }
        }
        if self.sent_as_scripted(message, xid) {
            return self.emit(sink, lsn, message);
        }
        let change = match message {
            PgOutputMessage::Insert(m) => PgOutputMessage::Insert(crate::Insert {
                xid,
                relation_oid: m.relation_oid,
                new_tuple: self.tuple(m.relation_oid, &m.new_tuple)?,
            }),
            PgOutputMessage::Update(m) => PgOutputMessage::Update(crate::Update {
                xid,
                relation_oid: m.relation_oid,
                old_tuple: match &m.old_tuple {
                    Some(OldTuple::Key(t)) => Some(OldTuple::Key(self.tuple(m.relation_oid, t)?)),
                    Some(OldTuple::Old(t)) => Some(OldTuple::Old(self.tuple(m.relation_oid, t)?)),
                    None => None,
                },
                new_tuple: self.tuple(m.relation_oid, &m.new_tuple)?,
            }),
            PgOutputMessage::Delete(m) => PgOutputMessage::Delete(crate::Delete {
                xid,
                relation_oid: m.relation_oid,
                old_tuple: match &m.old_tuple {
                    OldTuple::Key(t) => OldTuple::Key(self.tuple(m.relation_oid, t)?),
                    OldTuple::Old(t) => OldTuple::Old(self.tuple(m.relation_oid, t)?),
                },
            }),
            PgOutputMessage::Truncate(m) => PgOutputMessage::Truncate(crate::Truncate {
                xid,
                options: m.options,
                relation_oids: m
                    .relation_oids
                    .iter()
                    .filter(|oid| self.published.contains(oid))
                    .collect(),
            }),
            PgOutputMessage::Message(m) => PgOutputMessage::Message(crate::Message {
                xid,
                flags: m.flags,
                lsn: m.lsn,
                prefix: PgStr::from(m.prefix.as_bytes()),
                content: crate::PgBytes::from(m.content.as_bytes()),
            }),
            PgOutputMessage::Type(m) => {
                let mut m = m.clone();
                m.xid = xid;
                PgOutputMessage::Type(m)
            }
            PgOutputMessage::Relation(m) => {
                let mut m = m.clone();
                m.xid = xid;
                PgOutputMessage::Relation(m)
            }
            other => other.clone(),
        };
        // Relation and Type frames carry 0/0, as PostgreSQL sends them.
        let lsn = if matches!(
            change,
            PgOutputMessage::Type(_) | PgOutputMessage::Relation(_)
        ) {
            Lsn(0)
        } else {
            lsn
        };
        self.emit(sink, lsn, &change)
    }

    /// Whether a row change goes out exactly as the script holds it: the xid this client
    /// gets is the message's own and every value is in the client's form already. Most
    /// changes are (a text capture to a text client), and they are encoded straight from
    /// the script, with no view built.
    fn sent_as_scripted(&self, message: &PgOutputMessage<'_>, xid: Option<Xid>) -> bool {
        let in_form = |oid: Oid, tuple: &TupleData<'_>| {
            let Some(values) = tuple.columns.as_slice() else {
                return false;
            };
            let table = self.table(oid);
            values.iter().enumerate().all(|(index, value)| {
                !self.converts(value, table.and_then(|t| t.columns.get(index)))
            })
        };
        let old_in_form = |oid: Oid, old: &OldTuple<'_>| match old {
            OldTuple::Key(t) | OldTuple::Old(t) => in_form(oid, t),
        };
        match message {
            PgOutputMessage::Insert(m) => m.xid == xid && in_form(m.relation_oid, &m.new_tuple),
            PgOutputMessage::Update(m) => {
                m.xid == xid
                    && in_form(m.relation_oid, &m.new_tuple)
                    && m.old_tuple
                        .as_ref()
                        .is_none_or(|old| old_in_form(m.relation_oid, old))
            }
            PgOutputMessage::Delete(m) => m.xid == xid && old_in_form(m.relation_oid, &m.old_tuple),
            _ => false,
        }
    }

    /// Whether `value` of `column` goes to this client in the other form: binary to a
    /// text client, text to a binary one (where the type has a binary form here).
    fn converts(&self, value: &ColumnValue<'_>, column: Option<&Column>) -> bool {
        match (value, column) {
            (ColumnValue::Binary(_), Some(_)) => !self.options.binary,
            (ColumnValue::Text(_), Some(_)) => self.options.binary,
            _ => false,
        }
    }

    /// A view of `tuple` of table `oid` with every value in the form the client asked
    /// for (borrowed where it is already in that form).
    fn tuple<'t>(&self, oid: Oid, tuple: &'t TupleData<'_>) -> Result<TupleData<'t>, RenderError> {
        let table = self.table(oid);
        let column = |index: usize| table.and_then(|t| t.columns.get(index));
        let values = match tuple.columns.as_slice() {
            Some(columns) => {
                let mut values = Vec::with_capacity(columns.len());
                for (index, value) in columns.iter().enumerate() {
                    values.push(self.value(value, column(index), table)?);
                }
                values
            }
            // A tuple decoded from the wire, not built: rare in a script; its values are
            // converted alike, then copied (they borrow from the iteration).
            None => tuple
                .columns
                .iter()
                .enumerate()
                .map(|(index, value)| {
                    self.value(&value, column(index), table)
                        .map(crate::IntoOwned::into_owned)
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        Ok(TupleData::new(values))
    }

    /// A view of `value` in the form the client asked for (borrowed where it already is).
    fn value<'v>(
        &self,
        value: &'v ColumnValue<'_>,
        column: Option<&Column>,
        table: Option<&Table>,
    ) -> Result<ColumnValue<'v>, RenderError> {
        // A value of a known column in the other form than the client asked for.
        let other_form = match (value, column) {
            (ColumnValue::Text(text), Some(column)) if self.options.binary => {
                Some((text.as_bytes(), true, column))
            }
            (ColumnValue::Binary(binary), Some(column)) if !self.options.binary => {
                Some((binary.as_bytes(), false, column))
            }
            _ => None,
        };
        if let Some((bytes, to_binary, column)) = other_form {
            let form = table.map_or(ValueForm::Type(column.type_oid), |t| t.value_form(column));
            let converted = match form {
                ValueForm::Label => Some(Cow::Borrowed(bytes)),
                ValueForm::Type(oid) if to_binary => text_to_binary(oid, bytes).map(Cow::Owned),
                ValueForm::Type(oid) => binary_to_text(oid, bytes).map(Cow::Owned),
            };
            let converted = converted.ok_or_else(|| {
                let table = table.map(Table::qualified_name).unwrap_or_default();
                let (held, missing, asked) = if to_binary {
                    ("text", "binary form here (a composite, or a type this server does not know)", "asked")
                } else {
                    ("binary", "text form here", "did not ask")
                };
                RenderError(format!(
                    "column \"{}\" of table {table} holds a {held} value of type {} that has no {missing}, and the client {asked} for binary values",
                    column.name,
                    column.type_oid.0
                ))
            })?;
            let converted: crate::PgBytes<'v> = match converted {
                Cow::Borrowed(bytes) => bytes.into(),
                Cow::Owned(bytes) => bytes.into(),
            };
            return Ok(if to_binary {
                ColumnValue::Binary(converted)
            } else {
                ColumnValue::Text(converted)
            });
        }
        Ok(match value {
            ColumnValue::Text(bytes) => ColumnValue::Text(bytes.as_bytes().into()),
            ColumnValue::Binary(bytes) => ColumnValue::Binary(bytes.as_bytes().into()),
            ColumnValue::Null => ColumnValue::Null,
            ColumnValue::UnchangedToast => ColumnValue::UnchangedToast,
        })
    }

    /// Encodes `message` with this client's session state and hands it to the sink.
    fn emit<S>(
        &mut self,
        sink: &mut dyn Sink<Stop = S>,
        lsn: Lsn,
        message: &PgOutputMessage<'_>,
    ) -> Result<(), Halt<S>> {
        self.scratch.clear();
        self.encoder
            .encode_into(message, &mut self.scratch)
            .map_err(|e| RenderError(format!("cannot encode {message:?} for this client: {e}")))?;
        sink.frame(lsn, message, &self.scratch)
            .map_err(Halt::Sink)?;
        Ok(())
    }
}

/// Whether pgoutput's change callbacks see it (where it loads the publications).
fn is_table_change(message: &PgOutputMessage<'_>) -> bool {
    matches!(
        message,
        PgOutputMessage::Insert(_)
            | PgOutputMessage::Update(_)
            | PgOutputMessage::Delete(_)
            | PgOutputMessage::Truncate(_)
    )
}

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

/// The prepared transaction a `COMMIT` / `ROLLBACK PREPARED` finishes.
fn prepared<'e>(
    partner: Option<&'e Transaction>,
    gid: &str,
) -> Result<&'e Transaction, RenderError> {
    partner.ok_or_else(|| {
        RenderError(format!(
            "no prepared transaction with gid {gid:?} before its COMMIT/ROLLBACK PREPARED"
        ))
    })
}
