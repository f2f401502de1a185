//! The script's JSON reader: lines in the form `pgoutput decode` and `pgoutput tail`
//! print, grouped back into transactions, so a captured stream replays as it is.

use std::collections::HashMap;
use std::fmt;
use std::io::{BufRead, Read};

use serde_json::Value;

use super::super::catalog::Table;
use super::model::{End, Event, Script, Step, Transaction};
use crate::{Lsn, PgOutputMessage, PgTimestamp, Xid};

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
    /// Prepared, and non-transactional Messages. Relation messages define tables.
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
