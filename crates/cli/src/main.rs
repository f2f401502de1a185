//! The `pgoutput` command-line tool: the codec without writing Rust.

/// The judge's part of `serve --help` and `proxy --help`: the probe, then every finding
/// and fact with its fields (a macro, so that `concat!` can join it to each text).
macro_rules! judge_help {
    () => {
        r#"

The judge (GET /findings, GET /facts; per slot, across all its connections):
  Lead with the probe, so an early confirmation is caught by design, not by luck:
    --probe 1   (or POST /probe {"every": 1}; "probe": {"every": 1} in --config)
  holds one transaction in N after its first change ("after": M changes) with a keepalive
  asking for a reply, until the client has answered every request so far (at most
  "wait_ms", 1000, twice), and
  asks for a reply each time the stream catches up with a new WAL end, again once
  answered, until two answers in a row leave the slot at the same place (four at most).
  Findings (each a consumer bug; "connection" names the client that showed it):
    confirmed_unsent {flush, sent}   a flush position past the commit record of a
        transaction not sent whole yet (sent: what had been sent): a restart there
        skips it, as PostgreSQL skips a commit before the confirmed position; e.g. one
        past the commit position its Begin announced (pglogrepl#40, debezium#7531)
    not_advanced_while_idle {confirmed, wal_end}   nothing left to send, the WAL end
        moved past every transaction sent, two reply requests answered, the slot left
        behind 10 s after the first: the server keeps that WAL while nothing is
        published (supabase/etl#429, debezium#6881, epgsql#306)
    stuck_inside_transaction {confirmed, transaction_end}   idle, two reply requests
        answered, the slot left 10 s inside a transaction it had whole, not past its
        commit record's start: sent again after any restart
    no_timely_reply {waited_ms}   a reply request unanswered until wal_sender_timeout
    never_confirmed {sent}   sent transactions, none streaming now, none ever confirmed
        though it answered a reply request once it had one whole
  Facts (what happened, no blame): started {requested, confirmed, behind: a request
  behind what the consumer had confirmed}, ended {how: client, fault, crash, timeout,
  server}, stopped_behind {confirmed, transaction_end: the consumer ended its stream
  behind transactions it was sent}, crash {confirmed}, resent {count, first, last, confirmed_before: transactions
  sent again that the consumer had confirmed, which it should skip}.
  An idle finding stands while it lasts and is kept if the consumer ends its stream in
  it, until a later connection confirms past it; a stream cut by a fault or a crash is
  not judged for it. A position before the slot's is ignored, as PostgreSQL ignores it."#
    };
}

mod cluster;
mod convert;
mod input;
mod proxy;
mod serve;
mod tail;
mod trial;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::{Args, Parser, Subcommand, ValueEnum};
use pgoutput_codec::{Ctx, ProtocolVersion, Streaming};

/// Decode, encode and check PostgreSQL pgoutput logical replication messages, and tail a
/// live server's replication stream as JSON.
#[derive(Debug, Parser)]
#[command(name = "pgoutput", version)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Read pgoutput messages and write one JSON object per line.
    #[command(after_help = input::FORMATS_HELP)]
    Decode(convert::DecodeArgs),
    /// Read JSON objects, one per line, and write each message as a hex line.
    Encode(convert::EncodeArgs),
    /// Decode and re-encode every message, report any that does not come back byte for
    /// byte, and finish with `N passed, M failed`.
    #[command(after_help = input::FORMATS_HELP)]
    Check(convert::DecodeArgs),
    /// Stream a replication slot from a live server and print its messages (like
    /// pg_recvlogical, for pgoutput).
    Tail(tail::TailArgs),
    /// Run a test walsender that serves a scripted pgoutput stream to replication clients.
    Serve(serve::ServeArgs),
    /// Run a proxy in front of a real PostgreSQL: everything passes through, and fault
    /// rules act on replication streams.
    Proxy(proxy::ProxyArgs),
    /// Run a consumer through the catalogue of the field's replication failures against
    /// a real PostgreSQL, and grade what it applied: did it lose or duplicate anything?
    Trial(trial::TrialArgs),
    /// Start a throwaway PostgreSQL cluster, print its connection string, and keep it
    /// until stopped (Ctrl-C or SIGTERM), for a test setup without a PostgreSQL of its own.
    Cluster(cluster::ClusterArgs),
}

/// The negotiated options the bytes depend on.
#[derive(Debug, Clone, Args)]
pub struct SessionArgs {
    /// The pgoutput protocol version the stream was produced with (1 to 4).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4))]
    pub proto_version: u32,
    /// The streaming mode the stream was produced with.
    #[arg(long, value_enum, default_value_t = StreamingArg::Off)]
    pub streaming: StreamingArg,
}

impl SessionArgs {
    /// The session context these options describe.
    pub fn ctx(&self) -> Result<Ctx, String> {
        let version = ProtocolVersion::from_number(self.proto_version)
            .ok_or_else(|| format!("unknown protocol version {}", self.proto_version))?;
        Ctx::new(version, self.streaming.into()).map_err(|e| e.to_string())
    }
}

/// `--streaming`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StreamingArg {
    /// No streaming of in-progress transactions.
    Off,
    /// `streaming 'on'` (protocol 2+).
    On,
    /// `streaming 'parallel'` (protocol 4+).
    Parallel,
}

