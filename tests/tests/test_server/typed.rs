//! Column values read as the ecosystem's types (`with-uuid-1`, `with-chrono-0_4`,
//! `with-rust_decimal-1`, `with-serde_json-1`) from a text and a binary session of the test
//! server, which sends the binary forms PostgreSQL's send functions write.

use chrono::NaiveDate;
use pgoutput_client::{ConnInfo, Consumer, ConsumerConfig, StreamOptions};
use pgoutput_codec::ProtocolVersion;
use pgoutput_harness::server::{Publication, Script, Table, TestServer, Transaction};
use pgoutput_tests::typed::{expected, typed, COLUMNS, ROWS};

#[test]
fn the_ecosystems_types_read_the_same_from_text_and_binary() {
    let mut table = Table::new(16400, "public", "typed").key_column("id", 23);
    for (name, oid, _) in COLUMNS {
        table = table.column(name, oid);
    }
    let mut transaction = Transaction::new();
    for (i, row) in ROWS.iter().enumerate() {
        let id = i.to_string();
        let values: Vec<&str> = std::iter::once(id.as_str())
            .chain(row.iter().copied())
            .collect();
        transaction = transaction.insert(&table, values);
    }
    let server = TestServer::builder()
        .publication(Publication::new("p").table(table))
        .script(Script::new().transaction(transaction))
        .start()
        .unwrap();
    let info = ConnInfo::parse(Some(&server.connection_string()), |_| None).unwrap();
    for binary in [false, true] {
        let options = StreamOptions::new(ProtocolVersion::V1, &["p"]).binary(binary);
        let config = ConsumerConfig::new(&format!("typed{binary}"), options)
            .create_slot(true)
            .end_lsn(server.wal_end());
        let mut consumer = Consumer::connect(&info, config).unwrap();
        let mut got = Vec::new();
        let mut sent_binary = false;
        while let Some(event) = consumer.next().unwrap() {
            if let Some(row) = event.new_row() {
                sent_binary |= matches!(
                    row.column("n").unwrap().raw(),
                    pgoutput_codec::ColumnValue::Binary(_)
                );
                got.push(typed(&row));
                // A built-in type of another kind is refused, not misread.
                let wrong = row.value::<NaiveDate>("ts").unwrap_err();
                assert_eq!(wrong.column, "ts");
                assert!(row.value::<uuid::Uuid>("n").is_err());
            }
        }
        assert_eq!(sent_binary, binary);
        assert_eq!(got, expected(), "binary {binary}");
    }
}
