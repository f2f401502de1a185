use super::*;

/// A frame at `position`: opening a transaction or not, telling where the record that
/// decides it starts, ending it at `end`.
fn frame(position: u64, opens: bool, decided_at: Option<u64>, end: Option<u64>) -> Frame {
    Frame {
        position: Lsn(position),
        opens,
        decided_at: decided_at.map(Lsn),
        end: end.map(Lsn),
    }
}

/// A transaction whose Begin goes at `first`, one change just after, its Commit at `end`
/// (the commit record starting 8 bytes before).
fn transaction(judge: &mut Judge, connection: u64, first: u64, end: u64) {
    judge.frame_sent(connection, frame(first, true, Some(end - 8), None));
    judge.frame_sent(connection, frame(first + 8, false, None, None));
    judge.frame_sent(connection, frame(end, false, Some(end - 8), Some(end)));
}

/// A judge that finds an idle consumer once its answers have shown it for `patience`
/// rather than [`IDLE_PATIENCE`], so that its tests need not wait 10 s.
fn patient_for(patience: Duration) -> Judge {
    Judge {
        patience: Patience(patience),
        ..Judge::default()
    }
}

/// A judge that finds an idle consumer as soon as its answers show it.
fn impatient() -> Judge {
    patient_for(Duration::ZERO)
}

#[test]
fn a_consumer_cut_before_its_first_status_update_that_confirms_after_reconnecting_has_no_finding() {
    let mut judge = Judge::default();
    judge.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut judge, 1, 110, 200);
    judge.ended(1, Ending::Fault);
    judge.started(2, Lsn(0), Some(Lsn(100)));
    transaction(&mut judge, 2, 110, 200);
    transaction(&mut judge, 2, 210, 300);
    judge.status_update(2, Lsn(300));
    judge.ended(2, Ending::Client);
    assert_eq!(judge.findings(), []);
    assert!(matches!(
        judge.facts()[..],
        [
            Fact::Started { connection: 1, .. },
            Fact::Ended {
                connection: 1,
                how: Ending::Fault
            },
            Fact::Started { connection: 2, .. },
            Fact::Ended {
                connection: 2,
                how: Ending::Client
            },
        ]
    ));
    // Nothing streams it and it confirmed nothing though it answered a reply request
    // holding a transaction: that is a finding of the slot.
    let mut silent = Judge::default();
    silent.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut silent, 1, 110, 200);
    answer_unconfirmed(&mut silent, 1, 200);
    assert_eq!(silent.findings(), []);
    silent.ended(1, Ending::Fault);
    assert_eq!(
        silent.findings(),
        [Finding::NeverConfirmed { sent: Lsn(200) }]
    );
    // Asked while holding it, it never answered, and the walsender dropped it for that.
    let mut mute = Judge::default();
    mute.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut mute, 1, 110, 200);
    mute.keepalive_sent(1, Lsn(200), true, true);
    mute.reply_overdue(1);
    mute.ended(1, Ending::Timeout);
    assert_eq!(mute.findings().len(), 2);
    assert_eq!(
        mute.findings()[1],
        Finding::NeverConfirmed { sent: Lsn(200) }
    );
    // psycopg2 through the proxy (which does not know the slot's position): it confirms
    // the idle WAL end it was told before the first transaction, then nothing it was sent.
    let mut proxied = Judge::default();
    proxied.started(1, Lsn(0), None);
    proxied.keepalive_sent(1, Lsn(100), true, true);
    proxied.status_update(1, Lsn(100));
    transaction(&mut proxied, 1, 110, 200);
    proxied.keepalive_sent(1, Lsn(200), true, true);
    proxied.status_update(1, Lsn(100));
    proxied.ended(1, Ending::Client);
    assert_eq!(
        proxied.findings(),
        [Finding::NeverConfirmed { sent: Lsn(200) }]
    );
}

/// Two keepalives at `wal_end` with no transaction open, each asking for a reply and
/// answered with `flush`.
fn answer_idle_twice(judge: &mut Judge, connection: u64, wal_end: u64, flush: u64) {
    for _ in 0..2 {
        judge.keepalive_sent(connection, Lsn(wal_end), true, true);
        judge.status_update(connection, Lsn(flush));
    }
}

