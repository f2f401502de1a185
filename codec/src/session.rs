//! Stateful session decoding and encoding: the context follows Stream Start / Stream Stop.
//!
//! Inside a Stream Start/Stop block, Relation, Type, Insert, Update, Delete, Truncate and
//! Message carry a leading xid that the bytes alone do not reveal. A [`Decoder`] (and the
//! matching [`Encoder`]) is created from the negotiated options and tracks the blocks, so
//! the caller never manages the context by hand. Messages that cannot come where they come
//! (a Stream Stop without a Stream Start, say) are errors, not guesses.

use crate::{
    Ctx, CtxError, Decode, DecodeError, DecodeErrorKind, Encode, EncodeError, EncodeErrorKind,
    Outline, PgOutputMessage, ProtocolVersion, Reader, StreamRole, Streaming, Tagged,
};

/// The context after a message with `role`, or why the message cannot come now.
///
/// Mirrors the checks of PostgreSQL's apply worker (`worker.c`) that concern decoding:
/// `duplicate STREAM START message`, `STREAM STOP message without STREAM START`,
/// `STREAM COMMIT/ABORT/PREPARE message without STREAM STOP`. The role comes from the
/// message's type ([`Tagged::stream_role`]), not its tag byte, so a protocol of one's own
/// may use any tag.
#[inline]
fn transition(ctx: Ctx, role: StreamRole) -> Result<Ctx, &'static str> {
    match role {
        StreamRole::Start if ctx.in_stream() => {
            Err("Stream Start inside a stream block: the previous block has no Stream Stop")
        }
        StreamRole::Start => ctx.with_in_stream(true).map_err(|_| {
            "Stream Start in a session without streaming: negotiate streaming on or parallel"
        }),
        StreamRole::Stop if !ctx.in_stream() => Err("Stream Stop without a Stream Start"),
        StreamRole::Stop => Ok(ctx.with_in_stream(false).unwrap_or(ctx)),
        StreamRole::Outside if ctx.in_stream() => Err(
            "the end of a streamed transaction (Stream Commit, Abort or Prepare) inside a \
             stream block: Stream Stop comes first",
        ),
        _ => Ok(ctx),
    }
}

/// The error for a message that cannot come now.
#[cold]
fn out_of_order<M: Tagged>(tag: u8, reason: &'static str) -> DecodeError {
    DecodeError::new(DecodeErrorKind::OutOfOrder { tag, reason }, 0).in_field(M::NAME, "tag")
}

/// Decodes the pgoutput messages of one replication session, in order.
///
/// ```
/// use pgoutput_codec::{Decoder, PgOutputMessage, ProtocolVersion, Streaming};
///
/// let mut decoder = Decoder::new(ProtocolVersion::V2, Streaming::On)?;
/// // Stream Start for xid 744, an Insert carrying that xid, Stream Stop.
/// let start = b"S\0\0\x02\xe8\x01";
/// let insert = b"I\0\0\x02\xe8\0\0\x40\x00N\0\x01t\0\0\0\x0242";
/// let stop = b"E";
/// assert!(matches!(decoder.decode(start)?, PgOutputMessage::StreamStart(_)));
/// assert!(decoder.in_stream());
/// let PgOutputMessage::Insert(insert) = decoder.decode(insert)? else { panic!() };
/// assert_eq!(insert.xid.map(|x| x.0), Some(744));
/// decoder.decode(stop)?;
/// assert!(!decoder.in_stream());
/// // A second Stream Stop is a protocol-order error.
/// assert!(decoder.decode(stop).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoder {
    ctx: Ctx,
}

impl Decoder {
    /// A decoder for a session that negotiated `version` and `streaming`.
    ///
    /// # Errors
    ///
    /// [`CtxError`] when the version cannot carry the streaming mode.
    pub fn new(version: ProtocolVersion, streaming: Streaming) -> Result<Self, CtxError> {
        Ctx::new(version, streaming).map(Self::with_ctx)
    }

    /// A decoder starting from `ctx` (for example inside a block, to resume a stream).
    #[must_use]
    pub fn with_ctx(ctx: Ctx) -> Self {
        Decoder { ctx }
    }

    /// The context the next message will be decoded in.
    #[must_use]
    pub fn ctx(&self) -> Ctx {
        self.ctx
    }

