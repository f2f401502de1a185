//! The `pgoutput` command-line tool: the codec without writing Rust.

mod convert;
mod input;
mod proxy;
mod serve;
mod tail;

use std::process::ExitCode;

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
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Decode(args) => convert::decode(&args),
        Command::Encode(args) => convert::encode(&args),
        Command::Check(args) => convert::check(&args),
        Command::Tail(args) => tail::tail(&args),
        Command::Serve(args) => serve::serve(&args),
        Command::Proxy(args) => proxy::proxy(&args),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("pgoutput: {message}");
            ExitCode::from(2)
        }
    }
}