/// A keepalive at `wal_end` asking for a reply, answered with 0/0 ("unknown").
fn answer_unconfirmed(judge: &mut Judge, connection: u64, wal_end: u64) {
    judge.keepalive_sent(connection, Lsn(wal_end), true, true);
    judge.status_update(connection, Lsn(0));
}

#[test]
fn a_consumer_stopped_before_anyone_asked_it_is_a_fact_one_that_answered_without_confirming_is_not()
{
    // pg_recvlogical with its defaults (status every 10 s), stopped by a signal after 2 s:
    // it was sent a transaction and never asked about it.
    let mut stopped = Judge::default();
    stopped.started(1, Lsn(0), Some(Lsn(100)));
    // A reply request made before the transaction was whole, answered after it: it
    // confirms nothing of what it had been asked about.
    stopped.keepalive_sent(1, Lsn(100), true, true);
    transaction(&mut stopped, 1, 110, 200);
    stopped.status_update(1, Lsn(0));
    stopped.ended(1, Ending::Client);
    assert_eq!(stopped.findings(), []);
    assert!(stopped.facts().contains(&Fact::StoppedBehind {
        connection: 1,
        confirmed: Lsn(100),
        transaction_end: Lsn(200)
    }));
    // Asked while holding it, it answered without confirming it, and stopped.
    let mut silent = Judge::default();
    silent.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut silent, 1, 110, 200);
    answer_unconfirmed(&mut silent, 1, 200);
    silent.ended(1, Ending::Client);
    assert_eq!(
        silent.findings(),
        [Finding::NeverConfirmed { sent: Lsn(200) }]
    );
}

#[test]
fn a_position_past_a_commit_not_sent_whole_is_found_one_postgresql_resends_from_is_not() {
    let mut judge = Judge::default();
    judge.started(1, Lsn(0), Some(Lsn(100)));
    // The Begin says the commit record starts at 190.
    judge.frame_sent(1, frame(110, true, Some(190), None));
    judge.frame_sent(1, frame(118, false, None, None));
    // pg_recvlogical confirms the position of the last message it wrote.
    judge.status_update(1, Lsn(118));
    // The Begin's commit position itself: a restart there sends the transaction again
    // (a commit record is skipped only if it starts before the confirmed position).
    judge.status_update(1, Lsn(190));
    assert_eq!(judge.findings(), []);
    // One past it, before the rest came: a restart there skips the transaction.
    judge.status_update(1, Lsn(191));
    assert_eq!(
        judge.findings(),
        [Finding::ConfirmedUnsent {
            connection: 1,
            flush: Lsn(191),
            sent: Lsn(118)
        }]
    );
    // Once sent, the same position is no news; nor is a keepalive's WAL end.
    judge.frame_sent(1, frame(200, false, Some(190), Some(200)));
    judge.keepalive_sent(1, Lsn(260), false, true);
    judge.status_update(1, Lsn(260));
    assert_eq!(judge.findings().len(), 1);
    assert!(judge.findings()[0].to_string().contains("skips"));
}

#[test]
fn a_commit_end_plus_one_is_found_only_when_the_next_commit_starts_at_that_end() {
    // pg-logical-replication acknowledges each Commit's end + 1.
    let mut judge = Judge::default();
    judge.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut judge, 1, 110, 200);
    judge.status_update(1, Lsn(201));
    // The next transaction commits later: nothing it confirmed is skipped.
    transaction(&mut judge, 1, 150, 300);
    judge.status_update(1, Lsn(301));
    assert_eq!(judge.findings(), []);
    // One whose commit record starts exactly at the last end (its changes were logged
    // before that commit, concurrently): a restart at 301 would skip it.
    judge.frame_sent(1, frame(250, true, Some(300), None));
    assert_eq!(
        judge.findings(),
        [Finding::ConfirmedUnsent {
            connection: 1,
            flush: Lsn(301),
            sent: Lsn(300)
        }]
    );
    // A streamed transaction tells its commit only at the end: judged then.
    let mut streamed = Judge::default();
    streamed.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut streamed, 1, 110, 200);
    streamed.frame_sent(1, frame(120, true, None, None));
    streamed.status_update(1, Lsn(201));
    assert_eq!(streamed.findings(), []);
    streamed.frame_sent(1, frame(208, false, Some(200), Some(208)));
    assert_eq!(streamed.findings().len(), 1);
}

