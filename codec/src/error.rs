//! Typed errors: what was expected, where (byte offset), and in which message and field.
//!
//! Both error types box their contents so that `Result<T, _>` stays one word wide on the
//! hot path; the box is only allocated when something is wrong.

use core::fmt;

use crate::{Ctx, TagSet};

/// One step of an error's location: a type and one of its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathStep {
    /// The Rust type being decoded or encoded, e.g. `StreamAbort`.
    pub message: &'static str,
    /// Its field, e.g. `abort_lsn`; `tag` for the leading tag byte.
    pub field: &'static str,
}

/// Writes `in Outer.field > Inner.field`, outermost first.
fn write_path(f: &mut fmt::Formatter<'_>, path: &[PathStep]) -> fmt::Result {
    for (i, step) in path.iter().rev().enumerate() {
        f.write_str(if i == 0 { " in " } else { " > " })?;
        write!(f, "{}.{}", step.message, step.field)?;
    }
    Ok(())
}

/// A byte as a tag: `'M' (0x4D)`, or just `0x07` when it is not printable.
pub(crate) struct TagByte(pub u8);

impl fmt::Display for TagByte {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_ascii_graphic() {
            write!(f, "'{}' (0x{:02X})", self.0 as char, self.0)
        } else {
            write!(f, "0x{:02X}", self.0)
        }
    }
}

/// What went wrong while decoding. Each kind is a distinct kind of malformed input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// The message ended inside a field.
    UnexpectedEnd {
        /// Bytes the field needed.
        needed: usize,
        /// Bytes that were left.
        available: usize,
    },
    /// The tag byte names no message (or variant) that was expected here.
    UnknownTag {
        /// The byte found.
        found: u8,
        /// The tags that would have been accepted.
        expected: TagSet,
    },
    /// A NUL-terminated String ran to the end of the message without its NUL.
    MissingNul,
    /// A length field was negative.
    NegativeLength {
        /// The length read.
        length: i64,
    },
    /// A length or count asks for more bytes than the message has left; nothing was
    /// allocated for it.
    LengthTooLarge {
        /// The length read.
        length: u64,
        /// Bytes that were left after the length field.
        available: usize,
    },
    /// A count of elements that cannot all fit in the bytes left, even at each element's
    /// minimum wire size; nothing was allocated for it.
    CountTooLarge {
        /// The count read.
        count: u64,
        /// The fewest bytes that many elements take.
        needed: u64,
        /// Bytes that were left after the count.
        available: usize,
    },
    /// A field holds a value its type does not allow (for example Message flags other than
    /// 0 or 1).
    InvalidValue {
        /// The value found.
        found: u64,
        /// What is allowed.
        expected: &'static str,
    },
    /// The message is well-formed but cannot come at this point of the stream (for example
    /// a Stream Stop without a Stream Start); see the stateful session decoder.
    OutOfOrder {
        /// The message's tag.
        tag: u8,
        /// What the protocol requires instead.
        reason: &'static str,
    },
    /// The message was complete but bytes were left after it.
    TrailingBytes {
        /// How many bytes were left.
        remaining: usize,
    },
}

