//! `proxy`: a protocol-aware proxy in front of a real PostgreSQL, from the command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Args;
use pgoutput_client::ConnInfo;
use pgoutput_harness::faults::Fault;
use pgoutput_harness::judge::Probe;
use pgoutput_harness::proxy::Proxy;

use super::serve::{pg_duration, Unit};

#[derive(Debug, Args)]
#[command(
    after_help = crate::serve::with_actions(concat!(r#"Every client connection gets its own connection to the upstream PostgreSQL, opened with
the client's own start-up packet (user, database, replication, application_name, options);
authentication is relayed, so the proxy needs no passwords. Everything passes through byte for
byte: queries, COPY, notices, errors, cancel requests. An SSLRequest is answered `N`, or
with --tls-cert and --tls-key `S` and TLS; the upstream leg uses TLS as its connection
string's sslmode says.

On a replication connection in copy-both mode, each frame is read with the codec in the
context START_REPLICATION set, and fault rules (the JSON of `pgoutput serve --help`: its
message, commit, change, stream_block, connect, time and flush triggers) act on the
upstream's frames as they go to the client, with these actions:
@ACTIONS@
An ERROR ends the upstream's copy with a CopyDone; a crash is POST /crash; an inject leaves
the upstream's stream untouched.

Control API (--control 127.0.0.1:PORT; loopback only unless --control-remote), JSON:
  GET /   the endpoints          GET|POST|DELETE /faults   (as pgoutput serve's)
  GET /connections   each client: user, upstream, slot, frames, status updates, how it ended
  GET /slots   per slot: the highest position a client confirmed and the highest sent
  GET /findings   GET /facts   GET|POST|DELETE /probe   (the judge: see below)
  POST /wait {"slot": "s", "lsn": "0/1000360", "timeout_ms": 5000}   (408 on timeout)
  GET /log   streams, rules that fired, frames the codec could not decode
  POST /checkpoint   POST /crash   (with --checkpoint-interval: the upstream hears
      confirmed positions at checkpoints only, so a crash re-sends what came since)
  POST /slots/NAME/invalidate (55000)   POST /slots/NAME/hold {"ms": 2000} (55006)
  DELETE /slots/NAME (42704)   answered to START_REPLICATION by the proxy itself

Example:
  pgoutput proxy --listen 127.0.0.1:6432 --upstream 'host=127.0.0.1 port=5432 sslmode=disable' \
      --fault '{"when": {"on": "change", "transaction": 2, "after": 1}, "then": {"do": "reset"}}'
  pg_recvlogical -d 'host=127.0.0.1 port=6432 user=me dbname=app' --slot s --start \
      -o proto_version=1 -o publication_names=p -f -"#, judge_help!()))
)]
pub struct ProxyArgs {
    /// The address to listen on (loopback only unless --listen-remote).
    #[arg(long, default_value = "127.0.0.1:6432")]
    listen: SocketAddr,
    /// Let the proxy listen on a non-loopback address: anyone who can reach it reaches
    /// the upstream through it, with whatever pg_hba.conf grants the proxy's address.
    #[arg(long)]
    listen_remote: bool,
    /// The upstream PostgreSQL: a libpq connection string or URI (host, port, sslmode and
    /// the TLS settings are used; each client logs in as itself).
    #[arg(long)]
    upstream: String,
    /// A fault rule as JSON (repeatable).
    #[arg(long, value_name = "JSON")]
    fault: Vec<String>,
    /// Arm the judge's probe: hold one transaction in N after its first change and ask
    /// for a reply (see below).
    #[arg(long, value_name = "N")]
    probe: Option<u64>,
    /// Serve the control API (HTTP/JSON) here: rules, connections, slots, waits.
    #[arg(long, value_name = "ADDR")]
    control: Option<SocketAddr>,
    /// Let the control API listen on a non-loopback address.
    #[arg(long, requires = "control")]
    control_remote: bool,
    /// Model slot persistence: a client's flush position reaches the upstream only at
    /// the proxy's checkpoints, this often (`5min`, `30s`; and at POST /checkpoint), so a
    /// crash makes the real server send again what was confirmed since.
    #[arg(long, value_name = "TIME")]
    checkpoint_interval: Option<String>,
    /// After a crash (POST /crash), new connections get FATAL 57P03 "the database system
    /// is starting up" this long (`2s`, `500ms`).
    #[arg(long, value_name = "TIME")]
    crash_refusal: Option<String>,
    /// Speak TLS with clients that ask for it, with this certificate chain (PEM); without
    /// it an SSLRequest is answered `N`.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Clients must use TLS (with --tls-cert): one that starts up without gets FATAL
    /// 28000, as from a server whose pg_hba.conf lines all say hostssl.
    #[arg(long, requires = "tls_cert")]
    require_tls: bool,
    /// PostgreSQL's max_connections: client connections open at once; one more gets
    /// FATAL 53300 "sorry, too many clients already".
    #[arg(long, value_name = "N", default_value_t = 100)]
    max_connections: usize,
    /// PostgreSQL's authentication_timeout: how long a client has from its connect to its
    /// start-up packet (TLS and the upstream connection included) before it is closed
    /// without a word (`60s`, `500ms`).
    #[arg(long, value_name = "TIME", default_value = "60s")]
    authentication_timeout: String,
}

/// Runs the proxy until Ctrl-C, logging what it notes.
pub fn proxy(args: &ProxyArgs) -> Result<ExitCode, String> {
    if !args.listen.ip().is_loopback() && !args.listen_remote {
        return Err(format!(
            "--listen {}: not a loopback address; anyone who can reach it reaches the upstream through the proxy, and the upstream sees the proxy's address (add --listen-remote if that is meant)",
            args.listen
        ));
    }
    let authentication_timeout = pg_duration(&args.authentication_timeout, Unit::Seconds)
        .map_err(|e| format!("--authentication-timeout: {e}"))?;
    let mut builder = Proxy::builder(&args.upstream)
        .map_err(|e| e.to_string())?
        .listen(args.listen)
        .max_connections(args.max_connections)
        .authentication_timeout(authentication_timeout);
    if args.require_tls {
        builder = builder.require_tls();
    }
    if let Some(text) = &args.checkpoint_interval {
        let interval = pg_duration(text, Unit::Milliseconds)
            .map_err(|e| format!("--checkpoint-interval: {e}"))?;
        builder = builder.checkpoint_interval(interval);
    }
    if let Some(text) = &args.crash_refusal {
        let refusal =
            pg_duration(text, Unit::Milliseconds).map_err(|e| format!("--crash-refusal: {e}"))?;
        builder = builder.crash_refusal(refusal);
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        builder = builder.tls(cert, key);
    }
    if let Some(every) = args.probe {
        builder = builder.probe(Probe::every(every));
    }
    for (i, text) in args.fault.iter().enumerate() {
        let fault: Fault =
            serde_json::from_str(text).map_err(|e| format!("--fault {}: {e}", i + 1))?;
        builder = builder.fault(fault);
    }
    let stop = super::stop_signal()?;
    let proxy = builder
        .start()
        .map_err(|e| format!("{}: {e}", args.listen))?;
    eprintln!(
        "pgoutput proxy: listening on {}, upstream {}",
        proxy.addr(),
        ConnInfo::redacted(&args.upstream)
    );
    if !args.listen.ip().is_loopback() {
        eprintln!(
            "pgoutput proxy: warning: listening on {} (--listen-remote): anyone who can reach it reaches the upstream through the proxy, with whatever pg_hba.conf grants the proxy's address",
            proxy.addr()
        );
    }
    let _control = match args.control {
        Some(addr) => {
            let control = proxy
                .control(addr, args.control_remote)
                .map_err(|e| format!("--control {addr}: {e}"))?;
            eprintln!("pgoutput proxy: control API on http://{}/", control.addr());
            Some(control)
        }
        None => None,
    };
    let mut next = 0;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
        let (lines, after) = proxy.log_since(next);
        for line in lines {
            eprintln!("pgoutput proxy: {line}");
        }
        next = after;
    }
    eprintln!("pgoutput proxy: stopping");
    proxy.stop();
    Ok(ExitCode::SUCCESS)
}
