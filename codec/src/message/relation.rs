//! Schema messages: Relation and Type.

use crate::{Oid, PgStr, Seq, Xid};

/// Relation `'R'` (protocol 1, PostgreSQL 10): a table's published columns. Sent before the
/// first change to it in a session, and again after its schema or publication changes.
///
/// `xid` is on the wire only inside a Stream Start/Stop block (protocol 2+).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'R')]
pub struct Relation<'a> {
    /// Xid of the (sub)transaction; only inside a stream block.
    #[since(version = 2, when = "streamed")]
    pub xid: Option<Xid>,
    /// OID of the relation.
    pub relation_oid: Oid,
    /// Namespace (empty for `pg_catalog`).
    pub namespace: PgStr<'a>,
    /// Relation name.
    pub relation_name: PgStr<'a>,
    /// Replica identity setting.
    pub replica_identity: ReplicaIdentity,
    /// The published columns.
    #[codec(count = u16)]
    pub columns: Seq<'a, RelationColumn<'a>>,
}

impl Relation<'_> {
    /// The namespace as SQL names it: `pg_catalog` where the wire has an empty string.
    #[must_use]
    pub fn namespace_or_pg_catalog(&self) -> PgStr<'_> {
        if self.namespace.is_empty() {
            PgStr::from("pg_catalog")
        } else {
            PgStr::borrowed(self.namespace.as_bytes())
        }
    }
}

/// A column of a [`Relation`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Encode)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct RelationColumn<'a> {
    /// Flags: bit 0 (1) marks the column as part of the key. Kept whole, so that
    /// re-encoding reproduces any bits a future server sets.
    pub flags: u8,
    /// Column name.
    pub name: PgStr<'a>,
    /// OID of the column's data type.
    pub type_oid: Oid,
    /// Type modifier (`atttypmod`); -1 when there is none.
    pub type_modifier: i32,
}

impl RelationColumn<'_> {
    /// `LOGICALREP_IS_REPLICA_IDENTITY`.
    pub const KEY: u8 = 1;

    /// Whether the column is part of the replica identity key.
    #[must_use]
    pub fn is_key(&self) -> bool {
        self.flags & Self::KEY != 0
    }
}

/// `pg_class.relreplident`, an Int8 character.
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
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum ReplicaIdentity {
    /// `'d'`: the primary key, if any.
    #[codec(tag = b'd')]
    Default,
    /// `'n'`: nothing.
    #[codec(tag = b'n')]
    Nothing,
    /// `'f'`: all columns.
    #[codec(tag = b'f')]
    Full,
    /// `'i'`: the columns of a chosen index.
    #[codec(tag = b'i')]
    Index,
}

/// Type `'Y'` (protocol 1, PostgreSQL 10): a user-defined type a column uses. Sent before
/// the Relation message, for columns whose type OID is not built in (≥ 10000).
///
/// `xid` is on the wire only inside a Stream Start/Stop block (protocol 2+).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'Y')]
pub struct Type<'a> {
    /// Xid of the (sub)transaction; only inside a stream block.
    #[since(version = 2, when = "streamed")]
    pub xid: Option<Xid>,
    /// OID of the data type (a domain's own OID for a domain).
    pub type_oid: Oid,
    /// Namespace of the base type (empty for `pg_catalog`).
    pub namespace: PgStr<'a>,
    /// Name of the base type.
    pub name: PgStr<'a>,
}
