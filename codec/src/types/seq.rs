//! `Seq`: the counted parts of a message (a tuple's columns, a Relation's columns,
//! Truncate's OIDs) without a heap allocation when decoded.

use core::fmt;
use core::hash::{Hash, Hasher};

use crate::{Ctx, Decode, DecodeError, Encode, EncodeError, IntoOwned, Reader, Writer};

/// A counted sequence of `T`: on decoding, a validated view of the input (each element
/// checked once, nothing allocated, iterated by reading it again, both with the
/// error-free decoding the derive generates for `T`); built by hand, a `Vec`. Either way it compares, hashes,
/// encodes and serializes by its elements.
///
/// ```
/// use pgoutput_codec::{decode, ColumnValue, Ctx, ProtocolVersion, Seq, TupleData};
///
/// // Two columns: text "42" and NULL.
/// let bytes = b"\0\x02t\0\0\0\x0242n";
/// let tuple: TupleData<'_> = decode(bytes, Ctx::plain(ProtocolVersion::V1))?;
/// assert_eq!(tuple.columns.len(), 2);
/// let values: Vec<ColumnValue<'_>> = tuple.columns.iter().collect();
/// assert_eq!(values[0].bytes(), Some(&b"42"[..]));
/// // The same values from a Vec are the same tuple.
/// assert_eq!(tuple, TupleData::new(vec![ColumnValue::Text(b"42"[..].into()), ColumnValue::Null]));
/// # Ok::<(), pgoutput_codec::DecodeError>(())
/// ```
pub struct Seq<'a, T> {
    repr: Repr<'a, T>,
}

enum Repr<'a, T> {
    /// `len` elements, validated, in `bytes`, as decoded in `ctx`.
    Wire {
        bytes: &'a [u8],
        len: usize,
        ctx: Ctx,
    },
    /// Elements built by hand (or made owned).
    Owned(Vec<T>),
}

impl<'a, T> Seq<'a, T> {
    /// The number of elements.
    #[must_use]
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Wire { len, .. } => *len,
            Repr::Owned(elements) => elements.len(),
        }
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements as a slice, when they were built by hand rather than decoded.
    #[must_use]
    pub fn as_slice(&self) -> Option<&[T]> {
        match &self.repr {
            Repr::Owned(elements) => Some(elements),
            Repr::Wire { .. } => None,
        }
    }
}

impl<'a, T: Decode<'a> + Clone> Seq<'a, T> {
    /// The elements in order: read from the input again (already validated, so nothing
    /// fails), or cloned from the `Vec` this was built from.
    #[must_use]
    pub fn iter(&self) -> Iter<'_, 'a, T> {
        match &self.repr {
            Repr::Wire { bytes, len, ctx } => Iter::Wire {
                reader: Reader::new(bytes),
                left: *len,
                ctx: *ctx,
            },
            Repr::Owned(elements) => Iter::Owned(elements.iter()),
        }
    }

    /// The element at `index`, if there is one (reading up to it for a decoded sequence).
    #[must_use]
    pub fn get(&self, index: usize) -> Option<T> {
        self.iter().nth(index)
    }

    /// The elements in a `Vec`.
    #[must_use]
    pub fn to_vec(&self) -> Vec<T> {
        self.iter().collect()
    }

    /// The elements as a `Vec` to change, read from the input first if they were decoded
    /// (as `Cow::to_mut` does).
    pub fn to_mut(&mut self) -> &mut Vec<T> {
        if let Repr::Wire { .. } = self.repr {
            self.repr = Repr::Owned(self.to_vec());
        }
        match &mut self.repr {
            Repr::Owned(elements) => elements,
            Repr::Wire { .. } => unreachable!("made owned above"),
        }
    }

    /// Reads `len` elements from `r`, checking each, and keeps the bytes they took.
    pub(crate) fn read(
        r: &mut Reader<'a>,
        ctx: Ctx,
        (len, at): (usize, usize),
    ) -> Result<Self, DecodeError> {
        check_elements::<T>(r, len, at)?;
        let from = r.rest();
        // The loop reads through a copy of the reader, which stays in registers, rather
        // than writing `r` back after every read; and with `decode_valid`, which builds no
        // errors. Should an element fail, `decode` reads them again for the error.
        let mut elements = r.clone();
        for _ in 0..len {
            if T::decode_valid(&mut elements, ctx).is_none() {
                return Self::read_checked(r, ctx, len);
            }
        }
        *r = elements;
        Ok(Seq {
            repr: Repr::Wire {
                bytes: r.read_since(from),
                len,
                ctx,
            },
        })
    }

    /// [`read`](Self::read) with `decode`, for the error. Should `decode` accept what
    /// `decode_valid` refused (a hand-written `Decode` whose two methods disagree), the
    /// elements are kept as `decode` read them, in a `Vec`: iterating the bytes with
    /// `decode_valid` would lose them.
    #[cold]
    #[inline(never)]
    fn read_checked(r: &mut Reader<'a>, ctx: Ctx, len: usize) -> Result<Self, DecodeError> {
        let mut again = r.clone();
        for _ in 0..len {
            T::decode(r, ctx)?;
        }
        let elements = (0..len).map(|_| T::decode(&mut again, ctx));
        Ok(elements.collect::<Result<Vec<T>, _>>()?.into())
    }
}