    /// Whether we are between a Stream Start and its Stream Stop.
    #[must_use]
    pub fn in_stream(&self) -> bool {
        self.ctx.in_stream()
    }

    /// Decodes the next message. On error the session state is unchanged.
    ///
    /// # Errors
    ///
    /// A [`DecodeError`]: malformed bytes, or [`DecodeErrorKind::OutOfOrder`] for a message
    /// that cannot come now (a Stream Stop without a Stream Start). The session is
    /// unchanged.
    #[inline]
    pub fn decode<'a>(&mut self, bytes: &'a [u8]) -> Result<PgOutputMessage<'a>, DecodeError> {
        self.decode_as(bytes)
    }

    /// Decodes the next message as `M`, for example a user's enum that wraps
    /// [`PgOutputMessage`] and adds message types of its own.
    ///
    /// # Errors
    ///
    /// As [`Decoder::decode`].
    #[inline]
    pub fn decode_as<'a, M: Decode<'a> + Tagged>(
        &mut self,
        bytes: &'a [u8],
    ) -> Result<M, DecodeError> {
        // One result, returned as it is on every path (see `crate::decode`).
        let mut result = crate::decode::<M>(bytes, self.ctx);
        let refused = match &result {
            Ok(message) => match transition(self.ctx, message.stream_role()) {
                Ok(ctx) => {
                    self.ctx = ctx;
                    None
                }
                Err(reason) => Some(out_of_order::<M>(message.tag(), reason)),
            },
            Err(_) => None,
        };
        if let Some(err) = refused {
            result = Err(err);
        }
        result
    }

    /// The next message's [`Outline`]: what it is (its tag, roles, xids and the positions
    /// of the transaction it ends or decides), read without its values, and the session
    /// followed as [`decode`](Self::decode) follows it. For a relay that only needs to
    /// know which frame it forwards: the fields after those the outline needs (a row, a
    /// Relation's columns) are neither read nor checked.
    ///
    /// # Errors
    ///
    /// As [`Decoder::decode`], for the bytes the outline reads.
    #[inline]
    pub fn outline(&mut self, bytes: &[u8]) -> Result<Outline, DecodeError> {
        self.outline_as::<PgOutputMessage<'_>>(bytes)
    }

    /// [`outline`](Self::outline) of a message of `M` (a user's enum that wraps
    /// [`PgOutputMessage`], say); a type without an outline read of its own is decoded
    /// whole.
    ///
    /// # Errors
    ///
    /// As [`Decoder::decode`], for the bytes the outline reads.
    #[inline]
    pub fn outline_as<'a, M: Decode<'a> + Tagged>(
        &mut self,
        bytes: &'a [u8],
    ) -> Result<Outline, DecodeError> {
        let outline = match M::outline(&mut Reader::new(bytes), self.ctx) {
            Some(outline) => outline?,
            None => Outline::of(&crate::decode::<M>(bytes, self.ctx)?),
        };
        match transition(self.ctx, outline.stream_role()) {
            Ok(ctx) => {
                self.ctx = ctx;
                Ok(outline)
            }
            Err(reason) => Err(out_of_order::<M>(outline.tag(), reason)),
        }
    }
}

/// Encodes the pgoutput messages of one replication session, in order: the counterpart of
/// [`Decoder`], for servers and test fixtures.
///
/// ```
/// use pgoutput_codec::{
///     Decoder, Encoder, PgOutputMessage, ProtocolVersion, StreamStart, StreamStop, Streaming, Xid,
/// };
///
/// let mut encoder = Encoder::new(ProtocolVersion::V2, Streaming::On)?;
/// let mut decoder = Decoder::new(ProtocolVersion::V2, Streaming::On)?;
/// let start = PgOutputMessage::StreamStart(StreamStart { xid: Xid(7), first_segment: true });
/// let bytes = encoder.encode(&start)?;
/// assert_eq!(decoder.decode(&bytes)?, start);
/// assert!(encoder.in_stream());
/// // Stream Start twice would nest blocks, which PostgreSQL never does.
/// assert!(encoder.encode(&start).is_err());
/// encoder.encode(&PgOutputMessage::StreamStop(StreamStop))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encoder {
    ctx: Ctx,
}

