//! Byte-exact NUL-terminated Strings.

use core::fmt;
use std::borrow::Cow;

use crate::{Ctx, Decode, DecodeError, Encode, EncodeError, IntoOwned, Reader, Writer};

/// A pgoutput String: the bytes before its NUL, borrowed from the input when decoded.
///
/// PostgreSQL converts names to the session's `client_encoding`, so they need not be UTF-8.
/// `PgStr` keeps the raw bytes (re-encoding reproduces the input exactly) and offers
/// [`to_str`](Self::to_str) and a lossy `Display` for reading them as text.
///
/// ```
/// use pgoutput_codec::PgStr;
///
/// let name = PgStr::from("public");
/// assert_eq!(name, "public");
/// assert_eq!(name.to_str(), Ok("public"));
/// let latin1 = PgStr::from(&b"caf\xE9"[..]);
/// assert!(latin1.to_str().is_err());
/// assert_eq!(latin1.to_string(), "caf\u{FFFD}");
/// assert_eq!(format!("{latin1:?}"), r#"b"caf\xe9""#);
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PgStr<'a>(Cow<'a, [u8]>);

impl<'a> PgStr<'a> {
    /// A string borrowing `bytes` (without the NUL).
    #[must_use]
    pub const fn borrowed(bytes: &'a [u8]) -> Self {
        PgStr(Cow::Borrowed(bytes))
    }

    /// The bytes, without the NUL.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The string as UTF-8, if it is.
    ///
    /// # Errors
    ///
    /// The UTF-8 error when the bytes are not UTF-8 (a SQL_ASCII database's text may not
    /// be).
    pub fn to_str(&self) -> Result<&str, core::str::Utf8Error> {
        core::str::from_utf8(&self.0)
    }

    /// The string as UTF-8, with invalid sequences replaced by U+FFFD.
    #[must_use]
    pub fn to_string_lossy(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.0)
    }

    /// Whether the bytes are borrowed from decoded input.
    #[must_use]
    pub fn is_borrowed(&self) -> bool {
        matches!(self.0, Cow::Borrowed(_))
    }

    /// Length in bytes, without the NUL.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the string is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The bytes, as an owned vector.
    #[must_use]
    pub fn into_bytes(self) -> Vec<u8> {
        self.0.into_owned()
    }

    /// A copy that owns its bytes.
    #[must_use]
    pub fn into_owned(self) -> PgStr<'static> {
        PgStr(Cow::Owned(self.0.into_owned()))
    }
}

impl<'a> Decode<'a> for PgStr<'a> {
    /// The NUL terminator.
    const MIN_WIRE_LEN: usize = 1;

    #[inline]
    fn decode(r: &mut Reader<'a>, _ctx: Ctx) -> Result<Self, DecodeError> {
        r.read_cstr().map(PgStr::borrowed)
    }
}

impl Encode for PgStr<'_> {
    #[inline]
    fn encode(&self, w: &mut Writer<'_>, _ctx: Ctx) -> Result<(), EncodeError> {
        w.write_cstr(&self.0)
    }

    #[inline]
    fn encoded_len(&self, _ctx: Ctx) -> usize {
        self.0.len() + 1
    }
}

impl IntoOwned for PgStr<'_> {
    type Owned = PgStr<'static>;
    fn into_owned(self) -> PgStr<'static> {
        PgStr::into_owned(self)
    }
}

impl fmt::Display for PgStr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.to_string_lossy(), f)
    }
}

impl fmt::Debug for PgStr<'_> {
    /// `"text"` when the bytes are UTF-8, else `b"caf\xe9"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_str() {
            Ok(s) => fmt::Debug::fmt(s, f),
            Err(_) => write!(f, "b\"{}\"", self.0.escape_ascii()),
        }
    }
}

impl<'a> From<&'a str> for PgStr<'a> {
    fn from(s: &'a str) -> Self {
        PgStr(Cow::Borrowed(s.as_bytes()))
    }
}

impl From<String> for PgStr<'static> {
    fn from(s: String) -> Self {
        PgStr(Cow::Owned(s.into_bytes()))
    }
}

impl<'a> From<&'a [u8]> for PgStr<'a> {
    fn from(bytes: &'a [u8]) -> Self {
        PgStr(Cow::Borrowed(bytes))
    }
}

impl From<Vec<u8>> for PgStr<'static> {
    fn from(bytes: Vec<u8>) -> Self {
        PgStr(Cow::Owned(bytes))
    }
}

impl AsRef<[u8]> for PgStr<'_> {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl PartialEq<str> for PgStr<'_> {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other.as_bytes()
    }
}

impl PartialEq<&str> for PgStr<'_> {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == *other.as_bytes()
    }
}

impl PartialEq<[u8]> for PgStr<'_> {
    fn eq(&self, other: &[u8]) -> bool {
        *self.0 == *other
    }
}

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for PgStr<'a> {
    /// Any bytes without a NUL: every value this produces can be encoded.
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        let bytes: &'a [u8] = u.arbitrary()?;
        Ok(match bytes.iter().position(|&b| b == 0) {
            Some(nul) => PgStr::borrowed(&bytes[..nul]),
            None => PgStr::borrowed(bytes),
        })
    }
}