impl<'a, T: Decode<'a> + Encode + Clone> Seq<'a, T> {
    /// Decoded elements written in another context than they were read in, one by one.
    #[cold]
    #[inline(never)]
    fn reencode(&self, w: &mut Writer<'_>, ctx: Ctx) -> Result<(), EncodeError> {
        self.iter().try_for_each(|element| element.encode(w, ctx))
    }
}

/// The elements of a [`Seq`], in order.
#[derive(Debug)]
pub enum Iter<'s, 'a, T> {
    #[doc(hidden)]
    Wire {
        reader: Reader<'a>,
        left: usize,
        ctx: Ctx,
    },
    #[doc(hidden)]
    Owned(core::slice::Iter<'s, T>),
}

impl<'a, T: Decode<'a> + Clone> Iterator for Iter<'_, 'a, T> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        match self {
            Iter::Wire { reader, left, ctx } => {
                if *left == 0 {
                    return None;
                }
                *left -= 1;
                // Validated with this very read when the sequence was decoded (or kept in
                // a `Vec` if only `decode` accepted it); should the impossible happen, the
                // sequence ends rather than panics.
                let element = T::decode_valid(reader, *ctx);
                if element.is_none() {
                    *left = 0;
                }
                element
            }
            Iter::Owned(elements) => elements.next().cloned(),
        }
    }

    /// `sum`, `for_each`, `collect` and the like: one loop over the bytes, its reader in
    /// registers.
    #[inline]
    fn fold<B, F: FnMut(B, T) -> B>(self, init: B, mut f: F) -> B {
        match self {
            Iter::Wire {
                mut reader,
                left,
                ctx,
            } => {
                let mut acc = init;
                for _ in 0..left {
                    match T::decode_valid(&mut reader, ctx) {
                        Some(element) => acc = f(acc, element),
                        None => break,
                    }
                }
                acc
            }
            Iter::Owned(elements) => elements.cloned().fold(init, f),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Iter::Wire { left, .. } => (0, Some(*left)),
            Iter::Owned(elements) => elements.size_hint(),
        }
    }
}

impl<T> Default for Seq<'_, T> {
    fn default() -> Self {
        Seq {
            repr: Repr::Owned(Vec::new()),
        }
    }
}

impl<T> From<Vec<T>> for Seq<'_, T> {
    fn from(elements: Vec<T>) -> Self {
        Seq {
            repr: Repr::Owned(elements),
        }
    }
}

impl<T> FromIterator<T> for Seq<'_, T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Vec::from_iter(iter).into()
    }
}

impl<T: Clone> Clone for Seq<'_, T> {
    fn clone(&self) -> Self {
        Seq {
            repr: match &self.repr {
                Repr::Wire { bytes, len, ctx } => Repr::Wire {
                    bytes,
                    len: *len,
                    ctx: *ctx,
                },
                Repr::Owned(elements) => Repr::Owned(elements.clone()),
            },
        }
    }
}

impl<'a, T: Decode<'a> + Clone + fmt::Debug> fmt::Debug for Seq<'a, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a, 'b, T, U> PartialEq<Seq<'b, U>> for Seq<'a, T>
where
    T: Decode<'a> + Clone + PartialEq<U>,
    U: Decode<'b> + Clone,
{
    fn eq(&self, other: &Seq<'b, U>) -> bool {
        self.len() == other.len() && self.iter().zip(other.iter()).all(|(a, b)| a == b)
    }
}

impl<'a, T: Decode<'a> + Clone + Eq> Eq for Seq<'a, T> {}

impl<'a, T: Decode<'a> + Clone + Hash> Hash for Seq<'a, T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_usize(self.len());
        for element in self.iter() {
            element.hash(state);
        }
    }
}

impl<'a, T> IntoOwned for Seq<'a, T>
where
    T: Decode<'a> + Clone + IntoOwned,
{
    type Owned = Seq<'static, T::Owned>;

    fn into_owned(self) -> Self::Owned {
        match self.repr {
            Repr::Owned(elements) => elements.into_iter().map(IntoOwned::into_owned).collect(),
            Repr::Wire { .. } => {
                // Sized once from the count: collecting would grow the vector by doubling
                // (the iterator's lower bound is 0), twice the memory in all.
                let mut owned = Vec::with_capacity(self.len());
                owned.extend(self.iter().map(IntoOwned::into_owned));
                owned.into()
            }
        }
    }
}

