//! Support for the code `#[derive(Decode, Encode)]` generates. Not a public API: names and
//! signatures here change without notice.
//!
//! Error context is added here, in one cold path per kind of failure, so that the generated
//! code stays a straight line of calls.

use crate::{
    Ctx, Decode, DecodeError, DecodeErrorKind, Encode, EncodeError, EncodeErrorKind, Reader,
    TagSet, Writer,
};

/// A field `#[codec(xid)]` or `#[codec(subxid)]` marks: an xid, always or sometimes there.
#[diagnostic::on_unimplemented(
    message = "a `#[codec(xid)]` or `#[codec(subxid)]` field holds an `Xid` or an `Option<Xid>`, not `{Self}`",
    label = "not an xid"
)]
pub trait XidField {
    /// The xid, where there is one.
    fn xid(&self) -> Option<crate::Xid>;
}

impl XidField for crate::Xid {
    #[inline]
    fn xid(&self) -> Option<crate::Xid> {
        Some(*self)
    }
}

impl XidField for Option<crate::Xid> {
    #[inline]
    fn xid(&self) -> Option<crate::Xid> {
        *self
    }
}

/// A field `#[codec(transaction_end_lsn)]` or `#[codec(decision_lsn)]` marks: a position,
/// always or sometimes there.
#[diagnostic::on_unimplemented(
    message = "a `#[codec(transaction_end_lsn)]` or `#[codec(decision_lsn)]` field holds an `Lsn` or an `Option<Lsn>`, not `{Self}`",
    label = "not an LSN"
)]
pub trait LsnField {
    /// The position, where there is one.
    fn lsn(&self) -> Option<crate::Lsn>;
}

impl LsnField for crate::Lsn {
    #[inline]
    fn lsn(&self) -> Option<crate::Lsn> {
        Some(*self)
    }
}

impl LsnField for Option<crate::Lsn> {
    #[inline]
    fn lsn(&self) -> Option<crate::Lsn> {
        *self
    }
}

/// Places a decode error in `message.field`.
#[inline(always)]
pub fn field<T>(
    result: Result<T, DecodeError>,
    message: &'static str,
    field: &'static str,
) -> Result<T, DecodeError> {
    match result {
        Ok(value) => Ok(value),
        Err(err) => Err(err.in_field(message, field)),
    }
}

/// Places an encode error in `message.field`.
#[inline(always)]
pub fn encode_field(
    result: Result<(), EncodeError>,
    message: &'static str,
    field: &'static str,
) -> Result<(), EncodeError> {
    match result {
        Ok(()) => Ok(()),
        Err(err) => Err(err.in_field(message, field)),
    }
}

/// Reads a message's tag byte and checks it is `tag`.
#[inline]
pub fn expect_tag(r: &mut Reader<'_>, tag: u8, message: &'static str) -> Result<(), DecodeError> {
    expect_byte(r, tag, message, "tag")
}

/// Reads a constant byte that precedes `message.field` (`#[codec(marker = …)]`).
#[inline]
pub fn expect_byte(
    r: &mut Reader<'_>,
    byte: u8,
    message: &'static str,
    field: &'static str,
) -> Result<(), DecodeError> {
    let at = r.position();
    let found = self::field(r.read_u8(), message, field)?;
    if found == byte {
        Ok(())
    } else {
        Err(unknown_tag(found, TagSet::single(byte), at, message, field))
    }
}

/// [`expect_byte`] (and a tag) without an error to build (`Decode::decode_valid`).
#[inline(always)]
pub fn expect_byte_valid(r: &mut Reader<'_>, byte: u8) -> Option<()> {
    (r.take_u8()? == byte).then_some(())
}

/// The error for a tag byte that is not in `expected`.
#[cold]
#[must_use]
pub fn unknown_tag(
    found: u8,
    expected: TagSet,
    at: usize,
    message: &'static str,
    field: &'static str,
) -> DecodeError {
    DecodeError::new(DecodeErrorKind::UnknownTag { found, expected }, at).in_field(message, field)
}

