//! `crash`: the server crashes and restarts: every connection is cut, and every slot
//! goes back to the position its last checkpoint persisted, so what a consumer confirmed
//! since is sent again.

use super::{Effect, End};

pub(super) fn effect() -> Effect {
    Effect::End(End::Crash)
}
