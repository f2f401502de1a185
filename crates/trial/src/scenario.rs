//! A scenario: a class of the field's failures as data. A workload committed before the
//! consumer starts (so that the faults' counts name exact transactions), the proxy's
//! fault rules on the consumer's stream, cues the trial acts on as the consumer confirms,
//! and steps after it has caught up.
//!
//! The built-in catalogue is [`catalogue`]; a file of the same form (a JSON array of
//! scenarios) adds a user's own ([`parse`]).

use serde::{Deserialize, Serialize};

use crate::workload::Step;
use pgoutput_harness::faults::Fault;

/// One scenario. See the trial guide (docs/trial.md) for the format, field by field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// What `--scenario` selects it by: lower case, words joined by `-`.
    pub name: String,
    /// The failure class it shows.
    pub class: String,
    /// What a correct consumer does.
    pub expect: String,
    /// The field's reports of the class.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reports: Vec<String>,
    /// Committed before the consumer starts.
    pub workload: Vec<Step>,
    /// The proxy's rules on the consumer's stream (the control API's JSON; the slot is
    /// the scenario's, unless a rule names one). Alternatives: the scenario happened when
    /// one of them fired (a point of the stream is a Commit, or a Stream Commit when the
    /// consumer asked for streaming).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<Fault>,
    /// What the trial does once the consumer confirmed a transaction of the workload.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cues: Vec<Cue>,
    /// How often the proxy's slots persist what consumers confirmed (PostgreSQL's
    /// checkpoints): a crash sends again what was confirmed since the last one. None:
    /// the upstream hears every status update as it comes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_interval_ms: Option<u64>,
    /// Committed once the consumer has confirmed the workload's end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub then: Vec<Step>,
    /// The least budget a correct consumer needs here, when it is more than the trial's:
    /// a silence is noticed after the consumer's own timeout (PostgreSQL's
    /// `wal_receiver_timeout` is 60 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_ms: Option<u64>,
    /// Once a `stall` rule holds the consumer's connection, the slot stays held (55006 to
    /// START_REPLICATION) this long after that connection ends: a server whose
    /// `wal_sender_timeout` has not yet ended the walsender of the half-open connection
    /// when the consumer gives it up. None: the slot is free as soon as it leaves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_after_stall_ms: Option<u64>,
}

/// An action once the consumer has confirmed the end of the workload's `transaction`-th
/// committed transaction (from 1; 0: as soon as it streams).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cue {
    pub confirmed: usize,
    #[serde(rename = "do")]
    pub action: CueAction,
    /// How long `hold_slot` holds the slot (3000 unless told).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ms: Option<u64>,
}

/// What a cue does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CueAction {
    /// SIGKILL the consumer's process group at once, then start it again: what it
    /// confirmed must have been durable.
    KillConsumer,
    /// The proxy's crash: every connection cut, the slot back at its last checkpoint.
    Crash,
    /// The slot dropped on the source (its walsender ended first), as after a failover
    /// that lost it or an operator's cleanup: the consumer must fail loudly (exit, or
    /// keep failing), not make a new slot and go on past what it never received.
    DropSlot,
    /// The slot invalidated (as when it fell behind `max_slot_wal_keep_size`): its
    /// walsender ended, and START_REPLICATION of it refused with 55000 from then on. The
    /// consumer must fail loudly, as for a dropped slot.
    InvalidateSlot,
    /// The walsender ended, and the slot still held for `ms` after (55006 to
    /// START_REPLICATION of it), as when PostgreSQL has not yet noticed that the lost
    /// connection's walsender is gone: the consumer must try again until it is free,
    /// without a crash loop and without losing anything.
    HoldSlot,
}

impl Scenario {
    /// Why the scenario needs a consumer the trial starts, when it does: it kills and
    /// starts the consumer, or a correct one passes by exiting.
    #[must_use]
    pub fn needs_its_process(&self) -> Option<&'static str> {
        let cues = || self.cues.iter().map(|cue| cue.action);
        if cues().any(|a| a == CueAction::KillConsumer) {
            Some("it kills the consumer and starts it again")
        } else if cues().any(|a| matches!(a, CueAction::DropSlot | CueAction::InvalidateSlot)) {
            Some("a correct consumer passes it by exiting, and again when started again")
        } else {
            None
        }
    }
}

/// Scenarios from JSON: an array of them.
///
/// # Errors
///
/// What does not parse, with its line and column; two scenarios with one name.
pub fn parse(json: &str) -> Result<Vec<Scenario>, String> {
    let scenarios: Vec<Scenario> = serde_json::from_str(json).map_err(|e| e.to_string())?;
    for (i, scenario) in scenarios.iter().enumerate() {
        if scenarios[..i].iter().any(|s| s.name == scenario.name) {
            return Err(format!("two scenarios are named {:?}", scenario.name));
        }
        crate::workload::plan(&scenario.workload, 0)
            .map_err(|e| format!("{}: workload: {e}", scenario.name))?;
        for fault in &scenario.faults {
            fault
                .check()
                .map_err(|e| format!("{}: fault: {e}", scenario.name))?;
        }
    }
    Ok(scenarios)
}

/// The built-in catalogue, one scenario per class of the field's failures.
#[must_use]
pub fn catalogue() -> Vec<Scenario> {
    parse(include_str!("../scenarios.json")).expect("the built-in catalogue parses")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalogue_parses_and_names_each_scenario_once() {
        let scenarios = catalogue();
        assert!(scenarios.len() >= 5);
        assert!(scenarios.iter().all(|s| !s.workload.is_empty()));
    }

    #[test]
    fn a_bad_scenario_is_refused_with_its_name() {
        let err = parse(
            r#"[{"name": "x", "class": "c", "expect": "e", "workload": [{"do": "commit"}]}]"#,
        )
        .unwrap_err();
        assert!(err.starts_with("x: workload: step 1"), "{err}");
        assert!(parse(
            r#"[{"name": "x", "class": "c", "expect": "e", "workload": [], "colour": 1}]"#
        )
        .is_err());
    }
}
