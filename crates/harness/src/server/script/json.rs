//! The script's JSON reader: lines in the form `pgoutput decode` and `pgoutput tail`
//! print, grouped back into transactions, so a captured stream replays as it is.

use std::collections::HashMap;
use std::fmt;
use std::io::{BufRead, Read};

use serde_json::Value;

use super::super::catalog::Table;
use super::super::schema_cache::SchemaCache;
use super::model::{relations_of, End, Event, Script, Step, Transaction};
use pgoutput_codec::{Lsn, Oid, PgOutputMessage, PgTimestamp, Type, Xid};

/// A JSON script line that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptError {
    /// The line number, counting from 1 (0 for a script built in Rust, whose message
    /// names the event instead).
    pub line: usize,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for ScriptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            // A script built in Rust, or an appended event: the message says where.
            0 => write!(f, "script {}", self.message),
            line => write!(f, "script line {line}: {}", self.message),
        }
    }
}

impl std::error::Error for ScriptError {}

impl Script {
    /// Reads JSON lines, one pgoutput message each, as `pgoutput decode` and `pgoutput
    /// tail` print them, so a captured stream replays as it is. Blank lines and lines
    /// starting with `#` are skipped. Fields that are left out are zero and filled in
    /// (LSNs, xids, timestamps, flags).
    ///
    /// Messages are grouped back into transactions: Begin…Commit, Begin Prepare…Prepare,
    /// Stream Start/Stop blocks up to their Stream Commit, Abort or Prepare (a Stream
    /// Abort of a subtransaction becomes a subtransaction abort), Commit / Rollback
    /// Prepared, and non-transactional Messages. Relation messages define tables; one
    /// inside a transaction is kept as a [`Step::Schema`] where pgoutput's own rules do
    /// not explain it (the WAL caused it), else each client gets it where its session
    /// needs it.
    ///
    /// Lines as `pgoutput tail --wal-positions` writes them carry `wal_start` and
    /// `wal_end`: each frame's position is kept (changes, stream blocks, a
    /// subtransaction's abort, Begin Prepare), so the stream served back for the recorded
    /// options is the recording, frame headers included. A Type line's `"enum": true`
    /// marks an enum, whose values convert between text and binary as they are.
    ///
    /// # Errors
    ///
    /// [`ScriptError`] naming the line and what is wrong with it.
    pub fn from_json_lines(text: &str) -> Result<Script, ScriptError> {
        Script::from_json_reader(text.as_bytes())
    }

    /// [`Script::from_json_lines`] reading from `reader` line by line, so a large capture
    /// is never held whole as text. A line longer than [`MAX_LINE_LEN`] is an error.
    ///
    /// # Errors
    ///
    /// [`ScriptError`] naming the line and what is wrong with it (or that it cannot be
    /// read).
    pub fn from_json_reader(reader: impl BufRead) -> Result<Script, ScriptError> {
        read_lines(reader, MAX_LINE_LEN)
    }
}

/// JSON lines from `reader`, each at most `max_line` bytes.
fn read_lines(mut reader: impl BufRead, max_line: usize) -> Result<Script, ScriptError> {
    let mut parser = JsonScript::default();
    let mut buf = Vec::new();
    let mut number = 0;
    loop {
        buf.clear();
        let read = (&mut reader)
            .take(max_line as u64 + 1)
            .read_until(b'\n', &mut buf);
        let error = |message: String| ScriptError {
            line: number + 1,
            message,
        };
        match read {
            Ok(0) => break,
            Ok(_) => number += 1,
            Err(err) => return Err(error(format!("cannot read it: {err}"))),
        }
        if buf.len() > max_line && !buf.ends_with(b"\n") {
            return Err(ScriptError {
                line: number,
                message: format!("the line is longer than {max_line} bytes"),
            });
        }
        let line = std::str::from_utf8(&buf).map_err(|_| ScriptError {
            line: number,
            message: "the line is not UTF-8".into(),
        })?;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        parser.read_line(trimmed, number)?;
    }
    parser.finish().map_err(|message| ScriptError {
        line: number,
        message,
    })
}

