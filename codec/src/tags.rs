//! Sets of tag bytes, computed at compile time.
//!
//! A message type has one tag; a dispatch enum accepts the union of its variants' tags, and
//! an enum can wrap another enum. A 256-bit set, built by `const fn`s, lets the derive
//! compute those unions and check them for overlaps while compiling.

use core::fmt;

use crate::error::TagByte;

/// A set of tag bytes.
///
/// ```
/// use pgoutput_codec::{PgOutputMessage, TagSet, Tagged};
///
/// const STREAM: TagSet = TagSet::EMPTY.with(b'S').with(b'E');
/// assert!(STREAM.contains(b'E'));
/// assert_eq!(STREAM.iter().collect::<Vec<_>>(), [b'E', b'S']);
/// assert!(PgOutputMessage::TAGS.contains(b'M'));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TagSet([u64; 4]);

impl TagSet {
    /// No tags.
    pub const EMPTY: TagSet = TagSet([0; 4]);
    /// Every byte.
    pub const ALL: TagSet = TagSet([u64::MAX; 4]);

    /// Just `tag`.
    #[must_use]
    pub const fn single(tag: u8) -> TagSet {
        TagSet::EMPTY.with(tag)
    }

    /// This set and `tag`.
    #[must_use]
    pub const fn with(self, tag: u8) -> TagSet {
        let mut bits = self.0;
        bits[(tag / 64) as usize] |= 1 << (tag % 64);
        TagSet(bits)
    }

    /// Tags in either set.
    #[must_use]
    pub const fn union(self, other: TagSet) -> TagSet {
        let (a, b) = (self.0, other.0);
        TagSet([a[0] | b[0], a[1] | b[1], a[2] | b[2], a[3] | b[3]])
    }

    /// Whether `tag` is in the set.
    #[must_use]
    pub const fn contains(self, tag: u8) -> bool {
        self.0[(tag / 64) as usize] & (1 << (tag % 64)) != 0
    }

    /// The lowest tag both sets hold, if any.
    #[must_use]
    pub const fn first_common(self, other: TagSet) -> Option<u8> {
        let mut byte = 0u8;
        loop {
            if self.contains(byte) && other.contains(byte) {
                return Some(byte);
            }
            if byte == u8::MAX {
                return None;
            }
            byte += 1;
        }
    }

    /// Whether the two sets share a tag.
    #[must_use]
    pub const fn intersects(self, other: TagSet) -> bool {
        let (a, b) = (self.0, other.0);
        (a[0] & b[0]) | (a[1] & b[1]) | (a[2] & b[2]) | (a[3] & b[3]) != 0
    }

    /// Number of tags.
    #[must_use]
    pub const fn len(self) -> usize {
        let b = self.0;
        (b[0].count_ones() + b[1].count_ones() + b[2].count_ones() + b[3].count_ones()) as usize
    }

    /// Whether the set is empty.
    #[must_use]
    pub const fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// The tags, in ascending byte order.
    pub fn iter(self) -> impl Iterator<Item = u8> {
        (0..=255u8).filter(move |&tag| self.contains(tag))
    }
}

impl fmt::Debug for TagSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(self.iter().map(|t| format!("{}", TagByte(t))))
            .finish()
    }
}

impl fmt::Display for TagSet {
    /// `'M' (0x4D)`, or `one of 'A' (0x41), 'M' (0x4D)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.len() > 1 {
            f.write_str("one of ")?;
        }
        for (i, tag) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", TagByte(tag))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations() {
        let a = TagSet::single(b'A').with(0).with(255);
        assert!(a.contains(0) && a.contains(255) && a.contains(b'A'));
        assert!(!a.contains(b'B'));
        assert_eq!(a.len(), 3);
        let b = TagSet::single(b'B');
        assert!(!a.intersects(b));
        assert!(a.union(b).intersects(b));
        assert_eq!(a.union(b).iter().collect::<Vec<_>>(), [0, b'A', b'B', 255]);
        assert_eq!(b.to_string(), "'B' (0x42)");
        assert_eq!(
            TagSet::single(b'A').with(b'B').to_string(),
            "one of 'A' (0x41), 'B' (0x42)"
        );
    }
}
