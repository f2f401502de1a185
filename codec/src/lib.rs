//! Byte-exact encoding and decoding of PostgreSQL's logical replication protocol, as
//! written by the `pgoutput` plugin.
//!
//! Messages are plain structs that borrow from the input; `#[derive(Decode, Encode)]`
//! generates both directions from their field attributes. What the bytes alone do not say
//! (protocol version, streaming mode, whether we are inside a Stream Start/Stop block) comes
//! from a [`Ctx`].
//!
//! ```
//! use pgoutput_codec::{decode, encode, Ctx, PgOutputMessage, ProtocolVersion, Streaming};
//!
//! // Stream Abort of subtransaction 745 of transaction 744, as PostgreSQL 17 sent it with
//! // protocol 4 and `streaming 'on'`.
//! let bytes = b"A\x00\x00\x02\xe8\x00\x00\x02\xe9";
//! let ctx = Ctx::new(ProtocolVersion::V4, Streaming::On)?;
//! let message: PgOutputMessage = decode(bytes, ctx)?;
//! let PgOutputMessage::StreamAbort(abort) = &message else { panic!("not a Stream Abort") };
//! assert_eq!(abort.subtransaction_xid.0, 745);
//! assert_eq!(encode(&message, ctx)?, bytes);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Defining a message
//!
//! One derive per trait; every attribute is described, with examples, in
//! [`docs::attributes`].
//!
//! ```
//! use pgoutput_codec::{
//!     decode, encode, Ctx, Decode, Encode, IntoOwned, Lsn, PgBytes, PgStr, ProtocolVersion, Tagged, Xid,
//! };
//!
//! /// A made-up message: tag `'Z'`, an LSN, a name, then Int32-length-prefixed bytes; from
//! /// protocol 3 on it also carries an xid.
//! #[derive(Debug, PartialEq, Decode, IntoOwned, Tagged, Encode)]
//! #[codec(tag = b'Z')]
//! struct Checkpoint<'a> {
//!     lsn: Lsn,
//!     name: PgStr<'a>,
//!     #[codec(len = i32)]
//!     payload: PgBytes<'a>,
//!     #[since(version = 3)]
//!     xid: Option<Xid>,
//! }
//!
//! let value = Checkpoint { lsn: Lsn(1), name: "x".into(), payload: b"ab".into(), xid: None };
//! let v1 = Ctx::plain(ProtocolVersion::V1);
//! let bytes = encode(&value, v1)?;
//! assert_eq!(bytes, b"Z\0\0\0\0\0\0\0\x01x\0\0\0\0\x02ab");
//! assert_eq!(decode::<Checkpoint>(&bytes, v1)?, value);
//! // Protocol 3 needs the xid: encoding without it is an error, not a silently short message.
//! assert!(encode(&value, Ctx::plain(ProtocolVersion::V3)).unwrap_err().is_context_error());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

//!
//! # Cargo features
//!
//! Both off by default, so the codec alone stays lean; it does no I/O and depends on no
//! runtime:
//!
//! - `serde`: the JSON form of every message and envelope type.
//! - `arbitrary`: `Arbitrary` impls for property tests and fuzzing.
//!
//! # The crates beside it
//!
//! - `pgoutput-wire`: PostgreSQL's frontend/backend protocol for both sides of a
//!   replication connection (framing, start-up, the server's SCRAM, SQLSTATEs, the
//!   replication command grammar).
//! - `pgoutput-client`: a logical replication client and consumer, blocking or on tokio.
//! - `pgoutput-harness`: the test walsender, the proxy, fault rules and the judge.
//! - `pgoutput-cli`: the `pgoutput` program.

#![forbid(unsafe_code)]
// The public API says what it returns and how it fails.
#![warn(
    clippy::must_use_candidate,
    clippy::return_self_not_must_use,
    clippy::missing_errors_doc
)]
// docs.rs: mark what each feature adds.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The derive macros name this crate `::pgoutput_codec`, also from inside it.
extern crate self as pgoutput_codec;

mod codec;
mod ctx;
pub mod docs;
mod envelope;
mod error;
mod follow;
pub mod message;
mod outline;
mod reader;
#[cfg(feature = "serde")]
mod serde_form;
mod session;
mod tags;
mod types;
mod writer;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use codec::{
    decode, encode, encode_into, Decode, Encode, IntoOwned, StreamRole, Tagged, TransactionRole,
};
pub use ctx::{Ctx, CtxError, ProtocolVersion, Streaming, UnknownStreaming};
pub use envelope::{
    ClientMessage, HotStandbyFeedback, PrimaryKeepalive, ServerMessage, StandbyStatusUpdate,
    XLogData,
};
pub use error::{DecodeError, DecodeErrorKind, EncodeError, EncodeErrorKind, PathStep};
pub use follow::{Follower, Place};
pub use message::{
    Begin, BeginPrepare, ColumnValue, Commit, CommitPrepared, Delete, Insert, Message,
    MessageFlags, OldTuple, Origin, PgOutputMessage, Prepare, Relation, RelationColumn,
    ReplicaIdentity, RollbackPrepared, StreamAbort, StreamCommit, StreamPrepare, StreamStart,
    StreamStop, Truncate, TruncateOptions, TupleData, Type, Update,
};
pub use outline::Outline;
pub use pgoutput_codec_derive::{Decode, Encode, IntoOwned, Tagged};
pub use reader::Reader;
pub use session::{Decoder, Encoder};
pub use tags::TagSet;
pub use types::{
    Lsn, LsnParseError, Oid, PgBytes, PgStr, PgTimestamp, Seq, SeqIter, TimestampError, Xid,
};
pub use writer::Writer;

/// The names most programs use, for a glob import that clashes with nothing common: it
/// leaves out [`Message`] and [`Type`] (reach them as `pgoutput_codec::Message`
/// or `pgoutput_codec::message::Type`).
///
/// ```
/// use pgoutput_codec::prelude::*;
///
/// let mut decoder = Decoder::new(ProtocolVersion::V1, Streaming::Off)?;
/// assert!(matches!(decoder.decode(b"E"), Err(_)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub mod prelude {
    pub use crate::{
        decode, encode, encode_into, Ctx, Decode, DecodeError, DecodeErrorKind, Decoder, Encode,
        EncodeError, EncodeErrorKind, Encoder, IntoOwned, Lsn, Oid, PgBytes, PgOutputMessage,
        PgStr, PgTimestamp, ProtocolVersion, StreamRole, Streaming, TagSet, Tagged, Xid,
    };
}
