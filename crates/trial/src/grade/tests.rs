use super::*;
use crate::change::Op;
use crate::sink;

fn row(id: u32, op: Op, version: u64) -> Change {
    Change::new("items", op, [("id", id.to_string())])
        .version(version)
        .value("note", format!("n{id}.{version}"))
}

/// Three transactions: rows 1 and 2 inserted; row 1 updated; row 2 deleted and row 3
/// inserted. Row 9's insert was rolled back.
fn ledger() -> Ledger {
    let t = |n: u32, changes| Transaction {
        xid: Xid(700 + n),
        commit_lsn: Lsn(u64::from(n) * 0x100),
        end_lsn: Lsn(u64::from(n) * 0x100 + 0x30),
        changes,
    };
    Ledger {
        transactions: vec![
            t(1, vec![row(1, Op::Insert, 1), row(2, Op::Insert, 1)]),
            t(2, vec![row(1, Op::Update, 2)]),
            t(
                3,
                vec![
                    Change::new("items", Op::Delete, [("id", "2".to_owned())]),
                    row(3, Op::Insert, 1),
                ],
            ),
        ],
        aborted: vec![row(9, Op::Insert, 1)],
    }
}

fn applied(changes: &[Change]) -> Vec<Applied> {
    changes
        .iter()
        .enumerate()
        .map(|(i, change)| Applied {
            line: i + 1,
            change: change.clone(),
        })
        .collect()
}

fn all_in_order() -> Vec<Change> {
    ledger()
        .transactions
        .into_iter()
        .flat_map(|t| t.changes)
        .collect()
}

fn kinds(anomalies: &[Anomaly]) -> Vec<&'static str> {
    anomalies.iter().map(Anomaly::kind).collect()
}

#[test]
fn everything_once_in_order_is_no_anomaly() {
    assert_eq!(grade(&ledger(), &applied(&all_in_order()), true), []);
}

#[test]
fn a_sink_written_as_documented_is_graded_as_its_changes() {
    let text = "{\"table\":\"items\",\"op\":\"insert\",\"key\":{\"id\":1},\"values\":{\"version\":1,\"note\":\"n1.1\"}}\n\
                {\"table\":\"items\",\"op\":\"insert\",\"key\":{\"id\":2},\"values\":{\"version\":1}}\n\
                {\"table\":\"items\",\"op\":\"update\",\"key\":{\"id\":1},\"values\":{\"version\":2}}\n\
                {\"table\":\"items\",\"op\":\"delete\",\"key\":{\"id\":2}}\n\
                {\"table\":\"items\",\"op\":\"insert\",\"key\":{\"id\":\"3\"},\"values\":{\"version\":\"1\",\"note\":\"n3.1\"}}\n";
    let sink = sink::read(text.as_bytes()).unwrap();
    assert_eq!(grade(&ledger(), &sink.applied, true), []);
}

#[test]
fn a_transaction_applied_again_is_duplicated_with_its_lines() {
    let mut changes = all_in_order();
    changes.insert(3, row(1, Op::Update, 2));
    let anomalies = grade(&ledger(), &applied(&changes), true);
    assert_eq!(kinds(&anomalies), ["duplicated"]);
    let Anomaly::Duplicated {
        transaction, lines, ..
    } = &anomalies[0]
    else {
        unreachable!()
    };
    assert_eq!((transaction.number, transaction.xid), (2, Xid(702)));
    assert_eq!(lines, &[3, 4]);
    assert!(anomalies[0].to_string().contains("applied 2 times"));
}

#[test]
fn a_transaction_never_applied_is_lost_once_finished_and_not_before() {
    let changes: Vec<Change> = all_in_order()
        .into_iter()
        .filter(|c| c.op != Op::Update)
        .collect();
    let anomalies = grade(&ledger(), &applied(&changes), true);
    assert_eq!(kinds(&anomalies), ["lost"]);
    assert!(anomalies[0]
        .to_string()
        .starts_with("lost transaction 2 (xid 702, commit at 0/200, end 0/230, 1 rows)"));
    assert_eq!(grade(&ledger(), &applied(&changes), false), []);
}

#[test]
fn a_transaction_applied_in_part_is_partial() {
    let mut changes = all_in_order();
    changes.pop();
    let anomalies = grade(&ledger(), &applied(&changes), true);
    assert_eq!(kinds(&anomalies), ["partial"]);
    let Anomaly::Partial {
        applied, missing, ..
    } = &anomalies[0]
    else {
        unreachable!()
    };
    assert_eq!((*applied, missing), (1, &row(3, Op::Insert, 1)));
}

