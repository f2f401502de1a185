//! `pgoutput cluster`: a throwaway PostgreSQL cluster for as long as the command runs
//! (the one `pgoutput trial` starts when it has no upstream), for a test setup that has no
//! PostgreSQL of its own: it prints the cluster's connection string and waits.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Args;
use pgoutput_harness::cluster::{Cluster, Installation};

/// `pgoutput cluster` arguments.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// The PostgreSQL installation (its bin directory); without it, the `postgres` on
    /// PATH, or the newest of Debian's /usr/lib/postgresql/*/bin.
    #[arg(long, value_name = "DIR")]
    pub postgres: Option<PathBuf>,
    /// More postgresql.conf lines (`--set 'max_wal_senders = 20'`), after the defaults.
    #[arg(long = "set", value_name = "LINE")]
    pub settings: Vec<String>,
}

/// Runs `pgoutput cluster`: the cluster started, its connection string on standard output
/// (one line, `host=… port=… user=… dbname=postgres`), then a wait for Ctrl-C or SIGTERM,
/// which stop it and remove its directory.
pub fn cluster(args: &ClusterArgs) -> Result<ExitCode, String> {
    let stop = crate::stop_signal()?;
    let settings: Vec<&str> = args.settings.iter().map(String::as_str).collect();
    let cluster = throwaway(args.postgres.as_deref(), &settings)?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{}", cluster.conninfo("postgres", None))
        .and_then(|()| stdout.flush())
        .map_err(|e| e.to_string())?;
    while !stop.load(Ordering::SeqCst) {
        // A signal handler's flag: no event to wait on without unsafe; a short poll.
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(cluster);
    Ok(ExitCode::SUCCESS)
}

/// A throwaway cluster started from `postgres` (or the installation found), with logical
/// replication, transactions streamed past 64 kB, and `settings` after those.
pub fn throwaway(postgres: Option<&Path>, settings: &[&str]) -> Result<Cluster, String> {
    let installation = Installation::find(postgres).map_err(|e| e.to_string())?;
    eprintln!("starting a throwaway cluster: {}", installation.version());
    let mut conf = vec!["logical_decoding_work_mem = 64kB"];
    conf.extend_from_slice(settings);
    let cluster = Cluster::init(&installation, &conf)
        .map_err(|e| format!("making the throwaway cluster: {e}"))?;
    cluster
        .start()
        .map_err(|e| format!("starting the throwaway cluster: {e}"))?;
    Ok(cluster)
}
