//! What the postmaster does for the test server: accepting connections (each served on a
//! thread of its own, or refused as PostgreSQL refuses it) and the checkpointer.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::connection;
use super::state::Shared;
use pgoutput_wire::error::{sqlstate, too_many_clients};

/// How many connections may be open at once, before any start-up packet: PostgreSQL's
/// postmaster allows twice its backends (`MaxLivePostmasterChildren`), which with the
/// default settings is 2 × (100 connections + 3 autovacuum workers + 1 launcher + 8
/// worker processes), plus the walsenders.
fn max_live_connections(max_wal_senders: usize) -> usize {
    2 * (100 + 3 + 1 + 8 + max_wal_senders)
}

/// Persists every slot's position each `checkpoint_interval`, until the server stops.
pub(super) fn checkpointer(shared: &Shared) {
    let interval = shared.config.checkpoint_interval;
    let mut next = Instant::now() + interval;
    let mut state = shared.lock();
    while !shared.stopping() {
        let now = Instant::now();
        if now >= next {
            state.slots_mut().checkpoint();
            next = now + interval;
            continue;
        }
        state = shared
            .changed
            .wait_timeout(state, next - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

pub(super) fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    loop {
        let accepted = listener.accept();
        // Shutdown wakes the blocking accept with a connection of its own.
        if shared.stopping() {
            return;
        }
        match accepted {
            Ok((stream, peer)) => {
                if shared.finishing() {
                    refuse(
                        stream,
                        sqlstate::CANNOT_CONNECT_NOW,
                        "the database system is shutting down",
                    );
                    continue;
                }
                let live = shared.lock().connection_count();
                if live >= max_live_connections(shared.config.max_wal_senders) {
                    let err = too_many_clients();
                    refuse(stream, &err.code, &err.message);
                    continue;
                }
                let attempt = shared.next_attempt();
                let on_connect = shared.faults.connecting(attempt, shared.config.major);
                let id = shared.next_client_id();
                // On failure the closure, and the socket in it, is dropped: closed.
                let handle = std::thread::Builder::new()
                    .name(format!("pgoutput-test-client-{id}"))
                    .spawn({
                        let shared = Arc::clone(shared);
                        move || connection::serve_tcp(&shared, stream, id, peer, on_connect)
                    });
                match handle {
                    Ok(handle) => shared.add_thread(handle),
                    Err(err) => shared.log(format!("client {id}: no thread to serve it: {err}")),
                }
            }
            // Out of file descriptors and the like: try again shortly.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// A FATAL from the postmaster to a connection it will not serve, without waiting on it.
fn refuse(mut stream: TcpStream, code: &str, text: &str) {
    let mut out = Vec::new();
    pgoutput_wire::backend::error_or_notice(&mut out, b'E', "FATAL", code, text, None, None);
    let _ = stream.set_nonblocking(true);
    let _ = stream.write_all(&out);
}
