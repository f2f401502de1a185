//! The streaming-replication envelope: the CopyData payloads around pgoutput messages.
//!
//! The server sends XLogData `'w'` (one pgoutput message each) and Primary keepalive
//! `'k'`; the client answers with Standby status update `'r'` (and, for physical standbys,
//! Hot standby feedback `'h'`). The same tag byte can mean different things at different
//! layers (`'r'` is also Rollback Prepared), so each direction has its own enum.

use crate::{decode, Ctx, DecodeError, Lsn, PgBytes, PgTimestamp, ProtocolVersion, Xid};

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

impl<'a> XLogData<'a> {
    /// The bytes before the payload: `'w'`, dataStart, walEnd, sendTime.
    pub const HEADER_LEN: usize = 1 + 8 + 8 + 8;

    /// An XLogData frame's `wal_start`, `wal_end` and payload (borrowed from `frame`
    /// itself), in the few reads a relay or a client makes per message rather than the
    /// whole value; what [`decode`] accepts, with its errors.
    ///
    /// # Errors
    ///
    /// As [`decode`]'s: another tag, or a frame shorter than the header.
    pub fn split(frame: &'a [u8]) -> Result<(Lsn, Lsn, &'a [u8]), DecodeError> {
        let position = |at: usize| {
            frame
                .get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map(|b| Lsn(u64::from_be_bytes(b)))
        };
        if let (Some(b'w'), Some(start), Some(end), Some(data)) = (
            frame.first(),
            position(1),
            position(9),
            frame.get(Self::HEADER_LEN..),
        ) {
            return Ok((start, end, data));
        }
        let xlog = decode::<XLogData<'_>>(frame, Ctx::plain(ProtocolVersion::V1))?;
        let data = frame.get(Self::HEADER_LEN..).unwrap_or_default();
        Ok((xlog.wal_start, xlog.wal_end, data))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_reads_what_decode_reads() {
        let frame = b"w\0\0\0\0\x01\x6b\x37\x48\0\0\0\0\x01\x6b\x37\x50\0\0\0\0\0\0\0\x01E";
        let ctx = Ctx::plain(ProtocolVersion::V1);
        let xlog: XLogData<'_> = decode(frame, ctx).unwrap();
        let (start, end, data) = XLogData::split(frame).unwrap();
        assert_eq!(
            (start, end, data),
            (xlog.wal_start, xlog.wal_end, xlog.data.as_bytes())
        );
        assert_eq!(data, b"E");
        // The header alone: an empty payload, as decode has it.
        assert_eq!(XLogData::split(&frame[..25]).unwrap().2, b"");
        // Short, or another tag: decode's own error, offset and all.
        for bad in [&frame[..24], &b"k\0"[..], &b""[..]] {
            assert_eq!(
                XLogData::split(bad).unwrap_err(),
                decode::<XLogData<'_>>(bad, ctx).unwrap_err()
            );
        }
    }
}
