//! What the source committed, in commit order, and what it rolled back.

use serde::Serialize;

use crate::change::Change;
use pgoutput_codec::{Lsn, Xid};

/// One committed transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Transaction {
    pub xid: Xid,
    /// Where its commit record starts (the Commit message's `commit_lsn`).
    pub commit_lsn: Lsn,
    /// Where its commit record ends: what a consumer confirms once it applied it.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_written_as_postgresql_prints_them() {
        let ledger = Ledger {
            transactions: vec![Transaction {
                xid: Xid(750),
                commit_lsn: Lsn(0x100),
                end_lsn: Lsn(0x1_0000_0130),
                changes: vec![],
            }],
            aborted: vec![],
        };
        let json = serde_json::to_value(&ledger).unwrap();
        assert_eq!(json["transactions"][0]["commit_lsn"], "0/100");
        assert_eq!(json["transactions"][0]["end_lsn"], "1/130");
        assert_eq!(ledger.end(), Some(Lsn(0x1_0000_0130)));
    }
}
