//! `request_reply`: a primary keepalive asking for a reply, now, as a walsender sends one
//! at half of `wal_sender_timeout`.

use super::Effect;

pub(super) fn effect() -> Effect {
    Effect::RequestReply
}
