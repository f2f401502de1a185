//! Waiting until a consumer has confirmed a position: the one loop the test server and the
//! proxy share, and what it says when time runs out.

use std::fmt;
use std::sync::{Condvar, MutexGuard};
use std::time::{Duration, Instant};

use pgoutput_codec::Lsn;

/// Waiting for a position timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeout {
    /// Where the slot stood when time ran out (`None`: no such slot).
    pub confirmed_flush_lsn: Option<Lsn>,
}

impl fmt::Display for Timeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.confirmed_flush_lsn {
            Some(lsn) => write!(f, "timed out with the slot confirmed at {lsn}"),
            None => f.write_str("timed out before the slot existed"),
        }
    }
}

impl std::error::Error for Timeout {}

/// Waits, looking again each time `changed` is signalled, until `confirmed` (read with
/// the lock held) reports `lsn` or beyond, or `timeout` passes.
pub(crate) fn wait<T>(
    mut guard: MutexGuard<'_, T>,
    changed: &Condvar,
    lsn: Lsn,
    timeout: Duration,
    confirmed: impl Fn(&T) -> Option<Lsn>,
) -> Result<Lsn, Timeout> {
    let deadline = Instant::now() + timeout;
    loop {
        let now_confirmed = confirmed(&guard);
        if let Some(at) = now_confirmed.filter(|c| *c >= lsn) {
            return Ok(at);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(Timeout {
                confirmed_flush_lsn: now_confirmed,
            });
        }
        guard = changed
            .wait_timeout(guard, deadline - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}
