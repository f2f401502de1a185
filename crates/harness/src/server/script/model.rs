//! The script's model: what happened in the WAL (transactions, their steps, prepared
//! transactions' ends, messages), in order, and the builders that write it in Rust.
//!
//! A script says *what happened* (this transaction inserted these rows, was streamed, had
//! a subtransaction abort, was prepared as `'gid'`), not how it is framed: the server
//! renders it for each client's options (see [`StreamOptions`](pgoutput_client::StreamOptions)),
//! so the same transaction reaches a protocol 1 client as Begin…Commit and a streaming
//! client as stream blocks.

use super::super::catalog::Table;
use super::ScriptError;
use pgoutput_codec::{
    ColumnValue, Lsn, Message, MessageFlags, Oid, PgBytes, PgOutputMessage, PgStr, PgTimestamp,
    Truncate, TruncateOptions, TupleData, Xid,
};

/// How far apart filled-in records are, as in a real WAL with small records.
pub(super) const RECORD: u64 = 0x48;

/// How a transaction ends.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum End {
    /// `COMMIT`.
    Commit,
    /// `ROLLBACK`: only streaming clients ever see it (as Stream Abort), since PostgreSQL
    /// decodes an aborted transaction only while streaming it.
    Abort,
    /// `PREPARE TRANSACTION 'gid'`; a later [`Event::CommitPrepared`] or
    /// [`Event::RollbackPrepared`] finishes it.
    Prepare {
        /// The global transaction identifier.
        gid: String,
    },
}

/// One step of a transaction.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Step {
    /// A change: an Insert, Update, Delete, Truncate, transactional Message or Type.
    Change {
        /// Its WAL position (zero: filled in).
        lsn: Lsn,
        /// 0 for the top-level transaction, `n` for its `n`-th subtransaction.
        subtransaction: usize,
        /// The message; its `xid` field is set when it is rendered.
        message: PgOutputMessage<'static>,
    },
    /// `ROLLBACK TO SAVEPOINT`: the subtransaction's changes are undone. Streaming
    /// clients get a Stream Abort for it; others never see those changes.
    SubtransactionAbort {
        /// Which subtransaction (1 or more).
        subtransaction: usize,
        /// The abort record's WAL position (zero: filled in).
        lsn: Lsn,
        /// When it aborted (zero: filled in).
        timestamp: PgTimestamp,
    },
    /// The table's schema changed here (`ALTER TABLE`) or PostgreSQL dropped what it had
    /// cached of it (`TRUNCATE`, a publication change): every client gets the Relation,
    /// with the Type messages before it, again before its next change of the table, and
    /// this definition holds from here on. The Relation that pgoutput sends on its own
    /// rules (a session's first change of a table, each streamed transaction's) is not a
    /// step: the server sends it for each client as pgoutput would.
    Schema {
        /// The Type messages PostgreSQL sends before it, for columns of user types.
        types: Vec<pgoutput_codec::Type<'static>>,
        /// The new definition.
        relation: pgoutput_codec::Relation<'static>,
    },
    /// A Stream Start: a streaming client gets the steps from here to the next block as
    /// one Stream Start/Stop block, also when none of them is for it (PostgreSQL sends
    /// empty blocks, as for a block of DDL alone). The transaction's first block starts
    /// at its first step, with this marker or without.
    StreamBlock {
        /// The Stream Start frame's position (zero: the block's first change, or for an
        /// empty block the change before it, as the server sends it).
        start_lsn: Lsn,
        /// The Stream Stop frame's position (zero: the block's last change).
        stop_lsn: Lsn,
    },
}

/// A transaction of the script.
#[derive(Debug, Clone, PartialEq)]
pub struct Transaction {
    /// The top-level xid (zero: filled in).
    pub xid: Xid,
    /// The xids of its subtransactions, 1-based by position (zeros: filled in).
    pub subtransaction_xids: Vec<Xid>,
    /// Whether PostgreSQL streamed it while in progress: streaming clients get it as
    /// Stream Start/Stop blocks, the others whole at its end.
    pub streamed: bool,
    /// Its changes, subtransaction aborts and stream blocks, in WAL order.
    pub steps: Vec<Step>,
    /// Whether PostgreSQL streamed blocks of it before the script begins (a capture that
    /// starts in the middle of it): no block of it here is the first segment.
    pub streamed_before: bool,
    /// How it ends.
    pub end: End,
    /// The origin (name and LSN) it was replayed from, if any (`origin 'none'` clients
    /// skip such transactions).
    pub origin: Option<(String, Lsn)>,
    /// Its first WAL record, which a Begin Prepare's frame carries (zero: its first
    /// change). A Begin's frame carries the first change the client gets, as PostgreSQL
    /// sends Begin only then.
    pub first_lsn: Lsn,
    /// The commit (or prepare, or abort) record's position (zero: filled in).
    pub commit_lsn: Lsn,
    /// The end of that record: what a client confirms once it has the transaction (zero:
    /// filled in).
    pub end_lsn: Lsn,
    /// Commit (or prepare, or abort) time (zero: filled in).
    pub timestamp: PgTimestamp,
}

