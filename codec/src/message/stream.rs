//! Messages of streamed (in-progress) transactions.

use crate::{Lsn, PgTimestamp, Xid};

/// Stream Start `'S'` (protocol 2, PostgreSQL 14): a block of a streamed transaction's
/// changes begins. Inside the block, Relation, Type, Insert, Update, Delete, Truncate and
/// Message carry an xid.
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
#[codec(tag = b'S', stream = "start")]
pub struct StreamStart {
    /// Top-level xid of the streamed transaction.
    #[codec(xid)]
    pub xid: Xid,
    /// Whether this is the transaction's first block (Int8 1), or a later one (0).
    pub first_segment: bool,
}

/// Stream Stop `'E'` (protocol 2, PostgreSQL 14): the current block ends. No fields.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
    crate::Decode,
    crate::IntoOwned,
    crate::Tagged,
    crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[codec(tag = b'E', stream = "stop")]
pub struct StreamStop;

/// Stream Commit `'c'` (protocol 2, PostgreSQL 14): a streamed transaction committed. Sent
/// outside stream blocks.
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
#[codec(tag = b'c', stream = "outside", role = "end")]
pub struct StreamCommit {
    /// Top-level xid.
    #[codec(xid)]
    pub xid: Xid,
    /// Unused flags; always 0.
    #[codec(expect = 0)]
    #[cfg_attr(feature = "arbitrary", arbitrary(value = 0))]
    pub flags: u8,
    /// The LSN of the commit.
    #[codec(decision_lsn)]
    pub commit_lsn: Lsn,
    /// The end LSN of the transaction.
    #[codec(transaction_end_lsn)]
    pub end_lsn: Lsn,
    /// Commit timestamp.
    pub commit_timestamp: PgTimestamp,
}

/// Stream Abort `'A'` (protocol 2+, PostgreSQL 14+; abort LSN and time PostgreSQL 16+): a
/// streamed transaction, or one of its subtransactions, rolled back.
///
/// Sent outside stream blocks. When `subtransaction_xid == xid` the whole transaction is
/// aborted; otherwise only that subtransaction (and those after it) and the transaction
/// goes on. `abort_lsn` and `abort_timestamp` are on the wire only with protocol 4 and
/// `streaming 'parallel'`; protocol 4 with `streaming 'on'` has the 9-byte form.
/// (PostgreSQL 18 can also send the 9-byte form to sessions that never enabled streaming.)
///
/// ```
/// use pgoutput_codec::{decode, Ctx, Lsn, ProtocolVersion, StreamAbort, Streaming, Xid};
///
/// // From PostgreSQL 17: a subtransaction abort, protocol 4, streaming parallel.
/// let bytes = b"\x41\x00\x00\x02\xe8\x00\x00\x02\xe9\x00\x00\x00\x00\x01\x4f\xfe\x70\
///               \x00\x03\x04\x67\x45\x34\xe7\x14";
/// let parallel = Ctx::new(ProtocolVersion::V4, Streaming::Parallel)?;
/// let abort: StreamAbort = decode(bytes, parallel)?;
/// assert_eq!((abort.xid, abort.subtransaction_xid), (Xid(744), Xid(745)));
/// assert_eq!(abort.abort_lsn, Some("0/14FFE70".parse()?));
/// assert!(!abort.is_top_level());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
#[codec(tag = b'A', stream = "outside", role = "abort")]
pub struct StreamAbort {
    /// Top-level xid of the streamed transaction.
    #[codec(xid)]
    pub xid: Xid,
    /// The aborted (sub)transaction; equal to `xid` when the whole transaction aborts.
    #[codec(subxid)]
    pub subtransaction_xid: Xid,
    /// End LSN of the abort record; only with protocol 4 and `streaming 'parallel'`.
    #[since(version = 4, when = "parallel")]
    pub abort_lsn: Option<Lsn>,
    /// Time of the abort; only with protocol 4 and `streaming 'parallel'`.
    #[since(version = 4, when = "parallel")]
    pub abort_timestamp: Option<PgTimestamp>,
}

impl StreamAbort {
    /// Whether the whole transaction aborted (not just a subtransaction).
    #[must_use]
    pub fn is_top_level(&self) -> bool {
        self.xid == self.subtransaction_xid
    }
}