#[test]
fn transactions_sent_again_after_a_crash_are_a_fact() {
    let mut judge = Judge::default();
    judge.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut judge, 1, 110, 200);
    transaction(&mut judge, 1, 210, 300);
    judge.status_update(1, Lsn(300));
    judge.crash();
    judge.ended(1, Ending::Crash);
    // The slot went back to its last checkpoint; the consumer asks for its own position.
    judge.started(2, Lsn(300), Some(Lsn(200)));
    transaction(&mut judge, 2, 210, 300);
    transaction(&mut judge, 2, 310, 400);
    judge.status_update(2, Lsn(300));
    judge.status_update(2, Lsn(400));
    assert_eq!(judge.findings(), []);
    assert_eq!(
        judge.resent(),
        Some(Resent {
            connection: 2,
            count: 1,
            first: Lsn(300),
            last: Lsn(300),
            confirmed_before: Lsn(300)
        })
    );
    assert!(judge.facts().contains(&Fact::Crash {
        confirmed: Lsn(300)
    }));
    // A request behind what it confirmed is recorded.
    judge.started(3, Lsn(250), Some(Lsn(400)));
    assert!(judge.facts().contains(&Fact::Started {
        connection: 3,
        requested: Lsn(250),
        confirmed: Lsn(400),
        behind: true
    }));
}

#[test]
fn a_slot_left_behind_while_idle_is_found_once_the_consumer_answered() {
    let mut judge = impatient();
    judge.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut judge, 1, 110, 200);
    judge.status_update(1, Lsn(200));
    // The WAL end moves with nothing to send: not asked yet, nothing to say.
    judge.keepalive_sent(1, Lsn(500), false, true);
    assert_eq!(judge.findings(), []);
    judge.keepalive_sent(1, Lsn(500), true, true);
    assert_eq!(judge.findings(), [], "asked, not answered yet");
    judge.status_update(1, Lsn(200));
    assert_eq!(
        judge.findings(),
        [],
        "the first answer may predate the keepalive"
    );
    judge.keepalive_sent(1, Lsn(500), true, true);
    judge.status_update(1, Lsn(200));
    let held = Finding::NotAdvancedWhileIdle {
        connection: 1,
        confirmed: Lsn(200),
        wal_end: Lsn(500),
    };
    assert_eq!(judge.findings(), [held]);
    // Confirmed later: nothing held any more.
    judge.status_update(1, Lsn(500));
    assert_eq!(judge.findings(), []);
    // Left by the consumer while still held: kept.
    answer_idle_twice(&mut judge, 1, 700, 500);
    judge.ended(1, Ending::Client);
    assert!(matches!(
        judge.findings()[..],
        [Finding::NotAdvancedWhileIdle {
            wal_end: Lsn(700),
            ..
        }]
    ));
    // Cut by a fault in the middle of it: not judged.
    let mut cut = Judge::default();
    cut.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut cut, 1, 110, 200);
    answer_idle_twice(&mut cut, 1, 500, 200);
    cut.ended(1, Ending::Fault);
    assert_eq!(cut.findings(), []);
}

/// Debezium with `heartbeat.action.query` confirms WAL nothing published by writing a row
/// every heartbeat and confirming that; stopped between two heartbeats, after answering
/// reply requests at an idle WAL end with its last transaction's end, it is a stopping
/// consumer: the slot is not kept for good, and nothing in its answers says it would be.
#[test]
fn a_consumer_that_stops_within_the_patience_after_idle_wal_is_not_accused() {
    let mut judge = Judge::default();
    judge.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut judge, 1, 110, 200);
    judge.status_update(1, Lsn(200));
    for _ in 0..MAX_IDLE_ASKS {
        judge.keepalive_sent(1, Lsn(500), true, true);
        judge.status_update(1, Lsn(200));
    }
    assert_eq!(judge.findings(), [], "not yet for {IDLE_PATIENCE:?}");
    judge.ended(1, Ending::Client);
    assert_eq!(judge.findings(), []);
}

