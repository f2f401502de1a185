//! What the fault rules keep of one stream, on either side: who it is for them (its
//! scope), where each frame it sends stands (the tracker), its copy of the rules, the
//! `time` rules' clock and a `slow` action in force. The test server and the proxy keep
//! one for each START_REPLICATION and ask it at every frame and timer; what it answers,
//! each carries out on its own sockets.

use std::sync::Arc;
use std::time::Instant;

use super::clock::Clock;
use super::frame::Fired;
use super::{Action, Effect, Facts, Pace, Plan, Point, Rules, Scope, Tracker, Trigger};
use pgoutput_codec::Ctx;

#[derive(Debug)]
pub(crate) struct StreamFaults {
    /// Who this stream is for the fault rules.
    pub(crate) scope: Arc<Scope>,
    /// Where each frame it sends stands in the stream.
    pub(crate) tracker: Tracker,
    /// This stream's copy of the rules.
    rules: Rules,
    clock: Clock,
    /// A `slow` action in force.
    pub(crate) pace: Option<Pace>,
}

impl StreamFaults {
    /// The faults of a stream of `scope` whose options make `ctx` (none: not known),
    /// started at `started`.
    pub(crate) fn new(scope: Scope, ctx: Option<Ctx>, started: Instant) -> StreamFaults {
        StreamFaults {
            scope: Arc::new(scope),
            tracker: Tracker::new(ctx),
            rules: Rules::default(),
            clock: Clock::start(started),
            pace: None,
        }
    }

    /// Whether a rule of `plan` may fire at some point of the frame with `facts`.
    pub(crate) fn may_fire(&mut self, plan: &Plan, facts: &Facts) -> bool {
        plan.may_fire_at_frame(&mut self.rules, &self.scope, facts)
    }

    /// The rules of `plan` that fire at `point` of a frame of `len` bytes, claimed.
    pub(crate) fn at_frame(
        &mut self,
        plan: &Plan,
        point: Point,
        facts: &Facts,
        len: usize,
    ) -> Vec<Fired> {
        plan.at_frame(&mut self.rules, &self.scope, point, facts, len)
    }

    /// When the next `time` rule of `plan` is due for this stream.
    pub(crate) fn next_time(&mut self, plan: &Plan) -> Option<Instant> {
        self.clock.next(plan, &mut self.rules, &self.scope)
    }

    /// The `time` rules of `plan` whose moment has come by `now`, claimed.
    pub(crate) fn due(&mut self, plan: &Plan, now: Instant) -> Vec<(Trigger, Action)> {
        self.clock.due(plan, &mut self.rules, &self.scope, now)
    }

    /// What `action`, firing now on this stream of a server of `major`, asks of the
    /// side: what is the stream's own to keep (a `slow` action's pace) it keeps here.
    pub(crate) fn fire(&mut self, action: &Action, major: u32) -> Effect {
        let slot = self.scope.slot.as_deref().unwrap_or_default();
        let effect = action.effect(&self.tracker.context(slot, major));
        if let Effect::Pace(pace) = effect {
            // For the rest of the stream, on either side.
            self.pace = Some(pace);
        }
        effect
    }
}