impl Default for Transaction {
    fn default() -> Self {
        Transaction::new()
    }
}

impl Transaction {
    /// A transaction that commits, with no changes yet.
    #[must_use]
    pub fn new() -> Transaction {
        Transaction {
            xid: Xid(0),
            subtransaction_xids: Vec::new(),
            streamed: false,
            steps: Vec::new(),
            streamed_before: false,
            end: End::Commit,
            origin: None,
            first_lsn: Lsn(0),
            commit_lsn: Lsn(0),
            end_lsn: Lsn(0),
            timestamp: PgTimestamp(0),
        }
    }

    /// Sets the xid.
    #[must_use]
    pub fn xid(mut self, xid: u32) -> Transaction {
        self.xid = Xid(xid);
        self
    }

    /// Marks it as streamed while in progress.
    #[must_use]
    pub fn streamed(mut self) -> Transaction {
        self.streamed = true;
        self
    }

    /// Ends it with `ROLLBACK` instead of `COMMIT`.
    #[must_use]
    pub fn abort(mut self) -> Transaction {
        self.end = End::Abort;
        self
    }

    /// Ends it with `PREPARE TRANSACTION 'gid'`.
    #[must_use]
    pub fn prepare(mut self, gid: &str) -> Transaction {
        self.end = End::Prepare {
            gid: gid.to_owned(),
        };
        self
    }

    /// Adds any change message (its xid is set when rendered). A Relation becomes a
    /// [`Step::Schema`]: the table's new definition from here on.
    #[must_use]
    pub fn change(mut self, message: PgOutputMessage<'static>) -> Transaction {
        if let PgOutputMessage::Relation(relation) = message {
            self.steps.push(Step::Schema {
                types: Vec::new(),
                relation,
            });
            return self;
        }
        self.steps.push(Step::Change {
            lsn: Lsn(0),
            subtransaction: 0,
            message,
        });
        self
    }