impl From<StreamingArg> for Streaming {
    fn from(arg: StreamingArg) -> Streaming {
        match arg {
            StreamingArg::Off => Streaming::Off,
            StreamingArg::On => Streaming::On,
            StreamingArg::Parallel => Streaming::Parallel,
        }
    }
}

/// Runs the tool; errors go to standard error with a non-zero exit.
fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Decode(args) => convert::decode(&args),
        Command::Encode(args) => convert::encode(&args),
        Command::Check(args) => convert::check(&args),
        Command::Tail(args) => tail::tail(&args).map_err(Stop::from),
        Command::Serve(args) => serve::serve(&args).map_err(Stop::from),
        Command::Proxy(args) => proxy::proxy(&args).map_err(Stop::from),
        Command::Trial(args) => trial::trial(&args).map_err(Stop::from),
        Command::Cluster(args) => cluster::cluster(&args).map_err(Stop::from),
    };
    match result {
        Ok(code) => code,
        // `pgoutput decode … | head -1`: the reader has what it wanted.
        Err(Stop::OutputClosed) => ExitCode::SUCCESS,
        Err(Stop::Failed(message)) => {
            eprintln!("pgoutput: {message}");
            ExitCode::from(2)
        }
    }
}

/// Why a command ended early: a failure to report, or its standard output closed by the
/// reader (`head`), which ends it quietly, as `tail` ends.
#[derive(Debug)]
pub enum Stop {
    Failed(String),
    OutputClosed,
}

impl From<String> for Stop {
    fn from(message: String) -> Stop {
        Stop::Failed(message)
    }
}

impl Stop {
    /// A write to standard output failed: closed, or an error worth reporting.
    pub fn output(err: std::io::Error) -> Stop {
        if err.kind() == std::io::ErrorKind::BrokenPipe {
            Stop::OutputClosed
        } else {
            Stop::Failed(format!("I/O error: {err}"))
        }
    }
}

/// Set by SIGINT or SIGTERM (Ctrl-C; systemd, container runtimes and test harnesses send
/// SIGTERM): the long-running subcommands stop cleanly once it is. They install it before
/// they say they listen, so a harness signalling as soon as it reads that line finds it.
fn stop_signal() -> Result<Arc<AtomicBool>, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let set = Arc::clone(&stop);
    ctrlc::set_handler(move || set.store(true, Ordering::SeqCst))
        .map_err(|e| format!("signal handler: {e}"))?;
    Ok(stop)
}
