//! `crash`: the server crashes and restarts: every connection is cut, and every slot
//! goes back to the position its last checkpoint persisted, so what a consumer confirmed
//! since is sent again.

use super::{Effect, End};

/// The command line's help: the rule's JSON and what it does.
pub(super) const HELP: &str =
    r#"{"do": "crash"}   drop every connection; slots back to their last checkpoint"#;

pub(super) fn effect() -> Effect {
    Effect::End(End::Crash)
}