impl DecodeErrorKind {
    /// The part of the message that comes before "at byte N".
    fn write_head(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::UnexpectedEnd { .. } => f.write_str("unexpected end of input"),
            Self::UnknownTag { found, .. } => write!(f, "unknown tag {}", TagByte(found)),
            Self::MissingNul => f.write_str("string without NUL terminator"),
            Self::NegativeLength { length } => write!(f, "negative length {length}"),
            Self::LengthTooLarge { length, .. } => write!(f, "length {length} too large"),
            Self::CountTooLarge { count, .. } => write!(f, "count {count} too large"),
            Self::InvalidValue { found, .. } => write!(f, "invalid value {found}"),
            Self::TrailingBytes { remaining } => write!(f, "{remaining} trailing bytes"),
            Self::OutOfOrder { tag, .. } => write!(f, "message {} out of order", TagByte(tag)),
        }
    }

    /// The detail that comes after the location.
    fn write_tail(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::UnexpectedEnd { needed, available } => {
                write!(f, " (needed {needed}, had {available})")
            }
            Self::UnknownTag { expected, .. } => write!(f, "; expected {expected}"),
            Self::MissingNul => f.write_str(" (the message ended first)"),
            Self::LengthTooLarge { available, .. } => {
                write!(f, " (only {available} bytes left)")
            }
            Self::CountTooLarge {
                needed, available, ..
            } => write!(
                f,
                " (the elements need at least {needed} bytes, only {available} left)"
            ),
            Self::InvalidValue { expected, .. } => write!(f, "; expected {expected}"),
            Self::OutOfOrder { reason, .. } => write!(f, ": {reason}"),
            Self::NegativeLength { .. } | Self::TrailingBytes { .. } => Ok(()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct DecodeErrorInner {
    kind: DecodeErrorKind,
    offset: usize,
    path: Vec<PathStep>,
}

/// Why bytes could not be decoded, where, and in which message and field.
///
/// ```
/// use pgoutput_codec::{decode, Ctx, DecodeErrorKind, ProtocolVersion, StreamAbort};
///
/// let err = decode::<StreamAbort>(b"A\0\0\0\x01\0\0", Ctx::plain(ProtocolVersion::V2)).unwrap_err();
/// assert_eq!(err.offset(), 5);
/// assert_eq!(err.kind(), DecodeErrorKind::UnexpectedEnd { needed: 4, available: 2 });
/// assert_eq!(
///     err.to_string(),
///     "unexpected end of input at byte 5 in StreamAbort.subtransaction_xid (needed 4, had 2)"
/// );
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct DecodeError(Box<DecodeErrorInner>);

impl DecodeError {
    /// An error of `kind` at byte `offset` of the message, not yet placed in a field.
    #[cold]
    #[must_use]
    pub fn new(kind: DecodeErrorKind, offset: usize) -> Self {
        DecodeError(Box::new(DecodeErrorInner {
            kind,
            offset,
            path: Vec::new(),
        }))
    }

    /// Records that the error happened while decoding `message.field`. Called innermost
    /// first, so nested types build the path outwards.
    #[cold]
    #[must_use]
    pub fn in_field(mut self, message: &'static str, field: &'static str) -> Self {
        self.0.path.push(PathStep { message, field });
        self
    }

    /// What went wrong.
    #[must_use]
    pub fn kind(&self) -> DecodeErrorKind {
        self.0.kind
    }

    /// Byte offset from the start of the message where the offending field begins.
    #[must_use]
    pub fn offset(&self) -> usize {
        self.0.offset
    }

    /// The outermost type being decoded, e.g. `Message`.
    #[must_use]
    pub fn message(&self) -> Option<&'static str> {
        self.0.path.last().map(|step| step.message)
    }

    /// The innermost field being decoded, e.g. `flags`.
    #[must_use]
    pub fn field(&self) -> Option<&'static str> {
        self.0.path.first().map(|step| step.field)
    }

    /// The whole location, innermost first.
    #[must_use]
    pub fn path(&self) -> &[PathStep] {
        &self.0.path
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.kind.write_head(f)?;
        write!(f, " at byte {}", self.0.offset)?;
        write_path(f, &self.0.path)?;
        self.0.kind.write_tail(f)
    }
}

impl fmt::Debug for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecodeError")
            .field("kind", &self.0.kind)
            .field("offset", &self.0.offset)
            .field("path", &self.0.path)
            .finish()
    }
}

impl std::error::Error for DecodeError {}

/// What went wrong while encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeErrorKind {
    /// A version- or context-gated field is `None` where the context requires a value.
    MissingInContext {
        /// When the field is present on the wire, e.g. `protocol 4+ with streaming parallel`.
        present_when: &'static str,
        /// The context that was used.
        ctx: Ctx,
    },
    /// A version- or context-gated field is `Some` where the wire cannot carry it; writing
    /// the message without it would silently lose data.
    NotCarriedInContext {
        /// When the field is present on the wire.
        present_when: &'static str,
        /// The context that was used.
        ctx: Ctx,
    },
    /// A String holds a NUL byte, which would end it early on the wire.
    InteriorNul {
        /// Index of the first NUL within the string.
        position: usize,
    },
    /// A value is longer than its length field can express.
    TooLong {
        /// Its length.
        length: usize,
        /// The largest length the field can carry.
        max: usize,
    },
    /// A field holds a value the wire format does not allow.
    InvalidValue {
        /// The value.
        found: u64,
        /// What is allowed.
        expected: &'static str,
    },
    /// The message cannot be sent at this point of the stream (session encoder).
    OutOfOrder {
        /// The message's tag.
        tag: u8,
        /// What the protocol requires instead.
        reason: &'static str,
    },
}