/// The WAL end moves on every few seconds on a busy server (other databases, other
/// tables): the patience runs from where the answers left the slot, not from the latest
/// WAL end, so a consumer that never moves is found however often it moves.
#[test]
fn the_patience_runs_on_while_the_wal_end_moves() {
    let mut judge = patient_for(Duration::from_millis(50));
    judge.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut judge, 1, 110, 200);
    judge.status_update(1, Lsn(200));
    answer_idle_twice(&mut judge, 1, 500, 200);
    std::thread::sleep(Duration::from_millis(60));
    answer_idle_twice(&mut judge, 1, 600, 200);
    assert_eq!(
        judge.findings(),
        [Finding::NotAdvancedWhileIdle {
            connection: 1,
            confirmed: Lsn(200),
            wal_end: Lsn(600)
        }]
    );
}

/// A consumer still working on its last transaction when first asked confirms it between
/// two answers, then leaves: its position moved, so no answer of it is its final word.
#[test]
fn a_consumer_that_confirms_its_last_transaction_between_two_answers_is_not_accused() {
    let mut judge = Judge::default();
    judge.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut judge, 1, 110, 200);
    transaction(&mut judge, 1, 210, 300);
    judge.status_update(1, Lsn(200));
    judge.keepalive_sent(1, Lsn(500), true, true);
    judge.status_update(1, Lsn(200));
    judge.keepalive_sent(1, Lsn(500), true, true);
    judge.status_update(1, Lsn(300));
    judge.ended(1, Ending::Client);
    assert_eq!(judge.findings(), []);
    // The same answer twice is its word.
    let mut stays = impatient();
    stays.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut stays, 1, 110, 300);
    answer_idle_twice(&mut stays, 1, 500, 300);
    assert!(matches!(
        stays.findings()[..],
        [Finding::NotAdvancedWhileIdle {
            confirmed: Lsn(300),
            wal_end: Lsn(500),
            ..
        }]
    ));
}

#[test]
fn a_slot_left_inside_a_transaction_while_idle_is_found() {
    let mut judge = impatient();
    judge.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut judge, 1, 110, 200);
    judge.status_update(1, Lsn(118));
    answer_idle_twice(&mut judge, 1, 200, 118);
    assert_eq!(
        judge.findings(),
        [Finding::StuckInsideTransaction {
            connection: 1,
            confirmed: Lsn(118),
            transaction_end: Lsn(200)
        }]
    );
    // New data ends the idle period before the consumer was proven stuck.
    transaction(&mut judge, 1, 210, 300);
    assert_eq!(judge.findings(), []);
}

/// A consumer still applying its last transaction when asked at an idle WAL end answers
/// with where it stood before (psycopg2 answers a keepalive for it): inside the
/// transaction before, for a consumer that confirms commit positions. Where it leaves
/// its slot for the judge's patience is its word, not the first two answers.
#[test]
fn a_consumer_still_applying_its_last_transaction_is_judged_where_it_leaves_its_slot() {
    let mut judge = patient_for(Duration::from_millis(50));
    judge.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut judge, 1, 110, 200);
    transaction(&mut judge, 1, 210, 300);
    answer_idle_twice(&mut judge, 1, 500, 192);
    assert_eq!(judge.findings(), [], "not for the patience yet");
    answer_idle_twice(&mut judge, 1, 500, 292);
    assert_eq!(judge.findings(), [], "moved: the patience runs from here");
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(
        judge.findings(),
        [Finding::StuckInsideTransaction {
            connection: 1,
            confirmed: Lsn(292),
            transaction_end: Lsn(300)
        }]
    );
}

