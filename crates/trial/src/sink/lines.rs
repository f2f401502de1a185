//! What a consumer applied: a JSON-lines file it appends one line to per row change.
//!
//! ```text
//! {"table": "trial_items", "op": "insert", "key": {"id": 7}, "values": {"version": 1, "note": "a"}}
//! {"table": "trial_items", "op": "delete", "key": {"id": 7}}
//! ```
//!
//! `table` (as the source names it, without schema for `public`), `op` (`insert`,
//! `update`, `delete`, `truncate`) and `key` (the key columns) are required; `values` (the
//! columns it wrote) may name some columns or none, and each named one is compared with
//! what the source wrote. A value is a JSON string, number or boolean, compared with
//! PostgreSQL's text form (numbers by value, so `12.5` matches `12.50`; `true` matches `t`);
//! `null` is not compared. Other fields (a position of the consumer's own, say) are ignored, and so are
//! blank lines. A last line without its newline is a write the consumer was killed in: it
//! is not counted, and [`Sink::torn`] says so.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde_json::Value;

use crate::change::{Change, Op};

/// One line of the sink: the change, and the line it is on (from 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub line: usize,
    pub change: Change,
}

/// Everything the sink holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sink {
    pub applied: Vec<Applied>,
    /// The last line had no newline and did not read: the number it would have had.
    pub torn: Option<usize>,
}

/// A line that is not a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for SinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sink line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for SinkError {}

#[derive(Deserialize)]
struct Line {
    table: String,
    op: Op,
    key: BTreeMap<String, Value>,
    #[serde(default)]
    values: BTreeMap<String, Value>,
}

/// Reads a sink's bytes.
///
/// # Errors
///
/// The first line that is not UTF-8, not JSON, or not a change as above (the torn last
/// line aside).
pub fn read(bytes: &[u8]) -> Result<Sink, SinkError> {
    let mut sink = Sink::default();
    let mut lines = bytes.split(|b| *b == b'\n').enumerate().peekable();
    while let Some((index, line)) = lines.next() {
        let number = index + 1;
        let last = lines.peek().is_none();
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match parse(line) {
            Ok(change) => sink.applied.push(Applied {
                line: number,
                change,
            }),
            // No newline after it: the consumer was stopped while writing it.
            Err(_) if last => sink.torn = Some(number),
            Err(message) => {
                return Err(SinkError {
                    line: number,
                    message,
                })
            }
        }
    }
    Ok(sink)
}

fn parse(line: &[u8]) -> Result<Change, String> {
    let text = std::str::from_utf8(line).map_err(|_| "not UTF-8".to_owned())?;
    let line: Line = serde_json::from_str(text).map_err(|err| {
        format!(
            "{err} (a change is {{\"table\": …, \"op\": \"insert\"|\"update\"|\"delete\"|\"truncate\", \"key\": {{…}}, \"values\": {{…}}}})"
        )
    })?;
    let text_of = |(column, value): (String, Value)| match value {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some((column, s))),
        Value::Number(n) => Ok(Some((column, n.to_string()))),
        Value::Bool(b) => Ok(Some((column, b.to_string()))),
        Value::Array(_) | Value::Object(_) => Err(format!(
            "column {column:?}: a value is a string, a number, a boolean or null"
        )),
    };
    let collect = |map: BTreeMap<String, Value>| -> Result<BTreeMap<String, String>, String> {
        let mut out = BTreeMap::new();
        for entry in map {
            if let Some((column, text)) = text_of(entry)? {
                out.insert(column, text);
            }
        }
        Ok(out)
    };
    Ok(Change {
        table: line.table,
        op: line.op,
        key: collect(line.key)?,
        values: collect(line.values)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_changes_and_skips_blank_lines() {
        let sink = read(
            b"{\"table\": \"t\", \"op\": \"insert\", \"key\": {\"id\": 1}, \"values\": {\"version\": 1, \"note\": \"a\", \"gone\": null, \"ok\": true}, \"lsn\": \"0/1\"}\n\n{\"table\": \"t\", \"op\": \"delete\", \"key\": {\"id\": \"1\"}}\n",
        )
        .unwrap();
        assert_eq!(sink.torn, None);
        assert_eq!(sink.applied.len(), 2);
        let first = &sink.applied[0];
        assert_eq!(first.line, 1);
        assert_eq!(first.change.key["id"], "1");
        assert_eq!(first.change.values["version"], "1");
        assert_eq!(first.change.values["ok"], "true");
        assert!(!first.change.values.contains_key("gone"));
        assert_eq!(sink.applied[1].line, 3);
        assert_eq!(sink.applied[1].change.op, Op::Delete);
        assert_eq!(sink.applied[1].change.key["id"], "1");
    }

    #[test]
    fn a_torn_last_line_is_not_counted() {
        let sink = read(b"{\"table\": \"t\", \"op\": \"insert\", \"key\": {\"id\": 1}}\n{\"table\": \"t\", \"op\"").unwrap();
        assert_eq!(sink.applied.len(), 1);
        assert_eq!(sink.torn, Some(2));
    }

    #[test]
    fn a_bad_line_names_its_number_and_what_a_change_is() {
        let err = read(b"{\"table\": \"t\", \"op\": \"upsert\", \"key\": {}}\n{}\n").unwrap_err();
        assert_eq!(err.line, 1);
        assert!(err.message.contains("upsert"), "{err}");
        assert!(err.message.contains("\"op\": \"insert\""), "{err}");
        let err =
            read(b"{\"table\": \"t\", \"op\": \"insert\", \"key\": {\"id\": [1]}}\n").unwrap_err();
        assert!(err.message.contains("column \"id\""), "{err}");
        let err = read(b"\xff\n").unwrap_err();
        assert_eq!(err.to_string(), "sink line 1: not UTF-8");
    }
}
