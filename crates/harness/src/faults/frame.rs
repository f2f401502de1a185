//! What a frame means to the rules: where in it a rule fires, what it counts as, and
//! the rules that fire there, in the order their bytes come.

use super::{Action, Context, MessageKind, Plan, Rules, Scope, Trigger};
use pgoutput_codec::{Ctx, Lsn, Tagged, Xid};
use pgoutput_codec::{Follower, Place};

/// Where in a frame a rule fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Point {
    /// Before the frame is written.
    Before,
    /// After some of its bytes (a trigger's `byte`).
    Within,
    /// After the whole frame.
    After,
}

/// A rule that fired at a frame: its action, done once the frame's first `upto` bytes
/// have gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fired {
    pub trigger: Trigger,
    pub action: Action,
    pub upto: usize,
}

impl Plan {
    /// The rules in `scope` that fire at `point` of a frame of `len` bytes with
    /// `facts`, claimed, in the order of their bytes (`copy`: the connection's rules).
    pub(crate) fn at_frame(
        &self,
        copy: &mut Rules,
        scope: &Scope,
        point: Point,
        facts: &Facts,
        len: usize,
    ) -> Vec<Fired> {
        let claimed = self.fire(copy, Some(scope), |trigger| {
            frame_matches(trigger, point, facts)
        });
        if claimed.is_empty() {
            // The common case, three times a frame: nothing to move or drop.
            return Vec::new();
        }
        let mut fired: Vec<Fired> = claimed
            .into_iter()
            .map(|(trigger, action)| {
                let upto = match (point, &trigger) {
                    (Point::Before, _) => 0,
                    (_, Trigger::Message { byte: Some(b), .. }) => (*b).min(len),
                    _ => len,
                };
                Fired {
                    trigger,
                    action,
                    upto,
                }
            })
            .collect();
        fired.sort_by_key(|f| f.upto);
        fired
    }
}

impl Plan {
    /// Whether a rule in `scope` may fire at some point of a frame with `facts`, nothing
    /// claimed: asked once a frame, so that a frame no rule waits for (every frame but
    /// the few a test names) costs one pass over the rules rather than three.
    pub(crate) fn may_fire_at_frame(&self, copy: &mut Rules, scope: &Scope, facts: &Facts) -> bool {
        self.armed()
            && self.current(copy).iter().any(|rule| {
                rule.left()
                    && rule.fault.in_scope(scope)
                    && [Point::Before, Point::Within, Point::After]
                        .into_iter()
                        .any(|point| frame_matches(&rule.fault.when, point, facts))
            })
    }
}

/// What one frame means, in the counts the triggers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Facts {
    pub kind: MessageKind,
    /// The message's number on the connection, and among messages of its kind.
    pub number: u64,
    pub number_of_kind: u64,
    /// Its transaction, change and block.
    pub place: Place,
}

/// Counts the messages a connection sends, by kind, and follows their transactions:
/// what the triggers count, and where an action's message of its own would stand.
#[derive(Debug)]
pub(crate) struct Tracker {
    messages: u64,
    /// Messages sent by kind, indexed by their tag byte.
    by_kind: [u64; 256],
    follower: Follower,
    /// The stream's pgoutput context outside a stream block, if its options are known.
    ctx: Option<Ctx>,
    /// The WAL position of the last message counted (the one at a rule's point).
    position: Lsn,
}

impl Tracker {
    /// A stream whose options make `ctx` (none: not known).
    pub(crate) fn new(ctx: Option<Ctx>) -> Tracker {
        Tracker {
            messages: 0,
            by_kind: [0; 256],
            follower: Follower::default(),
            ctx: ctx.and_then(|c| c.with_in_stream(false).ok()),
            position: Lsn(0),
        }
    }

    /// Counts `message` (a message, or its outline), sent at `position`, and says what it
    /// was.
    pub(crate) fn frame<T: Tagged + ?Sized>(&mut self, position: Lsn, message: &T) -> Facts {
        self.position = position;
        self.messages += 1;
        let of_kind = &mut self.by_kind[usize::from(message.tag())];
        *of_kind += 1;
        Facts {
            kind: MessageKind::of_message(message),
            number: self.messages,
            number_of_kind: *of_kind,
            place: self.follower.follow(message),
        }
    }

