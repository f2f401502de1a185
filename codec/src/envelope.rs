//! The streaming-replication envelope: the CopyData payloads around pgoutput messages.
//!
//! The server sends XLogData `'w'` (one pgoutput message each) and Primary keepalive
//! `'k'`; the client answers with Standby status update `'r'` (and, for physical standbys,
//! Hot standby feedback `'h'`). The same tag byte can mean different things at different
//! layers (`'r'` is also Rollback Prepared), so each direction has its own enum.

use crate::{Lsn, PgBytes, PgTimestamp, Xid};

/// XLogData `'w'` (server → client): one pgoutput message with its WAL position.
///
/// For logical replication `wal_start` and `wal_end` are the same value, and 0 for Relation,
/// Type, and a Begin / Begin Prepare / Stream Start that an Origin follows.
///
/// ```
/// use pgoutput_codec::{decode, Ctx, Decoder, PgOutputMessage, ProtocolVersion, Streaming, XLogData};
///
/// let frame = b"w\0\0\0\0\x01\x6b\x37\x48\0\0\0\0\x01\x6b\x37\x48\0\0\0\0\0\0\0\x01E";
/// let xlog: XLogData = decode(frame, Ctx::plain(ProtocolVersion::V1))?;
/// // The payload is borrowed from the frame and goes to the session decoder as it is.
/// let mut decoder = Decoder::with_ctx(
///     Ctx::new(ProtocolVersion::V2, Streaming::On)?.with_in_stream(true)?,
/// );
/// assert!(matches!(decoder.decode(&xlog.data)?, PgOutputMessage::StreamStop(_)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'w')]
pub struct XLogData<'a> {
    /// The starting point of the WAL data in this message.
    pub wal_start: Lsn,
    /// The current end of WAL on the server (for logical replication: the same as
    /// `wal_start`).
    pub wal_end: Lsn,
    /// The server's clock at the time of transmission.
    pub send_time: PgTimestamp,
    /// The pgoutput message.
    #[codec(rest)]
    pub data: PgBytes<'a>,
}

/// Primary keepalive `'k'` (server → client).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    crate::Decode,
    crate::IntoOwned,
    crate::Tagged,
    crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'k')]
pub struct PrimaryKeepalive {
    /// The current end of WAL on the server.
    pub wal_end: Lsn,
    /// The server's clock at the time of transmission.
    pub send_time: PgTimestamp,
    /// Whether the client should reply as soon as possible, to avoid a timeout disconnect.
    pub reply_requested: bool,
}

/// Standby status update `'r'` (client → server). For a logical slot, a non-zero
/// `flush_lsn` advances the slot's confirmed position.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    crate::Decode,
    crate::IntoOwned,
    crate::Tagged,
    crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'r')]
pub struct StandbyStatusUpdate {
    /// The last WAL byte + 1 received and written to disk.
    pub write_lsn: Lsn,
    /// The last WAL byte + 1 flushed to disk.
    pub flush_lsn: Lsn,
    /// The last WAL byte + 1 applied.
    pub apply_lsn: Lsn,
    /// The client's clock at the time of transmission.
    pub send_time: PgTimestamp,
    /// Whether the server should reply at once (with a keepalive).
    pub reply_requested: bool,
}

/// Hot standby feedback `'h'` (client → server; meant for physical standbys).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    crate::Decode,
    crate::IntoOwned,
    crate::Tagged,
    crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[codec(tag = b'h')]
pub struct HotStandbyFeedback {
    /// The client's clock at the time of transmission.
    pub send_time: PgTimestamp,
    /// The standby's current global xmin, excluding catalog_xmin; 0 if none.
    pub xmin: Xid,
    /// The epoch of `xmin`.
    pub xmin_epoch: u32,
    /// The lowest catalog_xmin of any replication slot on the standby; 0 if none.
    pub catalog_xmin: Xid,
    /// The epoch of `catalog_xmin`.
    pub catalog_xmin_epoch: u32,
}

/// What the server sends inside copy-both mode.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "type", rename_all = "snake_case"))]
pub enum ServerMessage<'a> {
    /// `'w'`
    #[cfg_attr(feature = "serde", serde(rename = "xlog_data"))]
    XLogData(XLogData<'a>),
    /// `'k'`
    PrimaryKeepalive(PrimaryKeepalive),
}

/// What the client sends inside copy-both mode.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "type", rename_all = "snake_case"))]
pub enum ClientMessage {
    /// `'r'`
    StandbyStatusUpdate(StandbyStatusUpdate),
    /// `'h'`
    HotStandbyFeedback(HotStandbyFeedback),
}
