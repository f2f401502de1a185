//! The `time` rules of one streaming connection: each fires once on it, when the
//! connection's clock (from its START_REPLICATION) passes the rule's `ms`.

use std::time::{Duration, Instant};

use super::{Action, Plan, Rules, Scope, Trigger};

/// A streaming connection's clock, and how far the time rules have been looked at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    started: Instant,
    /// The milliseconds after the start up to which the rules have fired.
    checked: Option<u64>,
}

impl Clock {
    /// The clock of a stream that started at `started`.
    pub(crate) fn start(started: Instant) -> Clock {
        Clock {
            started,
            checked: None,
        }
    }

    /// When the next `time` rule in `scope` is due (a rule added since is seen too).
    pub(crate) fn next(&self, plan: &Plan, copy: &mut Rules, scope: &Scope) -> Option<Instant> {
        let ms = plan.next_time(copy, scope, self.checked)?;
        Some(self.started + Duration::from_millis(ms))
    }

    /// The `time` rules in `scope` whose moment has come by `now`, claimed.
    pub(crate) fn due(
        &mut self,
        plan: &Plan,
        copy: &mut Rules,
        scope: &Scope,
        now: Instant,
    ) -> Vec<(Trigger, Action)> {
        if !plan.armed() {
            return Vec::new();
        }
        let elapsed = u64::try_from(now.saturating_duration_since(self.started).as_millis())
            .unwrap_or(u64::MAX);
        let checked = self.checked.replace(elapsed);
        plan.fire(copy, Some(scope), |trigger| {
            matches!(trigger, Trigger::Time { ms } if *ms <= elapsed && checked.is_none_or(|c| *ms > c))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Fault;

    #[test]
    fn a_time_rule_fires_once_when_the_clock_passes_it() {
        let plan = Plan::default();
        plan.add(Fault::new(Trigger::Time { ms: 100 }, Action::RequestReply).times(0));
        let scope = Scope::default();
        let start = Instant::now();
        let mut clock = Clock::start(start);
        let mut copy = Rules::default();
        assert_eq!(
            clock.next(&plan, &mut copy, &scope),
            Some(start + Duration::from_millis(100))
        );
        assert!(clock
            .due(&plan, &mut copy, &scope, start + Duration::from_millis(99))
            .is_empty());
        assert_eq!(
            clock
                .due(&plan, &mut copy, &scope, start + Duration::from_millis(100))
                .len(),
            1
        );
        // Every time, but once on each connection's clock.
        assert!(clock
            .due(&plan, &mut copy, &scope, start + Duration::from_millis(500))
            .is_empty());
        assert_eq!(clock.next(&plan, &mut copy, &scope), None);
        let mut other = Clock::start(start);
        assert_eq!(
            other
                .due(&plan, &mut copy, &scope, start + Duration::from_secs(1))
                .len(),
            1
        );
    }
}
