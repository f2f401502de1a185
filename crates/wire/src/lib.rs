//! PostgreSQL's frontend/backend protocol underneath logical replication, for both sides of
//! a connection: sockets and message framing, what clients send (`frontend`) and what servers
//! answer (`backend`), the server's side of SCRAM-SHA-256, the SQLSTATEs and PostgreSQL's
//! wording of its errors, and the walsender's grammar of replication commands.
//!
//! The replication client ([`pgoutput-client`]) writes frontend messages and parses backend
//! ones with `postgres-protocol`. That crate has no server side, so the other direction lives
//! here, each message a few lines with the documentation's layout beside it: the test
//! walsender and the proxy of [`pgoutput-harness`] read and answer clients with it.
//!
//! [`pgoutput-client`]: https://docs.rs/pgoutput-client
//! [`pgoutput-harness`]: https://docs.rs/pgoutput-harness

#![forbid(unsafe_code)]

pub mod backend;
pub mod error;
pub mod frontend;
pub mod grammar;
pub mod scram;
pub mod socket;
pub mod sqlstate;

pub use socket::{is_timeout, Socket};
