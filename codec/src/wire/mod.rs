//! The frontend/backend protocol underneath replication: sockets and message framing,
//! shared by the replication [`client`](crate::client) and the test
//! [`server`](crate::server).
//!
//! The client side builds on `postgres-protocol` (it writes frontend messages and parses
//! backend ones). That crate has no server side, so the other direction lives here:
//! `frontend` reads what clients send, `backend` writes what servers answer, each a
//! few lines per message with the documentation's layout beside it.

#[cfg(feature = "server")]
pub(crate) mod backend;
#[cfg(feature = "server")]
pub(crate) mod error;
#[cfg(feature = "server")]
pub(crate) mod frontend;
#[cfg(feature = "server")]
pub(crate) mod scram;
pub(crate) mod socket;
// Each build uses the codes of the features it has.
#[allow(dead_code)]
pub(crate) mod sqlstate;

pub(crate) use socket::is_timeout as socket_timeout;
pub(crate) use socket::Socket;
