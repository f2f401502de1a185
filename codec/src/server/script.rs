//! The stream a test server sends: transactions and other WAL events, in order, built in
//! Rust or read from JSON lines in the form `pgoutput decode` and `pgoutput tail` print.
//!
//! A script says *what happened* (this transaction inserted these rows, was streamed, had
//! a subtransaction abort, was prepared as `'gid'`), not how it is framed: the server
//! renders it for each client's options (see [`StreamOptions`](super::StreamOptions)), so
//! the same transaction reaches a protocol 1 client as Begin…Commit and a streaming client
//! as stream blocks. LSNs, xids and timestamps that are zero are filled in when the server
//! takes the script: increasing, with each transaction's records before its commit.

use std::fmt;

use serde_json::Value;

use super::catalog::Table;
use crate::{
    ColumnValue, Lsn, Message, MessageFlags, Oid, PgBytes, PgOutputMessage, PgStr, PgTimestamp,
    Truncate, TruncateOptions, TupleData, Xid,
};

/// How a transaction ends.
#[derive(Debug, Clone, PartialEq, Eq)]
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
pub enum Step {
    /// A change: an Insert, Update, Delete, Truncate, transactional Message or Type, or a
    /// Relation where the schema is sent again.
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
    /// Where a streamed transaction's block ends and the next begins.
    StreamBoundary,
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
    /// Its changes, subtransaction aborts and stream boundaries, in WAL order.
    pub steps: Vec<Step>,
    /// How it ends.
    pub end: End,
    /// The origin (name and LSN) it was replayed from, if any (`origin 'none'` clients
    /// skip such transactions).
    pub origin: Option<(String, Lsn)>,
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
            end: End::Commit,
            origin: None,
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

