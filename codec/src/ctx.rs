//! The decoding/encoding context: what the bytes alone cannot tell.
//!
//! Several pgoutput fields are invisible in the bytes: the Int32 xid that Message, Relation,
//! Type, Insert, Update, Delete and Truncate carry only inside a Stream Start/Stop block, and
//! Stream Abort's abort LSN and time, present only when the session asked for
//! `streaming = parallel` (protocol 4). A [`Ctx`] carries the negotiated options and the
//! stream-block state so that decoders never guess from the remaining length.

use core::fmt;

/// The pgoutput `proto_version` a session negotiated (1 to 4).
///
/// Ordered, so `ctx.version() >= ProtocolVersion::V2` reads like the PostgreSQL source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum ProtocolVersion {
    /// Protocol 1 (PostgreSQL 10+): the base protocol.
    V1 = 1,
    /// Protocol 2 (PostgreSQL 14+): streaming of in-progress transactions.
    V2 = 2,
    /// Protocol 3 (PostgreSQL 15+): two-phase commit.
    V3 = 3,
    /// Protocol 4 (PostgreSQL 16+): parallel apply of streamed transactions.
    V4 = 4,
}

impl ProtocolVersion {
    /// Every version, oldest first.
    pub const ALL: [ProtocolVersion; 4] = [Self::V1, Self::V2, Self::V3, Self::V4];

    /// The number sent as `proto_version`.
    #[must_use]
    pub const fn number(self) -> u32 {
        self as u32
    }

    /// The version with that number, if it is one PostgreSQL defines (1 to 4).
    #[must_use]
    pub const fn from_number(n: u32) -> Option<Self> {
        match n {
            1 => Some(Self::V1),
            2 => Some(Self::V2),
            3 => Some(Self::V3),
            4 => Some(Self::V4),
            _ => None,
        }
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number())
    }
}

impl TryFrom<u32> for ProtocolVersion {
    type Error = CtxError;

    fn try_from(n: u32) -> Result<Self, CtxError> {
        Self::from_number(n).ok_or(CtxError::UnknownVersion(n))
    }
}

/// The pgoutput `streaming` option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Streaming {
    /// Large transactions are sent whole, at commit (the default).
    #[default]
    Off,
    /// `streaming 'on'`: in-progress transactions are streamed in Stream Start/Stop blocks
    /// (protocol 2+).
    On,
    /// `streaming 'parallel'`: like `On`, and Stream Abort carries the abort LSN and time
    /// (protocol 4+, PostgreSQL 16+).
    Parallel,
}

impl Streaming {
    /// The lowest protocol version PostgreSQL accepts this mode with.
    #[must_use]
    pub const fn min_version(self) -> ProtocolVersion {
        match self {
            Streaming::Off => ProtocolVersion::V1,
            Streaming::On => ProtocolVersion::V2,
            Streaming::Parallel => ProtocolVersion::V4,
        }
    }
}

/// A streaming mode's name that is not one (see [`Streaming`]'s `FromStr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownStreaming(pub String);

impl fmt::Display for UnknownStreaming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown streaming mode {:?}; expected off, on or parallel",
            self.0
        )
    }
}

impl std::error::Error for UnknownStreaming {}

/// The names [`Streaming`]'s `Display` writes: `off`, `on`, `parallel`.
///
/// ```
/// use pgoutput_codec::Streaming;
///
/// assert_eq!("parallel".parse::<Streaming>()?, Streaming::Parallel);
/// assert_eq!(Streaming::On.to_string().parse::<Streaming>()?, Streaming::On);
/// assert!("true".parse::<Streaming>().is_err());
/// # Ok::<(), pgoutput_codec::UnknownStreaming>(())
/// ```
impl core::str::FromStr for Streaming {
    type Err = UnknownStreaming;

    fn from_str(text: &str) -> Result<Streaming, UnknownStreaming> {
        match text {
            "off" => Ok(Streaming::Off),
            "on" => Ok(Streaming::On),
            "parallel" => Ok(Streaming::Parallel),
            other => Err(UnknownStreaming(other.to_owned())),
        }
    }
}

impl fmt::Display for Streaming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Streaming::Off => "off",
            Streaming::On => "on",
            Streaming::Parallel => "parallel",
        })
    }
}

/// The context a message is decoded or encoded in: negotiated options and stream-block state.
///
/// `Ctx` is `Copy` and cheap; it is passed by value through every decode and encode call.
/// Its invariants mirror what PostgreSQL accepts: a streaming mode needs its minimum protocol
/// version, and only a streaming session can be inside a Stream Start/Stop block.
///
/// ```
/// use pgoutput_codec::{Ctx, ProtocolVersion, Streaming};
///
/// let ctx = Ctx::new(ProtocolVersion::V4, Streaming::Parallel)?;
/// assert!(!ctx.in_stream());
/// let in_block = ctx.with_in_stream(true)?;
/// assert!(in_block.in_stream());
///
/// // PostgreSQL refuses `streaming 'parallel'` below protocol 4, and so does `Ctx`.
/// assert!(Ctx::new(ProtocolVersion::V3, Streaming::Parallel).is_err());
/// # Ok::<(), pgoutput_codec::CtxError>(())
/// ```
// Four bytes, aligned: a decoded `Seq` keeps its `Ctx`, and moving one whole word (rather
// than three bytes at odd offsets) is what building every tuple-carrying message costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C, align(4))]
pub struct Ctx {
    version: ProtocolVersion,
    streaming: Streaming,
    in_stream: bool,
}

