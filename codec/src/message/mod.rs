//! pgoutput messages, one file per family, and the enum that dispatches over them.

mod logical;
mod stream;

pub use logical::{Message, MessageFlags};
pub use stream::StreamAbort;

/// Any pgoutput message, chosen by its tag byte.
///
/// Decodes every known tag whatever the protocol version (PostgreSQL 18 sends Stream Abort
/// even on protocol 1); rejects unknown tags with
/// [`DecodeErrorKind::UnknownTag`](crate::DecodeErrorKind::UnknownTag).
#[derive(Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::Encode)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum PgOutputMessage<'a> {
    /// `'M'`
    Message(Message<'a>),
    /// `'A'`
    StreamAbort(StreamAbort),
}
