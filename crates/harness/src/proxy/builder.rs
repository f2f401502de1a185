//! How a proxy is set up (the upstream, the address, the rules armed from the start, slot
//! persistence, TLS with clients) and started on a thread of its own.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::oneshot;

use super::shared::{Guard, Shared};
use super::{listener, Proxy, ProxyError};
use crate::faults::Fault;
use crate::judge::Probe;
use pgoutput_client::ConnInfo;

/// Settings of a proxy to be started.
#[derive(Debug, Clone)]
pub struct Builder {
    upstream: ConnInfo,
    listen: SocketAddr,
    faults: Vec<Fault>,
    checkpoint_interval: Option<Duration>,
    crash_refusal: Duration,
    tls: Option<(PathBuf, PathBuf)>,
    guard: Guard,
    probe: Option<Probe>,
}

impl Builder {
    /// Where the proxy connects for each client (the user, database and password are
    /// each client's own).
    #[must_use]
    pub fn upstream(&self) -> &ConnInfo {
        &self.upstream
    }

    /// The defaults, in front of `upstream`.
    pub(super) fn new(upstream: ConnInfo) -> Builder {
        Builder {
            upstream,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            faults: Vec::new(),
            checkpoint_interval: None,
            crash_refusal: Duration::ZERO,
            tls: None,
            guard: Guard::default(),
            probe: None,
        }
    }

    /// Listens on this address (default `127.0.0.1:0`, a free port).
    #[must_use]
    pub fn listen(mut self, addr: SocketAddr) -> Builder {
        self.listen = addr;
        self
    }

    /// A fault rule armed from the start.
    #[must_use]
    pub fn fault(mut self, fault: Fault) -> Builder {
        self.faults.push(fault);
        self
    }

    /// Arms the judge's probe (see [`crate::judge::Probe`]): one transaction in `every`
    /// is held after its first change with a keepalive asking for a reply (nothing more
    /// of the upstream's is forwarded until the client has answered every request), so a
    /// consumer that confirms a transaction before it has it is caught for certain; and
    /// each time the stream is idle at a new WAL end, the client is asked for a reply.
    #[must_use]
    pub fn probe(mut self, probe: Probe) -> Builder {
        self.probe = Some(probe);
        self
    }

    /// Model PostgreSQL's slot persistence: a client's flush position reaches the
    /// upstream only at the proxy's checkpoints, every `interval` (and at
    /// [`Proxy::checkpoint`]), so that after a [`Proxy::crash`] the real server sends
    /// again what a consumer confirmed since the last one. Without it, status updates
    /// pass unchanged.
    #[must_use]
    pub fn checkpoint_interval(mut self, interval: Duration) -> Builder {
        self.checkpoint_interval = Some(interval);
        self
    }

    /// After a [`Proxy::crash`], new connections get PostgreSQL's `FATAL: the database
    /// system is starting up` (57P03) for this long (default: none).
    #[must_use]
    pub fn crash_refusal(mut self, duration: Duration) -> Builder {
        self.crash_refusal = duration;
        self
    }

    /// Answer a client's SSLRequest `S` and speak TLS with it, with this certificate chain
    /// and private key (PEM files), as PostgreSQL with `ssl = on` does; without, the
    /// answer is `N`.
    #[must_use]
    pub fn tls(mut self, certificate_chain: &Path, private_key: &Path) -> Builder {
        self.tls = Some((certificate_chain.to_owned(), private_key.to_owned()));
        self
    }

    /// Clients must use TLS (a certificate is needed, [`Builder::tls`]): one that starts
    /// up without gets PostgreSQL's FATAL 28000 for a server whose `pg_hba.conf` lines
    /// all say `hostssl` ("no pg_hba.conf entry for host …, no encryption").
    #[must_use]
    pub fn require_tls(mut self) -> Builder {
        self.guard.require_tls = true;
        self
    }

    /// PostgreSQL's `max_connections` (default 100): client connections open at once,
    /// at most. One more gets FATAL 53300 "sorry, too many clients already" at once.
    #[must_use]
    pub fn max_connections(mut self, max: usize) -> Builder {
        self.guard.max_connections = max;
        self
    }

    /// PostgreSQL's `authentication_timeout` (default 60 s): how long a client has from
    /// its connect to its start-up packet, the TLS handshake and the upstream connection
    /// included (the upstream's `connect_timeout` bounds that one too). One that takes
    /// longer is closed without a word, as PostgreSQL closes it; once the start-up packet
    /// reached the upstream, its own `authentication_timeout` counts.
    #[must_use]
    pub fn authentication_timeout(mut self, timeout: Duration) -> Builder {
        self.guard.authentication_timeout = timeout;
        self
    }

    /// Binds the address and starts serving, on a thread of its own.
    ///
    /// # Errors
    ///
    /// [`ProxyError::Fault`] for a rule that cannot work on a proxy,
    /// [`ProxyError::Io`] when the address cannot be bound.
    pub fn start(self) -> Result<Proxy, ProxyError> {
        let tls = match &self.tls {
            Some((chain, key)) => Some(acceptor(chain, key).map_err(ProxyError::Tls)?),
            None => None,
        };
        if self.guard.require_tls && tls.is_none() {
            return Err(ProxyError::Tls(
                "clients cannot be required to use TLS without a certificate".to_owned(),
            ));
        }
        let shared = Arc::new(Shared::new(
            self.upstream,
            tls,
            self.guard,
            self.checkpoint_interval.is_some(),
            self.crash_refusal,
        ));
        for fault in self.faults {
            shared.add_fault(fault)?;
        }
        shared.probe.set(self.probe);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let std_listener = std::net::TcpListener::bind(self.listen)?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let (stop, stopped) = oneshot::channel();
        let serving = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("pgoutput-proxy {addr}"))
            .spawn(move || {
                runtime.block_on(listener::run(
                    std_listener,
                    serving,
                    self.checkpoint_interval,
                    stopped,
                ));
                // Dropping the runtime cancels every pair: their sockets close.
            })?;
        Ok(Proxy::running(addr, shared, stop, thread))
    }
}

/// The TLS configuration of a certificate chain and key in PEM files.
fn acceptor(chain: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let certificates = CertificateDer::pem_file_iter(chain)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("certificate chain {}: {e}", chain.display()))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("private key {}: {e}", key.display()))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_no_client_auth()
    .with_single_cert(certificates, key)
    .map_err(|e| format!("{}: {e}", chain.display()))?;
    Ok(Arc::new(config))
}
