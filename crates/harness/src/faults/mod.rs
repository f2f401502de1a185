//! Fault rules: at an exact protocol event (*when*), something goes wrong (*what*), so a
//! test can make a consumer meet the failures it breaks on, on cue: a connection dropped
//! after the third Insert of transaction 5, a reset after byte 7 of a CopyData frame, a
//! walsender that stops answering, an ERROR a real server sends, a crash that re-sends
//! what the consumer already confirmed.
//!
//! The rules look at the frames a connection sends, whatever produced them (the test
//! server's renderer, or a real PostgreSQL behind the proxy): each frame's meaning
//! (message type, transaction number, change number, stream block) comes from the typed
//! message through a tracker, one per streaming connection. The connection
//! asks the plan (shared by every connection) before and after each frame; a rule that
//! matches is claimed there, so that a rule with `times: 1` fires once in the whole
//! server, whichever connection gets there first.
//!
//! A rule in JSON (the same in `--config`'s `"faults"` and the control API):
//!
//! ```json
//! {"when": {"on": "change", "transaction": 5, "after": 3},
//!  "then": {"do": "close"}, "slot": "s", "times": 1}
//! ```

mod action;
mod clock;
mod course;
mod frame;
mod stream;
mod trigger;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use pgoutput_codec::Lsn;

pub use action::Action;
pub(crate) use action::{Context, Effect, End, OnConnect, Pace, Shutdown, ShutdownStep};
pub(crate) use course::{Course, Step};
pub(crate) use frame::{Facts, Point, Tracker};
pub(crate) use stream::StreamFaults;
pub use trigger::{MessageKind, Trigger};

/// A rule: when [`Trigger`] happens on a connection in scope, [`Action`] is done, at most
/// `times` times over the server's life (once unless told; 0: every time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// The protocol event.
    pub when: Trigger,
    /// What goes wrong then.
    pub then: Action,
    /// Only connections streaming from this slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    /// Only connections with this `application_name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_name: Option<String>,
    /// Only the n-th START_REPLICATION (1-based) of the slot, or of the server when no
    /// slot is named: "the second time the consumer connects".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<u64>,
    /// How many times the rule fires (0: every time it matches).
    #[serde(default = "once")]
    pub times: u64,
}

fn once() -> u64 {
    1
}
/// A fault rule that cannot work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultError(pub String);

impl fmt::Display for FaultError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FaultError {}

impl Fault {
    /// A rule doing `then` once when `when` happens, on any connection.
    #[must_use]
    pub fn new(when: Trigger, then: Action) -> Fault {
        Fault {
            when,
            then,
            slot: None,
            application_name: None,
            connection: None,
            times: 1,
        }
    }

    /// Only on connections streaming from `slot`.
    #[must_use]
    pub fn slot(mut self, slot: &str) -> Fault {
        self.slot = Some(slot.to_owned());
        self
    }

    /// Only on connections with this `application_name`.
    #[must_use]
    pub fn application_name(mut self, name: &str) -> Fault {
        self.application_name = Some(name.to_owned());
        self
    }

    /// Only on the n-th START_REPLICATION (1-based) of the slot (or of the server).
    #[must_use]
    pub fn connection(mut self, n: u64) -> Fault {
        self.connection = Some(n);
        self
    }

    /// Fires at most `times` times (0: every time).
    #[must_use]
    pub fn times(mut self, times: u64) -> Fault {
        self.times = times;
        self
    }

    /// Whether the rule can work.
    ///
    /// # Errors
    ///
    /// A count of 0, an action its trigger does not allow, a malformed SQLSTATE, or one
    /// with no known wording and no message.
    pub fn check(&self) -> Result<(), FaultError> {
        let bad = |text: String| Err(FaultError(text));
        match &self.when {
            Trigger::Message { n: 0, .. } => return bad("message n counts from 1".into()),
            Trigger::Message {
                before: true,
                byte: Some(_),
                ..
            } => return bad("a message trigger is `before` or at a `byte`, not both".into()),
            Trigger::Message { byte: Some(0), .. } => {
                return bad("byte counts from 1 (for none, use before: true)".into())
            }
            Trigger::Commit { transaction: 0 }
            | Trigger::Change { transaction: 0, .. }
            | Trigger::StreamBlock { transaction: 0, .. } => {
                return bad("transaction counts from 1".into())
            }
            Trigger::StreamBlock { block: 0, .. } => return bad("block counts from 1".into()),
            Trigger::Connect { attempt: 0 } => return bad("attempt counts from 1".into()),
            _ => {}
        }
        if self.connection == Some(0) {
            return bad("connection counts from 1".into());
        }
        if let Trigger::Connect { .. } = self.when {
            if self.then.on_connect(0).is_none() {
                return bad(format!(
                    "{:?} needs a streaming connection; on connect only close, reset, stall, error and crash work",
                    self.then
                ));
            }
            if self.slot.is_some() || self.application_name.is_some() || self.connection.is_some() {
                return bad("a connect trigger comes before the slot and application_name are known: no slot, application_name or connection scope".into());
            }
        }
        if let Trigger::Message { byte: Some(_), .. } = self.when {
            if self.then.sends() {
                return bad(format!(
                    "{:?} sends a message of its own, which goes between frames: before or after a message, not at a byte",
                    self.then
                ));
            }
        }
        self.then.check()
    }
}
/// Who a connection is, for the rules' scopes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scope {
    pub slot: Option<String>,
    pub application_name: String,
    /// The connection's START_REPLICATION number for its slot, and for the server.
    pub of_slot: u64,
    pub of_server: u64,
}