    /// Inserts `row` into `table`.
    #[must_use]
    pub fn insert<V: Into<ColumnValue<'static>>>(
        self,
        table: &Table,
        row: impl IntoIterator<Item = V>,
    ) -> Transaction {
        self.change(PgOutputMessage::Insert(pgoutput_codec::Insert {
            xid: None,
            relation_oid: table.oid,
            new_tuple: tuple(row),
        }))
    }

    /// Updates a row of `table` to `new_row`; with `old_row`, the old values go on the
    /// wire as the table's replica identity says (the key, or the whole row for `FULL`).
    #[must_use]
    pub fn update<V: Into<ColumnValue<'static>>, W: Into<ColumnValue<'static>>>(
        self,
        table: &Table,
        old_row: Option<Vec<V>>,
        new_row: impl IntoIterator<Item = W>,
    ) -> Transaction {
        let old_tuple = old_row.map(|old| table.old_tuple(values(old)));
        self.change(PgOutputMessage::Update(pgoutput_codec::Update {
            xid: None,
            relation_oid: table.oid,
            old_tuple,
            new_tuple: tuple(new_row),
        }))
    }

    /// Deletes `old_row` from `table` (sent as the key, or the whole row for `FULL`).
    #[must_use]
    pub fn delete<V: Into<ColumnValue<'static>>>(
        self,
        table: &Table,
        old_row: impl IntoIterator<Item = V>,
    ) -> Transaction {
        let old_tuple = table.old_tuple(values(old_row));
        self.change(PgOutputMessage::Delete(pgoutput_codec::Delete {
            xid: None,
            relation_oid: table.oid,
            old_tuple,
        }))
    }

    /// Truncates `tables`.
    #[must_use]
    pub fn truncate(self, tables: &[&Table], options: TruncateOptions) -> Transaction {
        self.change(PgOutputMessage::Truncate(Truncate {
            xid: None,
            options,
            relation_oids: tables.iter().map(|t| t.oid).collect(),
        }))
    }

    /// A transactional logical decoding message (`pg_logical_emit_message(true, …)`),
    /// sent to clients that asked for `messages`.
    #[must_use]
    pub fn message(self, prefix: &str, content: &[u8]) -> Transaction {
        self.change(PgOutputMessage::Message(Message {
            xid: None,
            flags: MessageFlags::Transactional,
            lsn: Lsn(0),
            prefix: PgStr::from(prefix.to_owned()),
            content: PgBytes::from(content.to_vec()),
        }))
    }

    /// Runs `build` inside a new subtransaction (`SAVEPOINT`) that is released.
    #[must_use]
    pub fn subtransaction(self, build: impl FnOnce(Transaction) -> Transaction) -> Transaction {
        self.with_subtransaction(build, false)
    }

    /// Runs `build` inside a new subtransaction that is then rolled back
    /// (`ROLLBACK TO SAVEPOINT`).
    #[must_use]
    pub fn aborted_subtransaction(
        self,
        build: impl FnOnce(Transaction) -> Transaction,
    ) -> Transaction {
        self.with_subtransaction(build, true)
    }

    fn with_subtransaction(
        mut self,
        build: impl FnOnce(Transaction) -> Transaction,
        abort: bool,
    ) -> Transaction {
        self.subtransaction_xids.push(Xid(0));
        let index = self.subtransaction_xids.len();
        let inner = build(Transaction::new());
        for step in inner.steps {
            match step {
                Step::Change { lsn, message, .. } => self.steps.push(Step::Change {
                    lsn,
                    subtransaction: index,
                    message,
                }),
                schema @ Step::Schema { .. } => self.steps.push(schema),
                _ => {}
            }
        }
        if abort {
            self.steps.push(Step::SubtransactionAbort {
                subtransaction: index,
                lsn: Lsn(0),
                timestamp: PgTimestamp(0),
            });
        }
        self
    }

    /// Ends the current stream block: a streaming client gets the changes so far in one
    /// Stream Start/Stop block and the rest in the next.
    #[must_use]
    pub fn stream_boundary(mut self) -> Transaction {
        self.steps.push(Step::StreamBlock {
            start_lsn: Lsn(0),
            stop_lsn: Lsn(0),
        });
        self
    }

    /// The xid of subtransaction `index` (0: the transaction itself).
    pub(crate) fn xid_of(&self, index: usize) -> Xid {
        match index {
            0 => self.xid,
            n => self
                .subtransaction_xids
                .get(n - 1)
                .copied()
                .unwrap_or(self.xid),
        }
    }

    /// The LSN of its first change, or the commit's.
    pub(crate) fn first_change_lsn(&self) -> Lsn {
        self.steps
            .iter()
            .find_map(|s| match s {
                Step::Change { lsn, .. } => Some(*lsn),
                _ => None,
            })
            .unwrap_or(self.commit_lsn)
    }
}

fn tuple<V: Into<ColumnValue<'static>>>(row: impl IntoIterator<Item = V>) -> TupleData<'static> {
    TupleData::new(values(row))
}

/// A row's values, for an old tuple the table shapes (`Table::old_tuple`).
fn values<V: Into<ColumnValue<'static>>>(
    row: impl IntoIterator<Item = V>,
) -> Vec<ColumnValue<'static>> {
    row.into_iter().map(Into::into).collect()
}

/// One event of the WAL, in order.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// A transaction.
    Transaction(Transaction),
    /// `COMMIT PREPARED 'gid'`.
    CommitPrepared {
        /// The prepared transaction's identifier.
        gid: String,
        /// The commit record's position (zero: filled in).
        commit_lsn: Lsn,
        /// Its end (zero: filled in).
        end_lsn: Lsn,
        /// The commit time (zero: filled in).
        timestamp: PgTimestamp,
    },
    /// `ROLLBACK PREPARED 'gid'`.
    RollbackPrepared {
        /// The prepared transaction's identifier.
        gid: String,
        /// The end of the rollback record (zero: filled in).
        end_lsn: Lsn,
        /// The rollback time (zero: filled in).
        timestamp: PgTimestamp,
    },
    /// A non-transactional logical decoding message (`pg_logical_emit_message(false, …)`).
    Message(Message<'static>),
    /// Blocks of a streamed transaction that went out here, before it ended: streaming
    /// clients get its first `steps` steps at this point (in WAL order with the events
    /// around it), the others nothing. Its [`Event::Transaction`] comes later.
    StreamProgress {
        /// The streamed transaction's xid.
        xid: Xid,
        /// How many of its steps are out by now.
        steps: usize,
        /// The transaction's end (filled in): a client that confirmed it does not get
        /// these blocks again.
        end_lsn: Lsn,
    },
    /// The WAL reached `lsn` with nothing more for the clients (a recorded keepalive's
    /// position, past the last change: other databases' WAL, records pgoutput does not
    /// send): the server's WAL end moves there, and its keepalives report it once a
    /// client has had everything before it.
    WalPosition {
        /// The position (zero: where the events before it end).
        lsn: Lsn,
    },
}

