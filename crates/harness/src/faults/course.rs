//! A frame's course through the rules, without I/O: what the side sending the frame does
//! before, within and after it, one step at a time (in the manner of quinn-proto's polls:
//! the side carries a step out on its own socket, then asks for the next, and stops
//! asking once a step has ended the stream). The test server and the proxy both walk it,
//! so that a rule, a `slow` action and the probe mean the same frame by frame on both.

use std::time::Duration;

use super::frame::Fired;
use super::{Effect, Facts, Plan, Point, StreamFaults};
use crate::judge::Probe;

/// What a frame asks of its side next.
#[derive(Debug)]
pub(crate) enum Step {
    /// A rule fired (its trigger, its action, and how many of the frame's bytes go
    /// before it: none, before the frame, but what came before it) and asks `effect`.
    Act(Fired, Effect),
    /// A `slow` action: what came before the frame goes, then this wait.
    Wait(Duration),
    /// The frame's bytes go now: after what the rules before it did, before those within
    /// it.
    Frame,
    /// The probe holds the transaction after this frame (see [`crate::judge::Hold`]).
    Hold(Probe),
}

/// Where a frame's course stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Before,
    Pace,
    Frame,
    Within,
    After,
    Hold,
    Done,
}

/// One frame's course (see the module's documentation).
#[derive(Debug)]
pub(crate) struct Course {
    stage: Stage,
    facts: Facts,
    /// The frame's length (its CopyData message, header included).
    len: usize,
    /// A rule may fire at some point of it: the points are asked.
    asks: bool,
    /// The probe's hold after the frame, if it holds there.
    probe: Option<Probe>,
    /// The rules that fired at the point asked last, not handed out yet.
    fired: std::vec::IntoIter<Fired>,
    /// The server's major version, for the effects' wordings.
    major: u32,
}

impl Course {
    /// The course of a frame of `len` bytes with `facts`, sent on the stream of
    /// `faults` with the rules of `plan` and the probe `probe`; `None` when nothing can
    /// happen at it (no rule may fire there, no pace, no hold: with no rule armed, two
    /// atomic loads), so the frame goes as it is.
    #[inline]
    pub(crate) fn new(
        faults: &mut StreamFaults,
        plan: &Plan,
        probe: Option<Probe>,
        facts: Facts,
        len: usize,
        major: u32,
    ) -> Option<Course> {
        // Inlined: the frame of a stream with nothing armed pays no call.
        if !plan.armed() && faults.pace.is_none() && probe.is_none() {
            return None;
        }
        let asks = plan.armed() && faults.may_fire(plan, &facts);
        let hold = probe.filter(|p| p.holds(&facts.place));
        if !asks && faults.pace.is_none() && hold.is_none() {
            return None;
        }
        Some(Course {
            stage: Stage::Before,
            asks,
            facts,
            len,
            probe: hold,
            fired: Vec::new().into_iter(),
            major,
        })
    }

    /// The next step, or `None` once the frame's course is over.
    pub(crate) fn next(&mut self, faults: &mut StreamFaults, plan: &Plan) -> Option<Step> {
        loop {
            if let Some(fired) = self.fired.next() {
                let effect = faults.fire(&fired.action, self.major);
                return Some(Step::Act(fired, effect));
            }
            match self.stage {
                Stage::Before => {
                    self.stage = Stage::Pace;
                    self.ask(faults, plan, Point::Before);
                }
                Stage::Pace => {
                    // After the rules before the frame: a `slow` one there paces it too.
                    self.stage = Stage::Frame;
                    if let Some(wait) = faults.pace.as_mut().and_then(|p| p.before(self.len)) {
                        return Some(Step::Wait(wait));
                    }
                }
                Stage::Frame => {
                    self.stage = Stage::Within;
                    return Some(Step::Frame);
                }
                Stage::Within => {
                    self.stage = Stage::After;
                    self.ask(faults, plan, Point::Within);
                }
                Stage::After => {
                    self.stage = Stage::Hold;
                    self.ask(faults, plan, Point::After);
                }
                Stage::Hold => {
                    self.stage = Stage::Done;
                    if let Some(probe) = self.probe.take() {
                        return Some(Step::Hold(probe));
                    }
                }
                Stage::Done => return None,
            }
        }
    }

    /// The rules that fire at `point`, claimed (asked only when some may).
    fn ask(&mut self, faults: &mut StreamFaults, plan: &Plan, point: Point) {
        if self.asks {
            self.fired = faults
                .at_frame(plan, point, &self.facts, self.len)
                .into_iter();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::faults::frame::tests::{begin, commit, insert};
    use crate::faults::{Action, Fault, Scope, Tracker, Trigger};
    use pgoutput_codec::{Lsn, PgOutputMessage};

    fn stream() -> StreamFaults {
        let scope = Scope {
            slot: Some("s".into()),
            ..Scope::default()
        };
        StreamFaults::new(scope, None, Instant::now())
    }

    /// The steps of each frame of `messages`, by name.
    fn walk(plan: &Plan, probe: Option<Probe>, messages: &[PgOutputMessage<'_>]) -> Vec<String> {
        let mut faults = stream();
        let mut tracker = Tracker::new(None);
        let mut steps = Vec::new();
        for message in messages {
            let facts = tracker.frame(Lsn(0x100), message);
            let Some(mut course) = Course::new(&mut faults, plan, probe, facts, 40, 15) else {
                steps.push("quiet".to_owned());
                continue;
            };
            while let Some(step) = course.next(&mut faults, plan) {
                steps.push(match step {
                    Step::Act(fired, _) => format!("{:?} at {}", fired.action, fired.upto),
                    Step::Wait(wait) => format!("wait {}ms", wait.as_millis()),
                    Step::Frame => "frame".to_owned(),
                    Step::Hold(_) => "hold".to_owned(),
                });
            }
        }
        steps
    }

    #[test]
    fn a_frame_with_nothing_armed_goes_as_it_is() {
        let plan = Plan::default();
        assert_eq!(walk(&plan, None, &[begin(), commit()]), ["quiet", "quiet"]);
    }

    #[test]
    fn rules_before_within_and_after_a_frame_come_in_its_order_with_its_pace() {
        let plan = Plan::default();
        let at = |before, byte| Trigger::Message {
            n: 2,
            kind: None,
            before,
            byte,
        };
        plan.add(Fault::new(at(true, None), Action::RequestReply));
        plan.add(Fault::new(
            at(true, None),
            Action::Slow {
                delay_ms: Some(5),
                bytes_per_second: None,
            },
        ));
        plan.add(Fault::new(
            at(false, Some(7)),
            Action::Stall { ms: Some(1) },
        ));
        plan.add(Fault::new(at(false, None), Action::Close));
        let steps = walk(&plan, None, &[begin(), insert()]);
        assert_eq!(
            steps,
            [
                // The first frame: a rule armed, none of them for it.
                "quiet",
                "RequestReply at 0",
                "Slow { delay_ms: Some(5), bytes_per_second: None } at 0",
                // The pace set before the frame is the frame's own.
                "wait 5ms",
                "frame",
                "Stall { ms: Some(1) } at 7",
                "Close at 40",
            ]
        );
    }

    #[test]
    fn the_probe_holds_after_the_frame_it_holds() {
        let plan = Plan::default();
        let probe = Probe::every(1);
        let steps = walk(&plan, Some(probe), &[begin(), insert(), commit()]);
        assert_eq!(steps, ["quiet", "frame", "hold", "quiet"]);
    }
}
