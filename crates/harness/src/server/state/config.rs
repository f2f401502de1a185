//! The server's settings.

use std::time::Duration;

use super::super::{Auth, Logger};

/// The server's settings, fixed when it starts.
pub(crate) struct Config {
    pub server_version: String,
    pub major: u32,
    pub system_identifier: u64,
    pub database: String,
    pub auth: Auth,
    /// Ours, not PostgreSQL's: how long a streaming connection may go without a message
    /// before it gets a keepalive (without a reply request).
    pub keepalive_interval: Duration,
    /// PostgreSQL's `wal_sender_timeout` (`None`: 0, off).
    pub wal_sender_timeout: Option<Duration>,
    /// PostgreSQL's `authentication_timeout`.
    pub authentication_timeout: Duration,
    /// PostgreSQL's `max_wal_senders`.
    pub max_wal_senders: usize,
    pub max_replication_slots: usize,
    /// PostgreSQL's `checkpoint_timeout`: how often slots' positions are persisted.
    pub checkpoint_interval: Duration,
    pub logger: Option<Logger>,
}
