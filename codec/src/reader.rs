//! Bounds-checked big-endian reads over one message's bytes.
//!
//! Every read checks the bytes left first and fails with a positioned [`DecodeError`];
//! nothing here can panic or read past the message, and no length taken from the wire is
//! trusted before it has been compared with what is actually there.

use byteorder::{BigEndian, ByteOrder};

use crate::__private::Count;
use crate::{DecodeError, DecodeErrorKind};

/// A cursor over the bytes of one message. Borrowed slices it hands out live as long as the
/// input, which is what lets decoded messages borrow instead of copy.
///
/// It keeps the bytes not read yet as a slice (the position is derived from it): a read
/// compares with the slice's length and splits it, with no offset arithmetic to overflow.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    rest: &'a [u8],
    /// The length of the whole input, for offsets.
    len: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`; offsets in errors count from here.
    #[must_use]
    #[inline]
    pub fn new(buf: &'a [u8]) -> Self {
        Reader {
            rest: buf,
            len: buf.len(),
        }
    }

    /// The offset of the next byte to read.
    #[must_use]
    #[inline]
    pub fn position(&self) -> usize {
        self.len - self.rest.len()
    }

    /// Bytes not read yet.
    #[must_use]
    #[inline]
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    /// Whether every byte has been read.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Fails with [`DecodeErrorKind::TrailingBytes`] unless every byte has been read.
    ///
    /// # Errors
    ///
    /// [`DecodeErrorKind::TrailingBytes`] when bytes are left.
    #[inline]
    pub fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            remaining => Err(DecodeError::new(
                DecodeErrorKind::TrailingBytes { remaining },
                self.position(),
            )),
        }
    }

    /// The next `n` bytes, without copying.
    ///
    /// # Errors
    ///
    /// [`DecodeErrorKind::UnexpectedEnd`] when the input ends first.
    #[inline]
    pub fn read_bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        match self.take(n) {
            Some(bytes) => Ok(bytes),
            None => Err(self.unexpected_end(n)),
        }
    }

    /// The next `N` bytes as an array.
    #[inline]
    fn read_array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        match self.take_array() {
            Some(array) => Ok(array),
            None => Err(self.unexpected_end(N)),
        }
    }

    /// The next byte, without consuming it.
    ///
    /// # Errors
    ///
    /// [`DecodeErrorKind::UnexpectedEnd`] when the input ends first.
    #[inline]
    pub fn peek_u8(&self) -> Result<u8, DecodeError> {
        match self.rest.first() {
            Some(&byte) => Ok(byte),
            None => Err(self.unexpected_end(1)),
        }
    }

    /// Byte1 / Int8, unsigned.
    ///
    /// # Errors
    ///
    /// [`DecodeErrorKind::UnexpectedEnd`] when the input ends first.
    #[inline]
    pub fn read_u8(&mut self) -> Result<u8, DecodeError> {
        match self.take_u8() {
            Some(byte) => Ok(byte),
            None => Err(self.unexpected_end(1)),
        }
    }

    /// An Int8 that must lie in `allowed`; anything else is
    /// [`DecodeErrorKind::InvalidValue`] with `expected` as the explanation.
    ///
    /// # Errors
    ///
    /// [`DecodeErrorKind::UnexpectedEnd`] at the end of input,
    /// [`DecodeErrorKind::InvalidValue`] for a byte outside `allowed`.
    #[inline]
    pub fn read_u8_in(
        &mut self,
        allowed: core::ops::RangeInclusive<u8>,
        expected: &'static str,
    ) -> Result<u8, DecodeError> {
        let at = self.position();
        let byte = self.read_u8()?;
        if allowed.contains(&byte) {
            Ok(byte)
        } else {
            Err(DecodeError::new(
                DecodeErrorKind::InvalidValue {
                    found: byte.into(),
                    expected,
                },
                at,
            ))
        }
    }

    /// Int8, signed.
    ///
    /// # Errors
    ///
    /// [`DecodeErrorKind::UnexpectedEnd`] when the input ends first.
    #[inline]
    pub fn read_i8(&mut self) -> Result<i8, DecodeError> {
        self.read_u8().map(|b| b as i8)
    }

    /// Int16, unsigned.
    ///
    /// # Errors
    ///
    /// [`DecodeErrorKind::UnexpectedEnd`] when the input ends first.
    #[inline]
    pub fn read_u16(&mut self) -> Result<u16, DecodeError> {
        self.read_array::<2>().map(|b| BigEndian::read_u16(&b))
    }

    /// Int16, signed.
    ///
    /// # Errors
    ///
    /// [`DecodeErrorKind::UnexpectedEnd`] when the input ends first.
    #[inline]
    pub fn read_i16(&mut self) -> Result<i16, DecodeError> {
        self.read_array::<2>().map(|b| BigEndian::read_i16(&b))
    }

    /// Int32, unsigned.
    ///
    /// # Errors
    ///
    /// [`DecodeErrorKind::UnexpectedEnd`] when the input ends first.
    #[inline]
    pub fn read_u32(&mut self) -> Result<u32, DecodeError> {
        self.read_array::<4>().map(|b| BigEndian::read_u32(&b))
    }

    /// Int32, signed.
    ///
    /// # Errors
    ///
    /// [`DecodeErrorKind::UnexpectedEnd`] when the input ends first.
    #[inline]
    pub fn read_i32(&mut self) -> Result<i32, DecodeError> {
        self.read_array::<4>().map(|b| BigEndian::read_i32(&b))
    }

    /// Int64, unsigned.
    ///
    /// # Errors
    ///
    /// [`DecodeErrorKind::UnexpectedEnd`] when the input ends first.
    #[inline]
    pub fn read_u64(&mut self) -> Result<u64, DecodeError> {
        self.read_array::<8>().map(|b| BigEndian::read_u64(&b))
    }

    /// Int64, signed.
    ///
    /// # Errors
    ///
    /// [`DecodeErrorKind::UnexpectedEnd`] when the input ends first.
    #[inline]
    pub fn read_i64(&mut self) -> Result<i64, DecodeError> {
        self.read_array::<8>().map(|b| BigEndian::read_i64(&b))
    }

    /// A NUL-terminated String: the bytes before the NUL, which is consumed too.
    ///
    /// # Errors
    ///
    /// [`DecodeErrorKind::MissingNul`] when no NUL byte ends the string.
    pub fn read_cstr(&mut self) -> Result<&'a [u8], DecodeError> {
        match self.rest.iter().position(|&b| b == 0) {
            Some(len) => {
                let (string, rest) = self.rest.split_at(len);
                self.rest = rest.get(1..).unwrap_or_default();
                Ok(string)
            }
            None => Err(DecodeError::new(
                DecodeErrorKind::MissingNul,
                self.position(),
            )),
        }
    }

    /// An Int32 length, then that many bytes. The length is checked against the bytes left
    /// before anything else happens; negative lengths are errors.
    ///
    /// # Errors
    ///
    /// [`DecodeErrorKind::NegativeLength`], [`DecodeErrorKind::LengthTooLarge`] (positioned
    /// at the length), or the end of input.
    pub fn read_i32_len_bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let length = self.read_i32()?;
        self.read_len_prefixed(length)
    }

    /// Fails with [`DecodeErrorKind::LengthTooLarge`] (positioned at `at`, the length field)
    /// when `needed` bytes are more than are left. Use it before allocating for a count.
    ///
    /// # Errors
    ///
    /// [`DecodeErrorKind::LengthTooLarge`] when fewer bytes are left.
    pub fn check_len(&self, needed: u64, at: usize) -> Result<(), DecodeError> {
        let available = self.remaining();
        if needed > available as u64 {
            return Err(DecodeError::new(
                DecodeErrorKind::LengthTooLarge {
                    length: needed,
                    available,
                },
                at,
            ));
        }
        Ok(())
    }

    /// Fails with [`DecodeErrorKind::CountTooLarge`] (positioned at `at`, the count field)
    /// unless `count` elements of at least `element_min` bytes each fit in what is left.
    ///
    /// # Errors
    ///
    /// [`DecodeErrorKind::CountTooLarge`] when the elements cannot fit in the bytes left.
    #[inline]
    pub fn check_count(&self, count: u64, element_min: u64, at: usize) -> Result<(), DecodeError> {
        let available = self.remaining();
        let needed = count.saturating_mul(element_min);
        if needed > available as u64 {
            return Err(DecodeError::new(
                DecodeErrorKind::CountTooLarge {
                    count,
                    needed,
                    available,
                },
                at,
            ));
        }
        Ok(())
    }

    /// Every byte not read yet.
    pub fn read_rest(&mut self) -> &'a [u8] {
        core::mem::take(&mut self.rest)
    }

    /// The bytes not read yet, to hand to [`read_since`](Self::read_since) later.
    #[inline]
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.rest
    }

    /// The bytes read since `earlier` was what [`rest`](Self::rest) gave.
    #[inline]
    pub(crate) fn read_since(&self, earlier: &'a [u8]) -> &'a [u8] {
        earlier
            .get(..earlier.len() - self.rest.len())
            .unwrap_or_default()
    }

    /// The bytes counted by the length field just read (`length`, a `C`). One comparison
    /// checks both sign and size: a negative length, taken as unsigned, is more than any
    /// input holds; the cold path then tells the two apart. Always inlined: it is every
    /// column's read, and the call costs more than its body.
    #[inline(always)]
    pub(crate) fn read_len_prefixed<C: Count>(
        &mut self,
        length: C,
    ) -> Result<&'a [u8], DecodeError> {
        match self.take(length.to_len_valid()) {
            Some(bytes) => Ok(bytes),
            // By its parts: a reader in a loop must not have its address taken.
            None => Err(length_error(length, self.position(), self.remaining())),
        }
    }

    /// Decoding without errors ([`Decode::decode_valid`](crate::Decode)): the next byte.
    #[doc(hidden)]
    #[inline(always)]
    pub fn take_u8(&mut self) -> Option<u8> {
        let (&byte, rest) = self.rest.split_first()?;
        self.rest = rest;
        Some(byte)
    }

    /// [`Decode::decode_valid`](crate::Decode): the next byte, not consumed.
    #[doc(hidden)]
    #[inline(always)]
    #[must_use]
    pub fn peek_byte(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    /// Decoding without errors: the next `N` bytes as an array.
    #[doc(hidden)]
    #[inline(always)]
    pub fn take_array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (array, rest) = self.rest.split_first_chunk::<N>()?;
        self.rest = rest;
        Some(*array)
    }

    /// Decoding without errors: the next `n` bytes.
    #[doc(hidden)]
    #[inline(always)]
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (bytes, rest) = self.rest.split_at_checked(n)?;
        self.rest = rest;
        Some(bytes)
    }

    /// The error for a read of `needed` bytes past the end. The reader is passed by its
    /// parts, not by reference, so that a reader in a loop never has its address taken
    /// and stays in registers.
    #[inline(always)]
    fn unexpected_end(&self, needed: usize) -> DecodeError {
        unexpected_end(needed, self.remaining(), self.position())
    }
}

#[cold]
#[inline(never)]
fn unexpected_end(needed: usize, available: usize, offset: usize) -> DecodeError {
    DecodeError::new(DecodeErrorKind::UnexpectedEnd { needed, available }, offset)
}

/// A length that is negative or more than the `available` bytes left; the length field
/// (a `C`, as many bytes as its size) ends at `end`.
#[cold]
#[inline(never)]
fn length_error<C: Count>(length: C, end: usize, available: usize) -> DecodeError {
    let at = end - core::mem::size_of::<C>();
    match length.to_len(at) {
        Err(negative) => negative,
        Ok(len) => DecodeError::new(
            DecodeErrorKind::LengthTooLarge {
                length: len as u64,
                available,
            },
            at,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_big_endian() {
        let mut r = Reader::new(&[0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0xFF]);
        assert_eq!(r.read_u16().unwrap(), 0x0102);
        assert_eq!(r.read_i32().unwrap(), 0x0304_0506);
        assert_eq!(r.position(), 6);
        assert_eq!(r.read_u8().unwrap(), 7);
        assert_eq!(r.read_u8().unwrap(), 8);
        assert_eq!(r.read_i8().unwrap(), -1);
        assert!(r.finish().is_ok());
    }

    #[test]
    fn short_reads_are_positioned() {
        let mut r = Reader::new(&[0, 0, 0, 1, 9, 9]);
        r.read_u32().unwrap();
        let err = r.read_u64().unwrap_err();
        assert_eq!(err.offset(), 4);
        assert_eq!(
            err.kind(),
            DecodeErrorKind::UnexpectedEnd {
                needed: 8,
                available: 2
            }
        );
        // A failed read consumes nothing.
        assert_eq!(r.position(), 4);
    }

    #[test]
    fn strings_need_their_nul() {
        let mut r = Reader::new(b"abc\0de");
        assert_eq!(r.read_cstr().unwrap(), b"abc");
        let err = r.read_cstr().unwrap_err();
        assert_eq!((err.kind(), err.offset()), (DecodeErrorKind::MissingNul, 4));
    }

    #[test]
    fn lengths_are_checked_before_use() {
        let mut r = Reader::new(&[0x7F, 0xFF, 0xFF, 0xFF, 1]);
        assert_eq!(
            r.read_i32_len_bytes().unwrap_err().kind(),
            DecodeErrorKind::LengthTooLarge {
                length: i32::MAX as u64,
                available: 1
            }
        );
        let mut r = Reader::new(&[0xFF, 0xFF, 0xFF, 0xFF]);
        assert_eq!(
            r.read_i32_len_bytes().unwrap_err().kind(),
            DecodeErrorKind::NegativeLength { length: -1 }
        );
        let mut r = Reader::new(&[0, 0, 0, 2, 7, 8]);
        assert_eq!(r.read_i32_len_bytes().unwrap(), &[7, 8]);
    }

    #[test]
    fn trailing_bytes_are_reported() {
        let mut r = Reader::new(&[1, 2, 3]);
        r.read_u8().unwrap();
        assert_eq!(
            (
                r.finish().unwrap_err().kind(),
                r.finish().unwrap_err().offset()
            ),
            (DecodeErrorKind::TrailingBytes { remaining: 2 }, 1)
        );
    }
}
