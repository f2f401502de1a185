//! Raw byte values (Byte n): Message content, and the values of TupleData columns.

use core::fmt;
use core::ops::Deref;
use std::borrow::Cow;

use crate::IntoOwned;

/// Raw bytes from the wire, borrowed from the input when decoded.
///
/// It has no wire shape of its own: a field declares one, e.g. `#[codec(len = i32)]` for an
/// Int32 byte count followed by the bytes. Its `Debug` prints a byte-string literal, which
/// keeps snapshots readable.
///
/// ```
/// use pgoutput_codec::PgBytes;
///
/// let bytes = PgBytes::from(&b"\0hi"[..]);
/// assert_eq!(&*bytes, b"\0hi");
/// assert_eq!(format!("{bytes:?}"), r#"b"\x00hi""#);
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PgBytes<'a>(Cow<'a, [u8]>);

impl<'a> PgBytes<'a> {
    /// Bytes borrowed from `bytes`.
    #[must_use]
    pub const fn borrowed(bytes: &'a [u8]) -> Self {
        PgBytes(Cow::Borrowed(bytes))
    }

    /// The bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Whether the bytes are borrowed from decoded input.
    #[must_use]
    pub fn is_borrowed(&self) -> bool {
        matches!(self.0, Cow::Borrowed(_))
    }

    /// The bytes, as an owned vector.
    #[must_use]
    pub fn into_vec(self) -> Vec<u8> {
        self.0.into_owned()
    }

    /// A copy that owns its bytes.
    #[must_use]
    pub fn into_owned(self) -> PgBytes<'static> {
        PgBytes(Cow::Owned(self.0.into_owned()))
    }
}

impl Deref for PgBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for PgBytes<'_> {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl IntoOwned for PgBytes<'_> {
    type Owned = PgBytes<'static>;
    fn into_owned(self) -> PgBytes<'static> {
        PgBytes::into_owned(self)
    }
}

impl fmt::Debug for PgBytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b\"{}\"", self.0.escape_ascii())
    }
}

impl<'a> From<&'a [u8]> for PgBytes<'a> {
    fn from(bytes: &'a [u8]) -> Self {
        PgBytes(Cow::Borrowed(bytes))
    }
}

impl<'a, const N: usize> From<&'a [u8; N]> for PgBytes<'a> {
    fn from(bytes: &'a [u8; N]) -> Self {
        PgBytes(Cow::Borrowed(bytes))
    }
}

impl From<Vec<u8>> for PgBytes<'static> {
    fn from(bytes: Vec<u8>) -> Self {
        PgBytes(Cow::Owned(bytes))
    }
}

impl<'a> From<Cow<'a, [u8]>> for PgBytes<'a> {
    fn from(bytes: Cow<'a, [u8]>) -> Self {
        PgBytes(bytes)
    }
}

impl<'a> From<PgBytes<'a>> for Cow<'a, [u8]> {
    fn from(bytes: PgBytes<'a>) -> Self {
        bytes.0
    }
}

impl PartialEq<[u8]> for PgBytes<'_> {
    fn eq(&self, other: &[u8]) -> bool {
        *self.0 == *other
    }
}

impl<const N: usize> PartialEq<[u8; N]> for PgBytes<'_> {
    fn eq(&self, other: &[u8; N]) -> bool {
        *self.0 == other[..]
    }
}

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for PgBytes<'a> {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        u.arbitrary().map(PgBytes::borrowed)
    }
}
