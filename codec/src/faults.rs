//! Fault rules: at an exact protocol event (*when*), something goes wrong (*what*), so a
//! test can make a consumer meet the failures it breaks on, on cue: a connection dropped
//! after the third Insert of transaction 5, a reset after byte 7 of a CopyData frame, a
//! walsender that stops answering, an ERROR a real server sends, a crash that re-sends
//! what the consumer already confirmed.
//!
//! The rules look at the frames a connection sends, whatever produced them (the test
//! server's renderer, or a real PostgreSQL behind the proxy): each frame's meaning
//! (message type, transaction number, change number, stream block) comes from the typed
//! message through a [`Tracker`], one per streaming connection. The connection
//! asks the [`Plan`] (shared by every connection) before and after each frame; a rule that
//! matches is claimed there, so that a rule with `times: 1` fires once in the whole
//! server, whichever connection gets there first.
//!
//! A rule in JSON (the same in `--config`'s `"faults"` and the control API):
//!
//! ```json
//! {"when": {"on": "change", "transaction": 5, "after": 3},
//!  "then": {"do": "close"}, "slot": "s", "times": 1}
//! ```

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::follow::{Follower, Place};
use crate::wire::error::{error, slot_in_use, slot_invalidated, sqlstate, SqlError};
use crate::{Lsn, PgOutputMessage, Tagged, Xid};

/// A rule: when [`Trigger`] happens on a connection in scope, [`Action`] is done, at most
/// `times` times over the server's life (once unless told; 0: every time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// The protocol event.
    pub when: Trigger,
    /// What goes wrong then.
    pub then: Action,
    /// Only connections streaming from this slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    /// Only connections with this `application_name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_name: Option<String>,
    /// Only the n-th START_REPLICATION (1-based) of the slot, or of the server when no
    /// slot is named: "the second time the consumer connects".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<u64>,
    /// How many times the rule fires (0: every time it matches).
    #[serde(default = "once")]
    pub times: u64,
}