impl Encoder {
    /// An encoder for a session that negotiated `version` and `streaming`.
    ///
    /// # Errors
    ///
    /// [`CtxError`] when the version cannot carry the streaming mode.
    pub fn new(version: ProtocolVersion, streaming: Streaming) -> Result<Self, CtxError> {
        Ctx::new(version, streaming).map(Self::with_ctx)
    }

    /// An encoder starting from `ctx`.
    #[must_use]
    pub fn with_ctx(ctx: Ctx) -> Self {
        Encoder { ctx }
    }

    /// The context the next message will be encoded in.
    #[must_use]
    pub fn ctx(&self) -> Ctx {
        self.ctx
    }

    /// Whether we are between a Stream Start and its Stream Stop.
    #[must_use]
    pub fn in_stream(&self) -> bool {
        self.ctx.in_stream()
    }

    /// Encodes the next message into a new buffer.
    ///
    /// # Errors
    ///
    /// An [`EncodeError`]: a value the context cannot carry, or
    /// [`EncodeErrorKind::OutOfOrder`] for a message that cannot come now. The session is
    /// unchanged.
    pub fn encode<M: Encode + Tagged + ?Sized>(
        &mut self,
        message: &M,
    ) -> Result<Vec<u8>, EncodeError> {
        let mut buf = Vec::with_capacity(message.encoded_len(self.ctx));
        self.encode_into(message, &mut buf)?;
        Ok(buf)
    }

    /// Appends the next message to `buf`. On error `buf` and the session state are
    /// unchanged.
    ///
    /// # Errors
    ///
    /// As [`Encoder::encode`].
    #[inline]
    pub fn encode_into<M: Encode + Tagged + ?Sized>(
        &mut self,
        message: &M,
        buf: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        let after = transition(self.ctx, message.stream_role()).map_err(|reason| {
            let tag = message.tag();
            EncodeError::new(EncodeErrorKind::OutOfOrder { tag, reason })
        })?;
        crate::encode_into(message, self.ctx, buf)?;
        self.ctx = after;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_rules() {
        use StreamRole::{Outside, Start, Stop};
        let on = Ctx::new(ProtocolVersion::V2, Streaming::On).unwrap();
        let block = on.with_in_stream(true).unwrap();
        assert_eq!(transition(on, Start), Ok(block));
        assert_eq!(transition(block, Stop), Ok(on));
        assert!(transition(block, Start).is_err());
        assert!(transition(on, Stop).is_err());
        assert!(transition(block, Outside).is_err());
        assert_eq!(transition(on, Outside), Ok(on));
        // Non-streamed transactions and non-transactional messages may sit between blocks,
        // and pgoutput never nests them inside one; either way their layout is the same.
        assert_eq!(transition(block, StreamRole::None), Ok(block));
        let off = Ctx::plain(ProtocolVersion::V1);
        assert!(transition(off, Start).is_err());
        // PostgreSQL 18 sends Stream Abort without streaming.
        assert_eq!(transition(off, Outside), Ok(off));
    }

    #[test]
    fn pgoutput_messages_carry_their_roles() {
        use crate::{StreamAbort, StreamCommit, StreamPrepare, StreamStart, StreamStop, Xid};
        let start = PgOutputMessage::StreamStart(StreamStart {
            xid: Xid(1),
            first_segment: true,
        });
        assert_eq!(start.stream_role(), StreamRole::Start);
        assert_eq!(
            PgOutputMessage::StreamStop(StreamStop).stream_role(),
            StreamRole::Stop
        );
        // The three that end a streamed transaction, decoded from PostgreSQL's bytes.
        let ctx = Ctx::new(ProtocolVersion::V3, Streaming::On).unwrap();
        let commit: StreamCommit = crate::decode(
            &[
                b'c', 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0,
                0, 0, 3,
            ],
            ctx,
        )
        .unwrap();
        let abort: StreamAbort = crate::decode(&[b'A', 0, 0, 0, 1, 0, 0, 0, 1], ctx).unwrap();
        let mut prepare = vec![b'p', 0];
        prepare.extend([0; 8 * 3 + 4]);
        prepare.extend(b"gid\0");
        let prepare: StreamPrepare<'_> = crate::decode(&prepare, ctx).unwrap();
        assert_eq!(commit.stream_role(), StreamRole::Outside);
        assert_eq!(abort.stream_role(), StreamRole::Outside);
        assert_eq!(prepare.stream_role(), StreamRole::Outside);
    }
}
