//! Turning the script into one client's stream: the pgoutput messages PostgreSQL would
//! send for that client's options, with the XLogData header LSN of each.
//!
//! The rules follow pgoutput and the walsender: changes only for tables in the client's
//! publications, Relation before a table's first change in a session (and in each
//! streamed transaction), empty transactions skipped, aborted (sub)transactions invisible
//! unless streamed, prepared transactions sent whole at `COMMIT PREPARED` to clients
//! without `two_phase`, logical decoding messages only with `messages`, and values in
//! the text or binary form the client asked for.

mod change;
mod stream;
mod transaction;

use stream::StreamState;
use transaction::{prepared, Ending};

use std::collections::{HashMap, HashSet};
use std::fmt;

use super::catalog::{Catalog, Table};
use super::schema_cache::SchemaCache;
use super::script::Event;
use pgoutput_client::StreamOptions;
use pgoutput_codec::{
    CommitPrepared, Encoder, Lsn, Oid, PgOutputMessage, PgStr, RollbackPrepared, StreamAbort,
    StreamCommit, Streaming, Xid,
};
use pgoutput_wire::error::{error, sqlstate, SqlError};

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

/// Why a script event cannot be sent to a client with its options.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RenderError {
    /// A column's value is held in one form (text or binary) and the client asked for
    /// the other, which this server cannot convert for the column's type (a composite,
    /// or a type it does not know).
    NoConversion {
        /// The table, schema-qualified.
        table: String,
        column: String,
        type_oid: Oid,
        /// Whether the client asked for binary values (the value is held in text).
        to_binary: bool,
    },
    /// A `COMMIT PREPARED` or `ROLLBACK PREPARED` of a gid no transaction before it
    /// prepared.
    UnknownGid { gid: String },
    /// The message cannot be encoded with the client's options (its protocol version or
    /// streaming mode lacks it).
    Unencodable { message: String, reason: String },
    /// An ERROR pgoutput raises for the event (a publication that does not exist).
    Server { code: String, message: String },
}

impl fmt::Display for RenderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RenderError::NoConversion {
                table,
                column,
                type_oid,
                to_binary: true,
            } => write!(
                f,
                "column \"{column}\" of table {table} holds a text value of type {type_oid} that has no binary form here (a composite, or a type this server does not know), and the client asked for binary values"
            ),
            RenderError::NoConversion {
                table,
                column,
                type_oid,
                to_binary: false,
            } => write!(
                f,
                "column \"{column}\" of table {table} holds a binary value of type {type_oid} that has no text form here, and the client did not ask for binary values"
            ),
            RenderError::UnknownGid { gid } => write!(
                f,
                "no prepared transaction with gid {gid:?} before its COMMIT/ROLLBACK PREPARED"
            ),
            RenderError::Unencodable { message, reason } => {
                write!(f, "cannot encode {message} for this client: {reason}")
            }
            RenderError::Server { code, message } => write!(f, "{message} (SQLSTATE {code})"),
        }
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
    types: Vec<pgoutput_codec::Type<'static>>,
    relation: pgoutput_codec::Relation<'static>,
    table: Table,
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

    /// The table's definition at this point of the stream.
    fn table(&self, oid: Oid) -> Option<&Table> {
        match self.definitions.get(&oid) {
            Some(definition) => Some(&definition.table),
            None => self.catalog.table(oid),
        }
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
            .map_err(|e| RenderError::Unencodable {
                message: format!("{message:?}"),
                reason: e.to_string(),
            })?;
        sink.frame(lsn, message, &self.scratch)
            .map_err(Halt::Sink)?;
        Ok(())
    }
}