impl Event {
    /// The WAL position a client has everything of this event at.
    #[must_use]
    pub fn end_lsn(&self) -> Lsn {
        match self {
            Event::Transaction(t) => t.end_lsn,
            Event::CommitPrepared { end_lsn, .. } | Event::RollbackPrepared { end_lsn, .. } => {
                *end_lsn
            }
            // The end of the message's record: a client that confirmed its start has not
            // had it yet.
            Event::Message(m) => Lsn(m.lsn.0 + RECORD),
            Event::StreamProgress { end_lsn, .. } => *end_lsn,
            Event::WalPosition { lsn } => *lsn,
        }
    }

    /// Whether a stream that starts at `from` (the slot's confirmed position, or a later
    /// one asked for) leaves this event out. PostgreSQL skips a transaction whose commit
    /// (or prepare, or abort) record starts before `from`, and a non-transactional
    /// message whose record does (`SnapBuildXactNeedsSkip`): a client that confirmed a
    /// commit's own position gets that transaction again; one past it, never.
    pub(crate) fn skipped_from(&self, from: Lsn) -> bool {
        match self {
            Event::Transaction(t) => t.commit_lsn < from,
            Event::CommitPrepared { commit_lsn, .. } => *commit_lsn < from,
            Event::Message(m) => m.lsn < from,
            _ => self.end_lsn() <= from,
        }
    }
}

/// The events a server streams, and the tables that the script's own Relation messages
/// define.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Script {
    /// The events, in WAL order.
    pub events: Vec<Event>,
    /// Tables defined by Relation messages in a JSON script.
    pub tables: Vec<Table>,
    /// Where a JSON script's events came from, for errors that name the line.
    pub(crate) source: Source,
}

/// The lines a JSON script's events came from: the line that ended each event, and the
/// line of each of its steps. Empty for a script built in Rust.
#[derive(Debug, Clone, Default)]
pub(crate) struct Source {
    pub events: Vec<usize>,
    pub steps: Vec<Vec<usize>>,
}

/// Where a script came from is not part of what it says.
impl PartialEq for Source {
    fn eq(&self, _: &Source) -> bool {
        true
    }
}

impl Script {
    /// An error about event `index` (and its step `step`), naming the line it came from,
    /// or the event for a script built in Rust.
    pub(crate) fn error_at(
        &self,
        index: usize,
        step: Option<usize>,
        message: String,
    ) -> ScriptError {
        match self.source.events.get(index) {
            Some(&line) => ScriptError {
                line: step
                    .and_then(|s| self.source.steps.get(index)?.get(s).copied())
                    .unwrap_or(line),
                message,
            },
            None => ScriptError {
                line: 0,
                message: match step {
                    Some(s) => format!("event {}, step {}: {message}", index + 1, s + 1),
                    None => format!("event {}: {message}", index + 1),
                },
            },
        }
    }

    /// An empty script.
    #[must_use]
    pub fn new() -> Script {
        Script::default()
    }

    /// Adds a transaction.
    #[must_use]
    pub fn transaction(mut self, transaction: Transaction) -> Script {
        self.events.push(Event::Transaction(transaction));
        self
    }

    /// Adds `COMMIT PREPARED 'gid'`.
    #[must_use]
    pub fn commit_prepared(mut self, gid: &str) -> Script {
        self.events.push(Event::CommitPrepared {
            gid: gid.to_owned(),
            commit_lsn: Lsn(0),
            end_lsn: Lsn(0),
            timestamp: PgTimestamp(0),
        });
        self
    }

    /// Adds `ROLLBACK PREPARED 'gid'`.
    #[must_use]
    pub fn rollback_prepared(mut self, gid: &str) -> Script {
        self.events.push(Event::RollbackPrepared {
            gid: gid.to_owned(),
            end_lsn: Lsn(0),
            timestamp: PgTimestamp(0),
        });
        self
    }

    /// Adds a non-transactional logical decoding message.
    #[must_use]
    pub fn message(mut self, prefix: &str, content: &[u8]) -> Script {
        self.events.push(Event::Message(Message {
            xid: None,
            flags: MessageFlags::NonTransactional,
            lsn: Lsn(0),
            prefix: PgStr::from(prefix.to_owned()),
            content: PgBytes::from(content.to_vec()),
        }));
        self
    }
}

/// The relation OIDs a change touches.
pub(crate) fn relations_of(message: &PgOutputMessage<'_>) -> Vec<Oid> {
    match message {
        PgOutputMessage::Insert(m) => vec![m.relation_oid],
        PgOutputMessage::Update(m) => vec![m.relation_oid],
        PgOutputMessage::Delete(m) => vec![m.relation_oid],
        PgOutputMessage::Truncate(m) => m.relation_oids.to_vec(),
        _ => Vec::new(),
    }
}
