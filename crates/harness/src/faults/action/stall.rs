//! `stall`: the server stops writing and reading with the socket left open, for `ms`
//! milliseconds or for good: a half-dead peer, which only the client's own timeout (or
//! TCP keepalives) can find.

use std::time::Duration;

use super::Effect;

/// The command line's help: the rule's JSON and what it does.
pub(super) const HELP: &str =
    r#"{"do": "stall", "ms": 5000}   stop reading and writing (no "ms": for good)"#;

pub(super) fn effect(ms: Option<u64>) -> Effect {
    Effect::Pause(ms.map(Duration::from_millis))
}
