//! `close`: the connection closes (FIN) at the rule's point, with nothing more sent, as
//! when a walsender exits or a middlebox closes an idle connection.

use super::{Effect, End};

pub(super) fn effect() -> Effect {
    Effect::End(End::Fin)
}
