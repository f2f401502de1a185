//! Logical decoding messages (`pg_logical_emit_message`).

use crate::{
    Ctx, Decode, DecodeError, Encode, EncodeError, IntoOwned, Lsn, PgBytes, PgStr, Reader, Writer,
    Xid,
};

/// Message `'M'` (protocol 1+, PostgreSQL 14+; sent only with the `messages` option): a
/// message written with `pg_logical_emit_message()`.
///
/// `xid` is on the wire only inside a Stream Start/Stop block (protocol 2+), where it is the
/// top-level xid of the streamed transaction. Transactional messages otherwise sit between
/// Begin and Commit; non-transactional ones arrive alone and never carry an xid.
///
/// ```
/// use pgoutput_codec::{decode, encode, Ctx, Lsn, Message, MessageFlags, ProtocolVersion};
///
/// let message = Message {
///     xid: None,
///     flags: MessageFlags::Transactional,
///     lsn: "0/16B3748".parse()?,
///     prefix: "audit".into(),
///     content: b"hello".into(),
/// };
/// let ctx = Ctx::plain(ProtocolVersion::V1);
/// let bytes = encode(&message, ctx)?;
/// assert_eq!(bytes.len(), 1 + 1 + 8 + 6 + 4 + 5);
/// assert_eq!(decode::<Message>(&bytes, ctx)?, message);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'M', role = "change")]
pub struct Message<'a> {
    /// Top-level xid of the streamed transaction; only inside a stream block.
    #[since(version = 2, when = "streamed")]
    #[codec(subxid)]
    pub xid: Option<Xid>,
    /// Whether the message is transactional.
    pub flags: MessageFlags,
    /// The end LSN of the message's WAL record: what `pg_logical_emit_message()` returned.
    pub lsn: Lsn,
    /// The prefix given to `pg_logical_emit_message()` (in `client_encoding`).
    pub prefix: PgStr<'a>,
    /// The content, raw bytes (never converted).
    #[codec(len = i32)]
    pub content: PgBytes<'a>,
}

impl Message<'_> {
    /// Whether the message was emitted with `transactional = true`.
    #[must_use]
    pub fn is_transactional(&self) -> bool {
        self.flags == MessageFlags::Transactional
    }
}

/// The Int8 flags of a [`Message`]: 0, or 1 for transactional (`MESSAGE_TRANSACTIONAL`).
/// PostgreSQL writes no other value, so decoding rejects any other.
///
/// Hand-written rather than derived: it is a validated Int8, not a tagged shape, and a bad
/// value is [`DecodeErrorKind::InvalidValue`](crate::DecodeErrorKind::InvalidValue), not an unknown tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum MessageFlags {
    /// `transactional = false`: decoded and sent at once, outside any transaction.
    #[default]
    NonTransactional,
    /// `transactional = true`: sent with its transaction, between Begin and Commit.
    Transactional,
}

impl MessageFlags {
    /// The byte on the wire.
    #[must_use]
    pub const fn bits(self) -> u8 {
        match self {
            MessageFlags::NonTransactional => 0,
            MessageFlags::Transactional => 1,
        }
    }
}

impl<'a> Decode<'a> for MessageFlags {
    const MIN_WIRE_LEN: usize = 1;

    #[inline]
    fn decode(r: &mut Reader<'a>, _ctx: Ctx) -> Result<Self, DecodeError> {
        match r.read_u8_in(0..=1, "0 (non-transactional) or 1 (transactional)")? {
            0 => Ok(MessageFlags::NonTransactional),
            _ => Ok(MessageFlags::Transactional),
        }
    }
}

impl Encode for MessageFlags {
    #[inline]
    fn encode(&self, w: &mut Writer<'_>, _ctx: Ctx) -> Result<(), EncodeError> {
        w.write_u8(self.bits());
        Ok(())
    }

    #[inline]
    fn encoded_len(&self, _ctx: Ctx) -> usize {
        1
    }
}

impl IntoOwned for MessageFlags {
    type Owned = Self;
    fn into_owned(self) -> Self {
        self
    }
}
