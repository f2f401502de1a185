//! `close`: the connection closes (FIN) at the rule's point, with nothing more sent, as
//! when a walsender exits or a middlebox closes an idle connection.

use super::{Effect, End};

/// The command line's help: the rule's JSON and what it does.
pub(super) const HELP: &str = r#"{"do": "close"}   FIN"#;

pub(super) fn effect() -> Effect {
    Effect::End(End::Fin)
}
