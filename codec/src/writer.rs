//! Big-endian writes into a caller's `Vec<u8>`.
//!
//! Fixed-width writes cannot fail. The two variable-width shapes can: a String must not
//! hold a NUL (it would end early on the wire) and an Int32-length-prefixed value must fit
//! its length field. Those return [`EncodeError`]s instead of writing something PostgreSQL
//! would read back differently.

use byteorder::{BigEndian, ByteOrder};

use crate::{EncodeError, EncodeErrorKind};

/// Appends encoded bytes to a buffer the caller owns (and may reuse between messages).
#[derive(Debug)]
pub struct Writer<'b> {
    buf: &'b mut Vec<u8>,
}

impl<'b> Writer<'b> {
    /// A writer appending to `buf`.
    #[inline]
    pub fn new(buf: &'b mut Vec<u8>) -> Self {
        Writer { buf }
    }

    /// Bytes in the buffer (including any that were there before this writer).
    #[must_use]
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether the buffer is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Reserves room for `additional` more bytes.
    pub fn reserve(&mut self, additional: usize) {
        self.buf.reserve(additional);
    }

    /// Byte n: raw bytes, as they are.
    #[inline]
    pub fn write_bytes(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Byte1 / Int8, unsigned.
    #[inline]
    pub fn write_u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    /// Int8, signed.
    #[inline]
    pub fn write_i8(&mut self, v: i8) {
        self.buf.push(v as u8);
    }

    /// Int16, unsigned.
    #[inline]
    pub fn write_u16(&mut self, v: u16) {
        let mut b = [0; 2];
        BigEndian::write_u16(&mut b, v);
        self.write_bytes(&b);
    }

    /// Int16, signed.
    #[inline]
    pub fn write_i16(&mut self, v: i16) {
        let mut b = [0; 2];
        BigEndian::write_i16(&mut b, v);
        self.write_bytes(&b);
    }

    /// Int32, unsigned.
    #[inline]
    pub fn write_u32(&mut self, v: u32) {
        let mut b = [0; 4];
        BigEndian::write_u32(&mut b, v);
        self.write_bytes(&b);
    }

    /// Int32, signed.
    #[inline]
    pub fn write_i32(&mut self, v: i32) {
        let mut b = [0; 4];
        BigEndian::write_i32(&mut b, v);
        self.write_bytes(&b);
    }

    /// Int64, unsigned.
    #[inline]
    pub fn write_u64(&mut self, v: u64) {
        let mut b = [0; 8];
        BigEndian::write_u64(&mut b, v);
        self.write_bytes(&b);
    }

    /// Int64, signed.
    #[inline]
    pub fn write_i64(&mut self, v: i64) {
        let mut b = [0; 8];
        BigEndian::write_i64(&mut b, v);
        self.write_bytes(&b);
    }

    /// A String: the bytes, then a NUL. Fails if the bytes hold a NUL themselves.
    ///
    /// # Errors
    ///
    /// [`EncodeErrorKind::InteriorNul`] when `bytes` holds a NUL byte (it would end the
    /// string early).
    pub fn write_cstr(&mut self, bytes: &[u8]) -> Result<(), EncodeError> {
        if let Some(position) = find_nul(bytes) {
            return Err(EncodeError::new(EncodeErrorKind::InteriorNul { position }));
        }
        self.write_bytes(bytes);
        self.write_u8(0);
        Ok(())
    }

    /// An Int32 byte count, then the bytes. Fails beyond `i32::MAX` bytes, which
    /// PostgreSQL's reader would take for a negative length.
    ///
    /// # Errors
    ///
    /// [`EncodeErrorKind::TooLong`] for more bytes than an Int32 counts.
    pub fn write_i32_len_bytes(&mut self, bytes: &[u8]) -> Result<(), EncodeError> {
        let len = i32::try_from(bytes.len()).map_err(|_| {
            EncodeError::new(EncodeErrorKind::TooLong {
                length: bytes.len(),
                max: i32::MAX as usize,
            })
        })?;
        self.write_i32(len);
        self.write_bytes(bytes);
        Ok(())
    }
}

/// The first NUL byte in `bytes`, eight bytes at a time: names and prefixes are short, and
/// a call to `memchr` costs more than scanning them.
#[inline]
fn find_nul(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut chunks = bytes.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or([1; 8]));
        // A byte of `word` is zero exactly when this sets its high bit (the classic test:
        // borrows only run upwards from a zero byte, so the lowest flagged byte is one).
        if word.wrapping_sub(ONES) & !word & HIGHS != 0 {
            return chunk.iter().position(|&b| b == 0).map(|i| offset + i);
        }
        offset += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == 0)
        .map(|i| offset + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_big_endian() {
        let mut buf = vec![0xAA];
        let mut w = Writer::new(&mut buf);
        w.write_u16(0x0102);
        w.write_i32(-2);
        w.write_u64(0x0102_0304_0506_0708);
        w.write_cstr(b"hi").unwrap();
        w.write_i32_len_bytes(b"\0x").unwrap();
        assert_eq!(
            buf,
            [
                0xAA, 1, 2, 0xFF, 0xFF, 0xFF, 0xFE, 1, 2, 3, 4, 5, 6, 7, 8, b'h', b'i', 0, 0, 0, 0,
                2, 0, b'x'
            ]
        );
    }

    #[test]
    fn strings_with_nul_are_refused() {
        let mut buf = Vec::new();
        let err = Writer::new(&mut buf).write_cstr(b"a\0b").unwrap_err();
        assert_eq!(err.kind(), EncodeErrorKind::InteriorNul { position: 1 });
        assert!(buf.is_empty());
    }

    #[test]
    fn nul_bytes_are_found_wherever_they_are() {
        for len in 0..40 {
            let clean = vec![0x41u8; len];
            assert_eq!(find_nul(&clean), None);
            for at in 0..len {
                let mut with = clean.clone();
                with[at] = 0;
                assert_eq!(find_nul(&with), Some(at), "len {len}, at {at}");
                // And with a second NUL later, still the first.
                if at + 1 < len {
                    with[len - 1] = 0;
                    assert_eq!(find_nul(&with), Some(at));
                }
            }
        }
        // High bytes next to a zero: the test must not flag a byte that is not zero.
        assert_eq!(
            find_nul(&[0x80, 0xff, 0x01, 0x80, 0x80, 0x80, 0x80, 0x80, 0]),
            Some(8)
        );
        assert_eq!(
            find_nul(&[0x01, 0x00, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01]),
            Some(1)
        );
    }
}
