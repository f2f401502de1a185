//! The `Decode` and `Encode` traits, and the entry points that run them over whole messages.

use std::borrow::Cow;

use crate::{Ctx, DecodeError, EncodeError, Reader, TagSet, Writer};

/// A value read from the wire, borrowing from the input where it can.
///
/// Implemented by `#[derive(Decode)]` for messages and their parts, and by hand for the
/// wire's primitive types. `'a` is the lifetime of the input bytes.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be decoded: it does not implement `Decode`",
    label = "this needs `Decode`",
    note = "add `#[derive(Decode)]` to `{Self}` (messages and their parts derive it; see the `docs::attributes` guide)"
)]
pub trait Decode<'a>: Sized {
    /// The fewest bytes any value of this type takes on the wire, in any context.
    /// Counted parts check their count against it before allocating, so a count the bytes
    /// left cannot hold fails at once, and the derive's enums read their longest variants
    /// first when that many bytes are left. The derive computes it; the default, 0, is
    /// always safe (such elements are checked as one byte each). More than `decode` can
    /// take refuses valid counts.
    const MIN_WIRE_LEN: usize = 0;

    /// Reads one value at the reader's position in context `ctx`.
    ///
    /// # Errors
    ///
    /// A [`DecodeError`] with the byte offset, the message and field, and what was
    /// expected.
    fn decode(r: &mut Reader<'a>, ctx: Ctx) -> Result<Self, DecodeError>;

    /// [`decode`](Self::decode) without building errors: the same value where `decode`
    /// succeeds, `None` exactly where it fails. How a [`Seq`](crate::Seq) checks its
    /// elements when decoded and reads them again when iterated, in tight loops (a
    /// `decode` that fails there is run again, once, for its error). The derive generates
    /// it; the default is `decode(…).ok()`.
    #[doc(hidden)]
    #[inline(always)]
    fn decode_valid(r: &mut Reader<'a>, ctx: Ctx) -> Option<Self> {
        Self::decode(r, ctx).ok()
    }

    /// The value's [`Outline`](crate::Outline), read from its first fields only: what the
    /// session [`Decoder::outline`](crate::Decoder::outline) reads. The derive generates it
    /// for messages and dispatch enums from their attributes. `None`, reading nothing: the
    /// type has no outline read of its own (the default), and the caller decodes it whole.
    #[doc(hidden)]
    #[inline(always)]
    fn outline(r: &mut Reader<'a>, ctx: Ctx) -> Option<Result<crate::Outline, DecodeError>> {
        let _ = (r, ctx);
        None
    }
}

/// A value written to the wire.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be encoded: it does not implement `Encode`",
    label = "this needs `Encode`",
    note = "add `#[derive(Encode)]` to `{Self}`, with the same `#[codec(...)]` attributes as its `Decode`"
)]
pub trait Encode {
    /// Appends the value's bytes for context `ctx`, or explains why this context cannot
    /// carry it.
    ///
    /// # Errors
    ///
    /// An [`EncodeError`] for a value the context cannot carry or a length its type cannot
    /// count.
    fn encode(&self, w: &mut Writer<'_>, ctx: Ctx) -> Result<(), EncodeError>;

    /// The number of bytes `encode` appends in `ctx` when it succeeds.
    fn encoded_len(&self, ctx: Ctx) -> usize;
}

/// A type whose encoding starts with a tag byte from a known set: a message with
/// `#[codec(tag = …)]` (one tag), or a tagged enum (the union of its variants' tags).
/// Dispatch enums use it to pick the variant from the first byte, `#[codec(optional)]`
/// to tell whether an optional part is there, and the session [`Decoder`](crate::Decoder)
/// and [`Encoder`](crate::Encoder) to follow stream blocks. `#[derive(Tagged)]`
/// implements it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no tag byte: it does not implement `Tagged`",
    label = "this needs `Tagged`",
    note = "add `#[derive(Tagged)]` to `{Self}` beside `#[codec(tag = b'…')]`"
)]
pub trait Tagged {
    /// The tag bytes a value can start with.
    const TAGS: TagSet;
    /// The Rust type's name, for errors.
    const NAME: &'static str;