/// The longest line a JSON script may have: 256 MiB, room for PostgreSQL's largest value
/// (1 GB in the database, but a row that large is not a test's), and a bound on what one
/// line makes the reader allocate.
pub const MAX_LINE_LEN: usize = 256 << 20;

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
    /// The line of each step of the open transaction, and of each streamed one.
    open_lines: Vec<usize>,
    streamed_lines: HashMap<Xid, Vec<usize>>,
    /// Type lines waiting for the Relation they come before.
    pending_types: Vec<Type<'static>>,
    /// The types the Type lines mark as enums.
    enums: Vec<Oid>,
    /// The recorded session's schemas by pgoutput's rules, and each table's definition
    /// so far: a Relation those rules explain, with the definition unchanged, is not
    /// kept (each client gets it where its own session needs it).
    schemas: SchemaCache,
    definitions: HashMap<Oid, (Table, Vec<Type<'static>>)>,
    /// Relations those rules explain, kept as steps (by index in the open transaction or
    /// block) until a change of the table confirms that pgoutput sent them for it.
    explained: Vec<(Oid, usize)>,
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
    /// One line, numbered `number`, recording which line each new step and event came
    /// from.
    fn read_line(&mut self, line: &str, number: usize) -> Result<(), ScriptError> {
        let events_before = self.script.events.len();
        let open_before = self.open.is_some();
        self.line(line).map_err(|message| ScriptError {
            line: number,
            message,
        })?;
        if let Some(t) = &self.open {
            if !open_before {
                self.open_lines.clear();
            }
            self.open_lines.resize(t.steps.len(), number);
        }
        for t in &self.streamed {
            let lines = self.streamed_lines.entry(t.xid).or_default();
            lines.resize(t.steps.len(), number);
        }
        for index in events_before..self.script.events.len() {
            let steps = match &self.script.events[index] {
                Event::Transaction(_) if open_before && self.open.is_none() => {
                    std::mem::take(&mut self.open_lines)
                }
                Event::Transaction(t) => self.streamed_lines.remove(&t.xid).unwrap_or_default(),
                _ => Vec::new(),
            };
            self.script.source.events.push(number);
            self.script.source.steps.push(steps);
        }
        Ok(())
    }

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
        if kind == "keepalive" {
            return self.keepalive(object);
        }
        // `pgoutput tail --wal-positions` puts the XLogData header's positions in front;
        // PostgreSQL's logical walsender sends `walEnd` equal to `dataStart`.
        let position = match object.remove("wal_start") {
            Some(lsn) => {
                Some(serde_json::from_value::<Lsn>(lsn).map_err(|e| format!("wal_start: {e}"))?)
            }
            None => None,
        };
        // `tail --wal-positions` marks the Type of an enum: its label is both forms.
        let is_enum = kind == "type"
            && match object.remove("enum") {
                None => false,
                Some(Value::Bool(b)) => b,
                Some(_) => return Err("\"enum\" is true or false".into()),
            };
        if let Some(end) = object.remove("wal_end") {
            serde_json::from_value::<Lsn>(end).map_err(|e| format!("wal_end: {e}"))?;
        }
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
        let message = pgoutput_codec::IntoOwned::into_owned(message);
        if let (true, PgOutputMessage::Type(t)) = (is_enum, &message) {
            self.enums.push(t.type_oid);
        }
        if !matches!(
            message,
            PgOutputMessage::Type(_) | PgOutputMessage::Relation(_)
        ) {
            // Type lines no Relation followed: changes as they are.
            for t in std::mem::take(&mut self.pending_types) {
                self.change(PgOutputMessage::Type(t), None)?;
            }
        }
        self.message(message, position.filter(|lsn| lsn.0 != 0))
    }

    /// A keepalive `pgoutput tail --wal-positions` recorded (`{"type":"keepalive",
    /// "wal_end":"0/16B3748"}`): where the server's WAL end had moved with nothing more
    /// to send.
    fn keepalive(&mut self, object: &mut serde_json::Map<String, Value>) -> Result<(), String> {
        if self.open.is_some() || self.in_block.is_some() {
            return Err("a keepalive inside a transaction or stream block".into());
        }
        object.remove("type");
        let end = object
            .remove("wal_end")
            .ok_or("a keepalive needs its \"wal_end\"")?;
        let lsn = serde_json::from_value::<Lsn>(end).map_err(|e| format!("wal_end: {e}"))?;
        if let Some(field) = object.keys().next() {
            return Err(format!("unknown field `{field}` of a keepalive"));
        }
        self.script.events.push(Event::WalPosition { lsn });
        Ok(())
    }

    /// One message; `position` is its frame's `dataStart` where the line has it.
    fn message(
        &mut self,
        message: PgOutputMessage<'static>,
        position: Option<Lsn>,
    ) -> Result<(), String> {
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
                t.first_lsn = position.unwrap_or(Lsn(0));
                self.open = Some(t);
            }
            M::Commit(commit) => {
                self.explained.clear();
                let mut t = self.take_open("Commit", false)?;
                t.commit_lsn = commit.commit_lsn;
                t.end_lsn = commit.end_lsn;
                t.timestamp = commit.commit_timestamp;
                self.script.events.push(Event::Transaction(t));
            }
            M::Prepare(prepare) => {
                self.explained.clear();
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
                // With an Origin, the frame before it carries 0/0 and the Origin's the
                // position.
                if let (End::Prepare { .. }, 0, Some(lsn)) = (&t.end, t.first_lsn.0, position) {
                    t.first_lsn = lsn;
                }
                if let Some(Step::StreamBlock { start_lsn, .. }) = t.steps.last_mut() {
                    if start_lsn.0 == 0 {
                        *start_lsn = position.unwrap_or(Lsn(0));
                    }
                }
                t.origin = Some((
                    origin.name.to_string_lossy().into_owned(),
                    origin.origin_lsn,
                ));
            }
            M::Type(t) => self.pending_types.push(t),
            M::Relation(relation) => self.relation(relation)?,
            M::StreamStart(start) => {
                if self.in_block.is_some() {
                    return Err("Stream Start inside a stream block".into());
                }
                self.check_no_open("Stream Start")?;
                self.in_block = Some(start.xid);
                let block = Step::StreamBlock {
                    start_lsn: position.unwrap_or(Lsn(0)),
                    stop_lsn: Lsn(0),
                };
                match self.streamed.iter_mut().find(|t| t.xid == start.xid) {
                    Some(t) => t.steps.push(block),
                    None => {
                        let mut t = Transaction::new().xid(start.xid.0).streamed();
                        // Streamed before, in blocks this script does not hold.
                        t.streamed_before = !start.first_segment;
                        t.steps.push(block);
                        self.streamed.push(t);
                    }
                }
            }
            M::StreamStop(_) => {
                self.explained.clear();
                let xid = self
                    .in_block
                    .take()
                    .ok_or("Stream Stop without Stream Start")?;
                if let Some(t) = self.streamed.iter_mut().find(|t| t.xid == xid) {
                    let block = t
                        .steps
                        .iter_mut()
                        .rev()
                        .find(|s| matches!(s, Step::StreamBlock { .. }));
                    if let Some(Step::StreamBlock { stop_lsn, .. }) = block {
                        *stop_lsn = position.unwrap_or(Lsn(0));
                    }
                }
                self.progress(xid);
            }
            M::StreamCommit(commit) => {
                let mut t = self.take_streamed(commit.xid)?;
                t.commit_lsn = commit.commit_lsn;
                t.end_lsn = commit.end_lsn;
                t.timestamp = commit.commit_timestamp;
                self.schemas.stream_committed(t.xid);
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
                self.schemas.stream_aborted(t.xid);
                t.commit_lsn = abort.abort_lsn.or(position).unwrap_or(Lsn(0));
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
                self.schemas.stream_aborted(abort.xid);
                t.steps.push(Step::SubtransactionAbort {
                    subtransaction,
                    lsn: abort.abort_lsn.or(position).unwrap_or(Lsn(0)),
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
            change => self.change(change, position)?,
        }
        Ok(())
    }

    /// A Relation (after the Type lines before it). Outside a transaction it defines the
    /// table. Inside one it is kept as a [`Step::Schema`] only where pgoutput's own rules
    /// for the recorded session do not explain it, or the definition changed: the WAL
    /// caused it (`ALTER TABLE`, an invalidation), so every client gets it.
    fn relation(&mut self, relation: pgoutput_codec::Relation<'static>) -> Result<(), String> {
        let types: Vec<Type<'static>> = std::mem::take(&mut self.pending_types)
            .into_iter()
            .map(|mut t| {
                t.xid = None;
                t
            })
            .collect();
        let mut table = Table::from_relation(&relation);
        table.types = types.clone();
        table.enums = types
            .iter()
            .map(|t| t.type_oid)
            .filter(|oid| self.enums.contains(oid))
            .collect();
        let oid = table.oid;
        let in_transaction = self.in_block.is_some() || self.open.is_some();
        if !in_transaction {
            match self.script.tables.iter_mut().find(|t| t.oid == oid) {
                Some(known) => *known = table.clone(),
                None => self.script.tables.push(table.clone()),
            }
            self.definitions.insert(oid, (table, types));
            return Ok(());
        }
        let stream = self.in_block;
        let first = !self.definitions.contains_key(&oid);
        if first {
            // The table's first definition: the server's catalog.
            self.script.tables.push(table.clone());
        }
        let explained = self.schemas.needs(oid, stream);
        let unchanged = first
            || self
                .definitions
                .get(&oid)
                .is_some_and(|(known, known_types)| *known == table && *known_types == types);
        if !(explained && unchanged) {
            self.schemas.invalidate(oid);
        }
        // The xid stays as recorded: a Relation no change follows is sent with it.
        let index = self.push_step(Step::Schema {
            types: types.clone(),
            relation,
        })?;
        if explained && unchanged {
            // Kept until a change of the table confirms pgoutput sent it for that change
            // (a capture cut short may hold a Relation without it).
            self.explained.push((oid, index));
        }
        self.schemas.sent(oid, stream);
        self.definitions.insert(oid, (table, types));
        Ok(())
    }

    /// An Insert, Update, Delete, Truncate, Type or transactional Message, at `position`.
    fn change(
        &mut self,
        message: PgOutputMessage<'static>,
        position: Option<Lsn>,
    ) -> Result<(), String> {
        let xid = match &message {
            PgOutputMessage::Message(m) => m.xid,
            PgOutputMessage::Insert(m) => m.xid,
            PgOutputMessage::Update(m) => m.xid,
            PgOutputMessage::Delete(m) => m.xid,
            PgOutputMessage::Truncate(m) => m.xid,
            PgOutputMessage::Type(m) => m.xid,
            _ => None,
        };
        let lsn = match &message {
            PgOutputMessage::Message(m) => m.lsn,
            // Type frames carry 0/0.
            PgOutputMessage::Type(_) => Lsn(0),
            _ => position.unwrap_or(Lsn(0)),
        };
        // The Relations pgoutput sent for this change on its own rules are not steps.
        if !self.explained.is_empty() {
            let touched = relations_of(&message);
            let mut confirmed: Vec<usize> = Vec::new();
            self.explained.retain(|(oid, index)| {
                let hit = touched.contains(oid);
                if hit {
                    confirmed.push(*index);
                }
                !hit
            });
            confirmed.sort_unstable();
            for index in confirmed.into_iter().rev() {
                self.remove_step(index);
            }
        }
        let subtransaction = match (self.in_block, xid) {
            (Some(top), Some(xid)) => {
                let t = self
                    .streamed
                    .iter_mut()
                    .find(|t| t.xid == top)
                    .expect("a block's transaction is open");
                sub_index(t, xid)
            }
            _ => 0,
        };
        // A TRUNCATE invalidates pgoutput's entries for its tables (see the renderer).
        if let PgOutputMessage::Truncate(truncate) = &message {
            for oid in truncate.relation_oids.iter() {
                self.schemas.invalidate(oid);
            }
        }
        self.push_step(Step::Change {
            lsn,
            subtransaction,
            message,
        })
        .map(drop)
    }

    /// Removes step `index` of the stream block or transaction open now (with its line).
    fn remove_step(&mut self, index: usize) {
        let (t, lines) = match self.in_block {
            Some(top) => (
                self.streamed.iter_mut().find(|t| t.xid == top),
                self.streamed_lines.get_mut(&top),
            ),
            None => (self.open.as_mut(), Some(&mut self.open_lines)),
        };
        if let Some(t) = t {
            if index < t.steps.len() {
                t.steps.remove(index);
            }
        }
        if let Some(lines) = lines {
            if index < lines.len() {
                lines.remove(index);
            }
        }
    }

    /// A step of the stream block or transaction open now; its index there.
    fn push_step(&mut self, step: Step) -> Result<usize, String> {
        let t = match self.in_block {
            Some(top) => self
                .streamed
                .iter_mut()
                .find(|t| t.xid == top)
                .expect("a block's transaction is open"),
            None => self.open.as_mut().ok_or(
                "a change outside a transaction: Begin, Begin Prepare or Stream Start comes first",
            )?,
        };
        t.steps.push(step);
        Ok(t.steps.len() - 1)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::script::Clock;

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
        script.fill(&mut clock).unwrap();
        let Event::Transaction(first) = &script.events[0] else {
            panic!("{:?}", script.events[0])
        };
        assert_eq!(first.xid, Xid(10));
        assert!(first.commit_lsn > first.first_change_lsn());
        assert!(first.end_lsn > first.commit_lsn);
        assert_ne!(first.timestamp, PgTimestamp(0));
        assert!(matches!(
            script.events[1],
            Event::StreamProgress {
                xid: Xid(900),
                steps: 2,
                ..
            }
        ));
        assert!(matches!(
            script.events[2],
            Event::StreamProgress {
                xid: Xid(900),
                steps: 3,
                ..
            }
        ));
        let Event::Transaction(streamed) = &script.events[3] else {
            panic!()
        };
        assert!(streamed.streamed);
        assert_eq!(streamed.subtransaction_xids, [Xid(901)]);
        assert!(matches!(streamed.steps[0], Step::StreamBlock { .. }));
        assert!(matches!(
            streamed.steps[2],
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

    /// A recorded Relation that pgoutput's rules explain is not kept, and the lines of
    /// the steps after it stay right: an error names the line it is on.
    #[test]
    fn positions_are_kept_and_errors_still_name_their_line() {
        let relation = r#"{"wal_start":"0/0","wal_end":"0/0","type":"relation","xid":null,"relation_oid":16400,"namespace":"public","relation_name":"t","replica_identity":"default","columns":[{"flags":1,"name":"id","type_oid":23,"type_modifier":-1}]}"#;
        let text = format!(
            "{{\"wal_start\":\"0/2000000\",\"wal_end\":\"0/2000000\",\"type\":\"begin\"}}\n{relation}\n\
             {{\"wal_start\":\"0/2000010\",\"wal_end\":\"0/2000010\",\"type\":\"insert\",\"relation_oid\":16400,\"new_tuple\":[{{\"text\":\"1\"}}]}}\n\
             {{\"wal_start\":\"0/2000020\",\"wal_end\":\"0/2000020\",\"type\":\"insert\",\"relation_oid\":16400,\"new_tuple\":[{{\"text\":\"1\"}},{{\"text\":\"2\"}}]}}\n\
             {{\"type\":\"commit\"}}"
        );
        let script = Script::from_json_lines(&text).unwrap();
        let Event::Transaction(t) = &script.events[0] else {
            panic!()
        };
        // The Relation is the session's first for the table: not a step.
        let lsns: Vec<Lsn> = t
            .steps
            .iter()
            .map(|s| match s {
                Step::Change { lsn, .. } => *lsn,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(lsns, [Lsn(0x2000010), Lsn(0x2000020)]);
        let mut catalog = crate::server::catalog::Catalog::new(Vec::new()).unwrap();
        for table in &script.tables {
            catalog.add_table(table.clone());
        }
        let err = script.check(&catalog).unwrap_err();
        assert_eq!(err.line, 4, "{err}");
        for (line, message) in [
            (r#"{"wal_start":"x","type":"begin"}"#, "wal_start: "),
            (
                r#"{"type":"type","type_oid":1,"namespace":"","name":"x","enum":1}"#,
                "\"enum\" is true or false",
            ),
        ] {
            let err = Script::from_json_lines(line).unwrap_err();
            assert!(err.message.starts_with(message), "{err}");
        }
    }

    #[test]
    fn a_line_too_long_is_refused_with_its_number() {
        let text = "{\"type\":\"begin\"}\n{\"type\":\"commit\"}\n# 01234567890123456789\n";
        let err = read_lines(text.as_bytes(), 20).unwrap_err();
        assert_eq!(
            (err.line, err.message.as_str()),
            (3, "the line is longer than 20 bytes")
        );
        assert!(read_lines(text.as_bytes(), 22).is_ok());
    }
}
