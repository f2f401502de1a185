//! Transaction boundaries: Begin, Commit, Origin.

use crate::{Lsn, PgStr, PgTimestamp, Xid};

/// Begin `'B'` (protocol 1, PostgreSQL 10): a transaction starts.
///
/// There is no flags byte. PostgreSQL 15+ sends Begin lazily, right before the first change
/// that is published, and sends nothing for empty transactions.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    crate::Decode,
    crate::IntoOwned,
    crate::Tagged,
    crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'B', role = "begin")]
pub struct Begin {
    /// The final LSN of the transaction: the start of its commit record, equal to the
    /// Commit's `commit_lsn`.
    #[codec(decision_lsn)]
    pub final_lsn: Lsn,
    /// Commit timestamp (the origin's, if the commit carries origin information).
    pub commit_timestamp: PgTimestamp,
    /// Top-level xid.
    #[codec(xid)]
    pub xid: Xid,
}

/// Commit `'C'` (protocol 1, PostgreSQL 10): a transaction committed.
///
/// The flags byte is unused and always 0; PostgreSQL's reader rejects anything else.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    crate::Decode,
    crate::IntoOwned,
    crate::Tagged,
    crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'C', role = "end")]
pub struct Commit {
    /// Unused flags; always 0.
    #[codec(expect = 0)]
    #[cfg_attr(feature = "arbitrary", arbitrary(value = 0))]
    pub flags: u8,
    /// The LSN of the commit (start of the commit record).
    #[codec(decision_lsn)]
    pub commit_lsn: Lsn,
    /// The end LSN of the transaction: what a client reports as flushed.
    #[codec(transaction_end_lsn)]
    pub end_lsn: Lsn,
    /// Commit timestamp.
    pub commit_timestamp: PgTimestamp,
}

/// Origin `'O'` (protocol 1, PostgreSQL 10): the transaction came from a replication origin.
///
/// Sent right after Begin, Begin Prepare or the first Stream Start of a transaction.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'O')]
pub struct Origin<'a> {
    /// The LSN of the commit on the origin server (0 after a Stream Start).
    pub origin_lsn: Lsn,
    /// Name of the origin.
    pub name: PgStr<'a>,
}
