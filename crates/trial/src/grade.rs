//! The anomalies: what the consumer applied against what the source committed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use serde::Serialize;

use crate::change::{Change, Identity, Op, VERSION_COLUMN};
use crate::ledger::{Ledger, Transaction};
use crate::sink::Applied;
use pgoutput_codec::{Lsn, Xid};

/// A transaction as evidence names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TransactionRef {
    /// Its place in commit order, from 1.
    pub number: usize,
    pub xid: Xid,
    pub commit_lsn: Lsn,
    pub end_lsn: Lsn,
    /// How many row changes it made.
    pub rows: usize,
}

impl TransactionRef {
    fn of(index: usize, t: &Transaction) -> TransactionRef {
        TransactionRef {
            number: index + 1,
            xid: t.xid,
            commit_lsn: t.commit_lsn,
            end_lsn: t.end_lsn,
            rows: t.changes.len(),
        }
    }
}

impl fmt::Display for TransactionRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "transaction {} (xid {}, commit at {}, end {}, {} rows)",
            self.number, self.xid.0, self.commit_lsn, self.end_lsn, self.rows
        )
    }
}

/// One way what was applied differs from what was committed, with the smallest evidence:
/// the transaction, the change and the sink's lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "anomaly", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Anomaly {
    /// A committed transaction none of whose changes was applied.
    Lost {
        transaction: TransactionRef,
        /// Its first change.
        first: Change,
    },
    /// A committed transaction only some of whose changes were applied: a consumer that
    /// applies changes as they come and resumed past the rest.
    Partial {
        transaction: TransactionRef,
        applied: usize,
        /// The first change not applied.
        missing: Change,
    },
    /// A change applied more than once: a restart it did not resume from its own
    /// progress (PostgreSQL sends again what it had not heard confirmed).
    Duplicated {
        transaction: TransactionRef,
        change: Change,
        lines: Vec<usize>,
    },
    /// A change of a transaction (or subtransaction) the source rolled back.
    AbortedApplied { change: Change, line: usize },
    /// A change the source never made.
    Unexpected { change: Change, line: usize },
    /// A change applied after one of a transaction that committed later (or, within a
    /// transaction, after a later change of the same row).
    Reordered {
        /// The transaction applied late.
        transaction: TransactionRef,
        /// The later one applied before it.
        after: TransactionRef,
        line: usize,
    },
    /// A row the source has at the end that a table sink does not (the change that
    /// wrote it last, and its transaction): that transaction's effect is lost.
    Missing {
        transaction: TransactionRef,
        change: Change,
    },
    /// A row of a table sink at an older version than the source's: the transaction
    /// that wrote the source's version is lost for it.
    Stale {
        transaction: TransactionRef,
        change: Change,
        found: String,
    },
    /// A value the consumer wrote that is not what the source wrote (`line` 0: in a table
    /// sink).
    WrongValue {
        change: Change,
        column: String,
        expected: String,
        applied: String,
        line: usize,
    },
}

impl Anomaly {
    /// Its kind, as JSON names it (`"lost"`, …).
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Anomaly::Lost { .. } => "lost",
            Anomaly::Partial { .. } => "partial",
            Anomaly::Duplicated { .. } => "duplicated",
            Anomaly::AbortedApplied { .. } => "aborted_applied",
            Anomaly::Unexpected { .. } => "unexpected",
            Anomaly::Reordered { .. } => "reordered",
            Anomaly::WrongValue { .. } => "wrong_value",
            Anomaly::Missing { .. } => "missing",
            Anomaly::Stale { .. } => "stale",
        }
    }

    /// Whether more time could still make it go away: a loss is one only once the
    /// consumer says it has everything (its slot confirmed to the end).
    #[must_use]
    pub fn is_missing(&self) -> bool {
        matches!(
            self,
            Anomaly::Lost { .. }
                | Anomaly::Partial { .. }
                | Anomaly::Missing { .. }
                | Anomaly::Stale { .. }
        )
    }
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Anomaly::Lost { transaction, first } => {
                write!(f, "lost {transaction}: none of it applied (first: {first})")
            }
            Anomaly::Partial {
                transaction,
                applied,
                missing,
            } => write!(
                f,
                "partial {transaction}: {applied} of its rows applied, not {missing}"
            ),
            Anomaly::Duplicated {
                transaction,
                change,
                lines,
            } => {
                let lines: Vec<String> = lines.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "duplicated {change} of {transaction}: applied {} times (sink lines {})",
                    lines.len(),
                    lines.join(", ")
                )
            }
            Anomaly::AbortedApplied { change, line } => write!(
                f,
                "applied {change}, which the source rolled back ({})",
                place(*line)
            ),
            Anomaly::Unexpected { change, line } => write!(
                f,
                "applied {change}, which the source never made ({})",
                place(*line)
            ),
            Anomaly::Missing {
                transaction,
                change,
            } => write!(
                f,
                "missing: the row {change} of {transaction} is not in the sink's table"
            ),
            Anomaly::Stale {
                transaction,
                change,
                found,
            } => write!(
                f,
                "stale: the sink's table has version {found} of the row {change} wrote ({transaction})"
            ),
            Anomaly::Reordered {
                transaction,
                after,
                line,
            } => write!(
                f,
                "reordered: {transaction} applied (sink line {line}) after {after}"
            ),
            Anomaly::WrongValue {
                change,
                column,
                expected,
                applied,
                line,
            } => write!(
                f,
                "wrong value in {change}: {column} = {applied:?}, the source wrote {expected:?} ({})",
                place(*line)
            ),
        }
    }
}

