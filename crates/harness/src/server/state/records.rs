//! What the server keeps of its clients and its log, bounded: a `pgoutput serve` that
//! runs for days (or a fuzzer's millions of connections) must not grow without bound.

use std::time::Duration;

use super::super::sent::{SentMessage, Unrecorded};
use pgoutput_client::StreamOptions;
use pgoutput_codec::{PgTimestamp, StandbyStatusUpdate};

/// How many log lines, disconnected clients' records, and commands and status updates
/// per client the server keeps, dropping the oldest.
pub(crate) const MAX_LOG_LINES: usize = 10_000;
pub(crate) const MAX_CLIENT_RECORDS: usize = 1_000;
pub(crate) const MAX_PER_CLIENT: usize = 10_000;

/// What the server saw of one client.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ClientInfo {
    /// The client's number, in order of connection (its BackendKeyData process id is
    /// 10000 more).
    pub id: usize,
    /// The user from its start-up packet.
    pub user: String,
    /// Its `application_name`.
    pub application_name: String,
    /// Every query and replication command it sent, in order.
    pub commands: Vec<String>,
    /// The options of each START_REPLICATION it ran.
    pub stream_options: Vec<StreamOptions>,
    /// Every standby status update it sent, with when the server read it.
    pub status_updates: Vec<ReceivedStatusUpdate>,
    /// Whether it is still connected.
    pub connected: bool,
    /// The messages it was sent while streaming, with their positions (the last
    /// 10,000).
    pub sent: Vec<SentMessage>,
    /// How long each of its replies to a reply request took.
    pub replies: Vec<Duration>,
    /// How its connection ended (`None` while it is connected).
    pub ended: Option<String>,
}

/// A standby status update and when the server read it: the client's `send_time` says
/// when it was written, which a slow or clock-skewed client makes no guide to when it
/// arrived (PostgreSQL keeps both: `reply_time` and the lags it measures on receipt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReceivedStatusUpdate {
    /// What the client sent.
    pub update: StandbyStatusUpdate,
    /// The server's clock when it read the update.
    pub received_at: PgTimestamp,
}

/// Appends to a record list, dropping the oldest tenth when it is full.
fn push_bounded<T>(list: &mut Vec<T>, item: T, max: usize) {
    if list.len() >= max {
        list.drain(..max / 10);
    }
    list.push(item);
}

/// The clients' records and the log.
#[derive(Debug, Default)]
pub(crate) struct Records {
    clients: Vec<ClientInfo>,
    log: Vec<String>,
}

impl Records {
    /// Registers a new client, forgetting the oldest disconnected ones beyond the limit.
    pub(crate) fn add_client(&mut self, id: usize, user: &str, application_name: &str) {
        let disconnected = self.clients.iter().filter(|c| !c.connected).count();
        if disconnected >= MAX_CLIENT_RECORDS {
            let mut excess = disconnected - MAX_CLIENT_RECORDS + MAX_CLIENT_RECORDS / 10;
            self.clients.retain(|c| {
                let drop = !c.connected && excess > 0;
                excess -= usize::from(drop);
                !drop
            });
        }
        self.clients.push(ClientInfo {
            id,
            user: user.to_owned(),
            application_name: application_name.to_owned(),
            commands: Vec::new(),
            stream_options: Vec::new(),
            status_updates: Vec::new(),
            connected: true,
            sent: Vec::new(),
            replies: Vec::new(),
            ended: None,
        });
    }

    /// A copy of every client's record, in order of connection.
    pub(crate) fn clients(&self) -> Vec<ClientInfo> {
        self.clients.clone()
    }

    /// Every command any client sent, in order of connection.
    pub(crate) fn commands(&self) -> Vec<String> {
        self.clients
            .iter()
            .flat_map(|c| c.commands.iter().cloned())
            .collect()
    }

    fn client(&mut self, id: usize) -> Option<&mut ClientInfo> {
        self.clients.iter_mut().find(|c| c.id == id)
    }