fn once() -> u64 {
    1
}

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
/// use pgoutput_codec::server::MessageKind;
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
    /// [`Insert`](crate::Insert)).
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
    pub fn of_message(message: &PgOutputMessage<'_>) -> MessageKind {
        MessageKind(message.tag())
    }

    /// Its name in JSON.
    #[must_use]
    pub fn name(self) -> &'static str {
        self.entry().map_or("unknown", |(name, _)| name)
    }

    fn entry(self) -> Option<&'static (&'static str, crate::TagSet)> {
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

/// What goes wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Action {
    /// Close the connection (FIN), with nothing more sent.
    Close,
    /// Reset the connection (RST).
    Reset,
    /// Stop writing and reading, the socket left open (a half-dead peer): for `ms`
    /// milliseconds, or for good.
    Stall {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ms: Option<u64>,
    },
    /// Send an ErrorResponse with SQLSTATE `code`: FATAL for the 57P0x codes, then the
    /// connection closes; ERROR otherwise, then ReadyForQuery, as a walsender goes back
    /// to its command loop. The message defaults to PostgreSQL's wording for 57P01,
    /// 55000, 55006, 53100 and XX000; other codes need one.
    Error {
        code: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// PostgreSQL's shutdown of a walsender (`WalSndDone`): what is left is sent, then
    /// keepalives asking for a reply until the client's flush position reaches what was
    /// sent, then CommandComplete and the connection closes. A client that never
    /// confirms holds it (until `wal_sender_timeout`), as in PostgreSQL.
    Shutdown,
    /// A keepalive asking for a reply, now.
    RequestReply,
    /// From now on, delay each message by `delay_ms`, or send at most `bytes_per_second`.
    Slow {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delay_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bytes_per_second: Option<u64>,
    },
    /// A server crash: every connection is dropped and every slot goes back to the
    /// position its last checkpoint persisted, so transactions a consumer confirmed since
    /// are sent again.
    Crash,
}

impl Action {
    /// An ErrorResponse with SQLSTATE `code` in PostgreSQL's words (see
    /// [`Action::Error`] for the codes it knows).
    #[must_use]
    pub fn error(code: &str) -> Action {
        Action::Error {
            code: code.to_owned(),
            message: None,
        }
    }
}

/// A fault rule that cannot work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultError(pub String);

impl fmt::Display for FaultError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FaultError {}

impl Fault {
    /// A rule doing `then` once when `when` happens, on any connection.
    #[must_use]
    pub fn new(when: Trigger, then: Action) -> Fault {
        Fault {
            when,
            then,
            slot: None,
            application_name: None,
            connection: None,
            times: 1,
        }
    }

    /// Only on connections streaming from `slot`.
    #[must_use]
    pub fn slot(mut self, slot: &str) -> Fault {
        self.slot = Some(slot.to_owned());
        self
    }

    /// Only on connections with this `application_name`.
    #[must_use]
    pub fn application_name(mut self, name: &str) -> Fault {
        self.application_name = Some(name.to_owned());
        self
    }

    /// Only on the n-th START_REPLICATION (1-based) of the slot (or of the server).
    #[must_use]
    pub fn connection(mut self, n: u64) -> Fault {
        self.connection = Some(n);
        self
    }

    /// Fires at most `times` times (0: every time).
    #[must_use]
    pub fn times(mut self, times: u64) -> Fault {
        self.times = times;
        self
    }

    /// Whether the rule can work.
    ///
    /// # Errors
    ///
    /// A count of 0, an action its trigger does not allow, a malformed SQLSTATE, or one
    /// with no known wording and no message.
    pub fn check(&self) -> Result<(), FaultError> {
        let bad = |text: String| Err(FaultError(text));
        match &self.when {
            Trigger::Message { n: 0, .. } => return bad("message n counts from 1".into()),
            Trigger::Message {
                before: true,
                byte: Some(_),
                ..
            } => return bad("a message trigger is `before` or at a `byte`, not both".into()),
            Trigger::Message { byte: Some(0), .. } => {
                return bad("byte counts from 1 (for none, use before: true)".into())
            }
            Trigger::Commit { transaction: 0 }
            | Trigger::Change { transaction: 0, .. }
            | Trigger::StreamBlock { transaction: 0, .. } => {
                return bad("transaction counts from 1".into())
            }
            Trigger::StreamBlock { block: 0, .. } => return bad("block counts from 1".into()),
            Trigger::Connect { attempt: 0 } => return bad("attempt counts from 1".into()),
            _ => {}
        }
        if self.connection == Some(0) {
            return bad("connection counts from 1".into());
        }
        if let Trigger::Connect { .. } = self.when {
            if !matches!(
                self.then,
                Action::Close
                    | Action::Reset
                    | Action::Stall { .. }
                    | Action::Error { .. }
                    | Action::Crash
            ) {
                return bad(format!(
                    "{:?} needs a streaming connection; on connect only close, reset, stall, error and crash work",
                    self.then
                ));
            }
            if self.slot.is_some() || self.application_name.is_some() || self.connection.is_some() {
                return bad("a connect trigger comes before the slot and application_name are known: no slot, application_name or connection scope".into());
            }
        }
        match &self.then {
            Action::Error { code, message } => {
                if code.len() != 5 || !code.bytes().all(|b| b.is_ascii_alphanumeric()) {
                    return bad(format!("SQLSTATE {code:?} is not five letters or digits"));
                }
                if message.is_none() && default_message(code).is_none() {
                    return bad(format!(
                        "no default message for SQLSTATE {code} (there are for 57P01, 55000, 55006, 53100, XX000): give one"
                    ));
                }
            }
            Action::Slow {
                delay_ms,
                bytes_per_second,
            } => match (delay_ms, bytes_per_second) {
                (Some(_), None) | (None, Some(1..)) => {}
                _ => return bad("slow takes one of delay_ms and bytes_per_second (above 0)".into()),
            },
            _ => {}
        }
        Ok(())
    }
}

/// Which default wording an [`Action::Error`] gets (`None`: a message must be given).
pub(crate) fn default_message(code: &str) -> Option<ErrorWording> {
    Some(match code {
        sqlstate::ADMIN_SHUTDOWN => ErrorWording::AdminShutdown,
        sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE => ErrorWording::SlotInvalidated,
        sqlstate::OBJECT_IN_USE => ErrorWording::SlotActive,
        sqlstate::DISK_FULL => ErrorWording::DiskFull,
        sqlstate::INTERNAL_ERROR => ErrorWording::Internal,
        _ => return None,
    })
}

/// PostgreSQL's wording for the errors a walsender is known to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorWording {
    /// `terminating connection due to administrator command` (FATAL, `ProcessInterrupts`).
    AdminShutdown,
    /// The invalidated slot's ERROR, as START_REPLICATION gets it
    /// (`StartLogicalReplication`, or from 18 on `ReplicationSlotAcquire`).
    SlotInvalidated,
    /// `replication slot "…" is active for PID …` (`ReplicationSlotAcquire`).
    SlotActive,
    /// The reorder buffer's spill file on a full disk (`ReorderBufferSerializeChange`).
    DiskFull,
    /// A decoding failure (`XLogSendLogical`).
    Internal,
}