    /// For a dispatch enum: each variant's name (in snake_case, as serde's
    /// `rename_all = "snake_case"` spells it) and its tags. Empty for a message.
    const KINDS: &'static [(&'static str, TagSet)] = &[];

    /// The tag byte this value starts with.
    fn tag(&self) -> u8;

    /// What this message does to a session's stream blocks: decided by the value's type
    /// (`#[codec(stream = …)]`), never by its tag byte, so a protocol of your own may use
    /// any tags. `StreamRole::None` unless said otherwise.
    fn stream_role(&self) -> StreamRole {
        StreamRole::None
    }

    /// What this message does to the transaction it belongs to (`#[codec(role = …)]`):
    /// with [`stream_role`](Self::stream_role) and the xids, all a
    /// [`Follower`](crate::Follower) needs to place it. `TransactionRole::None` unless
    /// said otherwise.
    fn transaction_role(&self) -> TransactionRole {
        TransactionRole::None
    }

    /// The xid of the (top-level) transaction this message names, from its
    /// `#[codec(xid)]` field; `None` if it names none.
    fn xid(&self) -> Option<crate::Xid> {
        None
    }

    /// The xid of the subtransaction this message names, from its `#[codec(subxid)]`
    /// field: Stream Abort's `subtransaction_xid` (the one aborted), or the xid a change
    /// carries inside a stream block (the (sub)transaction it was made in, which such an
    /// abort drops); the top-level xid when it is the top-level transaction's. `None` if
    /// it names none.
    fn subtransaction_xid(&self) -> Option<crate::Xid> {
        None
    }

    /// Where the transaction this message ends ends, from its
    /// `#[codec(transaction_end_lsn)]` field (Commit's `end_lsn`, say): the position a
    /// consumer confirms once it has the whole transaction. `None` for a message that
    /// ends none.
    fn transaction_end_lsn(&self) -> Option<crate::Lsn> {
        None
    }

    /// Where the record that decides this message's transaction starts (its commit or
    /// prepare), from its `#[codec(decision_lsn)]` field (Begin's `final_lsn`, Commit's
    /// `commit_lsn`); `None` for a message that does not tell it.
    fn decision_lsn(&self) -> Option<crate::Lsn> {
        None
    }
}

/// What a message does to the transaction it belongs to, which the
/// [`Follower`](crate::Follower) reads to place every message of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransactionRole {
    /// Nothing of its own: it belongs to the transaction open around it, if any (Origin,
    /// Relation, Type).
    None,
    /// Opens a transaction sent whole (Begin, Begin Prepare).
    Begin,
    /// A change of the transaction around it (Insert, Update, Delete, Truncate, Message).
    Change,
    /// Ends a transaction: the one open, the streamed one it names, or one of its own
    /// (Commit, Prepare, Stream Commit, Stream Prepare, Commit Prepared, Rollback
    /// Prepared).
    End,
    /// Aborts the streamed transaction it names, or only its subtransaction when the two
    /// xids differ (Stream Abort).
    Abort,
}

/// What a message does to a session's stream blocks (Stream Start … Stream Stop), which
/// the session [`Decoder`](crate::Decoder) and [`Encoder`](crate::Encoder) follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StreamRole {
    /// Nothing: allowed inside and outside blocks.
    None,
    /// Opens a block (pgoutput's Stream Start).
    Start,
    /// Closes a block (pgoutput's Stream Stop).
    Stop,
    /// Ends a streamed transaction, so it comes outside blocks (Stream Commit, Stream
    /// Abort, Stream Prepare).
    Outside,
}

/// Turns a value that borrows from decoded input into one that owns its data.
///
/// `#[derive(IntoOwned)]` implements it, mapping `Message<'a>` to `Message<'static>`.
///
/// ```
/// use pgoutput_codec::{decode, Ctx, IntoOwned, Message, ProtocolVersion};
///
/// fn keep(bytes: &[u8]) -> Message<'static> {
///     let borrowed: Message<'_> = decode(bytes, Ctx::plain(ProtocolVersion::V1)).unwrap();
///     borrowed.into_owned()
/// }
/// let owned = keep(b"M\x01\0\0\0\0\0\0\0\x10p\0\0\0\0\x01x");
/// assert_eq!(owned.content, *b"x");
/// ```
pub trait IntoOwned {
    /// The owning form.
    type Owned: 'static;
    /// Copies out whatever is borrowed.
    fn into_owned(self) -> Self::Owned;
}

/// Decodes one whole message from `bytes`: every byte must belong to it.
///
/// Fails with [`DecodeErrorKind::TrailingBytes`](crate::DecodeErrorKind::TrailingBytes) if
/// bytes are left over. (PostgreSQL's own readers ignore trailing bytes; a codec that
/// promises `encode(decode(b)) == b` cannot.)
///
/// # Errors
///
/// A [`DecodeError`] with the byte offset, the message and field, and what was expected.
#[inline]
pub fn decode<'a, T: Decode<'a>>(bytes: &'a [u8], ctx: Ctx) -> Result<T, DecodeError> {
    let mut r = Reader::new(bytes);
    // One result, returned as it is on every path: the decoded message is moved out once
    // rather than unwrapped and wrapped again (769 -> 741 instructions per message on the
    // benchmark corpus, with the session decoder's matching shape).
    let mut result = T::decode(&mut r, ctx);
    if result.is_ok() {
        if let Err(err) = r.finish() {
            result = Err(err);
        }
    }
    result
}

