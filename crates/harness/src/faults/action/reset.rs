//! `reset`: the connection is reset (RST) at the rule's point, as by a load balancer or a
//! failover; what the client's kernel had not yet handed over is lost.

use super::{Effect, End};

/// The command line's help: the rule's JSON and what it does.
pub(super) const HELP: &str = r#"{"do": "reset"}   RST"#;

pub(super) fn effect() -> Effect {
    Effect::End(End::Rst)
}