/// Refuses a count (read at `at`) whose elements cannot fit in the bytes left, each taking
/// at least its minimum wire size (one byte at least), before anything is read or
/// allocated for them.
#[inline]
fn check_elements<'a, T: Decode<'a>>(
    r: &Reader<'a>,
    count: usize,
    at: usize,
) -> Result<(), DecodeError> {
    r.check_count(count as u64, T::MIN_WIRE_LEN.max(1) as u64, at)
}

/// Decoding the counted parts `#[codec(count = …)]` can carry: a `Vec<T>` (collected into
/// a new vector) or a [`Seq`] (validated, nothing allocated). Used by derived code.
#[doc(hidden)]
pub trait ReadParts<'a>: Sized {
    /// Reads `count` elements (the count was read at the offset that comes with it).
    fn read_parts(r: &mut Reader<'a>, ctx: Ctx, count: (usize, usize))
        -> Result<Self, DecodeError>;
}

/// Encoding the counted parts: their count, their bytes, their length. Used by derived
/// code.
#[doc(hidden)]
pub trait WriteParts {
    /// The number of elements.
    fn count(&self) -> usize;
    /// Writes the elements (not their count).
    fn write_parts(&self, w: &mut Writer<'_>, ctx: Ctx) -> Result<(), EncodeError>;
    /// The bytes the elements take (not their count).
    fn parts_len(&self, ctx: Ctx) -> usize;
}

impl<'a, T: Decode<'a>> ReadParts<'a> for Vec<T> {
    #[inline]
    fn read_parts(
        r: &mut Reader<'a>,
        ctx: Ctx,
        (count, at): (usize, usize),
    ) -> Result<Self, DecodeError> {
        check_elements::<T>(r, count, at)?;
        let mut elements = Vec::with_capacity(count);
        for _ in 0..count {
            elements.push(T::decode(r, ctx)?);
        }
        Ok(elements)
    }
}

impl<T: Encode> WriteParts for Vec<T> {
    #[inline]
    fn count(&self) -> usize {
        self.len()
    }

    #[inline]
    fn write_parts(&self, w: &mut Writer<'_>, ctx: Ctx) -> Result<(), EncodeError> {
        self.iter().try_for_each(|element| element.encode(w, ctx))
    }

    #[inline]
    fn parts_len(&self, ctx: Ctx) -> usize {
        self.iter().map(|element| element.encoded_len(ctx)).sum()
    }
}

impl<'a, T: Decode<'a> + Clone> ReadParts<'a> for Seq<'a, T> {
    #[inline]
    fn read_parts(
        r: &mut Reader<'a>,
        ctx: Ctx,
        count: (usize, usize),
    ) -> Result<Self, DecodeError> {
        Seq::read(r, ctx, count)
    }
}

impl<'a, T: Decode<'a> + Encode + Clone> WriteParts for Seq<'a, T> {
    #[inline]
    fn count(&self) -> usize {
        self.len()
    }

    #[inline]
    fn write_parts(&self, w: &mut Writer<'_>, ctx: Ctx) -> Result<(), EncodeError> {
        match &self.repr {
            Repr::Owned(elements) => elements.write_parts(w, ctx),
            // Decoded in this very context: the bytes are the encoding.
            Repr::Wire {
                bytes,
                ctx: read_in,
                ..
            } if *read_in == ctx => {
                w.write_bytes(bytes);
                Ok(())
            }
            Repr::Wire { .. } => self.reencode(w, ctx),
        }
    }

    #[inline]
    fn parts_len(&self, ctx: Ctx) -> usize {
        match &self.repr {
            Repr::Owned(elements) => elements.parts_len(ctx),
            Repr::Wire {
                bytes,
                ctx: read_in,
                ..
            } if *read_in == ctx => bytes.len(),
            Repr::Wire { .. } => self.iter().map(|element| element.encoded_len(ctx)).sum(),
        }
    }
}

#[cfg(feature = "serde")]
impl<'a, T: Decode<'a> + Clone + serde::Serialize> serde::Serialize for Seq<'a, T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

#[cfg(feature = "serde")]
impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Seq<'_, T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<T>::deserialize(deserializer).map(Seq::from)
    }
}

#[cfg(feature = "arbitrary")]
impl<'x, T: arbitrary::Arbitrary<'x>> arbitrary::Arbitrary<'x> for Seq<'_, T> {
    fn arbitrary(u: &mut arbitrary::Unstructured<'x>) -> arbitrary::Result<Self> {
        Vec::<T>::arbitrary(u).map(Seq::from)
    }

    fn size_hint(depth: usize) -> (usize, Option<usize>) {
        Vec::<T>::size_hint(depth)
    }
}