impl Ctx {
    /// A context for a session that negotiated `version` and `streaming`, outside any stream
    /// block. Fails where PostgreSQL would refuse the options.
    ///
    /// # Errors
    ///
    /// [`CtxError`] when the version cannot carry the streaming mode (streaming needs
    /// protocol 2, parallel protocol 4).
    pub const fn new(version: ProtocolVersion, streaming: Streaming) -> Result<Self, CtxError> {
        if (version as u8) < (streaming.min_version() as u8) {
            return Err(CtxError::StreamingNeedsVersion { streaming, version });
        }
        Ok(Ctx {
            version,
            streaming,
            in_stream: false,
        })
    }

    /// Protocol `version` with streaming off: always valid.
    #[must_use]
    pub const fn plain(version: ProtocolVersion) -> Self {
        Ctx {
            version,
            streaming: Streaming::Off,
            in_stream: false,
        }
    }

    /// The same session, inside (`true`) or outside (`false`) a Stream Start/Stop block.
    /// Fails when streaming is off, since such a session never has a block.
    ///
    /// # Errors
    ///
    /// [`CtxError`] when the session has no streaming, so no stream block can open.
    pub const fn with_in_stream(self, in_stream: bool) -> Result<Self, CtxError> {
        if in_stream && matches!(self.streaming, Streaming::Off) {
            return Err(CtxError::StreamBlockWithoutStreaming);
        }
        Ok(Ctx { in_stream, ..self })
    }

    /// The negotiated protocol version.
    #[must_use]
    pub const fn version(self) -> ProtocolVersion {
        self.version
    }

    /// The negotiated streaming mode.
    #[must_use]
    pub const fn streaming(self) -> Streaming {
        self.streaming
    }

    /// Whether we are between a Stream Start and its Stream Stop.
    #[must_use]
    pub const fn in_stream(self) -> bool {
        self.in_stream
    }

    /// Whether the session streams in parallel mode (`streaming 'parallel'`).
    #[must_use]
    pub const fn is_parallel(self) -> bool {
        matches!(self.streaming, Streaming::Parallel)
    }
}

impl fmt::Display for Ctx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "protocol {}, streaming {}", self.version, self.streaming)?;
        if self.in_stream {
            f.write_str(", inside a stream block")?;
        }
        Ok(())
    }
}

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for Ctx {
    /// Only valid contexts: the streaming mode fits the version, blocks only when streaming.
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        let version: ProtocolVersion = u.arbitrary()?;
        let streaming = *u.choose(match version {
            ProtocolVersion::V1 => &[Streaming::Off][..],
            ProtocolVersion::V2 | ProtocolVersion::V3 => &[Streaming::Off, Streaming::On],
            ProtocolVersion::V4 => &[Streaming::Off, Streaming::On, Streaming::Parallel],
        })?;
        let in_stream = streaming != Streaming::Off && u.arbitrary()?;
        Ok(Ctx {
            version,
            streaming,
            in_stream,
        })
    }
}

/// Why a [`Ctx`] could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtxError {
    /// A `proto_version` outside 1 to 4.
    UnknownVersion(u32),
    /// The streaming mode needs a newer protocol version.
    StreamingNeedsVersion {
        /// The requested mode.
        streaming: Streaming,
        /// The requested version.
        version: ProtocolVersion,
    },
    /// A stream block was requested for a session that does not stream.
    StreamBlockWithoutStreaming,
}

impl fmt::Display for CtxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            CtxError::UnknownVersion(n) => {
                write!(f, "unknown protocol version {n}; expected 1 to 4")
            }
            CtxError::StreamingNeedsVersion { streaming, version } => write!(
                f,
                "streaming {streaming} needs protocol version {} or higher, not {version}",
                streaming.min_version()
            ),
            CtxError::StreamBlockWithoutStreaming => {
                f.write_str("a stream block needs streaming on or parallel")
            }
        }
    }
}

impl std::error::Error for CtxError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_modes_need_their_versions() {
        for version in ProtocolVersion::ALL {
            for streaming in [Streaming::Off, Streaming::On, Streaming::Parallel] {
                let ok = version >= streaming.min_version();
                assert_eq!(
                    Ctx::new(version, streaming).is_ok(),
                    ok,
                    "{version} {streaming}"
                );
            }
        }
        assert_eq!(
            Ctx::new(ProtocolVersion::V1, Streaming::On)
                .unwrap_err()
                .to_string(),
            "streaming on needs protocol version 2 or higher, not 1"
        );
    }

    #[test]
    fn stream_block_needs_streaming() {
        let off = Ctx::plain(ProtocolVersion::V4);
        assert_eq!(
            off.with_in_stream(true),
            Err(CtxError::StreamBlockWithoutStreaming)
        );
        assert_eq!(off.with_in_stream(false), Ok(off));
        let on = Ctx::new(ProtocolVersion::V2, Streaming::On).unwrap();
        assert!(on.with_in_stream(true).unwrap().in_stream());
    }

    #[test]
    fn version_numbers() {
        assert_eq!(ProtocolVersion::try_from(3), Ok(ProtocolVersion::V3));
        assert_eq!(
            ProtocolVersion::try_from(0),
            Err(CtxError::UnknownVersion(0))
        );
        assert_eq!(
            ProtocolVersion::try_from(5),
            Err(CtxError::UnknownVersion(5))
        );
        assert!(ProtocolVersion::V4 > ProtocolVersion::V2);
    }
}
