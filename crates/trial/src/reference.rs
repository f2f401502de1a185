//! The source's own account of what it committed: the reference slot read directly (not
//! through the proxy) with the crate's consumer, whole transactions only, into a
//! [`Ledger`].

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use pgoutput_client::{ConnInfo, Consumer, ConsumerConfig, Event, StreamOptions, TransactionKind};
use pgoutput_codec::{ColumnValue, Lsn, PgOutputMessage, ProtocolVersion};

use crate::change::{Change, Op};
use crate::ledger::{Ledger, Transaction};
use crate::schema::PUBLICATION;

/// Reads `slot` up to `end` (the WAL position after the workload) into the ledger's
/// transactions, in commit order. `wait` bounds the whole read.
///
/// # Errors
///
/// The connection's errors, or a stream that did not reach `end` within `wait`.
pub fn read(info: &ConnInfo, slot: &str, end: Lsn, wait: Duration) -> Result<Ledger, String> {
    let options = StreamOptions::new(ProtocolVersion::V1, &[PUBLICATION]);
    let config = ConsumerConfig::new(slot, options)
        .end_lsn(end)
        .auto_confirm(true);
    let mut consumer =
        Consumer::connect(info, config).map_err(|e| format!("reference slot: {e}"))?;
    let mut ledger = Ledger::default();
    let mut rows = Rows::default();
    let deadline = std::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(format!(
                "the reference slot did not reach {end} within {wait:?}"
            ));
        }
        let Some(mut transaction) = consumer
            .next_transaction_within(left)
            .map_err(|e| format!("reference slot: {e}"))?
        else {
            if consumer.finished().is_some() {
                break;
            }
            continue;
        };
        if transaction.kind() != TransactionKind::Committed {
            continue;
        }
        let xid = transaction.xid().unwrap_or_default();
        let end_lsn = transaction.end_lsn().unwrap_or_default();
        let mut changes = Vec::new();
        let mut commit_lsn = Lsn(0);
        while let Some(event) = transaction
            .next_event()
            .map_err(|e| format!("reference slot: {e}"))?
        {
            if let Some(lsn) = event.message.decision_lsn() {
                commit_lsn = lsn;
            }
            changes.extend(rows.changes_of(&event));
        }
        if !changes.is_empty() {
            ledger.transactions.push(Transaction {
                xid,
                commit_lsn,
                end_lsn,
                changes,
            });
        }
    }
    consumer.close();
    Ok(ledger)
}

/// Each row's last values as the stream gave them (an unchanged TOASTed value is not
/// sent again; the consumer keeps what it had, and so does the ledger).
#[derive(Debug, Default)]
struct Rows {
    last: HashMap<(String, BTreeMap<String, String>), BTreeMap<String, String>>,
}

impl Rows {
    /// The row changes one event made (a Truncate names each of its tables).
    fn changes_of(&mut self, event: &Event<'_>) -> Vec<Change> {
        let op = match &event.message {
            PgOutputMessage::Truncate(_) => {
                let truncated: Vec<&str> = event.truncated().map(|r| r.name.as_str()).collect();
                self.last
                    .retain(|(table, _), _| !truncated.contains(&table.as_str()));
                return truncated
                    .into_iter()
                    .map(|table| Change::new(table, Op::Truncate, Vec::<(String, String)>::new()))
                    .collect();
            }
            PgOutputMessage::Insert(_) => Op::Insert,
            PgOutputMessage::Update(_) => Op::Update,
            PgOutputMessage::Delete(_) => Op::Delete,
            _ => return Vec::new(),
        };
        let Some(relation) = event.relation() else {
            return Vec::new();
        };
        let row = match op {
            Op::Delete => event.old_row(),
            _ => event.new_row(),
        };
        let Some(row) = row else {
            return Vec::new();
        };
        let key: BTreeMap<String, String> = row
            .key()
            .filter_map(|column| Some((column.name().to_owned(), text(column.raw())?)))
            .collect();
        let mut change = Change::new(&relation.name, op, key);
        let id = (change.table.clone(), change.key.clone());
        if op == Op::Delete {
            self.last.remove(&id);
            return vec![change];
        }
        let before = self.last.remove(&id).unwrap_or_default();
        for column in row.iter() {
            let value = match column.raw() {
                ColumnValue::UnchangedToast => before.get(column.name()).cloned(),
                raw => text(raw),
            };
            if let Some(value) = value {
                change.values.insert(column.name().to_owned(), value);
            }
        }
        self.last.insert(id, change.values.clone());
        vec![change]
    }
}

fn text(value: &ColumnValue<'_>) -> Option<String> {
    match value {
        ColumnValue::Text(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        _ => None,
    }
}