    /// Adds any change message (its xid is set when rendered).
    #[must_use]
    pub fn change(mut self, message: PgOutputMessage<'static>) -> Transaction {
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
        self.change(PgOutputMessage::Insert(crate::Insert {
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
        self.change(PgOutputMessage::Update(crate::Update {
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
        self.change(PgOutputMessage::Delete(crate::Delete {
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
            if let Step::Change { lsn, message, .. } = step {
                self.steps.push(Step::Change {
                    lsn,
                    subtransaction: index,
                    message,
                });
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
        self.steps.push(Step::StreamBoundary);
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

    /// The LSN of its first change (what Begin's frame carries), or the commit's.
    pub(crate) fn first_lsn(&self) -> Lsn {
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
}

/// A JSON script line that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptError {
    /// The line number, counting from 1.
    pub line: usize,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for ScriptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "script line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ScriptError {}

impl Script {
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

    /// Reads JSON lines, one pgoutput message each, as `pgoutput decode` and `pgoutput
    /// tail` print them, so a captured stream replays as it is. Blank lines and lines
    /// starting with `#` are skipped. Fields that are left out are zero and filled in
    /// (LSNs, xids, timestamps, flags).
    ///
    /// Messages are grouped back into transactions: Begin…Commit, Begin Prepare…Prepare,
    /// Stream Start/Stop blocks up to their Stream Commit, Abort or Prepare (a Stream
    /// Abort of a subtransaction becomes a subtransaction abort), Commit / Rollback
    /// Prepared, and non-transactional Messages. Relation messages define tables.
    ///
    /// # Errors
    ///
    /// [`ScriptError`] naming the line and what is wrong with it.
    pub fn from_json_lines(text: &str) -> Result<Script, ScriptError> {
        let mut parser = JsonScript::default();
        for (index, line) in text.lines().enumerate() {
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            parser.line(trimmed).map_err(|message| ScriptError {
                line: index + 1,
                message,
            })?;
        }
        parser.finish().map_err(|message| ScriptError {
            line: text.lines().count(),
            message,
        })
    }

    /// Gives every zero LSN, xid and timestamp a value, continuing from `clock`.
    pub(crate) fn fill(&mut self, clock: &mut Clock) {
        for event in &mut self.events {
            clock.fill_event(event);
        }
        // Stream progress takes its transaction's end, known now.
        for i in 0..self.events.len() {
            if let Event::StreamProgress { xid, .. } = self.events[i] {
                let end = self.events[i + 1..].iter().find_map(|e| match e {
                    Event::Transaction(t) if t.xid == xid => Some(t.end_lsn),
                    _ => None,
                });
                if let (Some(end), Event::StreamProgress { end_lsn, .. }) =
                    (end, &mut self.events[i])
                {
                    *end_lsn = end;
                }
            }
        }
    }
}

/// Where the server's WAL stands: the next LSN and xid to hand out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Clock {
    pub next_lsn: Lsn,
    pub next_xid: u32,
}

/// How far apart filled-in records are, as in a real WAL with small records.
const RECORD: u64 = 0x48;

impl Clock {
    /// The position of a record: `given` if set (and the clock moves past it), else the
    /// next one.
    fn lsn(&mut self, given: Lsn) -> Lsn {
        let lsn = if given.0 != 0 { given } else { self.next_lsn };
        self.next_lsn = Lsn(self.next_lsn.0.max(lsn.0 + RECORD));
        lsn
    }

    fn xid(&mut self, given: Xid) -> Xid {
        let xid = if given.0 != 0 {
            given
        } else {
            Xid(self.next_xid)
        };
        self.next_xid = self.next_xid.max(xid.0.saturating_add(1));
        xid
    }

    fn fill_event(&mut self, event: &mut Event) {
        let now = PgTimestamp::now();
        let time = |t: &mut PgTimestamp| {
            if t.0 == 0 {
                *t = now;
            }
        };
        match event {
            Event::Transaction(t) => {
                t.xid = self.xid(t.xid);
                for sub in &mut t.subtransaction_xids {
                    *sub = self.xid(*sub);
                }
                for step in &mut t.steps {
                    match step {
                        Step::Change { lsn, message, .. } => {
                            *lsn = self.lsn(*lsn);
                            if let PgOutputMessage::Message(m) = message {
                                m.lsn = *lsn;
                            }
                        }
                        Step::SubtransactionAbort { lsn, timestamp, .. } => {
                            *lsn = self.lsn(*lsn);
                            time(timestamp);
                        }
                        Step::StreamBoundary => {}
                    }
                }
                t.commit_lsn = self.lsn(t.commit_lsn);
                t.end_lsn = self.end(t.commit_lsn, t.end_lsn);
                time(&mut t.timestamp);
            }
            Event::CommitPrepared {
                commit_lsn,
                end_lsn,
                timestamp,
                ..
            } => {
                *commit_lsn = self.lsn(*commit_lsn);
                *end_lsn = self.end(*commit_lsn, *end_lsn);
                time(timestamp);
            }
            Event::RollbackPrepared {
                end_lsn, timestamp, ..
            } => {
                let record = self.lsn(Lsn(0));
                *end_lsn = self.end(record, *end_lsn);
                time(timestamp);
            }
            Event::Message(m) => {
                m.lsn = self.lsn(m.lsn);
            }
            Event::StreamProgress { .. } => {}
        }
    }

    /// The end of the record at `record`: `given` if set, else a record length on.
    fn end(&mut self, record: Lsn, given: Lsn) -> Lsn {
        let end = if given.0 != 0 {
            given
        } else {
            Lsn(record.0 + RECORD)
        };
        self.next_lsn = Lsn(self.next_lsn.0.max(end.0));
        end
    }
}

/// Grouping JSON message lines back into events.
#[derive(Debug, Default)]
struct JsonScript {
    script: Script,
    /// The transaction between Begin (or Begin Prepare) and its end.
    open: Option<Transaction>,
    /// Streamed transactions seen in blocks and not yet ended, with the xid of the block
    /// we are in.
    streamed: Vec<Transaction>,
    in_block: Option<Xid>,
}

/// Fields every message of a type needs, with the value that means "fill in".
fn defaults(kind: &str) -> &'static [(&'static str, &'static str)] {
    const LSN0: &str = "\"0/0\"";
    const TIME0: &str = "\"2000-01-01 00:00:00+00\"";
    match kind {
        "begin" => &[
            ("final_lsn", LSN0),
            ("commit_timestamp", TIME0),
            ("xid", "0"),
        ],
        "commit" => &[
            ("flags", "0"),
            ("commit_lsn", LSN0),
            ("end_lsn", LSN0),
            ("commit_timestamp", TIME0),
        ],
        "stream_commit" => &[
            ("flags", "0"),
            ("commit_lsn", LSN0),
            ("end_lsn", LSN0),
            ("commit_timestamp", TIME0),
            ("xid", "0"),
        ],
        "begin_prepare" => &[
            ("prepare_lsn", LSN0),
            ("end_lsn", LSN0),
            ("prepare_timestamp", TIME0),
            ("xid", "0"),
        ],
        "prepare" | "stream_prepare" => &[
            ("flags", "0"),
            ("prepare_lsn", LSN0),
            ("end_lsn", LSN0),
            ("prepare_timestamp", TIME0),
            ("xid", "0"),
        ],
        "commit_prepared" => &[
            ("flags", "0"),
            ("commit_lsn", LSN0),
            ("end_lsn", LSN0),
            ("commit_timestamp", TIME0),
            ("xid", "0"),
        ],
        "rollback_prepared" => &[
            ("flags", "0"),
            ("prepare_end_lsn", LSN0),
            ("rollback_end_lsn", LSN0),
            ("prepare_timestamp", TIME0),
            ("rollback_timestamp", TIME0),
            ("xid", "0"),
        ],
        "stream_start" => &[("xid", "0"), ("first_segment", "false")],
        "stream_abort" => &[("xid", "0"), ("subtransaction_xid", "0")],
        "message" => &[("flags", "\"transactional\""), ("lsn", LSN0)],
        "origin" => &[("origin_lsn", LSN0)],
        "truncate" => &[("options", "0")],
        _ => &[],
    }
}

impl JsonScript {
    fn line(&mut self, line: &str) -> Result<(), String> {
        let mut value: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        let object = value
            .as_object_mut()
            .ok_or("expected a JSON object with a \"type\"")?;
        let kind = object
            .get("type")
            .and_then(Value::as_str)
            .ok_or("expected a \"type\" field")?
            .to_owned();
        for (field, default) in defaults(&kind) {
            if !object.contains_key(*field) {
                object.insert(
                    (*field).to_owned(),
                    serde_json::from_str(default).expect("valid default"),
                );
            }
        }
        let message: PgOutputMessage<'_> =
            serde_json::from_value(value).map_err(|e| e.to_string())?;
        self.message(crate::IntoOwned::into_owned(message))
    }

    fn message(&mut self, message: PgOutputMessage<'static>) -> Result<(), String> {
        use PgOutputMessage as M;
        match message {
            M::Begin(begin) => {
                self.check_no_open("Begin")?;
                let mut t = Transaction::new();
                t.xid = begin.xid;
                t.commit_lsn = begin.final_lsn;
                t.timestamp = begin.commit_timestamp;
                self.open = Some(t);
            }
            M::BeginPrepare(begin) => {
                self.check_no_open("Begin Prepare")?;
                let mut t = Transaction::new().prepare(&begin.gid.to_string_lossy());
                t.xid = begin.xid;
                t.commit_lsn = begin.prepare_lsn;
                t.end_lsn = begin.end_lsn;
                t.timestamp = begin.prepare_timestamp;
                self.open = Some(t);
            }
            M::Commit(commit) => {
                let mut t = self.take_open("Commit", false)?;
                t.commit_lsn = commit.commit_lsn;
                t.end_lsn = commit.end_lsn;
                t.timestamp = commit.commit_timestamp;
                self.script.events.push(Event::Transaction(t));
            }
            M::Prepare(prepare) => {
                let mut t = self.take_open("Prepare", true)?;
                t.commit_lsn = prepare.prepare_lsn;
                t.end_lsn = prepare.end_lsn;
                t.timestamp = prepare.prepare_timestamp;
                self.script.events.push(Event::Transaction(t));
            }
            M::Origin(origin) => {
                let t = match self.in_block {
                    Some(xid) => self.streamed.iter_mut().find(|t| t.xid == xid),
                    None => self.open.as_mut(),
                }
                .ok_or("Origin outside a transaction")?;
                t.origin = Some((
                    origin.name.to_string_lossy().into_owned(),
                    origin.origin_lsn,
                ));
            }
            M::Relation(relation) => {
                let table = Table::from_relation(&relation);
                if let Some(known) = self.script.tables.iter_mut().find(|t| t.oid == table.oid) {
                    *known = table;
                } else {
                    self.script.tables.push(table);
                }
                // Inside a transaction it also marks where PostgreSQL sent the schema
                // again (after an invalidation such as a TRUNCATE): replayed there too.
                if self.in_block.is_some() || self.open.is_some() {
                    self.change(M::Relation(relation))?;
                }
            }
            M::StreamStart(start) => {
                if self.in_block.is_some() {
                    return Err("Stream Start inside a stream block".into());
                }
                self.check_no_open("Stream Start")?;
                self.in_block = Some(start.xid);
                match self.streamed.iter_mut().find(|t| t.xid == start.xid) {
                    Some(t) => t.steps.push(Step::StreamBoundary),
                    None => {
                        let mut t = Transaction::new().xid(start.xid.0).streamed();
                        if !start.first_segment {
                            // Streamed before, in blocks this script does not hold.
                            t.steps.push(Step::StreamBoundary);
                        }
                        self.streamed.push(t);
                    }
                }
            }
            M::StreamStop(_) => {
                let xid = self
                    .in_block
                    .take()
                    .ok_or("Stream Stop without Stream Start")?;
                self.progress(xid);
            }
            M::StreamCommit(commit) => {
                let mut t = self.take_streamed(commit.xid)?;
                t.commit_lsn = commit.commit_lsn;
                t.end_lsn = commit.end_lsn;
                t.timestamp = commit.commit_timestamp;
                self.script.events.push(Event::Transaction(t));
            }
            M::StreamPrepare(prepare) => {
                let mut t = self
                    .take_streamed(prepare.xid)?
                    .prepare(&prepare.gid.to_string_lossy());
                t.commit_lsn = prepare.prepare_lsn;
                t.end_lsn = prepare.end_lsn;
                t.timestamp = prepare.prepare_timestamp;
                self.script.events.push(Event::Transaction(t));
            }
            M::StreamAbort(abort) if abort.is_top_level() || abort.subtransaction_xid.0 == 0 => {
                let mut t = self.take_streamed(abort.xid)?.abort();
                t.commit_lsn = abort.abort_lsn.unwrap_or(Lsn(0));
                t.timestamp = abort.abort_timestamp.unwrap_or(PgTimestamp(0));
                self.script.events.push(Event::Transaction(t));
            }
            M::StreamAbort(abort) => {
                if self.in_block.is_some() {
                    return Err("Stream Abort inside a stream block".into());
                }
                let t = self
                    .streamed
                    .iter_mut()
                    .find(|t| t.xid == abort.xid)
                    .ok_or_else(|| {
                        format!("Stream Abort of unknown transaction {}", abort.xid.0)
                    })?;
                let subtransaction = sub_index(t, abort.subtransaction_xid);
                t.steps.push(Step::SubtransactionAbort {
                    subtransaction,
                    lsn: abort.abort_lsn.unwrap_or(Lsn(0)),
                    timestamp: abort.abort_timestamp.unwrap_or(PgTimestamp(0)),
                });
                self.progress(abort.xid);
            }
            M::CommitPrepared(commit) => self.script.events.push(Event::CommitPrepared {
                gid: commit.gid.to_string_lossy().into_owned(),
                commit_lsn: commit.commit_lsn,
                end_lsn: commit.end_lsn,
                timestamp: commit.commit_timestamp,
            }),
            M::RollbackPrepared(rollback) => self.script.events.push(Event::RollbackPrepared {
                gid: rollback.gid.to_string_lossy().into_owned(),
                end_lsn: rollback.rollback_end_lsn,
                timestamp: rollback.rollback_timestamp,
            }),
            M::Message(message) if !message.is_transactional() => {
                self.script.events.push(Event::Message(message))
            }
            change => self.change(change)?,
        }
        Ok(())
    }

    /// An Insert, Update, Delete, Truncate, Type or transactional Message.
    fn change(&mut self, message: PgOutputMessage<'static>) -> Result<(), String> {
        let (lsn, xid) = match &message {
            PgOutputMessage::Message(m) => (m.lsn, m.xid),
            PgOutputMessage::Insert(m) => (Lsn(0), m.xid),
            PgOutputMessage::Update(m) => (Lsn(0), m.xid),
            PgOutputMessage::Delete(m) => (Lsn(0), m.xid),
            PgOutputMessage::Truncate(m) => (Lsn(0), m.xid),
            PgOutputMessage::Type(m) => (Lsn(0), m.xid),
            PgOutputMessage::Relation(m) => (Lsn(0), m.xid),
            _ => (Lsn(0), None),
        };
        if let Some(top) = self.in_block {
            let t = self
                .streamed
                .iter_mut()
                .find(|t| t.xid == top)
                .expect("a block's transaction is open");
            let subtransaction = xid.map_or(0, |xid| sub_index(t, xid));
            t.steps.push(Step::Change {
                lsn,
                subtransaction,
                message,
            });
            return Ok(());
        }
        let t = self.open.as_mut().ok_or(
            "a change outside a transaction: Begin, Begin Prepare or Stream Start comes first",
        )?;
        t.steps.push(Step::Change {
            lsn,
            subtransaction: 0,
            message,
        });
        Ok(())
    }

    /// Marks that the streamed transaction `xid` went out up to here.
    fn progress(&mut self, xid: Xid) {
        if let Some(t) = self.streamed.iter().find(|t| t.xid == xid) {
            self.script.events.push(Event::StreamProgress {
                xid,
                steps: t.steps.len(),
                end_lsn: Lsn(0),
            });
        }
    }

    fn check_no_open(&self, what: &str) -> Result<(), String> {
        match &self.open {
            Some(t) => Err(format!(
                "{what} inside transaction {}, which has not ended",
                t.xid.0
            )),
            None => Ok(()),
        }
    }

    fn take_open(&mut self, what: &str, prepared: bool) -> Result<Transaction, String> {
        match self.open.take() {
            Some(t) if matches!(t.end, End::Prepare { .. }) == prepared => Ok(t),
            Some(t) => {
                self.open = Some(t);
                Err(format!("{what} does not match the transaction's beginning"))
            }
            None => Err(format!("{what} without a beginning")),
        }
    }

    fn take_streamed(&mut self, xid: Xid) -> Result<Transaction, String> {
        if self.in_block.is_some() {
            return Err("a streamed transaction ends inside a stream block".into());
        }
        let index = self
            .streamed
            .iter()
            .position(|t| t.xid == xid)
            .ok_or_else(|| format!("end of unknown streamed transaction {}", xid.0))?;
        Ok(self.streamed.remove(index))
    }

    fn finish(self) -> Result<Script, String> {
        if let Some(t) = self.open {
            return Err(format!("transaction {} has no end", t.xid.0));
        }
        if let Some(t) = self.streamed.first() {
            return Err(format!("streamed transaction {} has no end", t.xid.0));
        }
        Ok(self.script)
    }
}

/// The subtransaction index of `xid` in `t` (0 for `t` itself), registering it.
fn sub_index(t: &mut Transaction, xid: Xid) -> usize {
    if xid == t.xid {
        return 0;
    }
    match t.subtransaction_xids.iter().position(|&x| x == xid) {
        Some(i) => i + 1,
        None => {
            t.subtransaction_xids.push(xid);
            t.subtransaction_xids.len()
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_group_into_events_and_missing_fields_are_filled() {
        let text = r#"
# a comment
{"type":"relation","relation_oid":16385,"namespace":"public","relation_name":"t","replica_identity":"default","columns":[{"flags":1,"name":"id","type_oid":23,"type_modifier":-1}]}
{"type":"begin"}
{"type":"insert","relation_oid":16385,"new_tuple":[{"text":"1"}]}
{"type":"commit"}
{"type":"stream_start","xid":900,"first_segment":true}
{"type":"insert","xid":901,"relation_oid":16385,"new_tuple":[{"text":"2"}]}
{"type":"stream_stop"}
{"type":"stream_abort","xid":900,"subtransaction_xid":901}
{"type":"stream_commit","xid":900}
{"type":"message","flags":"non_transactional","prefix":"p","content":"c"}
"#;
        let mut script = Script::from_json_lines(text).unwrap();
        assert_eq!(script.tables.len(), 1);
        assert_eq!(script.events.len(), 5);
        let mut clock = Clock {
            next_lsn: Lsn(0x1000),
            next_xid: 10,
        };
        script.fill(&mut clock);
        let Event::Transaction(first) = &script.events[0] else {
            panic!("{:?}", script.events[0])
        };
        assert_eq!(first.xid, Xid(10));
        assert!(first.commit_lsn > first.first_lsn());
        assert!(first.end_lsn > first.commit_lsn);
        assert_ne!(first.timestamp, PgTimestamp(0));
        assert!(matches!(
            script.events[1],
            Event::StreamProgress {
                xid: Xid(900),
                steps: 1,
                ..
            }
        ));
        assert!(matches!(
            script.events[2],
            Event::StreamProgress {
                xid: Xid(900),
                steps: 2,
                ..
            }
        ));
        let Event::Transaction(streamed) = &script.events[3] else {
            panic!()
        };
        assert!(streamed.streamed);
        assert_eq!(streamed.subtransaction_xids, [Xid(901)]);
        assert!(matches!(
            streamed.steps[1],
            Step::SubtransactionAbort {
                subtransaction: 1,
                ..
            }
        ));
        assert!(streamed.commit_lsn > first.end_lsn);
        let Event::StreamProgress { end_lsn, .. } = script.events[1] else {
            panic!()
        };
        assert_eq!(end_lsn, streamed.end_lsn);
        // Every event ends after the one before.
        let ends: Vec<Lsn> = script.events.iter().map(Event::end_lsn).collect();
        assert!(ends[3] < ends[4]);
    }

    /// Every default names a field its message has: the JSON form refuses unknown fields.
    #[test]
    fn defaults_fit_their_messages() {
        for kind in [
            "begin",
            "commit",
            "stream_commit",
            "begin_prepare",
            "prepare",
            "stream_prepare",
            "commit_prepared",
            "rollback_prepared",
            "stream_start",
            "stream_abort",
            "message",
            "origin",
            "truncate",
        ] {
            let mut object = serde_json::Map::new();
            object.insert("type".into(), kind.into());
            for (field, default) in defaults(kind) {
                object.insert((*field).into(), serde_json::from_str(default).unwrap());
            }
            if let Err(err) = serde_json::from_value::<PgOutputMessage<'_>>(object.into()) {
                let err = err.to_string();
                assert!(err.starts_with("missing field"), "{kind}: {err}");
            }
        }
    }

    #[test]
    fn json_errors_name_the_line() {
        for (text, line, message) in [
            ("{\"type\":\"commit\"}", 1, "Commit without a beginning"),
            (
                "{\"type\":\"begin\"}\n{\"type\":\"begin\"}",
                2,
                "Begin inside transaction 0, which has not ended",
            ),
            (
                "{\"type\":\"begin\"}\n\n{\"type\":\"insert\"}",
                3,
                "missing field `relation_oid`",
            ),
            (
                "{\"type\":\"stream_stop\"}",
                1,
                "Stream Stop without Stream Start",
            ),
            ("not json", 1, "expected ident at line 1 column 2"),
            ("{\"type\":\"begin\"}", 1, "transaction 0 has no end"),
        ] {
            let err = Script::from_json_lines(text).unwrap_err();
            assert_eq!((err.line, err.message.as_str()), (line, message), "{text}");
        }
    }
}