impl Fault {
    fn in_scope(&self, scope: &Scope) -> bool {
        if let Some(slot) = &self.slot {
            if scope.slot.as_deref() != Some(slot.as_str()) {
                return false;
            }
        }
        if let Some(name) = &self.application_name {
            if *name != scope.application_name {
                return false;
            }
        }
        match self.connection {
            Some(n) if self.slot.is_some() => scope.of_slot == n,
            Some(n) => scope.of_server == n,
            None => true,
        }
    }
}

/// A rule and how often it has fired: shared by the plan and every connection's copy of
/// the rules, so that a firing is claimed once whichever connection gets there first.
#[derive(Debug)]
struct Rule {
    fault: Fault,
    fired: AtomicU64,
}

impl Rule {
    /// Whether it may fire again.
    fn left(&self) -> bool {
        self.fault.times == 0 || self.fired.load(Ordering::Acquire) < self.fault.times
    }

    /// Counts one firing, unless another connection took the last one meanwhile.
    fn claim(&self) -> bool {
        let times = self.fault.times;
        self.fired
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |fired| {
                (times == 0 || fired < times).then_some(fired + 1)
            })
            .is_ok()
    }
}

/// The rules as they stand, replaced whole when they change.
type RuleSet = Arc<[Arc<Rule>]>;

/// A connection's copy of the plan's rules: asked at every frame without a lock, taken
/// again (under the plan's lock) only when the rules changed since.
#[derive(Debug, Default)]
pub(crate) struct Rules {
    generation: u64,
    rules: RuleSet,
}

/// The server's rules, with how often each has fired.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    rules: Mutex<RuleSet>,
    /// Counts the changes of `rules` (made under its lock): a connection's copy of an
    /// older generation is taken again.
    generation: AtomicU64,
    /// Whether there are rules at all: checked on every frame first.
    armed: AtomicBool,
}

impl Plan {
    fn lock(&self) -> std::sync::MutexGuard<'_, RuleSet> {
        self.rules.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn add(&self, fault: Fault) {
        let mut rules = self.lock();
        let rule = Arc::new(Rule {
            fault,
            fired: AtomicU64::new(0),
        });
        *rules = rules.iter().cloned().chain([rule]).collect();
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.armed.store(true, Ordering::SeqCst);
    }

    pub(crate) fn clear(&self) {
        let mut rules = self.lock();
        *rules = RuleSet::default();
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.armed.store(false, Ordering::SeqCst);
    }

    pub(crate) fn faults(&self) -> Vec<(Fault, u64)> {
        self.lock()
            .iter()
            .map(|r| (r.fault.clone(), r.fired.load(Ordering::Acquire)))
            .collect()
    }

    pub(crate) fn armed(&self) -> bool {
        self.armed.load(Ordering::Relaxed)
    }

