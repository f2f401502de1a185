//! A slot held by a walsender that has not exited yet: START_REPLICATION of it gets 55006
//! ("active for PID …") for a while after its client left, as when PostgreSQL's walsender
//! is slow to exit and release it. The test server and the proxy each keep one per slot
//! a test held; what a hold is and when it ends is said here.

use std::time::{Duration, Instant};

/// A hold of a slot by `holder` (who the error names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold<T> {
    holder: T,
    duration: Duration,
    /// When it ends; `None` while its holder still streams the slot (the time starts when
    /// it leaves).
    until: Option<Instant>,
}

impl<T: Copy> Hold<T> {
    /// Held by `holder` for `duration`: from when it leaves, if it streams the slot now
    /// (`streaming`), else from `now`.
    pub(crate) fn new(holder: T, duration: Duration, streaming: bool, now: Instant) -> Hold<T> {
        Hold {
            holder,
            duration,
            until: (!streaming).then(|| now + duration),
        }
    }

    /// The holder left the slot: the hold's time starts, if it had not.
    pub(crate) fn let_go(&mut self, now: Instant) {
        self.until.get_or_insert(now + self.duration);
    }

    /// Who holds the slot at `now`: the holder, until the time after it left is over.
    pub(crate) fn holder(&self, now: Instant) -> Option<T> {
        match self.until {
            Some(until) if now >= until => None,
            _ => Some(self.holder),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_lasts_its_time_after_the_holder_leaves() {
        let now = Instant::now();
        let second = Duration::from_secs(1);
        let mut hold = Hold::new(7, second, true, now);
        // Still streaming: held however long that takes.
        assert_eq!(hold.holder(now + 10 * second), Some(7));
        hold.let_go(now + 10 * second);
        assert_eq!(hold.holder(now + 10 * second), Some(7));
        assert_eq!(hold.holder(now + 11 * second), None);
        // Letting go again does not move the end.
        hold.let_go(now + 20 * second);
        assert_eq!(hold.holder(now + 11 * second), None);
        // No one streaming it: from now.
        let free = Hold::new(0, second, false, now);
        assert_eq!(free.holder(now), Some(0));
        assert_eq!(free.holder(now + second), None);
    }
}
