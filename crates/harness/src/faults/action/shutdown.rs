//! `shutdown`: PostgreSQL's shutdown of a walsender (`WalSndDone`): what is left is sent,
//! then keepalives asking for a reply until the client's flush position reaches what was
//! sent, then CommandComplete and the connection closes.

use super::Effect;

pub(super) fn effect() -> Effect {
    Effect::Shutdown
}
