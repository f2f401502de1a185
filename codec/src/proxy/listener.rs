//! The proxy's runtime: the listener that hands each client connection a task of its own,
//! and the checkpointer.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::relay;
use super::shared::Shared;

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

/// Counts a client connection as open while it lives (also when its task is cancelled).
struct OpenPair<'a>(&'a Shared);

impl<'a> OpenPair<'a> {
    fn new(shared: &'a Shared) -> OpenPair<'a> {
        shared.open.fetch_add(1, Ordering::SeqCst);
        OpenPair(shared)
    }
}

impl Drop for OpenPair<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Accepts clients until told to stop; each pair runs in a task of its own.
async fn accept(listener: TcpListener, shared: Arc<Shared>, mut stopped: oneshot::Receiver<()>) {
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((client, peer)) => {
                    let _ = client.set_nodelay(true);
                    let shared = Arc::clone(&shared);
                    tokio::spawn(async move {
                        let _open = OpenPair::new(&shared);
                        relay::serve(client, peer, &shared).await;
                    });
                }
                // Out of file descriptors, say: the listener stays, the client is gone.
                Err(err) => shared.log(format!("accept: {err}")),
            },
        }
    }
}
