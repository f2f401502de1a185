//! `shutdown`: PostgreSQL's shutdown of a walsender (`WalSndDone`): what is left is sent,
//! then keepalives asking for a reply until the client's flush position reaches what was
//! sent, then CommandComplete and the connection closes.

use super::Effect;
use pgoutput_codec::Lsn;

/// The command line's help: the rule's JSON and what it does.
pub(super) const HELP: &str =
    r#"{"do": "shutdown"}   send the rest, wait for the client to confirm, COPY 0, close"#;

pub(super) fn effect() -> Effect {
    Effect::Shutdown
}

/// Whether the shutdown's wait is over: the client has confirmed what it was `sent`, by
/// its flush position or, where it reports none, its write position (`WalSndDone`'s
/// `replicatedPtr`). PostgreSQL asks for `sentPtr == replicatedPtr`; at or past here,
/// since the proxy's `sent` (what it saw go) can be behind a WAL end the client took
/// from the upstream, and a client confirming more than it was sent would otherwise hold
/// the connection until `wal_sender_timeout`.
pub(crate) fn client_has_all(sent: Lsn, write: Lsn, flush: Lsn) -> bool {
    let replicated = if flush == Lsn(0) { write } else { flush };
    replicated >= sent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flush_position_counts_and_the_write_position_stands_in_for_none() {
        assert!(client_has_all(Lsn(0x20), Lsn(0x10), Lsn(0x20)));
        // A flush behind what was sent holds it, whatever was written.
        assert!(!client_has_all(Lsn(0x20), Lsn(0x30), Lsn(0x10)));
        // No flush position reported: the write position is what was replicated.
        assert!(client_has_all(Lsn(0x20), Lsn(0x20), Lsn(0)));
        assert!(!client_has_all(Lsn(0x20), Lsn(0x10), Lsn(0)));
    }
}