    /// Client `id`'s `application_name` (empty when it has no record).
    pub(crate) fn application_name(&self, id: usize) -> String {
        self.clients
            .iter()
            .find(|c| c.id == id)
            .map(|c| c.application_name.clone())
            .unwrap_or_default()
    }

    /// Records a command of client `id`.
    pub(crate) fn add_command(&mut self, id: usize, command: &str) {
        if let Some(client) = self.client(id) {
            push_bounded(&mut client.commands, command.to_owned(), MAX_PER_CLIENT);
        }
    }

    /// Records the options of a START_REPLICATION of client `id`.
    pub(crate) fn add_stream_options(&mut self, id: usize, options: StreamOptions) {
        if let Some(client) = self.client(id) {
            client.stream_options.push(options);
        }
    }

    /// Records the frames client `id` was sent.
    pub(crate) fn add_sent(&mut self, id: usize, frames: &[Unrecorded]) {
        if let Some(client) = self.client(id) {
            for frame in frames {
                let message = SentMessage {
                    tag: frame.tag,
                    lsn: frame.lsn,
                };
                push_bounded(&mut client.sent, message, MAX_PER_CLIENT);
            }
        }
    }

    /// Records a keepalive client `id` was sent.
    pub(crate) fn add_keepalive(&mut self, id: usize, wal_end: pgoutput_codec::Lsn) {
        if let Some(client) = self.client(id) {
            let message = SentMessage {
                tag: b'k',
                lsn: wal_end,
            };
            push_bounded(&mut client.sent, message, MAX_PER_CLIENT);
        }
    }

    /// Records how long client `id` took to answer a reply request.
    pub(crate) fn add_reply(&mut self, id: usize, waited: Duration) {
        if let Some(client) = self.client(id) {
            push_bounded(&mut client.replies, waited, MAX_PER_CLIENT);
        }
    }

    /// Records a standby status update of client `id`, read now.
    pub(crate) fn add_status_update(&mut self, id: usize, update: StandbyStatusUpdate) {
        if let Some(client) = self.client(id) {
            let received = ReceivedStatusUpdate {
                update,
                received_at: PgTimestamp::now(),
            };
            push_bounded(&mut client.status_updates, received, MAX_PER_CLIENT);
        }
    }

    /// Client `id` left, for the reason given.
    pub(crate) fn end(&mut self, id: usize, why: String) {
        if let Some(client) = self.client(id) {
            client.connected = false;
            client.ended = Some(why);
        }
    }

    /// Forgets client `id`'s record.
    pub(crate) fn forget(&mut self, id: usize) {
        self.clients.retain(|c| c.id != id);
    }

    pub(crate) fn log(&self) -> Vec<String> {
        self.log.clone()
    }

    pub(crate) fn log_len(&self) -> usize {
        self.log.len()
    }

    pub(crate) fn add_log(&mut self, line: String) {
        push_bounded(&mut self.log, line, MAX_LOG_LINES);
    }

    /// Forgets the log lines after the first `len`.
    pub(crate) fn truncate_log(&mut self, len: usize) {
        self.log.truncate(len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_stay_bounded() {
        let mut records = Records::default();
        records.add_client(0, "u", "");
        for id in 1..5_000 {
            records.add_client(id, "u", "");
            records.end(id, String::new());
        }
        assert!(records.clients.len() <= MAX_CLIENT_RECORDS + 1);
        // The connected client is never forgotten, and the newest are kept.
        assert_eq!(records.clients[0].id, 0);
        assert_eq!(records.clients.last().unwrap().id, 4_999);
        for n in 0..25_000 {
            records.add_command(0, &format!("SELECT {n}"));
        }
        let commands = &records.clients[0].commands;
        assert!(commands.len() <= MAX_PER_CLIENT);
        assert_eq!(commands.last().unwrap(), "SELECT 24999");
    }
}
