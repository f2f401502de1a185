//! `request_reply`: a primary keepalive asking for a reply, now, as a walsender sends one
//! at half of `wal_sender_timeout`.

use super::Effect;

/// The command line's help: the rule's JSON and what it does.
pub(super) const HELP: &str =
    r#"{"do": "request_reply"}   a keepalive asking for a reply now (not at a byte)"#;

pub(super) fn effect() -> Effect {
    Effect::RequestReply
}
