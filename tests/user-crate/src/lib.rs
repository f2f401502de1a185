//! What a user of pgoutput-codec writes to extend the protocol, outside this workspace's
//! own types: nothing here comes from the codec but the derives and the wire types.
//!
//! - [`Audit`]: a message of its own (tag `'Q'`) with a field from protocol 3 on, a counted
//!   list of a nested struct and a length-prefixed byte field, carried in [`Extended`]
//!   next to every pgoutput message.
//! - [`Chat`]: a protocol of its own whose messages use the tags `'S'` and `'E'`, which in
//!   pgoutput are Stream Start and Stop; they mean nothing of the kind here.

use codec::{Decode, Encode, IntoOwned, Lsn, PgBytes, PgOutputMessage, PgStr, Tagged, Xid};

/// One changed column of an [`Audit`].
#[derive(Debug, Clone, PartialEq, Eq, Decode, Encode, IntoOwned)]
#[codec(crate = "::codec")]
pub struct AuditColumn<'a> {
    /// The column's name.
    pub name: PgStr<'a>,
    /// Its new value, raw.
    #[codec(len = u16)]
    pub value: PgBytes<'a>,
}

/// An audit record `'Q'`.
#[derive(Debug, Clone, PartialEq, Eq, Decode, Encode, IntoOwned, Tagged)]
#[codec(tag = b'Q', crate = "::codec")]
pub struct Audit<'a> {
    /// Where it was logged.
    pub lsn: Lsn,
    /// The transaction, from protocol 3 on.
    #[since(version = 3)]
    pub xid: Option<Xid>,
    /// The changed columns.
    #[codec(count = u16)]
    pub columns: Vec<AuditColumn<'a>>,
    /// A signature over the record.
    #[codec(len = i32)]
    pub signature: PgBytes<'a>,
}

/// pgoutput with audit records.
#[derive(Debug, Clone, PartialEq, Eq, Decode, Encode, IntoOwned, Tagged)]
#[codec(crate = "::codec")]
pub enum Extended<'a> {
    /// Any pgoutput message.
    PgOutput(PgOutputMessage<'a>),
    /// An audit record.
    Audit(Audit<'a>),
}

/// `'S'`: someone says something.
#[derive(Debug, Clone, PartialEq, Eq, Decode, Encode, IntoOwned, Tagged)]
#[codec(tag = b'S', crate = "::codec")]
pub struct Say<'a> {
    /// The text.
    pub text: PgStr<'a>,
}

/// `'E'`: someone leaves.
#[derive(Debug, Clone, PartialEq, Eq, Decode, Encode, IntoOwned, Tagged)]
#[codec(tag = b'E', crate = "::codec")]
pub struct Exit {
    /// Their seat.
    pub seat: u16,
}

/// A chat protocol: `'S'` and `'E'`, nothing to do with streaming.
#[derive(Debug, Clone, PartialEq, Eq, Decode, Encode, IntoOwned, Tagged)]
#[codec(crate = "::codec")]
pub enum Chat<'a> {
    /// `'S'`
    Say(Say<'a>),
    /// `'E'`
    Exit(Exit),
}
