//! The proxy's runtime: the listener that hands each client connection a task of its own,
//! and the checkpointer.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use super::relay;
use super::shared::Shared;
use pgoutput_wire::backend;
use pgoutput_wire::error::{too_many_clients, SqlError};

/// Serves `listener` until told to stop (checkpointing every `checkpoint_interval`).
pub(super) async fn run(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    checkpoint_interval: Option<Duration>,
    stopped: oneshot::Receiver<()>,
) {
    if let Some(interval) = checkpoint_interval {
        tokio::spawn(checkpointer(Arc::clone(&shared), interval));
    }
    match TcpListener::from_std(listener) {
        Ok(listener) => accept(listener, shared, stopped).await,
        Err(err) => shared.log(format!("cannot listen: {err}")),
    }
}

/// Checkpoints every `interval`.
async fn checkpointer(shared: Arc<Shared>, interval: Duration) {
    let mut ticks = tokio::time::interval(interval);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        shared.checkpoint();
    }
}

/// Counts a client connection as open while it lives (from its accept, and also when its
/// task is cancelled).
struct OpenPair(Arc<Shared>);

impl OpenPair {
    fn new(shared: &Arc<Shared>) -> OpenPair {
        shared.open.fetch_add(1, Ordering::SeqCst);
        OpenPair(Arc::clone(shared))
    }
}

impl Drop for OpenPair {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long the accept loop waits after a failed accept (out of file descriptors, say)
/// before it tries again: the listener stays, without spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Accepts clients until told to stop; each pair runs in a task of its own. A client
/// past the connection limit gets PostgreSQL's FATAL 53300 at once, as the test server
/// answers it.
async fn accept(listener: TcpListener, shared: Arc<Shared>, mut stopped: oneshot::Receiver<()>) {
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((client, peer)) => {
                    let _ = client.set_nodelay(true);
                    // As PostgreSQL does on every TCP connection: a peer that vanished
                    // is found out.
                    let _ = socket2::SockRef::from(&client).set_keepalive(true);
                    if shared.open.load(Ordering::SeqCst) >= shared.guard.max_connections {
                        refuse(&client, &too_many_clients());
                        shared.log(format!("connection from {peer}: refused, {} open already (max_connections)", shared.guard.max_connections));
                        continue;
                    }
                    let open = OpenPair::new(&shared);
                    tokio::spawn(async move {
                        relay::serve(client, peer, &open.0).await;
                    });
                }
                Err(err) => {
                    shared.log(format!("accept: {err}"));
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
        }
    }
}

/// A FATAL written without waiting (a fresh socket has room for it), then the close.
fn refuse(client: &TcpStream, err: &SqlError) {
    let mut out = Vec::new();
    backend::error_response(&mut out, "FATAL", err);
    let _ = client.try_write(&out);
}