/// The answers that proved a slot stuck stay its word when the WAL end moves with nothing
/// new sent: a consumer that leaves before answering twice at the new end is still found
/// (the test server's probe asks twice at a transaction's end, then again at a keepalive's
/// later WAL end).
#[test]
fn a_slot_proven_stuck_stays_found_when_the_wal_end_moves_before_the_consumer_leaves() {
    let mut judge = impatient();
    judge.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut judge, 1, 110, 200);
    transaction(&mut judge, 1, 210, 300);
    answer_idle_twice(&mut judge, 1, 300, 218);
    let stuck = Finding::StuckInsideTransaction {
        connection: 1,
        confirmed: Lsn(218),
        transaction_end: Lsn(300),
    };
    assert_eq!(judge.findings(), std::slice::from_ref(&stuck));
    judge.keepalive_sent(1, Lsn(500), true, true);
    assert_eq!(
        judge.findings(),
        std::slice::from_ref(&stuck),
        "asked at the new end"
    );
    judge.status_update(1, Lsn(218));
    assert_eq!(
        judge.findings(),
        std::slice::from_ref(&stuck),
        "answered once there"
    );
    judge.ended(1, Ending::Client);
    assert_eq!(judge.findings(), [stuck]);
    // Confirmed past the transaction at the new end: nothing held any more.
    let mut moved_on = impatient();
    moved_on.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut moved_on, 1, 110, 200);
    transaction(&mut moved_on, 1, 210, 300);
    answer_idle_twice(&mut moved_on, 1, 300, 218);
    moved_on.keepalive_sent(1, Lsn(500), true, true);
    moved_on.status_update(1, Lsn(500));
    moved_on.ended(1, Ending::Client);
    assert_eq!(moved_on.findings(), []);
}

/// pg-logical-replication acknowledges a Commit's position + 1 (its commit LSN + 1 on the
/// test server): past where the commit record starts, so a restart skips the transaction as
/// applied, though the position is short of its end. Only a position up to the commit
/// record's start is stuck.
#[test]
fn a_slot_left_past_the_commit_records_start_is_not_stuck() {
    // The transaction goes from 110 to 200, its commit record starting at 192.
    for (confirmed, stuck) in [(150, true), (192, true), (193, false), (199, false)] {
        let mut judge = impatient();
        judge.started(1, Lsn(0), Some(Lsn(100)));
        transaction(&mut judge, 1, 110, 200);
        judge.status_update(1, Lsn(confirmed));
        answer_idle_twice(&mut judge, 1, 200, confirmed);
        let found = matches!(
            judge.findings()[..],
            [Finding::StuckInsideTransaction { .. }]
        );
        assert_eq!(
            found,
            stuck,
            "confirmed {confirmed}: {:?}",
            judge.findings()
        );
    }
}

#[test]
fn a_flush_going_back_is_ignored_as_postgresql_ignores_it_an_unanswered_reply_request_is_found() {
    let mut judge = Judge::default();
    judge.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut judge, 1, 110, 200);
    transaction(&mut judge, 1, 210, 300);
    judge.status_update(1, Lsn(300));
    // 0/0 is "unknown"; a position before the slot's changes nothing in PostgreSQL
    // (`LogicalConfirmReceivedLocation` never moves it back).
    judge.status_update(1, Lsn(0));
    judge.status_update(1, Lsn(200));
    judge.status_update(1, Lsn(1));
    assert_eq!(judge.findings(), []);
    assert_eq!(judge.positions().confirmed_flush_lsn, Lsn(300));
    judge.keepalive_sent(1, Lsn(300), true, false);
    assert!(judge.status_update(1, Lsn(300)).is_some());
    judge.keepalive_sent(1, Lsn(300), true, false);
    judge.reply_overdue(1);
    assert!(matches!(
        judge.findings()[..],
        [Finding::NoTimelyReply { connection: 1, .. }]
    ));
    let json = serde_json::to_value(&judge.findings()[0]).unwrap();
    assert_eq!(json["finding"], "no_timely_reply");
    assert!(json["waited_ms"].is_u64());
}

#[test]
fn judges_keep_each_slot_apart() {
    let mut judges = Judges::default();
    judges.slot("a").started(1, Lsn(0), Some(Lsn(100)));
    transaction(judges.slot("a"), 1, 110, 200);
    answer_unconfirmed(judges.slot("a"), 1, 200);
    judges.slot("a").ended(1, Ending::Client);
    judges.slot("b").started(2, Lsn(0), Some(Lsn(100)));
    judges.crash();
    assert_eq!(
        judges.findings(),
        [("a".to_owned(), Finding::NeverConfirmed { sent: Lsn(200) })]
    );
    assert_eq!(judges.facts().len(), 6);
    assert!(judges.facts().contains(&(
        "a".to_owned(),
        Fact::StoppedBehind {
            connection: 1,
            confirmed: Lsn(100),
            transaction_end: Lsn(200)
        }
    )));
    assert_eq!(judges.get("a").unwrap().positions().sent_lsn, Lsn(200));
}

