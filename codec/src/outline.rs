//! What a message is, read without its values: its tag, its roles, the xids it names and
//! the positions of the transaction it ends or decides. All a [`Follower`](crate::Follower)
//! needs to place it, and all a relay needs to know which frame it is forwarding, for a
//! fraction of a decode: an Insert's outline reads its tag and (in a stream block) its
//! xid, not its row.
//!
//! ```
//! use pgoutput_codec::{Decoder, ProtocolVersion, Streaming, Tagged, TransactionRole, Xid};
//!
//! let mut decoder = Decoder::new(ProtocolVersion::V2, Streaming::On)?;
//! decoder.outline(b"S\0\0\x02\xe8\x01")?;
//! // An Insert in the block of xid 744: its row is not read.
//! let insert = decoder.outline(b"I\0\0\x02\xe8\0\0\x40\x00N\0\x01t\0\0\0\x0242")?;
//! assert_eq!(insert.transaction_role(), TransactionRole::Change);
//! assert_eq!(insert.subtransaction_xid(), Some(Xid(744)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::{Lsn, StreamRole, TagSet, Tagged, TransactionRole, Xid};

/// A message's outline: what [`Tagged`] says of it, read from its first fields only
/// ([`Decoder::outline`](crate::Decoder::outline)), or taken from a decoded message
/// ([`Outline::of`]). What is not read is not checked: a message whose row is malformed
/// has an outline all the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Outline {
    tag: u8,
    stream_role: StreamRole,
    transaction_role: TransactionRole,
    xid: Option<Xid>,
    subtransaction_xid: Option<Xid>,
    transaction_end_lsn: Option<Lsn>,
    decision_lsn: Option<Lsn>,
}

impl Outline {
    /// The outline of a message already decoded.
    #[must_use]
    pub fn of<T: Tagged + ?Sized>(message: &T) -> Outline {
        Outline {
            tag: message.tag(),
            stream_role: message.stream_role(),
            transaction_role: message.transaction_role(),
            xid: message.xid(),
            subtransaction_xid: message.subtransaction_xid(),
            transaction_end_lsn: message.transaction_end_lsn(),
            decision_lsn: message.decision_lsn(),
        }
    }

    /// An outline from its parts (what the derive's outline read builds).
    #[doc(hidden)]
    #[must_use]
    #[inline]
    pub const fn new(
        tag: u8,
        (stream_role, transaction_role): (StreamRole, TransactionRole),
        (xid, subtransaction_xid): (Option<Xid>, Option<Xid>),
        (transaction_end_lsn, decision_lsn): (Option<Lsn>, Option<Lsn>),
    ) -> Outline {
        Outline {
            tag,
            stream_role,
            transaction_role,
            xid,
            subtransaction_xid,
            transaction_end_lsn,
            decision_lsn,
        }
    }
}

impl Tagged for Outline {
    /// An outline can be of any message.
    const TAGS: TagSet = TagSet::ALL;
    const NAME: &'static str = "Outline";

    fn tag(&self) -> u8 {
        self.tag
    }

    fn stream_role(&self) -> StreamRole {
        self.stream_role
    }

    fn transaction_role(&self) -> TransactionRole {
        self.transaction_role
    }

    fn xid(&self) -> Option<Xid> {
        self.xid
    }

    fn subtransaction_xid(&self) -> Option<Xid> {
        self.subtransaction_xid
    }

    fn transaction_end_lsn(&self) -> Option<Lsn> {
        self.transaction_end_lsn
    }

    fn decision_lsn(&self) -> Option<Lsn> {
        self.decision_lsn
    }
}

#[cfg(test)]
mod tests {
    use crate::{DecodeErrorKind, Decoder, Lsn, ProtocolVersion, Streaming, Tagged};

    #[test]
    fn a_row_is_not_read_and_a_position_is() {
        let mut decoder = Decoder::new(ProtocolVersion::V1, Streaming::Off).unwrap();
        // An Insert whose one column claims 9 bytes and has 2: decode refuses it, the
        // outline does not read it.
        let insert = b"I\0\0\x40\x00N\0\x01t\0\0\0\x0942";
        assert!(decoder.decode(insert).is_err());
        let outline = decoder.outline(insert).unwrap();
        assert_eq!((outline.tag(), outline.xid()), (b'I', None));
        // A Commit's end is read; its timestamp, after it, is not.
        let commit = b"C\0\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0\x02\0\0";
        let outline = decoder.outline(commit).unwrap();
        assert_eq!(outline.transaction_end_lsn(), Some(Lsn(2)));
        assert_eq!(outline.decision_lsn(), Some(Lsn(1)));
        // Cut inside the end: an error at the offset where the bytes ran out.
        let err = decoder.outline(&commit[..12]).unwrap_err();
        assert!(
            matches!(err.kind(), DecodeErrorKind::UnexpectedEnd { .. }),
            "{err}"
        );
        assert_eq!(err.offset(), 10);
    }

    #[test]
    fn an_unknown_tag_or_nothing_is_an_error() {
        let mut decoder = Decoder::new(ProtocolVersion::V1, Streaming::Off).unwrap();
        let err = decoder.outline(b"Q").unwrap_err();
        assert!(
            matches!(err.kind(), DecodeErrorKind::UnknownTag { .. }),
            "{err}"
        );
        assert!(decoder.outline(b"").is_err());
        // Out of order as for decode: a Stream Stop with no block open.
        assert!(decoder.outline(b"E").is_err());
    }
}
