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

/// PostgreSQL's walsender shutdown (`WalSndDone`) under way, on either side: what is
/// left goes first, then the wait for the client to confirm it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shutdown {
    /// What is left still goes (the test server: the WAL up to its end; the proxy: the
    /// transaction under way).
    Finishing,
    /// All of it has gone: keepalives asking for a reply until the client has it.
    Waiting,
}

/// What a shutdown that is waiting asks next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShutdownStep {
    /// The client has all it was sent: CommandComplete `COPY 0`, then the close.
    Done,
    /// A keepalive asking for a reply.
    Ask,
    /// A request is out: its answer is awaited.
    Await,
}

impl Shutdown {
    /// What is left has gone: the wait begins.
    pub(crate) fn caught_up(&mut self) {
        *self = Shutdown::Waiting;
    }

    /// The next step, once waiting, for a client `sent` this far that reported these
    /// positions, with a request out (`asking`) or not; none while finishing.
    pub(crate) fn next(
        self,
        sent: Lsn,
        write: Lsn,
        flush: Lsn,
        asking: bool,
    ) -> Option<ShutdownStep> {
        Some(match self {
            Shutdown::Finishing => return None,
            Shutdown::Waiting if client_has_all(sent, write, flush) => ShutdownStep::Done,
            Shutdown::Waiting if asking => ShutdownStep::Await,
            Shutdown::Waiting => ShutdownStep::Ask,
        })
    }
}

/// Whether the shutdown's wait is over: the client has confirmed what it was `sent`, by
/// its flush position or, where it reports none, its write position (`WalSndDone`'s
/// `replicatedPtr`). PostgreSQL asks for `sentPtr == replicatedPtr`; at or past here,
/// since the proxy's `sent` (what it saw go) can be behind a WAL end the client took
/// from the upstream, and a client confirming more than it was sent would otherwise hold
/// the connection until `wal_sender_timeout`.
fn client_has_all(sent: Lsn, write: Lsn, flush: Lsn) -> bool {
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

    #[test]
    fn a_shutdown_waits_once_caught_up_and_asks_until_the_client_has_all() {
        let mut shutdown = Shutdown::Finishing;
        assert_eq!(shutdown.next(Lsn(0x20), Lsn(0), Lsn(0x20), false), None);
        shutdown.caught_up();
        let next = |flush, asking| shutdown.next(Lsn(0x20), Lsn(0), flush, asking);
        assert_eq!(next(Lsn(0x10), false), Some(ShutdownStep::Ask));
        assert_eq!(next(Lsn(0x10), true), Some(ShutdownStep::Await));
        assert_eq!(next(Lsn(0x20), true), Some(ShutdownStep::Done));
    }
}