/// A dispatch enum's lookup table: for each byte, the index of the variant whose tags hold
/// it, or `u8::MAX`. Built at compile time, so dispatch is one indexed load and a `match`.
#[must_use]
pub const fn variant_table(variant_tags: &[TagSet]) -> [u8; 256] {
    let mut table = [u8::MAX; 256];
    let mut variant = 0;
    while variant < variant_tags.len() {
        let mut byte = 0;
        while byte < 256 {
            if variant_tags[variant].contains(byte as u8) {
                table[byte] = variant as u8;
            }
            byte += 1;
        }
        variant += 1;
    }
    table
}

/// `#[codec(optional)]`: whether the next byte starts a value of a type with these tags.
#[inline]
#[must_use]
pub fn next_tag_in(r: &Reader<'_>, tags: TagSet) -> bool {
    matches!(r.peek_u8(), Ok(tag) if tags.contains(tag))
}

/// `#[codec(len = C)]`: a length of type `C`, then that many bytes, borrowed, the length
/// checked against the bytes left before anything is read (by the reader, in one
/// comparison for its sign and size).
#[inline(always)]
pub fn read_len_bytes<'a, C: Count + Decode<'a>>(
    r: &mut Reader<'a>,
    ctx: Ctx,
) -> Result<&'a [u8], DecodeError> {
    let length = C::decode(r, ctx)?;
    r.read_len_prefixed(length)
}

/// `#[codec(len = C)]` decoded without errors ([`Decode::decode_valid`]): a negative
/// length, taken as unsigned, is more than any input holds.
#[inline(always)]
pub fn read_len_bytes_valid<'a, C: Count + Decode<'a>>(
    r: &mut Reader<'a>,
    ctx: Ctx,
) -> Option<&'a [u8]> {
    let len = C::decode_valid(r, ctx)?.to_len_valid();
    r.take(len)
}

/// `#[codec(len = C)]` when encoding: the length as a `C` (if it fits), then the bytes.
#[inline]
pub fn write_len_bytes<C: Count + Encode>(
    w: &mut Writer<'_>,
    ctx: Ctx,
    bytes: &[u8],
) -> Result<(), EncodeError> {
    write_count::<C>(w, ctx, bytes.len())?;
    w.write_bytes(bytes);
    Ok(())
}

/// A tag byte, then `#[codec(len = C)]` bytes: the tag and the length in one write.
#[inline(always)]
pub fn write_tag_len_bytes<C: Count + Encode>(
    w: &mut Writer<'_>,
    tag: u8,
    bytes: &[u8],
) -> Result<(), EncodeError> {
    C::from_len(bytes.len())?.write_after_tag(w, tag);
    w.write_bytes(bytes);
    Ok(())
}

/// `#[codec(rest)]`: every byte left.
#[inline]
pub fn read_rest<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], DecodeError> {
    Ok(r.read_rest())
}

/// `#[codec(rest)]` when encoding.
#[inline]
pub fn write_rest(w: &mut Writer<'_>, bytes: &[u8]) -> Result<(), EncodeError> {
    w.write_bytes(bytes);
    Ok(())
}