/// Where a sink's change is: its line, or (0) a table sink's row.
fn place(line: usize) -> String {
    match line {
        0 => "in the sink's table".to_owned(),
        line => format!("sink line {line}"),
    }
}

/// Compares a table sink's rows at the end (each a [`Change`] of its table and key, the
/// values as text) with the rows the ledger leaves in the source's tables: a row missing
/// or at an older version names the transaction that wrote the source's; a value that
/// differs is a wrong value; a row the source does not have is unexpected (or a rolled
/// back one's).
#[must_use]
pub fn grade_state(ledger: &Ledger, rows: &[Change]) -> Vec<Anomaly> {
    type Row = (String, BTreeMap<String, String>);
    // The source's rows at the end, each with the change (and transaction) that last
    // wrote it.
    let mut expected: BTreeMap<Row, (usize, Change)> = BTreeMap::new();
    for (t, transaction) in ledger.transactions.iter().enumerate() {
        for change in &transaction.changes {
            let row = (change.table.clone(), change.key.clone());
            match change.op {
                Op::Truncate => expected.retain(|(table, _), _| *table != change.table),
                Op::Delete => {
                    expected.remove(&row);
                }
                Op::Insert | Op::Update => {
                    let mut written = change.clone();
                    if let Some((_, before)) = expected.get(&row) {
                        for (column, value) in &before.values {
                            written
                                .values
                                .entry(column.clone())
                                .or_insert(value.clone());
                        }
                    }
                    expected.insert(row, (t, written));
                }
            }
        }
    }
    let tx = |t: usize| TransactionRef::of(t, &ledger.transactions[t]);
    let found: BTreeMap<Row, &Change> = rows
        .iter()
        .map(|row| ((row.table.clone(), row.key.clone()), row))
        .collect();
    let aborted: HashSet<Row> = ledger
        .aborted
        .iter()
        .map(|c| (c.table.clone(), c.key.clone()))
        .collect();
    let mut anomalies = Vec::new();
    for (row, (t, change)) in &expected {
        let Some(sink) = found.get(row) else {
            anomalies.push(Anomaly::Missing {
                transaction: tx(*t),
                change: change.clone(),
            });
            continue;
        };
        if let (Some(want), Some(have)) = (
            change.values.get(VERSION_COLUMN),
            sink.values.get(VERSION_COLUMN),
        ) {
            if !same_value(want, have) {
                anomalies.push(Anomaly::Stale {
                    transaction: tx(*t),
                    change: change.clone(),
                    found: have.clone(),
                });
                continue;
            }
        }
        for (column, value) in &sink.values {
            if let Some(want) = change.values.get(column) {
                if !same_value(want, value) {
                    anomalies.push(Anomaly::WrongValue {
                        change: change.clone(),
                        column: column.clone(),
                        expected: want.clone(),
                        applied: value.clone(),
                        line: 0,
                    });
                }
            }
        }
    }
    for (row, sink) in &found {
        if !expected.contains_key(row) {
            let change = (*sink).clone();
            anomalies.push(if aborted.contains(row) {
                Anomaly::AbortedApplied { change, line: 0 }
            } else {
                Anomaly::Unexpected { change, line: 0 }
            });
        }
    }
    anomalies
}

