//! One row change, as the source committed it or as a consumer says it applied it.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// What a row change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Insert,
    Update,
    Delete,
    Truncate,
}

impl Op {
    /// Its name as the sink spells it (`"insert"`, …).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Update => "update",
            Op::Delete => "delete",
            Op::Truncate => "truncate",
        }
    }
}

/// The column whose value tells one change of a row from the next: the trial's tables
/// have one, raised by every update, so each change of a row is applied exactly once or
/// it is an anomaly.
pub const VERSION_COLUMN: &str = "version";

/// A row change: its table, what it did, its key (the key columns' values as text, as
/// PostgreSQL's text output gives them) and the values it wrote (text too; a delete's
/// are empty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub table: String,
    pub op: Op,
    pub key: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, String>,
}

/// What makes a change the one it is: two lines naming the same identity are the same
/// change applied twice.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Identity {
    table: String,
    op: Op,
    key: BTreeMap<String, String>,
    version: Option<String>,
}

impl Change {
    /// A change of `table` with `key`'s columns, and no values yet.
    pub fn new<K: Into<String>>(
        table: &str,
        op: Op,
        key: impl IntoIterator<Item = (K, String)>,
    ) -> Change {
        Change {
            table: table.to_owned(),
            op,
            key: key.into_iter().map(|(k, v)| (k.into(), v)).collect(),
            values: BTreeMap::new(),
        }
    }

    /// The same, with `column` written as `value`.
    #[must_use]
    pub fn value(mut self, column: &str, value: impl Into<String>) -> Change {
        self.values.insert(column.to_owned(), value.into());
        self
    }

    /// The same, with the row's version.
    #[must_use]
    pub fn version(self, version: u64) -> Change {
        self.value(VERSION_COLUMN, version.to_string())
    }

    pub(crate) fn identity(&self) -> Identity {
        Identity {
            table: self.table.clone(),
            op: self.op,
            key: self.key.clone(),
            version: self.values.get(VERSION_COLUMN).cloned(),
        }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.op.name(), self.table)?;
        let key: Vec<String> = self.key.iter().map(|(k, v)| format!("{k}={v}")).collect();
        write!(f, " ({})", key.join(", "))?;
        if let Some(version) = self.values.get(VERSION_COLUMN) {
            write!(f, " version {version}")?;
        }
        Ok(())
    }
}