/// An integer type that can carry an element count (`#[codec(count = …)]`).
pub trait Count: Copy {
    /// The count as a length; negative counts are errors.
    fn to_len(self, at: usize) -> Result<usize, DecodeError>;
    /// The count for `len` elements, if the type can carry it.
    fn from_len(len: usize) -> Result<Self, EncodeError>;
    /// Writes `tag`, then the count, as one write.
    fn write_after_tag(self, w: &mut Writer<'_>, tag: u8);
    /// As a length, without a sign check: a negative count becomes a length no input
    /// holds, so the read of that many bytes refuses it.
    fn to_len_valid(self) -> usize;
}

macro_rules! count {
    ($($ty:ty),*) => {$(
        impl Count for $ty {
            #[inline]
            fn to_len(self, at: usize) -> Result<usize, DecodeError> {
                usize::try_from(self).map_err(|_| {
                    DecodeError::new(DecodeErrorKind::NegativeLength { length: self as i64 }, at)
                })
            }

            #[inline(always)]
            fn write_after_tag(self, w: &mut Writer<'_>, tag: u8) {
                let mut bytes = [tag; 1 + ::core::mem::size_of::<$ty>()];
                bytes[1..].copy_from_slice(&self.to_be_bytes());
                w.write_bytes(&bytes);
            }

            #[inline(always)]
            #[allow(clippy::cast_sign_loss, clippy::cast_possible_wrap)]
            fn to_len_valid(self) -> usize {
                self as usize
            }

            #[inline]
            fn from_len(len: usize) -> Result<Self, EncodeError> {
                <$ty>::try_from(len).map_err(|_| {
                    EncodeError::new(EncodeErrorKind::TooLong { length: len, max: <$ty>::MAX as usize })
                })
            }
        }
    )*};
}

count!(u8, u16, i16, u32, i32);

pub use crate::types::{ReadParts, WriteParts};

/// `#[codec(count = u16)]` and friends: the count, then that many elements, as a `Vec` or
/// a `Seq`.
#[inline]
pub fn read_counted<'a, C, V>(r: &mut Reader<'a>, ctx: Ctx) -> Result<V, DecodeError>
where
    C: Count + Decode<'a>,
    V: ReadParts<'a>,
{
    let count = read_count::<C>(r, ctx)?;
    V::read_parts(r, ctx, count)
}

/// A count, as a length and the offset it was read at.
#[inline]
pub fn read_count<'a, C: Count + Decode<'a>>(
    r: &mut Reader<'a>,
    ctx: Ctx,
) -> Result<(usize, usize), DecodeError> {
    let at = r.position();
    Ok((C::decode(r, ctx)?.to_len(at)?, at))
}

/// `count` elements (with the offset of the count, for errors), the count read earlier.
#[inline]
pub fn read_elements<'a, V: ReadParts<'a>>(
    r: &mut Reader<'a>,
    ctx: Ctx,
    count: (usize, usize),
) -> Result<V, DecodeError> {
    V::read_parts(r, ctx, count)
}

/// Writes the count of `len` elements as a `C`.
#[inline]
pub fn write_count<C: Count + Encode>(
    w: &mut Writer<'_>,
    ctx: Ctx,
    len: usize,
) -> Result<(), EncodeError> {
    C::from_len(len)?.encode(w, ctx)
}

/// Writes the count as a `C`, then the elements.
#[inline]
pub fn write_counted<C: Count + Encode, V: WriteParts + ?Sized>(
    w: &mut Writer<'_>,
    ctx: Ctx,
    elements: &V,
) -> Result<(), EncodeError> {
    write_count::<C>(w, ctx, elements.count())?;
    elements.write_parts(w, ctx)
}

/// Writes the elements, one after another (their count went out earlier).
#[inline]
pub fn write_elements<V: WriteParts + ?Sized>(
    w: &mut Writer<'_>,
    ctx: Ctx,
    elements: &V,
) -> Result<(), EncodeError> {
    elements.write_parts(w, ctx)
}

/// The bytes the elements take.
#[inline]
pub fn elements_len<V: WriteParts + ?Sized>(ctx: Ctx, elements: &V) -> usize {
    elements.parts_len(ctx)
}

/// The number of elements, for a count written before another field.
#[inline]
pub fn elements_count<V: WriteParts + ?Sized>(elements: &V) -> usize {
    elements.count()
}

/// `#[codec(expect = N)]` when decoding: the value read (at `at`) must be `N`.
#[inline]
pub fn expect_value<T: PartialEq + Into<u64> + Copy>(
    read: Result<T, DecodeError>,
    expected: T,
    description: &'static str,
    at: usize,
) -> Result<T, DecodeError> {
    match read {
        Ok(value) if value == expected => Ok(value),
        Ok(value) => Err(DecodeError::new(
            DecodeErrorKind::InvalidValue {
                found: value.into(),
                expected: description,
            },
            at,
        )),
        Err(err) => Err(err),
    }
}

/// `#[codec(expect = N)]` when encoding.
#[inline]
pub fn check_value<T: PartialEq + Into<u64> + Copy>(
    value: T,
    expected: T,
    description: &'static str,
) -> Result<(), EncodeError> {
    if value == expected {
        Ok(())
    } else {
        Err(EncodeError::new(EncodeErrorKind::InvalidValue {
            found: value.into(),
            expected: description,
        }))
    }
}