/// Encodes `value` in context `ctx` into a new buffer of exactly the right size.
///
/// # Errors
///
/// An [`EncodeError`] for a value the context cannot carry or a length its type cannot
/// count.
pub fn encode<T: Encode + ?Sized>(value: &T, ctx: Ctx) -> Result<Vec<u8>, EncodeError> {
    let mut buf = Vec::with_capacity(value.encoded_len(ctx));
    encode_into(value, ctx, &mut buf)?;
    Ok(buf)
}

/// Appends `value`'s encoding to `buf`. On error `buf` is left as it was.
///
/// # Errors
///
/// As [`encode`]; `buf` is left as it was.
#[inline]
pub fn encode_into<T: Encode + ?Sized>(
    value: &T,
    ctx: Ctx,
    buf: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let start = buf.len();
    let result = value.encode(&mut Writer::new(buf), ctx);
    if result.is_err() {
        buf.truncate(start);
    }
    result
}

/// Integers are the wire's Int8/Int16/Int32/Int64, big-endian.
macro_rules! integer_codec {
    ($($ty:ty => $read:ident, $write:ident;)*) => {$(
        impl<'a> Decode<'a> for $ty {
            const MIN_WIRE_LEN: usize = ::core::mem::size_of::<$ty>();

            #[inline]
            fn decode(r: &mut Reader<'a>, _ctx: Ctx) -> Result<Self, DecodeError> {
                r.$read()
            }

            #[inline(always)]
            fn decode_valid(r: &mut Reader<'a>, _ctx: Ctx) -> Option<Self> {
                r.take_array().map(<$ty>::from_be_bytes)
            }
        }

        impl Encode for $ty {
            #[inline]
            fn encode(&self, w: &mut Writer<'_>, _ctx: Ctx) -> Result<(), EncodeError> {
                w.$write(*self);
                Ok(())
            }

            #[inline]
            fn encoded_len(&self, _ctx: Ctx) -> usize {
                ::core::mem::size_of::<$ty>()
            }
        }

        impl IntoOwned for $ty {
            type Owned = $ty;
            #[inline]
            fn into_owned(self) -> $ty {
                self
            }
        }
    )*};
}

integer_codec! {
    u8 => read_u8, write_u8;
    i8 => read_i8, write_i8;
    u16 => read_u16, write_u16;
    i16 => read_i16, write_i16;
    u32 => read_u32, write_u32;
    i32 => read_i32, write_i32;
    u64 => read_u64, write_u64;
    i64 => read_i64, write_i64;
}

/// A boolean Int8: 0 or 1. PostgreSQL writes no other value, so others are errors (keeping
/// `encode(decode(b)) == b` exact).
impl<'a> Decode<'a> for bool {
    const MIN_WIRE_LEN: usize = 1;

    #[inline]
    fn decode(r: &mut Reader<'a>, _ctx: Ctx) -> Result<Self, DecodeError> {
        r.read_u8_in(0..=1, "0 (false) or 1 (true)")
            .map(|byte| byte == 1)
    }
}

impl Encode for bool {
    #[inline]
    fn encode(&self, w: &mut Writer<'_>, _ctx: Ctx) -> Result<(), EncodeError> {
        w.write_u8(u8::from(*self));
        Ok(())
    }

    #[inline]
    fn encoded_len(&self, _ctx: Ctx) -> usize {
        1
    }
}

impl IntoOwned for bool {
    type Owned = bool;
    fn into_owned(self) -> bool {
        self
    }
}

impl<T: IntoOwned> IntoOwned for Option<T> {
    type Owned = Option<T::Owned>;
    fn into_owned(self) -> Self::Owned {
        self.map(IntoOwned::into_owned)
    }
}

impl<T: IntoOwned> IntoOwned for Vec<T> {
    type Owned = Vec<T::Owned>;
    fn into_owned(self) -> Self::Owned {
        self.into_iter().map(IntoOwned::into_owned).collect()
    }
}

impl IntoOwned for Cow<'_, [u8]> {
    type Owned = Cow<'static, [u8]>;
    fn into_owned(self) -> Cow<'static, [u8]> {
        Cow::Owned(Cow::into_owned(self))
    }
}
