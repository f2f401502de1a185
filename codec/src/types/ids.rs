//! Transaction ids and object ids: unsigned Int32 on the wire.

use core::fmt;

use crate::{Decode, Encode, IntoOwned};

/// A transaction id (`TransactionId`, uint32). 0 is `InvalidTransactionId`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Decode, IntoOwned, Encode)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Xid(pub u32);

impl Xid {
    /// `InvalidTransactionId`.
    pub const INVALID: Xid = Xid(0);

    /// Whether this is a real transaction id (not 0).
    #[must_use]
    pub const fn is_valid(self) -> bool {
        self.0 != 0
    }
}

impl fmt::Debug for Xid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Xid({})", self.0)
    }
}

impl fmt::Display for Xid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl From<u32> for Xid {
    fn from(v: u32) -> Self {
        Xid(v)
    }
}

impl From<Xid> for u32 {
    fn from(v: Xid) -> Self {
        v.0
    }
}

/// An object id (`Oid`, uint32): relation and type identifiers.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Decode, IntoOwned, Encode)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Oid(pub u32);

impl fmt::Debug for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Oid({})", self.0)
    }
}

impl fmt::Display for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl From<u32> for Oid {
    fn from(v: u32) -> Self {
        Oid(v)
    }
}

impl From<Oid> for u32 {
    fn from(v: Oid) -> Self {
        v.0
    }
}