    /// Whether no transaction is open on the connection.
    pub(crate) fn idle(&self) -> bool {
        self.follower.idle()
    }

    /// What an action firing on this stream of `slot` on a server of `major` depends on.
    pub(crate) fn context<'a>(&self, slot: &'a str, major: u32) -> Context<'a> {
        let in_block = self.follower.in_block();
        Context {
            slot,
            major,
            // The xid of the last transaction begun, for error wordings that name it.
            xid: self.follower.xid().unwrap_or(Xid(0)),
            ctx: self.ctx.and_then(|c| c.with_in_stream(in_block).ok()),
            position: self.position,
        }
    }
}

/// Whether `trigger` fires at `point` of a frame with `facts`.
pub(crate) fn frame_matches(trigger: &Trigger, point: Point, facts: &Facts) -> bool {
    match *trigger {
        Trigger::Message {
            n,
            kind,
            before,
            byte,
        } => {
            let number = match kind {
                Some(kind) if facts.kind != kind => return false,
                Some(_) => facts.number_of_kind,
                None => facts.number,
            };
            let at = match (before, byte) {
                (true, _) => Point::Before,
                (false, Some(_)) => Point::Within,
                (false, None) => Point::After,
            };
            number == n && at == point
        }
        Trigger::Commit { transaction } => {
            point == Point::After
                && facts.place.ends
                && facts.place.transaction == Some(transaction)
        }
        Trigger::Change { transaction, after } => {
            point == Point::After
                && facts.place.transaction == Some(transaction)
                && if after == 0 {
                    facts.place.opens
                } else {
                    facts.place.change == Some(after)
                }
        }
        Trigger::StreamBlock { transaction, block } => {
            point == Point::After
                && facts.place.transaction == Some(transaction)
                && facts.place.block == Some(block)
        }
        Trigger::Time { .. } | Trigger::Flush { .. } | Trigger::Connect { .. } => false,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::faults::Fault;
    use pgoutput_codec::{
        Begin, Commit, Insert, PgOutputMessage, PgTimestamp, ProtocolVersion, StreamStart,
        Streaming, TupleData,
    };

    /// A begin of transaction 750 (for the rules' tests).
    pub(in crate::faults) fn begin() -> PgOutputMessage<'static> {
        PgOutputMessage::Begin(Begin {
            final_lsn: Lsn(0x100),
            commit_timestamp: PgTimestamp(0),
            xid: Xid(750),
        })
    }

    /// An insert of transaction 750 (for the rules' tests).
    pub(in crate::faults) fn insert() -> PgOutputMessage<'static> {
        PgOutputMessage::Insert(Insert {
            xid: None,
            relation_oid: pgoutput_codec::Oid(16385),
            new_tuple: TupleData::default(),
        })
    }

    /// A commit of transaction 750 (for the rules' tests).
    pub(in crate::faults) fn commit() -> PgOutputMessage<'static> {
        PgOutputMessage::Commit(Commit {
            flags: 0,
            commit_lsn: Lsn(0x100),
            end_lsn: Lsn(0x148),
            commit_timestamp: PgTimestamp(0),
        })
    }

    #[test]
    fn frames_are_counted_on_the_connection_and_by_kind() {
        let mut tracker = Tracker::new(None);
        let facts: Vec<Facts> = [begin(), insert(), insert(), commit(), begin(), insert()]
            .iter()
            .map(|m| tracker.frame(Lsn(0x10), m))
            .collect();
        assert_eq!(facts[5].number, 6);
        assert_eq!(facts[5].number_of_kind, 3);
        assert_eq!(facts[5].kind, MessageKind::of::<Insert<'_>>());
        assert_eq!(
            (facts[5].place.transaction, facts[5].place.change),
            (Some(2), Some(1))
        );
        assert!(facts[3].place.ends);
        let on = tracker.context("s", 15);
        assert_eq!((on.xid, on.position, on.ctx), (Xid(750), Lsn(0x10), None));
    }

    #[test]
    fn an_action_sees_the_streams_context_where_it_fires() {
        let streaming = Ctx::new(ProtocolVersion::V2, Streaming::On).unwrap();
        let mut tracker = Tracker::new(Some(streaming));
        assert_eq!(tracker.context("s", 16).ctx, Some(streaming));
        let start = PgOutputMessage::StreamStart(StreamStart {
            xid: Xid(812),
            first_segment: true,
        });
        tracker.frame(Lsn(0x30), &start);
        let on = tracker.context("s", 16);
        assert!(on.ctx.is_some_and(|c| c.in_stream()));
        assert_eq!(on.position, Lsn(0x30));
    }

    #[test]
    fn triggers_match_at_their_point() {
        let mut tracker = Tracker::new(None);
        tracker.frame(Lsn(0x10), &begin());
        // A frame's facts are read before it is written: `before` rules see them too.
        let facts = tracker.frame(Lsn(0x20), &insert());
        let third = Trigger::before_message(2);
        assert!(frame_matches(&third, Point::Before, &facts));
        assert!(!frame_matches(&third, Point::After, &facts));
        let change = Trigger::Change {
            transaction: 1,
            after: 1,
        };
        assert!(frame_matches(&change, Point::After, &facts));
        let first_insert = Trigger::Message {
            n: 1,
            kind: Some(MessageKind::of::<Insert<'_>>()),
            before: false,
            byte: Some(9),
        };
        assert!(frame_matches(&first_insert, Point::Within, &facts));
        assert!(!frame_matches(&first_insert, Point::After, &facts));
    }

    #[test]
    fn rules_at_a_frame_come_in_the_order_of_their_bytes() {
        let plan = Plan::default();
        for (byte, action) in [(20, Action::Reset), (7, Action::Close)] {
            plan.add(Fault::new(Trigger::mid_frame(1, byte), action));
        }
        plan.add(Fault::new(Trigger::mid_frame(1, 99), Action::Shutdown));
        plan.add(Fault::new(Trigger::before_message(1), Action::RequestReply));
        let facts = Tracker::new(None).frame(Lsn(0x10), &begin());
        let scope = Scope::default();
        let mut copy = Rules::default();
        let mut at = |point| -> Vec<(usize, Action)> {
            plan.at_frame(&mut copy, &scope, point, &facts, 50)
                .into_iter()
                .map(|fired| (fired.upto, fired.action))
                .collect()
        };
        assert_eq!(at(Point::Before), [(0, Action::RequestReply)]);
        // A byte past the frame's end fires at its end.
        assert_eq!(
            at(Point::Within),
            [
                (7, Action::Close),
                (20, Action::Reset),
                (50, Action::Shutdown)
            ]
        );
        assert!(at(Point::After).is_empty());
    }

    #[test]
    fn a_frame_no_rule_waits_for_is_told_apart_without_claiming() {
        let plan = Plan::default();
        plan.add(Fault::new(Trigger::before_message(2), Action::Close));
        let (scope, mut copy) = (Scope::default(), Rules::default());
        let mut tracker = Tracker::new(None);
        let first = tracker.frame(Lsn(0x10), &begin());
        assert!(!plan.may_fire_at_frame(&mut copy, &scope, &first));
        let second = tracker.frame(Lsn(0x20), &insert());
        // Asked twice: nothing claimed by asking, the rule still fires.
        assert!(plan.may_fire_at_frame(&mut copy, &scope, &second));
        assert!(plan.may_fire_at_frame(&mut copy, &scope, &second));
        let fired = plan.at_frame(&mut copy, &scope, Point::Before, &second, 50);
        assert_eq!(fired.len(), 1);
        // Fired once: no longer waited for.
        assert!(!plan.may_fire_at_frame(&mut copy, &scope, &second));
        // A rule of another slot's stream is not this one's.
        plan.add(Fault::new(Trigger::message(2), Action::Close).slot("other"));
        let ours = Scope {
            slot: Some("ours".into()),
            ..Scope::default()
        };
        assert!(!plan.may_fire_at_frame(&mut copy, &ours, &second));
    }
}
