//! A harness for real PostgreSQL servers: start one in a temporary directory, run SQL
//! through its own `psql`, speak the replication protocol to its walsender, and stop it and
//! remove its files when done (also when a test panics).

mod server;
mod walsender;

pub use server::{find_servers, Server, ServerBinaries};
pub use walsender::{ReplicationStream, WalsenderError};
