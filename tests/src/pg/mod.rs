//! A harness for real PostgreSQL servers: start one in a temporary directory, run SQL
//! through its own `psql`, and stop it and remove its files when done (also when a test
//! panics). Replication connections go through `pgoutput_examples::connection`, the same
//! client `pgoutput tail` uses.

mod server;

pub use server::{find_servers, Server, ServerBinaries, TlsFiles, CERT_USER};
