//! The messages a streaming client was sent, as its record shows them (what it did
//! with them is the judge's: [`crate::judge`]).

use serde::Serialize;

use pgoutput_codec::Lsn;

/// One message a client was sent: its type (the pgoutput tag byte, or `b'k'` for a
/// keepalive) and the WAL position its header carried (a keepalive's WAL end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SentMessage {
    /// The pgoutput tag (`b'B'`, `b'I'`, …), or `b'k'` for a keepalive.
    #[serde(serialize_with = "tag_text")]
    pub tag: u8,
    /// XLogData's `dataStart`, or the keepalive's WAL end.
    pub lsn: Lsn,
}

fn tag_text<S: serde::Serializer>(tag: &u8, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&char::from(*tag))
}

/// A frame sent and not yet told to the judge and the client's record: they hear of
/// frames in batches, at the connection's writes, so a frame costs no lock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unrecorded {
    pub tag: u8,
    pub lsn: Lsn,
    /// What the judge hears of it.
    pub frame: crate::judge::Frame,
}
