//! Support for the code `#[derive(Decode, Encode)]` generates. Not a public API: names and
//! signatures here change without notice.
//!
//! Error context is added here, in one cold path per kind of failure, so that the generated
//! code stays a straight line of calls.

use crate::{Ctx, DecodeError, DecodeErrorKind, EncodeError, EncodeErrorKind, Reader, Writer};

pub use core;

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

/// Reads the tag byte and checks it is `expected[0]`.
#[inline]
pub fn expect_tag(
    r: &mut Reader<'_>,
    expected: &'static [u8],
    message: &'static str,
) -> Result<(), DecodeError> {
    let at = r.position();
    let found = field(r.read_u8(), message, "tag")?;
    if Some(&found) == expected.first() {
        Ok(())
    } else {
        Err(unknown_tag(found, expected, at, message))
    }
}

/// The error for a tag byte that matches nothing in `expected`.
#[cold]
pub fn unknown_tag(
    found: u8,
    expected: &'static [u8],
    at: usize,
    message: &'static str,
) -> DecodeError {
    DecodeError::new(DecodeErrorKind::UnknownTag { found, expected }, at).in_field(message, "tag")
}

/// `#[codec(len = i32)]`: an Int32 length, then that many bytes, borrowed.
#[inline]
pub fn read_i32_len_bytes<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], DecodeError> {
    r.read_i32_len_bytes()
}

/// `#[codec(len = i32)]` when encoding.
#[inline]
pub fn write_i32_len_bytes(w: &mut Writer<'_>, bytes: &[u8]) -> Result<(), EncodeError> {
    w.write_i32_len_bytes(bytes)
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