/// An `error` action's ErrorResponse: the rule's message, or PostgreSQL's wording for
/// the known codes (about `slot`, in transaction `xid`).
pub(crate) fn error_for(
    code: &str,
    message: Option<String>,
    slot: &str,
    major: u32,
    xid: u32,
) -> SqlError {
    let wording = match (message, default_message(code)) {
        (Some(message), _) => {
            return SqlError {
                code: code.to_owned().into(),
                message,
                detail: None,
                hint: None,
            }
        }
        (None, Some(wording)) => wording,
        // Refused when the rule is added.
        (None, None) => return error(sqlstate::INTERNAL_ERROR, format!("fault {code}")),
    };
    match wording {
        ErrorWording::AdminShutdown => error(
            sqlstate::ADMIN_SHUTDOWN,
            "terminating connection due to administrator command",
        ),
        ErrorWording::SlotInvalidated => slot_invalidated(slot, major),
        // The process id of a walsender that is not one of ours.
        ErrorWording::SlotActive => slot_in_use(slot, 0),
        ErrorWording::DiskFull => error(
            sqlstate::DISK_FULL,
            format!("could not write to data file for XID {xid}: No space left on device"),
        ),
        ErrorWording::Internal => error(
            sqlstate::INTERNAL_ERROR,
            "could not find record while sending logically-decoded data: missing contrecord",
        ),
    }
}

/// Where in a frame a rule fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Point {
    /// Before the frame is written.
    Before,
    /// After its first `n` bytes.
    Within(usize),
    /// After the whole frame.
    After,
}

/// What one frame means, in the counts the triggers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Facts {
    pub kind: MessageKind,
    /// The message's number on the connection, and among messages of its kind.
    pub number: u64,
    pub number_of_kind: u64,
    /// Its transaction, change and block.
    pub place: Place,
}

/// Counts the messages a connection sends, by kind, and follows their transactions:
/// what the triggers count.
#[derive(Debug)]
pub(crate) struct Tracker {
    messages: u64,
    /// Messages sent by kind, indexed by their tag byte.
    by_kind: [u64; 256],
    follower: Follower,
}

impl Default for Tracker {
    fn default() -> Tracker {
        Tracker {
            messages: 0,
            by_kind: [0; 256],
            follower: Follower::default(),
        }
    }
}

impl Tracker {
    /// Counts `message` as sent, and says what it was.
    pub(crate) fn frame(&mut self, message: &PgOutputMessage<'_>) -> Facts {
        self.messages += 1;
        let of_kind = &mut self.by_kind[usize::from(message.tag())];
        *of_kind += 1;
        Facts {
            kind: MessageKind::of_message(message),
            number: self.messages,
            number_of_kind: *of_kind,
            place: self.follower.follow(message),
        }
    }

    /// Whether no transaction is open on the connection.
    pub(crate) fn idle(&self) -> bool {
        self.follower.idle()
    }

    /// The xid of the last transaction begun (for error wordings that name it).
    pub(crate) fn xid(&self) -> Xid {
        self.follower.xid().unwrap_or(Xid(0))
    }
}

/// Whether `trigger` fires at `point` of a frame with `facts`.
pub(crate) fn frame_matches(trigger: &Trigger, point: Point, facts: &Facts) -> bool {
    match *trigger {
        Trigger::Message {
            n,
            kind,
            before,
            byte,
        } => {
            let number = match kind {
                Some(kind) if facts.kind != kind => return false,
                Some(_) => facts.number_of_kind,
                None => facts.number,
            };
            let at = match (before, byte) {
                (true, _) => Point::Before,
                (false, Some(b)) => Point::Within(b),
                (false, None) => Point::After,
            };
            number == n && at == point
        }
        Trigger::Commit { transaction } => {
            point == Point::After
                && facts.place.ends
                && facts.place.transaction == Some(transaction)
        }
        Trigger::Change { transaction, after } => {
            point == Point::After
                && facts.place.transaction == Some(transaction)
                && if after == 0 {
                    facts.place.opens
                } else {
                    facts.place.change == Some(after)
                }
        }
        Trigger::StreamBlock { transaction, block } => {
            point == Point::After
                && facts.place.transaction == Some(transaction)
                && facts.place.block == Some(block)
        }
        Trigger::Time { .. } | Trigger::Flush { .. } | Trigger::Connect { .. } => false,
    }
}