/// Compares what was applied with what was committed. `finished`: the consumer says it
/// has everything (its slot confirmed to the ledger's end); until then nothing counts as
/// lost. Anomalies of the sink come in its order, then losses in commit order.
#[must_use]
pub fn grade(ledger: &Ledger, applied: &[Applied], finished: bool) -> Vec<Anomaly> {
    // Where each committed change is: (transaction index, change index).
    let mut committed: HashMap<Identity, (usize, usize)> = HashMap::new();
    for (t, transaction) in ledger.transactions.iter().enumerate() {
        for (c, change) in transaction.changes.iter().enumerate() {
            committed.entry(change.identity()).or_insert((t, c));
        }
    }
    let aborted: HashSet<Identity> = ledger.aborted.iter().map(Change::identity).collect();
    let tx = |t: usize| TransactionRef::of(t, &ledger.transactions[t]);

    let mut anomalies = Vec::new();
    let mut lines_of: BTreeMap<(usize, usize), Vec<usize>> = BTreeMap::new();
    // The latest transaction applied so far (and where), and each row's latest change.
    let mut latest: Option<usize> = None;
    let mut row_latest: HashMap<(String, BTreeMap<String, String>), (usize, usize)> =
        HashMap::new();
    let mut reported: HashSet<(usize, usize)> = HashSet::new();
    for applied in applied {
        let change = &applied.change;
        let identity = change.identity();
        let Some(&(t, c)) = committed.get(&identity) else {
            let line = applied.line;
            anomalies.push(if aborted.contains(&identity) {
                Anomaly::AbortedApplied {
                    change: change.clone(),
                    line,
                }
            } else {
                Anomaly::Unexpected {
                    change: change.clone(),
                    line,
                }
            });
            continue;
        };
        let lines = lines_of.entry((t, c)).or_default();
        lines.push(applied.line);
        if lines.len() > 1 {
            // Its order and values were judged at its first application.
            continue;
        }
        let source = &ledger.transactions[t].changes[c];
        for (column, value) in &change.values {
            if let Some(expected) = source.values.get(column) {
                if !same_value(expected, value) {
                    anomalies.push(Anomaly::WrongValue {
                        change: source.clone(),
                        column: column.clone(),
                        expected: expected.clone(),
                        applied: value.clone(),
                        line: applied.line,
                    });
                }
            }
        }
        let row = (change.table.clone(), change.key.clone());
        let behind_row = row_latest.get(&row).filter(|&&(lt, lc)| lt == t && lc > c);
        match latest {
            Some(later) if later > t && reported.insert((t, later)) => {
                anomalies.push(Anomaly::Reordered {
                    transaction: tx(t),
                    after: tx(later),
                    line: applied.line,
                });
            }
            _ if behind_row.is_some() && reported.insert((t, t)) => {
                anomalies.push(Anomaly::Reordered {
                    transaction: tx(t),
                    after: tx(t),
                    line: applied.line,
                });
            }
            _ => {}
        }
        latest = Some(latest.map_or(t, |l| l.max(t)));
        let entry = row_latest.entry(row).or_insert((t, c));
        *entry = (*entry).max((t, c));
    }
    for (&(t, c), lines) in &lines_of {
        if lines.len() > 1 {
            anomalies.push(Anomaly::Duplicated {
                transaction: tx(t),
                change: ledger.transactions[t].changes[c].clone(),
                lines: lines.clone(),
            });
        }
    }
    if finished {
        for (t, transaction) in ledger.transactions.iter().enumerate() {
            let missing: Vec<usize> = (0..transaction.changes.len())
                .filter(|c| !lines_of.contains_key(&(t, *c)))
                .collect();
            let Some(&first_missing) = missing.first() else {
                continue;
            };
            let applied = transaction.changes.len() - missing.len();
            anomalies.push(if applied == 0 {
                Anomaly::Lost {
                    transaction: tx(t),
                    first: transaction.changes[first_missing].clone(),
                }
            } else {
                Anomaly::Partial {
                    transaction: tx(t),
                    applied,
                    missing: transaction.changes[first_missing].clone(),
                }
            });
        }
    }
    anomalies
}

/// Whether the consumer's `applied` text is the source's `expected`: the same text, the
/// same number, or the same boolean (PostgreSQL writes `t` and `f`).
fn same_value(expected: &str, applied: &str) -> bool {
    if expected == applied {
        return true;
    }
    let boolean = |s: &str| match s {
        "t" | "true" => Some(true),
        "f" | "false" => Some(false),
        _ => None,
    };
    if let (Some(a), Some(b)) = (boolean(expected), boolean(applied)) {
        return a == b;
    }
    match (expected.parse::<f64>(), applied.parse::<f64>()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests;
