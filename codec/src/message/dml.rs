//! Row changes: Insert, Update, Delete, Truncate.

use crate::{Oid, OldTuple, Seq, TupleData, Xid};

/// Insert `'I'` (protocol 1, PostgreSQL 10): a new row.
///
/// `xid` is on the wire only inside a Stream Start/Stop block (protocol 2+).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'I', role = "change")]
pub struct Insert<'a> {
    /// Xid of the (sub)transaction; only inside a stream block.
    #[since(version = 2, when = "streamed")]
    #[codec(subxid)]
    pub xid: Option<Xid>,
    /// OID of the relation.
    pub relation_oid: Oid,
    /// The new row, after the byte `'N'`.
    #[codec(marker = b'N')]
    pub new_tuple: TupleData<'a>,
}

/// Update `'U'` (protocol 1, PostgreSQL 10): a changed row.
///
/// The old row is sent only when the replica identity is FULL (`'O'`), or when a key column
/// changed or is stored externally (`'K'`); with REPLICA IDENTITY DEFAULT and an unchanged
/// key there is none.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'U', role = "change")]
pub struct Update<'a> {
    /// Xid of the (sub)transaction; only inside a stream block.
    #[since(version = 2, when = "streamed")]
    #[codec(subxid)]
    pub xid: Option<Xid>,
    /// OID of the relation.
    pub relation_oid: Oid,
    /// The old key (`'K'`) or old row (`'O'`), when sent.
    #[codec(optional)]
    pub old_tuple: Option<OldTuple<'a>>,
    /// The new row, after the byte `'N'`.
    #[codec(marker = b'N')]
    pub new_tuple: TupleData<'a>,
}

/// Delete `'D'` (protocol 1, PostgreSQL 10): a removed row, identified by its old key
/// (`'K'`) or whole old row (`'O'`).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'D', role = "change")]
pub struct Delete<'a> {
    /// Xid of the (sub)transaction; only inside a stream block.
    #[since(version = 2, when = "streamed")]
    #[codec(subxid)]
    pub xid: Option<Xid>,
    /// OID of the relation.
    pub relation_oid: Oid,
    /// The old key or row.
    pub old_tuple: OldTuple<'a>,
}

/// Truncate `'T'` (protocol 1, PostgreSQL 11): relations emptied by one TRUNCATE.
///
/// On the wire the Int32 relation count comes *before* the options byte, then the OIDs.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'T', role = "change")]
pub struct Truncate<'a> {
    /// Xid of the (sub)transaction; only inside a stream block.
    #[since(version = 2, when = "streamed")]
    #[codec(subxid)]
    pub xid: Option<Xid>,
    /// CASCADE and RESTART IDENTITY.
    pub options: TruncateOptions,
    /// OIDs of the truncated relations.
    #[codec(count = u32, count_before = options)]
    pub relation_oids: Seq<'a, Oid>,
}

/// Truncate's option bits. Unknown bits are kept, so re-encoding is exact.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, crate::Decode, crate::IntoOwned, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TruncateOptions(pub u8);

impl TruncateOptions {
    /// No options.
    pub const NONE: TruncateOptions = TruncateOptions(0);
    /// `TRUNCATE … CASCADE` (`TRUNCATE_CASCADE`).
    pub const CASCADE: TruncateOptions = TruncateOptions(1);
    /// `TRUNCATE … RESTART IDENTITY` (`TRUNCATE_RESTART_SEQS`).
    pub const RESTART_IDENTITY: TruncateOptions = TruncateOptions(2);

    /// Whether CASCADE was given.
    #[must_use]
    pub const fn cascade(self) -> bool {
        self.0 & Self::CASCADE.0 != 0
    }

    /// Whether RESTART IDENTITY was given.
    #[must_use]
    pub const fn restart_identity(self) -> bool {
        self.0 & Self::RESTART_IDENTITY.0 != 0
    }

    /// Both sets of bits.
    #[must_use]
    pub const fn union(self, other: TruncateOptions) -> TruncateOptions {
        TruncateOptions(self.0 | other.0)
    }
}

impl core::ops::BitOr for TruncateOptions {
    type Output = TruncateOptions;
    fn bitor(self, other: TruncateOptions) -> TruncateOptions {
        self.union(other)
    }
}
