//! Extending the protocol: a made-up message type, and an enum that carries it alongside
//! every pgoutput message.
//!
//! A test server can interleave its own messages with pgoutput's, and a client decodes both
//! with one session decoder:
//!
//! ```
//! use pgoutput_codec::{Decoder, Encoder, PgOutputMessage, ProtocolVersion, StreamStart, Streaming, Xid};
//! use pgoutput_examples::extension::{ExtendedMessage, Heartbeat};
//!
//! let mut encoder = Encoder::new(ProtocolVersion::V2, Streaming::On)?;
//! let mut decoder = Decoder::new(ProtocolVersion::V2, Streaming::On)?;
//! let start = ExtendedMessage::PgOutput(PgOutputMessage::StreamStart(StreamStart {
//!     xid: Xid(744),
//!     first_segment: true,
//! }));
//! // Inside a stream block the heartbeat carries the streamed xid, like pgoutput's own
//! // messages do.
//! let beat = ExtendedMessage::Heartbeat(Heartbeat { xid: Some(Xid(744)), lsn: "0/16B3748".parse()?, note: "alive".into() });
//! for message in [&start, &beat] {
//!     let bytes = encoder.encode(message)?;
//!     assert_eq!(&decoder.decode_as::<ExtendedMessage>(&bytes)?, message);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use pgoutput_codec::{Decode, Encode, IntoOwned, Lsn, PgOutputMessage, PgStr, Tagged, Xid};

/// Heartbeat `'H'`: not part of pgoutput, made up for this example. It carries an LSN and a
/// note, and, like pgoutput's messages, an xid only inside a Stream Start/Stop block.
#[derive(Debug, Clone, PartialEq, Eq, Decode, IntoOwned, Tagged, Encode)]
#[codec(tag = b'H')]
pub struct Heartbeat<'a> {
    /// The streamed transaction's xid; only inside a stream block.
    #[since(version = 2, when = "streamed")]
    pub xid: Option<Xid>,
    /// Where the sender is.
    pub lsn: Lsn,
    /// Free text.
    pub note: PgStr<'a>,
}

/// Every pgoutput message, or a [`Heartbeat`]. The derive dispatches on the tag byte: each
/// variant's tags come from its type, so `PgOutput` takes all 19 pgoutput tags. A second
/// variant using one of those tags would be a compile error naming both types.
#[derive(Debug, Clone, PartialEq, Eq, Decode, IntoOwned, Tagged, Encode)]
pub enum ExtendedMessage<'a> {
    /// Any pgoutput message.
    PgOutput(PgOutputMessage<'a>),
    /// Our own message.
    Heartbeat(Heartbeat<'a>),
}