#[test]
fn a_rolled_back_row_is_aborted_applied_and_a_made_up_one_unexpected() {
    let mut changes = all_in_order();
    changes.push(row(9, Op::Insert, 1));
    changes.push(row(4, Op::Insert, 1));
    let anomalies = grade(&ledger(), &applied(&changes), true);
    assert_eq!(kinds(&anomalies), ["aborted_applied", "unexpected"]);
}

#[test]
fn a_later_transaction_applied_first_is_reordered_once() {
    let mut changes = all_in_order();
    // Transaction 3 before transaction 2.
    let update = changes.remove(2);
    changes.push(update);
    let anomalies = grade(&ledger(), &applied(&changes), true);
    assert_eq!(kinds(&anomalies), ["reordered"]);
    let Anomaly::Reordered {
        transaction,
        after,
        line,
    } = &anomalies[0]
    else {
        unreachable!()
    };
    assert_eq!((transaction.number, after.number, *line), (2, 3, 5));
}

#[test]
fn a_row_changed_out_of_order_within_a_transaction_is_reordered() {
    let mut ledger = ledger();
    ledger.transactions[1].changes.push(row(1, Op::Update, 3));
    let mut changes: Vec<Change> = ledger
        .transactions
        .iter()
        .flat_map(|t| t.changes.clone())
        .collect();
    changes.swap(2, 3);
    let anomalies = grade(&ledger, &applied(&changes), true);
    assert_eq!(kinds(&anomalies), ["reordered"]);
}

#[test]
fn a_value_not_written_as_the_source_wrote_it_is_wrong() {
    let mut changes = all_in_order();
    changes[0] = changes[0].clone().value("note", "n1.x");
    let anomalies = grade(&ledger(), &applied(&changes), true);
    assert_eq!(kinds(&anomalies), ["wrong_value"]);
    assert!(anomalies[0]
        .to_string()
        .contains("note = \"n1.x\", the source wrote \"n1.1\""));
}

#[test]
fn values_compare_as_postgresql_writes_them() {
    assert!(same_value("12.50", "12.5"));
    assert!(same_value("t", "true"));
    assert!(same_value("f", "false"));
    assert!(!same_value("t", "false"));
    assert!(!same_value("12.50", "12.51"));
    assert!(!same_value("abc", "abd"));
}

#[test]
fn a_change_is_told_apart_by_its_version() {
    // Applied once each: the insert and the update of row 1 are two changes.
    let anomalies = grade(&ledger(), &applied(&all_in_order()), true);
    assert!(anomalies.is_empty());
    // Without the version the update is not the one committed.
    let mut changes = all_in_order();
    changes[2] = Change::new("items", Op::Update, [("id", "1".to_owned())]);
    let anomalies = grade(&ledger(), &applied(&changes), true);
    assert_eq!(kinds(&anomalies), ["unexpected", "lost"]);
}

/// The rows a table sink holds: (id, version, note).
fn table(rows: &[(u32, u64, &str)]) -> Vec<Change> {
    rows.iter()
        .map(|&(id, version, note)| {
            Change::new("items", Op::Insert, [("id", id.to_string())])
                .version(version)
                .value("note", note)
        })
        .collect()
}

#[test]
fn a_table_sink_with_the_sources_rows_is_no_anomaly() {
    let rows = table(&[(1, 2, "n1.2"), (3, 1, "n3.1")]);
    assert_eq!(grade_state(&ledger(), &rows), []);
}

#[test]
fn a_table_sink_names_missing_stale_wrong_and_extra_rows_with_their_transactions() {
    // Row 1 at version 1 (transaction 2 lost for it), row 3 missing, row 2 never deleted,
    // row 9 (rolled back) there, and a note that is not the source's.
    let rows = table(&[(1, 1, "n1.1"), (2, 1, "n2.1"), (9, 1, "n9.1")]);
    let anomalies = grade_state(&ledger(), &rows);
    assert_eq!(
        kinds(&anomalies),
        ["stale", "missing", "unexpected", "aborted_applied"]
    );
    let text: Vec<String> = anomalies.iter().map(ToString::to_string).collect();
    assert!(
        text[0].contains("version 1 of the row update items (id=1) version 2"),
        "{}",
        text[0]
    );
    assert!(text[0].contains("transaction 2 (xid 702"), "{}", text[0]);
    assert!(
        text[1].contains("insert items (id=3) version 1 of transaction 3"),
        "{}",
        text[1]
    );
    assert!(text[2].ends_with("(in the sink's table)"), "{}", text[2]);
    let wrong = grade_state(&ledger(), &table(&[(1, 2, "n1.2"), (3, 1, "other")]));
    assert_eq!(kinds(&wrong), ["wrong_value"]);
}
