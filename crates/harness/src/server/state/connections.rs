//! The live connections: how to wake each (its inbox) and how to cut it (its socket),
//! and how many are walsenders.

use std::sync::Arc;

use super::super::inbox::Inbox;
use pgoutput_wire::Socket;

/// The live connections.
#[derive(Default)]
pub(crate) struct Connections {
    /// Each connection's client id, inbox (to wake it) and a handle on its socket (to
    /// shut it down when the server stops).
    live: Vec<(usize, Arc<Inbox>, Option<Socket>)>,
    /// Connections that are walsenders (sent `replication` in their start-up packet).
    walsenders: usize,
}

impl Connections {
    /// Registers a live connection.
    pub(crate) fn connect(&mut self, id: usize, inbox: Arc<Inbox>, socket: Option<Socket>) {
        self.live.push((id, inbox, socket));
    }

    /// Counts a connection as a walsender, if fewer than `max` are: PostgreSQL's
    /// `max_wal_senders`, checked when the start-up packet asks for replication.
    pub(crate) fn add_walsender(&mut self, max: usize) -> bool {
        if self.walsenders >= max {
            return false;
        }
        self.walsenders += 1;
        true
    }

    /// Forgets connection `id` (counted as a walsender or not).
    pub(crate) fn disconnect(&mut self, id: usize, walsender: bool) {
        self.live.retain(|(client, ..)| *client != id);
        if walsender {
            self.walsenders -= 1;
        }
    }

    /// Wakes every connection (new WAL, or the server stops).
    pub(crate) fn wake_all(&self) {
        for (_, inbox, _) in &self.live {
            inbox.wake();
        }
    }

    /// Shuts down every connection's socket: blocked reads and writes return.
    pub(crate) fn shutdown_sockets(&self) {
        for (_, _, socket) in &self.live {
            if let Some(socket) = socket {
                let _ = socket.shutdown();
            }
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.live.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walsenders_are_counted_up_to_the_limit() {
        let mut connections = Connections::default();
        assert!(connections.add_walsender(2));
        assert!(connections.add_walsender(2));
        assert!(!connections.add_walsender(2));
        connections.disconnect(7, true);
        assert!(connections.add_walsender(2));
    }
}