impl fmt::Display for EncodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::MissingInContext { present_when, ctx } => write!(
                f,
                "is None, but the wire carries it when {present_when} (context: {ctx})"
            ),
            Self::NotCarriedInContext { present_when, ctx } => write!(
                f,
                "is Some, but the wire carries it only when {present_when} (context: {ctx})"
            ),
            Self::InteriorNul { position } => {
                write!(f, "contains a NUL byte at index {position}")
            }
            Self::TooLong { length, max } => {
                write!(f, "is {length} bytes long; at most {max} fit")
            }
            Self::InvalidValue { found, expected } => {
                write!(f, "holds {found}; expected {expected}")
            }
            Self::OutOfOrder { tag, reason } => {
                write!(f, "message {} cannot be sent here: {reason}", TagByte(tag))
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct EncodeErrorInner {
    kind: EncodeErrorKind,
    path: Vec<PathStep>,
}

/// Why a value could not be encoded, and in which message and field.
///
/// ```
/// use pgoutput_codec::{encode, Ctx, Lsn, ProtocolVersion, StreamAbort, Streaming, Xid};
///
/// let abort = StreamAbort {
///     xid: Xid(744),
///     subtransaction_xid: Xid(745),
///     abort_lsn: Some(Lsn(0x14FFE70)),
///     abort_timestamp: None,
/// };
/// let on = Ctx::new(ProtocolVersion::V4, Streaming::On)?;
/// let err = encode(&abort, on).unwrap_err();
/// assert!(err.is_context_error());
/// assert_eq!(err.to_string(), "StreamAbort.abort_lsn is Some, but the wire carries it only \
///     when protocol version is 4 or higher and streaming is parallel \
///     (context: protocol 4, streaming on)");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct EncodeError(Box<EncodeErrorInner>);

impl EncodeError {
    /// An error of `kind`, not yet placed in a field.
    #[cold]
    #[must_use]
    pub fn new(kind: EncodeErrorKind) -> Self {
        EncodeError(Box::new(EncodeErrorInner {
            kind,
            path: Vec::new(),
        }))
    }

    /// Records that the error happened while encoding `message.field` (innermost first).
    #[cold]
    #[must_use]
    pub fn in_field(mut self, message: &'static str, field: &'static str) -> Self {
        self.0.path.push(PathStep { message, field });
        self
    }

    /// What went wrong.
    #[must_use]
    pub fn kind(&self) -> EncodeErrorKind {
        self.0.kind
    }

    /// Whether the value is fine but the context cannot carry it as it is (a gated field
    /// that is `None` where required, or `Some` where the wire has no room for it).
    #[must_use]
    pub fn is_context_error(&self) -> bool {
        matches!(
            self.0.kind,
            EncodeErrorKind::MissingInContext { .. } | EncodeErrorKind::NotCarriedInContext { .. }
        )
    }

    /// The outermost type being encoded.
    #[must_use]
    pub fn message(&self) -> Option<&'static str> {
        self.0.path.last().map(|step| step.message)
    }

    /// The innermost field being encoded.
    #[must_use]
    pub fn field(&self) -> Option<&'static str> {
        self.0.path.first().map(|step| step.field)
    }

    /// The whole location, innermost first.
    #[must_use]
    pub fn path(&self) -> &[PathStep] {
        &self.0.path
    }
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = &self.0.path;
        match path.split_last() {
            // An order error is about the whole message, which its text names.
            None if matches!(self.0.kind, EncodeErrorKind::OutOfOrder { .. }) => {
                return write!(f, "{}", self.0.kind)
            }
            None => f.write_str("value")?,
            Some((outer, inner)) => {
                write!(f, "{}.{}", outer.message, outer.field)?;
                for step in inner.iter().rev() {
                    write!(f, " > {}.{}", step.message, step.field)?;
                }
            }
        }
        write!(f, " {}", self.0.kind)
    }
}

impl fmt::Debug for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncodeError")
            .field("kind", &self.0.kind)
            .field("path", &self.0.path)
            .finish()
    }
}

impl std::error::Error for EncodeError {}