    /// The rules as they stand, through `copy` (taken again only if they changed).
    fn current<'c>(&self, copy: &'c mut Rules) -> &'c [Arc<Rule>] {
        if copy.generation != self.generation.load(Ordering::Acquire) {
            let rules = self.lock();
            copy.rules = Arc::clone(&rules);
            copy.generation = self.generation.load(Ordering::Acquire);
        }
        &copy.rules
    }

    /// The actions of the rules in `scope` that `matches` picks, each claimed (its
    /// firing counted) before it is returned, in the order the rules were added; `copy`
    /// is the connection's copy of the rules.
    pub(crate) fn fire(
        &self,
        copy: &mut Rules,
        scope: Option<&Scope>,
        mut matches: impl FnMut(&Trigger) -> bool,
    ) -> Vec<(Trigger, Action)> {
        if !self.armed() {
            return Vec::new();
        }
        let mut actions = Vec::new();
        for rule in self.current(copy) {
            let scoped = scope.is_none_or(|scope| rule.fault.in_scope(scope));
            if rule.left() && scoped && matches(&rule.fault.when) && rule.claim() {
                actions.push((rule.fault.when.clone(), rule.fault.then.clone()));
            }
        }
        actions
    }

    /// The `flush` rules in `scope` a status update confirming `flush_lsn` meets,
    /// claimed.
    pub(crate) fn flushed(&self, scope: Option<&Scope>, flush_lsn: Lsn) -> Vec<(Trigger, Action)> {
        self.fire(
            &mut Rules::default(),
            scope,
            |trigger| matches!(trigger, Trigger::Flush { lsn } if flush_lsn >= *lsn),
        )
    }

    /// The `connect` rules of the `attempt`-th connection to a server of `major`,
    /// claimed: each action with what it asks of the connection (only those that work on
    /// connect are armed there).
    pub(crate) fn connecting(&self, attempt: u64, major: u32) -> Vec<(Action, OnConnect)> {
        self.fire(
            &mut Rules::default(),
            None,
            |trigger| matches!(trigger, Trigger::Connect { attempt: a } if *a == attempt),
        )
        .into_iter()
        .filter_map(|(_, action)| {
            let effect = action.on_connect(major)?;
            Some((action, effect))
        })
        .collect()
    }

    /// The earliest `Time` trigger for `scope` after `after_ms` (each connection fires a
    /// time rule once, when its clock passes it), in ms after the start.
    pub(crate) fn next_time(
        &self,
        copy: &mut Rules,
        scope: &Scope,
        after_ms: Option<u64>,
    ) -> Option<u64> {
        if !self.armed() {
            return None;
        }
        self.current(copy)
            .iter()
            .filter(|r| r.left())
            .filter(|r| r.fault.in_scope(scope))
            .filter_map(|r| match r.fault.when {
                Trigger::Time { ms } if after_ms.is_none_or(|after| ms > after) => Some(ms),
                _ => None,
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_fires_as_often_as_it_may_in_its_scope() {
        let plan = Plan::default();
        assert!(plan.fire(&mut Rules::default(), None, |_| true).is_empty());
        plan.add(Fault::new(Trigger::Commit { transaction: 1 }, Action::Close).slot("a"));
        plan.add(Fault::new(Trigger::Commit { transaction: 1 }, Action::Reset).times(0));
        let a = Scope {
            slot: Some("a".into()),
            ..Scope::default()
        };
        let b = Scope {
            slot: Some("b".into()),
            ..Scope::default()
        };
        let fire = |scope: &Scope| -> Vec<Action> {
            plan.fire(&mut Rules::default(), Some(scope), |_| true)
                .into_iter()
                .map(|(_, action)| action)
                .collect()
        };
        assert_eq!(fire(&b), vec![Action::Reset]);
        assert_eq!(fire(&a), vec![Action::Close, Action::Reset]);
        assert_eq!(fire(&a), vec![Action::Reset]);
        assert_eq!(plan.faults()[0].1, 1);
        assert_eq!(plan.faults()[1].1, 3);
    }

    #[test]
    fn each_connection_sees_the_rules_as_they_change_and_a_firing_is_claimed_once() {
        let plan = Plan::default();
        let (mut one, mut two) = (Rules::default(), Rules::default());
        let all = |copy: &mut Rules| plan.fire(copy, None, |_| true).len();
        assert_eq!(all(&mut one), 0);
        plan.add(Fault::new(
            Trigger::Commit { transaction: 1 },
            Action::Close,
        ));
        // Seen by a copy taken before it was added; fired once between the two.
        assert_eq!(all(&mut one), 1);
        assert_eq!(all(&mut two), 0);
        plan.add(Fault::new(Trigger::Commit { transaction: 1 }, Action::Reset).times(2));
        assert_eq!((all(&mut two), all(&mut one), all(&mut two)), (1, 1, 0));
        assert_eq!(plan.faults()[0].1, 1);
        assert_eq!(plan.faults()[1].1, 2);
        plan.clear();
        plan.add(Fault::new(
            Trigger::Commit { transaction: 1 },
            Action::Close,
        ));
        assert_eq!((all(&mut one), all(&mut two)), (1, 0));
    }

    #[test]
    fn rules_read_from_json_and_checked() {
        let fault: Fault = serde_json::from_str(
            r#"{"when": {"on": "change", "transaction": 5, "after": 3}, "then": {"do": "close"}, "slot": "s"}"#,
        )
        .unwrap();
        assert_eq!(
            fault,
            Fault::new(
                Trigger::Change {
                    transaction: 5,
                    after: 3
                },
                Action::Close
            )
            .slot("s")
        );
        assert_eq!(fault.check(), Ok(()));
        let json = serde_json::to_string(&fault).unwrap();
        assert_eq!(serde_json::from_str::<Fault>(&json).unwrap(), fault);
        let mid_frame: Fault = serde_json::from_str(
            r#"{"when": {"on": "message", "n": 4, "kind": "insert", "byte": 7}, "then": {"do": "reset"}, "times": 0}"#,
        )
        .unwrap();
        assert_eq!(mid_frame.times, 0);
        assert_eq!(mid_frame.check(), Ok(()));
        let unknown = serde_json::from_str::<Fault>(
            r#"{"when": {"on": "commit", "transaction": 1}, "then": {"do": "explode"}}"#,
        );
        assert!(unknown
            .unwrap_err()
            .to_string()
            .contains("unknown variant `explode`"));
        let no_message = Fault::new(Trigger::Time { ms: 10 }, Action::error("42P01"));
        assert!(no_message
            .check()
            .unwrap_err()
            .0
            .contains("no default message"));
        let on_connect = Fault::new(Trigger::Connect { attempt: 1 }, Action::RequestReply);
        assert!(on_connect
            .check()
            .unwrap_err()
            .0
            .contains("on connect only"));
        let zero = Fault::new(Trigger::Commit { transaction: 0 }, Action::Close);
        assert!(zero.check().is_err());
    }
}
