//! A test walsender: a server that real logical replication clients (pg_recvlogical,
//! psycopg2, a PostgreSQL subscriber, this crate's client) connect to and stream a
//! scripted pgoutput stream from, re-encoded for each client's options.
//!
//! ```
//! use pgoutput_client::StreamOptions;
//! use pgoutput_harness::server::{Publication, Script, Table, TestServer, Transaction};
//! use pgoutput_codec::{Decoder, PgOutputMessage, ProtocolVersion, Streaming};
//!
//! let accounts = Table::new(16385, "public", "accounts").key_column("id", 23).column("name", 25);
//! let script = Script::new().transaction(
//!     Transaction::new().insert(&accounts, ["1", "alice"]).insert(&accounts, ["2", "bob"]),
//! );
//! let server = TestServer::builder()
//!     .publication(Publication::new("app").table(accounts))
//!     .script(script)
//!     .start()?;
//! // Point the consumer under test at server.connection_string(); what a client with these
//! // options is sent, frame by frame:
//! let options = StreamOptions::new(ProtocolVersion::V1, &["app"]);
//! let mut decoder = Decoder::new(ProtocolVersion::V1, Streaming::Off)?;
//! let mut kinds = Vec::new();
//! for frame in server.render(&options)? {
//!     kinds.push(match decoder.decode(&frame.payload)? {
//!         PgOutputMessage::Begin(_) => "begin",
//!         PgOutputMessage::Relation(_) => "relation",
//!         PgOutputMessage::Insert(_) => "insert",
//!         PgOutputMessage::Commit(commit) => {
//!             assert_eq!(commit.end_lsn, server.wal_end());
//!             "commit"
//!         }
//!         other => panic!("unexpected {other:?}"),
//!     });
//! }
//! assert_eq!(kinds, ["begin", "relation", "insert", "insert", "commit"]);
//! // Then `server.wait_for_confirmed_flush("app_slot", server.wal_end(), timeout)` returns
//! // once the consumer under test has confirmed all of it.
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Blocking `std::net` with one thread per connection: it needs no async runtime and runs
//! under any runtime's tests. A client that stalls or misbehaves holds only its own thread.

mod builder;
mod catalog;
mod connection;
mod control;
mod credentials;
mod inbox;
mod listener;
mod queries;
mod render;
mod schema_cache;
mod script;
mod sent;
mod state;
mod test_server;

use std::sync::Arc;

pub use builder::Builder;
pub use catalog::{Column, Publication, Table};
pub use credentials::Auth;
pub use render::{RenderError, RenderedMessage};
pub use script::{End, Event, Script, ScriptError, Step, Transaction, MAX_LINE_LEN};
pub use sent::SentMessage;
pub use state::{ClientInfo, ReceivedStatusUpdate, SlotInfo};
pub use test_server::TestServer;

/// A log sink: each client, the options it asked for, the positions it confirms.
type Logger = Arc<dyn Fn(&str) + Send + Sync>;
