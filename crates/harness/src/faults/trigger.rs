//! When a rule fires: the protocol events, and the message kinds they name.

use std::fmt;

use serde::{Deserialize, Serialize};

use pgoutput_codec::{Lsn, PgOutputMessage, Tagged};

/// The protocol event a rule waits for. Messages, transactions, changes and blocks are
/// counted from 1 on each streaming connection, over the pgoutput messages it sends
/// (keepalives are not counted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "on", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Trigger {
    /// The n-th message (of `kind`, when given): after it is sent, or `before` it, or
    /// after the first `byte` bytes of its CopyData frame (mid-frame; the frame's 5-byte
    /// header and 25-byte XLogData header count).
    Message {
        n: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<MessageKind>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        before: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        byte: Option<usize>,
    },
    /// After the end of the k-th transaction sent (its Commit, Stream Commit, Prepare,
    /// Stream Prepare, Commit Prepared or Rollback Prepared).
    Commit { transaction: u64 },
    /// Inside the k-th transaction sent (counted by Begin, Begin Prepare or first Stream
    /// Start), after `after` of its changes (0: right after its Begin).
    Change { transaction: u64, after: u64 },
    /// Inside the k-th transaction's n-th stream block, right after its Stream Start.
    StreamBlock { transaction: u64, block: u64 },
    /// `ms` milliseconds after START_REPLICATION.
    Time { ms: u64 },
    /// When the client confirms a flush position at or past `lsn`.
    Flush { lsn: Lsn },
    /// On the n-th connection the server accepts, before it reads anything.
    Connect { attempt: u64 },
}

impl Trigger {
    /// After the n-th message sent.
    #[must_use]
    pub fn message(n: u64) -> Trigger {
        Trigger::Message {
            n,
            kind: None,
            before: false,
            byte: None,
        }
    }

    /// After the n-th message of `kind`.
    #[must_use]
    pub fn message_of(kind: MessageKind, n: u64) -> Trigger {
        Trigger::Message {
            n,
            kind: Some(kind),
            before: false,
            byte: None,
        }
    }

    /// Before the n-th message.
    #[must_use]
    pub fn before_message(n: u64) -> Trigger {
        Trigger::Message {
            n,
            kind: None,
            before: true,
            byte: None,
        }
    }

    /// After the first `byte` bytes of the n-th message's CopyData frame.
    #[must_use]
    pub fn mid_frame(n: u64, byte: usize) -> Trigger {
        Trigger::Message {
            n,
            kind: None,
            before: false,
            byte: Some(byte),
        }
    }
}

/// A pgoutput message type, for [`Trigger::Message`]'s `kind`: its tag, named in JSON as
/// the message's variant of [`PgOutputMessage`] in snake_case (`"insert"`,
/// `"stream_start"`), as the derive lists them.
///
/// ```
/// use pgoutput_harness::faults::MessageKind;
/// use pgoutput_codec::StreamStart;
///
/// let kind = MessageKind::of::<StreamStart>();
/// assert_eq!(kind.name(), "stream_start");
/// assert_eq!(MessageKind::named("stream_start"), Some(kind));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct MessageKind(u8);

impl MessageKind {
    /// The kind of message type `T` (a message with one tag, such as
    /// [`Insert`](pgoutput_codec::Insert)).
    ///
    /// # Panics
    ///
    /// If `T` is not one of [`PgOutputMessage`]'s message types.
    #[must_use]
    pub fn of<T: Tagged>() -> MessageKind {
        let mut tags = T::TAGS.iter();
        match (tags.next(), tags.next()) {
            (Some(tag), None) if MessageKind(tag).entry().is_some() => MessageKind(tag),
            _ => panic!("{} is not a pgoutput message type", T::NAME),
        }
    }

    /// The kind named `name` (`"insert"`, `"stream_start"`, …).
    #[must_use]
    pub fn named(name: &str) -> Option<MessageKind> {
        PgOutputMessage::KINDS
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, tags)| tags.iter().next())
            .map(MessageKind)
    }

    /// The kind of a message.
    #[must_use]
    pub fn of_message<T: Tagged + ?Sized>(message: &T) -> MessageKind {
        MessageKind(message.tag())
    }

    /// Its name in JSON.
    #[must_use]
    pub fn name(self) -> &'static str {
        self.entry().map_or("unknown", |(name, _)| name)
    }

    fn entry(self) -> Option<&'static (&'static str, pgoutput_codec::TagSet)> {
        PgOutputMessage::KINDS
            .iter()
            .find(|(_, tags)| tags.contains(self.0))
    }
}

impl fmt::Debug for MessageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for MessageKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for MessageKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<MessageKind, D::Error> {
        let name = String::deserialize(d)?;
        MessageKind::named(&name).ok_or_else(|| {
            let names: Vec<&str> = PgOutputMessage::KINDS.iter().map(|(n, _)| *n).collect();
            serde::de::Error::custom(format!(
                "unknown message kind `{name}`, expected one of: {}",
                names.join(", ")
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_named_as_the_dispatch_enum_names_its_variants() {
        for (name, tags) in PgOutputMessage::KINDS {
            let kind = MessageKind::named(name).unwrap();
            assert!(tags.contains(kind.0));
            assert_eq!(kind.name(), *name);
            assert_eq!(serde_json::to_string(&kind).unwrap(), format!("\"{name}\""));
        }
        assert_eq!(PgOutputMessage::KINDS.len(), 19);
        let err = serde_json::from_str::<MessageKind>("\"insrt\"").unwrap_err();
        assert!(
            err.to_string()
                .contains("unknown message kind `insrt`, expected one of: begin, message, commit"),
            "{err}"
        );
    }
}
