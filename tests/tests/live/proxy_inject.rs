//! The `inject` action through the proxy on a real stream: psycopg2 and the crate's
//! `Consumer` each get PostgreSQL's messages as they came, and the rule's two between
//! them (a logical message after the first Commit, a Type after the second Begin), each in
//! an XLogData at the position of the message it follows; the real slot still follows
//! the consumer's confirmations, and the judge finds nothing.

use std::time::{Duration, Instant};

use pgoutput_client::{ConnInfo, Consumer, ConsumerConfig};
use pgoutput_codec::{encode, Ctx, IntoOwned, Lsn, ProtocolVersion, Streaming};
use pgoutput_harness::faults::{Action, Fault, Trigger};
use pgoutput_tests::pg::Server;
use pgoutput_tests::poison;

use crate::consumer::{stream_options, transaction_ends};
use crate::proxy::{create_slot, drop_slot, psycopg2, start_proxy, through, wait_confirmed, write};
use crate::scenario::TAIL_USER;
use crate::{peek_slot, Options};

/// The rules for one slot: the logical message after transaction 1's Commit, the Type
/// right after transaction 2's Begin.
fn rules(slot: &str) -> [Fault; 2] {
    [
        Fault::new(
            Trigger::Commit { transaction: 1 },
            Action::inject(poison::message()),
        )
        .slot(slot),
        Fault::new(
            Trigger::Change {
                transaction: 2,
                after: 0,
            },
            Action::inject(poison::enum_type()),
        )
        .slot(slot),
    ]
}

/// What a client of `sent` (PostgreSQL's payloads, protocol 1) gets with the rules: the
/// index each injected payload comes at, and the payload.
fn with_injected(sent: &[Vec<u8>]) -> Result<(Vec<Vec<u8>>, [usize; 2]), String> {
    let v1 = Ctx::plain(ProtocolVersion::V1);
    let first_commit = sent.iter().position(|p| p[0] == b'C').ok_or("no Commit")?;
    let second_begin = sent
        .iter()
        .enumerate()
        .filter(|(_, p)| p[0] == b'B')
        .nth(1)
        .ok_or("no second Begin")?
        .0;
    let mut expected = sent.to_vec();
    // The Type first: its index is PostgreSQL's, before the message moves it on.
    expected.insert(second_begin + 1, encode(&poison::enum_type(), v1).unwrap());
    expected.insert(first_commit + 1, encode(&poison::message(), v1).unwrap());
    Ok((expected, [first_commit + 1, second_begin + 2]))
}

pub fn check(server: &Server) -> Result<String, String> {
    let options = Options {
        slot: "proxy_inject",
        version: ProtocolVersion::V1,
        streaming: Streaming::Off,
        binary: false,
        two_phase: false,
    };
    let psy_slot = "proxy_inject_psy";
    for slot in [options.slot, psy_slot] {
        create_slot(server, slot)?;
    }
    for sql in [
        "INSERT INTO accounts VALUES (97000, 'pat', 1.50, 'ok', 'n');",
        "UPDATE accounts SET balance = 2.50 WHERE id = 97000;",
        "DELETE FROM accounts WHERE id = 97000;",
    ] {
        write(server, sql)?;
    }
    let rows = peek_slot(server, options.slot, &options)?;
    let sent: Vec<Vec<u8>> = rows.iter().map(|r| r.data.clone()).collect();
    let (expected, injected_at) = with_injected(&sent)?;
    let proxy = start_proxy(server)?;
    for rule in rules(options.slot).into_iter().chain(rules(psy_slot)) {
        proxy.add_fault(rule).map_err(|e| e.to_string())?;
    }

    // psycopg2: the payloads, and each injected one at the position of the one before.
    let got = psycopg2(
        &through(&proxy, TAIL_USER),
        psy_slot,
        &options,
        expected.len(),
    )?;
    let payloads: Vec<Vec<u8>> = got.iter().map(|(_, _, p)| p.clone()).collect();
    if payloads != expected {
        return Err(format!(
            "psycopg2 got {} payloads, expected {}: {:?}",
            payloads.len(),
            expected.len(),
            payloads
                .iter()
                .map(|p| char::from(p[0]))
                .collect::<String>()
        ));
    }
    for at in injected_at {
        if (got[at].0, got[at].1) != (got[at - 1].0, got[at - 1].0) {
            return Err(format!(
                "the injected message at {at} came at {:?}, the one before at {}",
                (Lsn(got[at].0), Lsn(got[at].1)),
                Lsn(got[at - 1].0)
            ));
        }
    }

    // The crate's consumer: the same messages, and its confirmations reach the slot.
    let info =
        ConnInfo::parse(Some(&through(&proxy, TAIL_USER)), |_| None).map_err(|e| e.to_string())?;
    let config = ConsumerConfig::new(options.slot, stream_options(&options))
        .auto_confirm(true)
        .status_interval(Duration::from_millis(100));
    let mut consumer = Consumer::connect(&info, config).map_err(|e| e.to_string())?;
    let v1 = Ctx::plain(ProtocolVersion::V1);
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while events.len() < expected.len() {
        if Instant::now() > deadline {
            return Err(format!(
                "the consumer got {} of {} messages in 30 s; proxy log: {:?}",
                events.len(),
                expected.len(),
                proxy.log()
            ));
        }
        if let Some(event) = consumer
            .next_within(Duration::from_millis(200))
            .map_err(|e| e.to_string())?
        {
            let message = event.message.into_owned();
            events.push((
                event.wal_start,
                encode(&message, v1).map_err(|e| e.to_string())?,
            ));
        }
    }
    let consumed: Vec<Vec<u8>> = events.iter().map(|(_, p)| p.clone()).collect();
    if consumed != expected {
        return Err(format!(
            "the consumer got {consumed:?}, expected {expected:?}"
        ));
    }
    for at in injected_at {
        if events[at].0 != events[at - 1].0 {
            return Err(format!(
                "the consumer's injected message at {at} came at {}, the one before at {}",
                events[at].0,
                events[at - 1].0
            ));
        }
    }
    let last = *transaction_ends(&options, &rows)?
        .last()
        .ok_or("no transaction")?;
    // Moving past the last message lets auto_confirm confirm it.
    let _ = consumer.next_within(Duration::from_millis(50));
    let flushed = wait_confirmed(server, options.slot, last)?;
    consumer.close();
    let findings: Vec<_> = proxy
        .findings()
        .into_iter()
        .filter(|(slot, _)| slot == options.slot)
        .collect();
    if !findings.is_empty() {
        return Err(format!("findings for a correct consumer: {findings:?}"));
    }
    let fired: Vec<u64> = proxy.faults().iter().map(|(_, n)| *n).collect();
    for slot in [options.slot, psy_slot] {
        drop_slot(server, slot);
    }
    if fired != [1, 1, 1, 1] {
        return Err(format!("the rules fired {fired:?} times"));
    }
    Ok(format!(
        "psycopg2 and the crate's Consumer got PostgreSQL's {} messages and a logical message and a Type injected after the first Commit and the second Begin, at their positions; the real slot confirmed {flushed}",
        sent.len()
    ))
}
