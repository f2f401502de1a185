//! A harness for real PostgreSQL servers: start one in a temporary directory, run SQL
//! through its own `psql`, and stop it and remove its files when done (also when a test
//! panics). Replication connections go through `pgoutput_client`, the same client
//! `pgoutput tail` uses.

mod server;

pub use server::{find_servers, Server, ServerBinaries, TlsFiles, CERT_USER};

/// Whether python3 can import psycopg2 (`false` is a failure under
/// `PGOUTPUT_REQUIRE_LIVE=1`).
pub fn psycopg2_found() -> bool {
    let found = std::process::Command::new("python3")
        .args(["-c", "import psycopg2"])
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var_os("PGOUTPUT_REQUIRE_LIVE").is_none(),
            "psycopg2 is required (PGOUTPUT_REQUIRE_LIVE=1): pip install psycopg2-binary"
        );
        eprintln!("psycopg2 not found: skipping what needs it");
    }
    found
}
