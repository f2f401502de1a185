//! `slow`: from the rule's point on, each message waits `delay_ms` before it goes, or
//! the stream goes at most `bytes_per_second`: a walsender reading WAL from a slow disk,
//! or a thin link.

use std::time::Duration;

use super::{Effect, FaultError};

/// The command line's help: the rule's JSON and what it does.
pub(super) const HELP: &str =
    r#"{"do": "slow", "delay_ms": 100}   or {"do": "slow", "bytes_per_second": 10000}"#;

pub(super) fn check(
    delay_ms: Option<u64>,
    bytes_per_second: Option<u64>,
) -> Result<(), FaultError> {
    match (delay_ms, bytes_per_second) {
        (Some(_), None) | (None, Some(1..)) => Ok(()),
        _ => Err(FaultError(
            "slow takes one of delay_ms and bytes_per_second (above 0)".into(),
        )),
    }
}

pub(super) fn effect(delay_ms: Option<u64>, bytes_per_second: Option<u64>) -> Effect {
    Effect::Pace(match (delay_ms, bytes_per_second) {
        (Some(ms), _) => Pace::Delay(Duration::from_millis(ms)),
        (None, rate) => Pace::Rate {
            bytes_per_second: rate.unwrap_or(1).max(1),
            owed: 0,
        },
    })
}

/// A `slow` action in force on a connection: how long each frame waits before it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pace {
    /// Each frame waits this long.
    Delay(Duration),
    /// The frames go at most this fast: once the bytes owed make a twentieth of a
    /// second's, the frame waits for all of them (a wait per small frame would make the
    /// rate the timer's, not the rule's).
    Rate { bytes_per_second: u64, owed: u64 },
}

impl Pace {
    /// The wait before a frame of `len` bytes goes, if any.
    pub(crate) fn before(&mut self, len: usize) -> Option<Duration> {
        match self {
            Pace::Delay(delay) => Some(*delay),
            Pace::Rate {
                bytes_per_second,
                owed,
            } => {
                *owed += len as u64;
                if *owed < (*bytes_per_second / 20).max(1) {
                    return None;
                }
                let wait = Duration::from_secs_f64(*owed as f64 / *bytes_per_second as f64);
                *owed = 0;
                Some(wait)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_waits_once_a_twentieth_of_a_second_is_owed() {
        let Effect::Pace(mut pace) = effect(None, Some(2_000)) else {
            panic!("slow paces");
        };
        // A twentieth of a second at 2,000 bytes/s is 100 bytes.
        assert_eq!(pace.before(60), None);
        assert_eq!(pace.before(60), Some(Duration::from_millis(60)));
        assert_eq!(pace.before(99), None);
        let Effect::Pace(mut delay) = effect(Some(40), None) else {
            panic!("slow paces");
        };
        assert_eq!(delay.before(1), Some(Duration::from_millis(40)));
        assert_eq!(delay.before(1), Some(Duration::from_millis(40)));
        assert!(check(None, Some(0)).is_err());
        assert!(check(Some(1), Some(1)).is_err());
    }
}
