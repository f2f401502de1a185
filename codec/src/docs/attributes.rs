//! The derives and their attributes: everything `#[codec(...)]` and `#[since(...)]` can
//! say, where each goes, and what it puts on the wire. Every example here compiles and
//! runs as a doctest.
//!
//! # One derive per trait
//!
//! | derive | implements | needs |
//! |---|---|---|
//! | `Decode` | [`Decode`](crate::Decode): bytes to value, borrowing strings and bytes | — |
//! | `Encode` | [`Encode`](crate::Encode): value to bytes, refusing what the context cannot carry | — |
//! | `IntoOwned` | [`IntoOwned`](crate::IntoOwned): `Type<'a>` to `Type<'static>` | every field `IntoOwned` |
//! | `Tagged` | [`Tagged`](crate::Tagged): the tag byte(s), the stream and transaction roles, the xids | `#[codec(tag)]` on a struct, or an enum |
//!
//! The session [`Decoder`](crate::Decoder) and [`Encoder`](crate::Encoder) take types
//! that are `Tagged`; a dispatch enum's variants must be `Tagged` so that it can tell them
//! apart. A field of a hand-written type inside a `IntoOwned` type needs an `IntoOwned`
//! impl of its own (one line: `type Owned = Self` for a type that borrows nothing).
//!
//! # On a type
//!
//! ## `#[codec(tag = b'X')]`
//!
//! The message starts with this byte (a byte literal or an integer 0 to 255).
//!
//! ```
//! use pgoutput_codec::{decode, encode, Ctx, Decode, Encode, Lsn, ProtocolVersion, Tagged};
//!
//! #[derive(Debug, PartialEq, Decode, Encode, Tagged)]
//! #[codec(tag = b'H')]
//! struct Heartbeat {
//!     lsn: Lsn,
//! }
//!
//! let ctx = Ctx::plain(ProtocolVersion::V1);
//! let bytes = encode(&Heartbeat { lsn: Lsn(7) }, ctx)?;
//! assert_eq!(bytes, b"H\0\0\0\0\0\0\0\x07");
//! assert_eq!(decode::<Heartbeat>(&bytes, ctx)?, Heartbeat { lsn: Lsn(7) });
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## `#[codec(stream = "start" | "stop" | "outside")]`
//!
//! What the message does to a session's stream blocks, for the session `Decoder` and
//! `Encoder` (see [`StreamRole`](crate::StreamRole)): `start` opens a block, `stop` closes
//! it, `outside` may not come inside one. pgoutput's Stream Start, Stop, Commit, Abort and
//! Prepare say so; a message without it has no stream rules, whatever its tag byte.
//!
//! ```
//! use pgoutput_codec::{Decode, Decoder, Encode, ProtocolVersion, Streaming, Tagged, Xid};
//!
//! #[derive(Debug, PartialEq, Decode, Encode, Tagged)]
//! #[codec(tag = b'{', stream = "start")]
//! struct Open { xid: Xid }
//!
//! #[derive(Debug, PartialEq, Decode, Encode, Tagged)]
//! #[codec(tag = b'}', stream = "stop")]
//! struct Close;
//!
//! #[derive(Debug, PartialEq, Decode, Encode, Tagged)]
//! enum Framing { Open(Open), Close(Close) }
//!
//! let mut decoder = Decoder::new(ProtocolVersion::V2, Streaming::On)?;
//! decoder.decode_as::<Framing>(b"{\0\0\0\x01")?;
//! assert!(decoder.in_stream());
//! decoder.decode_as::<Framing>(b"}")?;
//! assert!(decoder.decode_as::<Framing>(b"}").is_err()); // no block to close
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## `#[codec(role = "begin" | "change" | "end" | "abort")]`, and `#[codec(xid)]`, `#[codec(subxid)]` on a field
//!
//! What the message does to the transaction it belongs to (see
//! [`TransactionRole`](crate::TransactionRole)), and which field names that transaction
//! (an `Xid` or an `Option<Xid>`; `subxid` for a subtransaction's: the one a Stream
//! Abort drops, or the one a change inside a stream block was made in, as pgoutput's
//! changes mark their xid). The [`Follower`](crate::Follower) reads them to number
//! transactions, changes and stream blocks, and so do the test server's and the proxy's
//! fault rules (`"change m of transaction k"`) and the client's whole transactions (a
//! subtransaction's abort drops the changes made in it): a message type of your own is
//! counted like pgoutput's.
//!
//! ```
//! use pgoutput_codec::{Decode, Decoder, Encode, Follower, ProtocolVersion, Streaming, Tagged, Xid};
//!
//! #[derive(Debug, PartialEq, Decode, Encode, Tagged)]
//! #[codec(tag = b'<', role = "begin")]
//! struct Open { #[codec(xid)] xid: Xid }
//!
//! #[derive(Debug, PartialEq, Decode, Encode, Tagged)]
//! #[codec(tag = b'*', role = "change")]
//! struct Tick { n: u32 }
//!
//! #[derive(Debug, PartialEq, Decode, Encode, Tagged)]
//! #[codec(tag = b'>', role = "end")]
//! struct Close;
//!
//! #[derive(Debug, PartialEq, Decode, Encode, Tagged)]
//! enum Batch { Open(Open), Tick(Tick), Close(Close) }
//!
//! let mut decoder = Decoder::new(ProtocolVersion::V1, Streaming::Off)?;
//! let mut follower = Follower::default();
//! follower.follow(&decoder.decode_as::<Batch>(b"<\0\0\x02\xee")?);
//! let tick = follower.follow(&decoder.decode_as::<Batch>(b"*\0\0\0\x07")?);
//! assert_eq!((tick.transaction, tick.change), (Some(1), Some(1)));
//! assert_eq!(follower.xid(), Some(Xid(750)));
//! assert!(follower.follow(&decoder.decode_as::<Batch>(b">")?).ends);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## `#[codec(transaction_end_lsn)]`, `#[codec(decision_lsn)]` on a field
//!
//! The positions of the transaction a message ends or decides (an `Lsn` or an
//! `Option<Lsn>`): `transaction_end_lsn` is the end a consumer confirms once it has the
//! whole transaction (Commit's `end_lsn`), `decision_lsn` where the record that decides it
//! starts (Begin's `final_lsn`, Commit's `commit_lsn`). [`Tagged`](crate::Tagged) gives
//! them, and so does the message's [`Outline`](crate::Outline):
//! [`Decoder::outline`](crate::Decoder::outline) reads a message's tag and its fields up to
//! the last one these attributes, `xid` and `subxid` mark, and no further, which is how
//! the proxy knows each frame it forwards without reading its row.
//!
//! ```
//! use pgoutput_codec::{Decode, Decoder, Encode, Lsn, ProtocolVersion, Streaming, Tagged};
//!
//! #[derive(Debug, PartialEq, Decode, Encode, Tagged)]
//! #[codec(tag = b'>', role = "end")]
//! struct Close {
//!     #[codec(transaction_end_lsn)]
//!     end: Lsn,
//!     note: u32,
//! }
//!
//! let mut decoder = Decoder::new(ProtocolVersion::V1, Streaming::Off)?;
//! // The outline stops after `end`: the note (cut short here) is not read.
//! let outline = decoder.outline_as::<Close>(b">\0\0\0\0\0\0\x01\0\0")?;
//! assert_eq!(outline.transaction_end_lsn(), Some(Lsn(0x100)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## `#[codec(crate = "path")]`
//!
//! Where the runtime crate is, when your `Cargo.toml` renames it
//! (`codec = { package = "pgoutput-codec", … }` → `#[codec(crate = "::codec")]`).
//!
//! ```
//! # extern crate pgoutput_codec as codec;
//! use codec::{Decode, Encode, Lsn};
//!
//! #[derive(Decode, Encode)]
//! #[codec(tag = b'H', crate = "::codec")]
//! struct Heartbeat {
//!     lsn: Lsn,
//! }
//! ```
//!
//! # On an enum variant
//!
//! ## `#[codec(tag = b'x')]`, or none for a newtype around a tagged type
//!
//! An enum is a tagged union: each variant has its own tag byte and fields, or wraps a
//! `Tagged` type and takes its tags (a dispatch enum). Two variants may not share a byte;
//! for wrapped types that is checked when the program is compiled.
//!
//! ```
//! use pgoutput_codec::{decode, Ctx, Decode, Encode, Lsn, PgOutputMessage, ProtocolVersion, Tagged};
//!
//! #[derive(Debug, PartialEq, Decode, Encode, Tagged)]
//! #[codec(tag = b'H')]
//! struct Heartbeat { lsn: Lsn }
//!
//! #[derive(Debug, PartialEq, Decode, Encode, Tagged)]
//! enum Extended<'a> {
//!     PgOutput(PgOutputMessage<'a>),
//!     Heartbeat(Heartbeat),
//!     #[codec(tag = b'!')]
//!     Ping,
//! }
//!
//! let ctx = Ctx::plain(ProtocolVersion::V1);
//! assert_eq!(decode::<Extended<'_>>(b"!", ctx)?, Extended::Ping);
//! assert!(matches!(decode::<Extended<'_>>(b"E", ctx)?, Extended::PgOutput(_)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # On a field
//!
//! A field without attributes is its type's own encoding (`u8` to `u64`, `i16` to `i64`,
//! `bool` as an Int8, [`Lsn`](crate::Lsn), [`Xid`](crate::Xid), [`PgStr`](crate::PgStr) as
//! a NUL-terminated string, or any type that derives the traits).
//!
//! ## `#[codec(len = i32)]` (or `u8`, `u16`, `i16`, `u32`)
//!
//! A byte count of that integer type, then the bytes, on a `PgBytes<'a>`, `Cow<'a, [u8]>`
//! or `Vec<u8>` field. A negative count, or one larger than the bytes left, is a decode
//! error; encoding more bytes than the type can count is an encode error.
//!
//! ## `#[codec(rest)]`
//!
//! Every byte left in the message, on the last field (a byte type as for `len`).
//!
//! ## `#[codec(count = u16)]`, `#[codec(count = u32, count_before = field)]`
//!
//! A `Vec<T>` or a [`Seq<'a, T>`](crate::Seq) preceded by its element count (`u8`, `u16`,
//! `i16`, `u32` or `i32`), or with the count placed before an earlier `field` (Truncate
//! puts its relation count before its options byte). The count is checked against the
//! bytes left before anything is read. A `Seq` decodes without allocating: the elements
//! are checked once and read again from the input when iterated, both times with a
//! decoding the derive generates that builds no errors (pgoutput's tuples,
//! Relation columns and Truncate OIDs are `Seq`s); a `Vec` collects them.
//!
//! ```
//! use pgoutput_codec::{decode, encode, Ctx, Decode, Encode, PgBytes, ProtocolVersion, Tagged};
//!
//! #[derive(Debug, PartialEq, Decode, Encode, Tagged)]
//! #[codec(tag = b'L')]
//! struct Blobs<'a> {
//!     #[codec(count = u16)]
//!     parts: Vec<Part<'a>>,
//!     #[codec(count = u8)]
//!     tags: pgoutput_codec::Seq<'a, u16>,
//!     #[codec(rest)]
//!     trailer: PgBytes<'a>,
//! }
//!
//! #[derive(Debug, Clone, PartialEq, Decode, Encode)]
//! struct Part<'a> {
//!     #[codec(len = u8)]
//!     data: PgBytes<'a>,
//! }
//!
//! let ctx = Ctx::plain(ProtocolVersion::V1);
//! let bytes = b"L\0\x02\x01a\x02bc\x02\0\x07\0\x09xyz";
//! let blobs: Blobs<'_> = decode(bytes, ctx)?;
//! assert_eq!(blobs.parts.len(), 2);
//! assert_eq!(blobs.tags.iter().collect::<Vec<u16>>(), [7, 9]);
//! assert_eq!(&*blobs.trailer, b"xyz");
//! assert_eq!(encode(&blobs, ctx)?, bytes);
//! // A count of 65535 parts in 6 bytes is refused before anything is allocated.
//! assert!(decode::<Blobs<'_>>(b"L\xff\xffabc", ctx).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## `#[since(version = N)]`, `#[since(version = N, when = "streamed" | "parallel")]`
//!
//! An `Option<T>` field on the wire only from protocol version `N` (1 to 4) on, and only
//! when the condition holds: `streamed` inside a Stream Start/Stop block, `parallel` with
//! `streaming 'parallel'` (which needs `N` = 4). Decoding gives `None` where it is absent;
//! encoding a `Some` where it cannot be carried, or a `None` where it must be, is an error.
//!
//! ```
//! use pgoutput_codec::{decode, encode, Ctx, Decode, Encode, Lsn, ProtocolVersion, Tagged, Xid};
//!
//! #[derive(Debug, PartialEq, Decode, Encode, Tagged)]
//! #[codec(tag = b'Q')]
//! struct Audit {
//!     lsn: Lsn,
//!     #[since(version = 3)]
//!     xid: Option<Xid>,
//! }
//!
//! let v2 = Ctx::plain(ProtocolVersion::V2);
//! let v3 = Ctx::plain(ProtocolVersion::V3);
//! let audit = Audit { lsn: Lsn(1), xid: Some(Xid(9)) };
//! assert_eq!(encode(&audit, v3)?.len(), 1 + 8 + 4);
//! assert!(encode(&audit, v2).is_err()); // protocol 2 cannot carry the xid
//! let old = encode(&Audit { lsn: Lsn(1), xid: None }, v2)?;
//! assert_eq!(decode::<Audit>(&old, v2)?.xid, None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## `#[codec(optional)]`
//!
//! An `Option<T>` of a `Tagged` type that is there when the next byte is one of `T`'s
//! tags (pgoutput's old-key tuple of an Update, `'K'` or `'O'`).
//!
//! ## `#[codec(marker = b'N')]`
//!
//! A constant byte right before the field (the `'N'` before an Insert's new tuple).
//!
//! ## `#[codec(expect = 0)]`
//!
//! An unsigned integer field that always holds this value (flags PostgreSQL leaves
//! unused): another value is a decode error naming the field, and an encode error.
//!
//! ```
//! use pgoutput_codec::{decode, Ctx, Decode, Encode, Lsn, ProtocolVersion, Tagged, TupleData};
//!
//! #[derive(Debug, PartialEq, Decode, Encode, Tagged)]
//! #[codec(tag = b'W')]
//! struct Write<'a> {
//!     #[codec(expect = 0)]
//!     flags: u8,
//!     #[codec(optional)]
//!     old: Option<pgoutput_codec::OldTuple<'a>>,
//!     #[codec(marker = b'N')]
//!     new: TupleData<'a>,
//! }
//!
//! let ctx = Ctx::plain(ProtocolVersion::V1);
//! let write: Write<'_> = decode(b"W\0N\0\0", ctx)?;
//! assert!(write.old.is_none());
//! assert!(decode::<Write<'_>>(b"W\x01N\0\0", ctx).is_err()); // flags must be 0
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Mistakes
//!
//! Every misuse is a compile error at the attribute or field to fix, all reported at once:
//! unknown keys, conflicting shapes (`len` with `rest`), `rest` not last, `count` on a
//! non-`Vec`, an `Option` field that says neither `#[since]` nor `optional`, `parallel`
//! before protocol 4, duplicate tags (naming the byte), generic types. When the input has
//! errors the derive still emits a stand-in impl, so the errors above are the only ones.