/// Who a connection is, for the rules' scopes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scope {
    pub slot: Option<String>,
    pub application_name: String,
    /// The connection's START_REPLICATION number for its slot, and for the server.
    pub of_slot: u64,
    pub of_server: u64,
}

impl Fault {
    fn in_scope(&self, scope: &Scope) -> bool {
        if let Some(slot) = &self.slot {
            if scope.slot.as_deref() != Some(slot.as_str()) {
                return false;
            }
        }
        if let Some(name) = &self.application_name {
            if *name != scope.application_name {
                return false;
            }
        }
        match self.connection {
            Some(n) if self.slot.is_some() => scope.of_slot == n,
            Some(n) => scope.of_server == n,
            None => true,
        }
    }
}

#[derive(Debug)]
struct Rule {
    fault: Fault,
    fired: u64,
}

/// The server's rules, with how often each has fired.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    rules: Mutex<Vec<Rule>>,
    /// Whether there are rules at all: checked on every frame without the lock.
    armed: AtomicBool,
}

impl Plan {
    pub(crate) fn add(&self, fault: Fault) {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        rules.push(Rule { fault, fired: 0 });
        self.armed.store(true, Ordering::SeqCst);
    }

    pub(crate) fn clear(&self) {
        self.rules.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.armed.store(false, Ordering::SeqCst);
    }

