//! Two-phase commit: prepared transactions (protocol 3, PostgreSQL 15).
//!
//! A two-phase slot sends these even on protocol 1, so they decode in any version.

use crate::{Lsn, PgStr, PgTimestamp, Xid};

/// Begin Prepare `'b'` (protocol 3, PostgreSQL 15): a prepared transaction starts. There is
/// no flags byte.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'b', role = "begin")]
pub struct BeginPrepare<'a> {
    /// The LSN of the prepare (start of the PREPARE record).
    #[codec(decision_lsn)]
    pub prepare_lsn: Lsn,
    /// The end LSN of the prepared transaction.
    pub end_lsn: Lsn,
    /// Prepare timestamp.
    pub prepare_timestamp: PgTimestamp,
    /// Xid of the prepared transaction.
    #[codec(xid)]
    pub xid: Xid,
    /// The user-defined GID of the prepared transaction.
    pub gid: PgStr<'a>,
}

/// Prepare `'P'` (protocol 3, PostgreSQL 15): the transaction was prepared.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'P', role = "end")]
pub struct Prepare<'a> {
    /// Unused flags; always 0.
    #[codec(expect = 0)]
    #[cfg_attr(feature = "arbitrary", arbitrary(value = 0))]
    pub flags: u8,
    /// The LSN of the prepare.
    #[codec(decision_lsn)]
    pub prepare_lsn: Lsn,
    /// The end LSN of the prepared transaction.
    #[codec(transaction_end_lsn)]
    pub end_lsn: Lsn,
    /// Prepare timestamp.
    pub prepare_timestamp: PgTimestamp,
    /// Xid of the prepared transaction.
    #[codec(xid)]
    pub xid: Xid,
    /// The user-defined GID of the prepared transaction.
    pub gid: PgStr<'a>,
}

/// Commit Prepared `'K'` (protocol 3, PostgreSQL 15): COMMIT PREPARED.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'K', role = "end")]
pub struct CommitPrepared<'a> {
    /// Unused flags; always 0.
    #[codec(expect = 0)]
    #[cfg_attr(feature = "arbitrary", arbitrary(value = 0))]
    pub flags: u8,
    /// The LSN of the commit of the prepared transaction.
    #[codec(decision_lsn)]
    pub commit_lsn: Lsn,
    /// The end LSN of the commit of the prepared transaction.
    #[codec(transaction_end_lsn)]
    pub end_lsn: Lsn,
    /// Commit timestamp.
    pub commit_timestamp: PgTimestamp,
    /// Xid of the prepared transaction.
    #[codec(xid)]
    pub xid: Xid,
    /// The user-defined GID of the prepared transaction.
    pub gid: PgStr<'a>,
}

/// Rollback Prepared `'r'` (protocol 3, PostgreSQL 15): ROLLBACK PREPARED.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'r', role = "end")]
pub struct RollbackPrepared<'a> {
    /// Unused flags; always 0.
    #[codec(expect = 0)]
    #[cfg_attr(feature = "arbitrary", arbitrary(value = 0))]
    pub flags: u8,
    /// The end LSN of the prepared transaction.
    pub prepare_end_lsn: Lsn,
    /// The end LSN of the rollback of the prepared transaction.
    #[codec(transaction_end_lsn)]
    pub rollback_end_lsn: Lsn,
    /// Prepare timestamp.
    pub prepare_timestamp: PgTimestamp,
    /// Rollback timestamp.
    pub rollback_timestamp: PgTimestamp,
    /// Xid of the prepared transaction.
    #[codec(xid)]
    pub xid: Xid,
    /// The user-defined GID of the prepared transaction.
    pub gid: PgStr<'a>,
}

/// Stream Prepare `'p'` (protocol 3, PostgreSQL 15): a streamed transaction was prepared.
/// Sent after its last Stream Stop, outside any block.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'p', stream = "outside", role = "end")]
pub struct StreamPrepare<'a> {
    /// Unused flags; always 0.
    #[codec(expect = 0)]
    #[cfg_attr(feature = "arbitrary", arbitrary(value = 0))]
    pub flags: u8,
    /// The LSN of the prepare.
    #[codec(decision_lsn)]
    pub prepare_lsn: Lsn,
    /// The end LSN of the prepared transaction.
    #[codec(transaction_end_lsn)]
    pub end_lsn: Lsn,
    /// Prepare timestamp.
    pub prepare_timestamp: PgTimestamp,
    /// Xid of the prepared transaction.
    #[codec(xid)]
    pub xid: Xid,
    /// The user-defined GID of the prepared transaction.
    pub gid: PgStr<'a>,
}
