//! `pgoutput`: decode, encode and check pgoutput messages, and tail a live server.
//! See `pgoutput --help`.

fn main() -> std::process::ExitCode {
    pgoutput_examples::cli::main()
}