/// The psycopg2 consumer of issue 43: it applies and confirms each transaction at its
/// Commit, stops gracefully with transactions in flight (read and dropped), and later
/// resumes and confirms everything. Idle and asked twice before it stopped, it was behind
/// published transactions it had been sent, with no WAL that nothing published after
/// them: no finding, a fact; and an idle finding that a later connection confirms past
/// is withdrawn.
#[test]
fn a_consumer_that_stops_or_lags_behind_what_it_was_sent_is_a_fact_not_a_finding() {
    let mut judge = Judge::default();
    judge.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut judge, 1, 110, 200);
    transaction(&mut judge, 1, 210, 300);
    transaction(&mut judge, 1, 310, 400);
    judge.status_update(1, Lsn(200));
    answer_idle_twice(&mut judge, 1, 400, 200);
    assert_eq!(judge.findings(), [], "lagging: behind what it was sent");
    judge.ended(1, Ending::Client);
    assert_eq!(judge.findings(), [], "stopped behind it");
    assert!(judge.facts().contains(&Fact::StoppedBehind {
        connection: 1,
        confirmed: Lsn(200),
        transaction_end: Lsn(400)
    }));
    // It resumes and confirms everything: still nothing.
    judge.started(2, Lsn(200), Some(Lsn(200)));
    transaction(&mut judge, 2, 210, 300);
    transaction(&mut judge, 2, 310, 400);
    judge.status_update(2, Lsn(400));
    judge.keepalive_sent(2, Lsn(500), true, true);
    judge.status_update(2, Lsn(500));
    judge.ended(2, Ending::Client);
    assert_eq!(judge.findings(), []);

    // Idle over WAL nothing published, left so, then confirmed past by a later
    // connection: the finding is withdrawn.
    let mut idle = impatient();
    idle.started(1, Lsn(0), Some(Lsn(100)));
    transaction(&mut idle, 1, 110, 200);
    idle.status_update(1, Lsn(200));
    answer_idle_twice(&mut idle, 1, 500, 200);
    idle.ended(1, Ending::Client);
    assert!(matches!(
        idle.findings()[..],
        [Finding::NotAdvancedWhileIdle { .. }]
    ));
    idle.started(2, Lsn(200), Some(Lsn(200)));
    idle.keepalive_sent(2, Lsn(600), false, true);
    idle.status_update(2, Lsn(600));
    assert_eq!(idle.findings(), []);
}

/// pg-logical-replication with its automatic acknowledgement confirms each frame's
/// position + 1 as it reads it: a Relation's 0/0 as 0/1, on a proxy's first connection
/// (where the slot's own position is not known) and after a reconnect. PostgreSQL never
/// moves a slot's position back, and the judge finds nothing in it.
#[test]
fn a_position_before_the_slots_is_ignored_as_postgresql_ignores_it() {
    let mut judge = Judge::default();
    judge.started(1, Lsn(0), None);
    judge.frame_sent(1, frame(110, true, Some(192), None));
    judge.status_update(1, Lsn(111));
    judge.frame_sent(1, frame(0, false, None, None));
    judge.status_update(1, Lsn(1));
    judge.frame_sent(1, frame(118, false, None, None));
    judge.status_update(1, Lsn(119));
    judge.frame_sent(1, frame(200, false, Some(192), Some(200)));
    judge.status_update(1, Lsn(201));
    judge.ended(1, Ending::Fault);
    judge.started(2, Lsn(200), None);
    judge.status_update(2, Lsn(1));
    transaction(&mut judge, 2, 210, 300);
    judge.status_update(2, Lsn(301));
    judge.status_update(2, Lsn(1));
    judge.keepalive_sent(2, Lsn(400), false, true);
    assert_eq!(judge.findings(), []);
    assert_eq!(judge.positions().confirmed_flush_lsn, Lsn(301));
}
