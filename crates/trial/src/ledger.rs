//! What the source committed, in commit order, and what it rolled back.

use serde::Serialize;

use crate::change::Change;
use pgoutput_codec::{Lsn, Xid};

/// One committed transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Transaction {
    pub xid: Xid,
    /// Where its commit record starts (the Commit message's `commit_lsn`).
    #[serde(serialize_with = "crate::ledger::lsn")]
    pub commit_lsn: Lsn,
    /// Where its commit record ends: what a consumer confirms once it applied it.
    #[serde(serialize_with = "crate::ledger::lsn")]
    pub end_lsn: Lsn,
    /// Its row changes, in order.
    pub changes: Vec<Change>,
}

/// Every transaction of the trial's workload the source committed, in commit order, and
/// the row changes it rolled back (whole transactions and subtransactions): a correct
/// consumer applies each of the first once, in order, and none of the second.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Ledger {
    pub transactions: Vec<Transaction>,
    pub aborted: Vec<Change>,
}

impl Ledger {
    /// The end of the last transaction: where a consumer that applied everything has
    /// confirmed its slot to.
    #[must_use]
    pub fn end(&self) -> Option<Lsn> {
        self.transactions.last().map(|t| t.end_lsn)
    }
}

pub(crate) fn lsn<S: serde::Serializer>(lsn: &Lsn, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(lsn)
}