    pub(crate) fn faults(&self) -> Vec<(Fault, u64)> {
        self.rules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|r| (r.fault.clone(), r.fired))
            .collect()
    }

    pub(crate) fn armed(&self) -> bool {
        self.armed.load(Ordering::Relaxed)
    }

    /// The actions of the rules in `scope` that `matches` picks, each claimed (its
    /// firing counted) before it is returned, in the order the rules were added.
    pub(crate) fn fire(
        &self,
        scope: Option<&Scope>,
        mut matches: impl FnMut(&Trigger) -> bool,
    ) -> Vec<(Trigger, Action)> {
        if !self.armed() {
            return Vec::new();
        }
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let mut actions = Vec::new();
        for rule in rules.iter_mut() {
            let left = rule.fault.times == 0 || rule.fired < rule.fault.times;
            let scoped = match scope {
                Some(scope) => rule.fault.in_scope(scope),
                None => true,
            };
            if left && scoped && matches(&rule.fault.when) {
                rule.fired += 1;
                actions.push((rule.fault.when.clone(), rule.fault.then.clone()));
            }
        }
        actions
    }

    /// The earliest `Time` trigger for `scope` after `after_ms` (each connection fires a
    /// time rule once, when its clock passes it), in ms after the start.
    pub(crate) fn next_time(&self, scope: &Scope, after_ms: Option<u64>) -> Option<u64> {
        if !self.armed() {
            return None;
        }
        let rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        rules
            .iter()
            .filter(|r| r.fault.times == 0 || r.fired < r.fault.times)
            .filter(|r| r.fault.in_scope(scope))
            .filter_map(|r| match r.fault.when {
                Trigger::Time { ms } if after_ms.is_none_or(|after| ms > after) => Some(ms),
                _ => None,
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Begin, Commit, Insert, Lsn, PgTimestamp, TupleData};

    fn begin() -> PgOutputMessage<'static> {
        PgOutputMessage::Begin(Begin {
            final_lsn: Lsn(0x100),
            commit_timestamp: PgTimestamp(0),
            xid: Xid(750),
        })
    }

    fn insert() -> PgOutputMessage<'static> {
        PgOutputMessage::Insert(Insert {
            xid: None,
            relation_oid: crate::Oid(16385),
            new_tuple: TupleData::default(),
        })
    }

    fn commit() -> PgOutputMessage<'static> {
        PgOutputMessage::Commit(Commit {
            flags: 0,
            commit_lsn: Lsn(0x100),
            end_lsn: Lsn(0x148),
            commit_timestamp: PgTimestamp(0),
        })
    }

    #[test]
    fn frames_are_counted_on_the_connection_and_by_kind() {
        let mut tracker = Tracker::default();
        let facts: Vec<Facts> = [begin(), insert(), insert(), commit(), begin(), insert()]
            .iter()
            .map(|m| tracker.frame(m))
            .collect();
        assert_eq!(facts[5].number, 6);
        assert_eq!(facts[5].number_of_kind, 3);
        assert_eq!(facts[5].kind, MessageKind::of::<Insert<'_>>());
        assert_eq!(
            (facts[5].place.transaction, facts[5].place.change),
            (Some(2), Some(1))
        );
        assert!(facts[3].place.ends);
        assert_eq!(tracker.xid(), Xid(750));
    }

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

    #[test]
    fn triggers_match_at_their_point() {
        let mut tracker = Tracker::default();
        tracker.frame(&begin());
        // A frame's facts are read before it is written: `before` rules see them too.
        let facts = tracker.frame(&insert());
        let third = Trigger::before_message(2);
        assert!(frame_matches(&third, Point::Before, &facts));
        assert!(!frame_matches(&third, Point::After, &facts));
        let change = Trigger::Change {
            transaction: 1,
            after: 1,
        };
        assert!(frame_matches(&change, Point::After, &facts));
        let first_insert = Trigger::Message {
            n: 1,
            kind: Some(MessageKind::of::<Insert<'_>>()),
            before: false,
            byte: Some(9),
        };
        assert!(frame_matches(&first_insert, Point::Within(9), &facts));
        assert!(!frame_matches(&first_insert, Point::After, &facts));
    }

    #[test]
    fn a_rule_fires_as_often_as_it_may_in_its_scope() {
        let plan = Plan::default();
        assert!(plan.fire(None, |_| true).is_empty());
        plan.add(Fault::new(Trigger::Commit { transaction: 1 }, Action::Close).slot("a"));
        plan.add(Fault::new(Trigger::Commit { transaction: 1 }, Action::Reset).times(0));
        let a = Scope {
            slot: Some("a".into()),
            ..Scope::default()
        };
        let b = Scope {
            slot: Some("b".into()),
            ..Scope::default()
        };
        let fire = |scope: &Scope| -> Vec<Action> {
            plan.fire(Some(scope), |_| true)
                .into_iter()
                .map(|(_, action)| action)
                .collect()
        };
        assert_eq!(fire(&b), vec![Action::Reset]);
        assert_eq!(fire(&a), vec![Action::Close, Action::Reset]);
        assert_eq!(fire(&a), vec![Action::Reset]);
        assert_eq!(plan.faults()[0].1, 1);
        assert_eq!(plan.faults()[1].1, 3);
    }

    #[test]
    fn rules_read_from_json_and_checked() {
        let fault: Fault = serde_json::from_str(
            r#"{"when": {"on": "change", "transaction": 5, "after": 3}, "then": {"do": "close"}, "slot": "s"}"#,
        )
        .unwrap();
        assert_eq!(
            fault,
            Fault::new(
                Trigger::Change {
                    transaction: 5,
                    after: 3
                },
                Action::Close
            )
            .slot("s")
        );
        assert_eq!(fault.check(), Ok(()));
        let json = serde_json::to_string(&fault).unwrap();
        assert_eq!(serde_json::from_str::<Fault>(&json).unwrap(), fault);
        let mid_frame: Fault = serde_json::from_str(
            r#"{"when": {"on": "message", "n": 4, "kind": "insert", "byte": 7}, "then": {"do": "reset"}, "times": 0}"#,
        )
        .unwrap();
        assert_eq!(mid_frame.times, 0);
        assert_eq!(mid_frame.check(), Ok(()));
        let unknown = serde_json::from_str::<Fault>(
            r#"{"when": {"on": "commit", "transaction": 1}, "then": {"do": "explode"}}"#,
        );
        assert!(unknown
            .unwrap_err()
            .to_string()
            .contains("unknown variant `explode`"));
        let no_message = Fault::new(Trigger::Time { ms: 10 }, Action::error("42P01"));
        assert!(no_message
            .check()
            .unwrap_err()
            .0
            .contains("no default message"));
        let on_connect = Fault::new(Trigger::Connect { attempt: 1 }, Action::RequestReply);
        assert!(on_connect
            .check()
            .unwrap_err()
            .0
            .contains("on connect only"));
        let zero = Fault::new(Trigger::Commit { transaction: 0 }, Action::Close);
        assert!(zero.check().is_err());
    }
}