/// `#[since]` when encoding: a gated field must be `Some` exactly when the context puts it
/// on the wire.
#[inline]
pub fn check_gated(
    is_some: bool,
    present: bool,
    present_when: &'static str,
    ctx: Ctx,
    message: &'static str,
    field: &'static str,
) -> Result<(), EncodeError> {
    if is_some == present {
        Ok(())
    } else {
        Err(gated_mismatch(present, present_when, ctx, message, field))
    }
}

#[cold]
fn gated_mismatch(
    present: bool,
    present_when: &'static str,
    ctx: Ctx,
    message: &'static str,
    field: &'static str,
) -> EncodeError {
    let kind = if present {
        EncodeErrorKind::MissingInContext { present_when, ctx }
    } else {
        EncodeErrorKind::NotCarriedInContext { present_when, ctx }
    };
    EncodeError::new(kind).in_field(message, field)
}

/// `min` for the derive's `MIN_WIRE_LEN` of enums, usable in constants.
#[inline]
#[must_use]
pub const fn min_len(a: usize, b: usize) -> usize {
    if a < b {
        a
    } else {
        b
    }
}

/// [`expect_value`] without an error to build (`Decode::decode_valid`).
#[inline(always)]
pub fn expect_value_valid<T: PartialEq>(value: T, expected: T) -> Option<T> {
    (value == expected).then_some(value)
}

/// `max` for the derive's `decode_valid` of enums (its longest variants' fast path).
#[inline]
#[must_use]
pub const fn max_len(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

/// A message built at compile time, for the duplicate-tag check of dispatch enums (a
/// `const` panic can print a `&str` but not format one).
#[derive(Debug)]
pub struct ConstMessage {
    buf: [u8; 512],
    len: usize,
}

impl ConstMessage {
    /// `text`, cut at 480 bytes (on a character boundary).
    #[must_use]
    pub const fn new(text: &str) -> ConstMessage {
        ConstMessage {
            buf: [0; 512],
            len: 0,
        }
        .push(text)
    }

    /// Appends `text` while it fits.
    #[must_use]
    pub const fn push(mut self, text: &str) -> ConstMessage {
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() && self.len < 480 {
            self.buf[self.len] = bytes[i];
            self.len += 1;
            i += 1;
        }
        // Never end inside a UTF-8 sequence.
        while self.len > 0 && self.buf[self.len - 1] & 0xC0 == 0x80 {
            self.len -= 1;
        }
        if self.len > 0 && self.buf[self.len - 1] >= 0xC0 {
            self.len -= 1;
        }
        self
    }

    /// Appends a tag byte as `b'M' (0x4d)`, or `0x01` when it is not printable.
    #[must_use]
    pub const fn push_tag(mut self, byte: u8) -> ConstMessage {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let printable = byte.is_ascii_graphic() && byte != b'\\' && byte != b'\'';
        if printable && self.len + 12 <= self.buf.len() {
            let text = [b'b', b'\'', byte, b'\'', b' ', b'(', b'0', b'x'];
            let mut i = 0;
            while i < text.len() {
                self.buf[self.len] = text[i];
                self.len += 1;
                i += 1;
            }
        } else if self.len + 4 <= self.buf.len() {
            self.buf[self.len] = b'0';
            self.buf[self.len + 1] = b'x';
            self.len += 2;
        }
        if self.len + 3 <= self.buf.len() {
            self.buf[self.len] = HEX[(byte >> 4) as usize];
            self.buf[self.len + 1] = HEX[(byte & 15) as usize];
            self.len += 2;
            if printable {
                self.buf[self.len] = b')';
                self.len += 1;
            }
        }
        self
    }

    /// The text so far.
    #[must_use]
    pub const fn as_str(&self) -> &str {
        match core::str::from_utf8(self.buf.split_at(self.len).0) {
            Ok(text) => text,
            Err(_) => "duplicate tag byte",
        }
    }
}
