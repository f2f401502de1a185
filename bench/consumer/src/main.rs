//! The whole consumer path, frames from a socket to events with column values, side by
//! side: `pgoutput_client::Consumer` and pg_walstream's `LogicalReplicationStream`
//! (on libpq), each reading the same slot history of a real PostgreSQL in alternating
//! rounds, and reading every column of every inserted row as text. Prints inserts per
//! second and this process's CPU time per insert for each, round by round, and the
//! medians.
//!
//! `cargo run --release --manifest-path bench/consumer/Cargo.toml -- [ROUNDS] [ROWS]`
//! with `PGOUTPUT_PG15_BIN` (or 18) set, as `scripts/install-postgres` prints.

use std::time::{Duration, Instant};

use pg_walstream::{
    CancellationToken, EventType, LogicalReplicationStream, ReplicationStreamConfig, RetryConfig,
    StreamingMode,
};
use pgoutput_client::{ConnInfo, Consumer, ConsumerConfig, StreamOptions};
use pgoutput_codec::{Lsn, ProtocolVersion};
use pgoutput_tests::pg::{find_servers, Server};

/// This process's CPU time (user and system), from /proc (clock ticks of 10 ms).
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let fields: Vec<&str> = stat.rsplit_once(')').expect("stat").1.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

struct Run {
    inserts: usize,
    wall: Duration,
    cpu: Duration,
    bytes: usize,
}

fn ours(server: &Server, slot: &str, end: Lsn) -> Run {
    let info = ConnInfo::parse(Some(&server.conninfo("postgres", None)), |_| None).unwrap();
    let (started, cpu0) = (Instant::now(), cpu());
    let options = StreamOptions::new(ProtocolVersion::V1, &["bench_pub"]);
    let mut consumer = Consumer::connect(&info, ConsumerConfig::new(slot, options).auto_confirm(true)).unwrap();
    let (mut inserts, mut bytes) = (0, 0);
    loop {
        let event = consumer.next().unwrap().expect("the stream goes on");
        if let Some(row) = event.new_row() {
            inserts += 1;
            for column in row.iter() {
                bytes += column.value::<Option<String>>().unwrap().map_or(0, |v| v.len());
            }
        }
        if event.confirmable_lsn() == Some(end) {
            break;
        }
    }
    let run = Run { inserts, wall: started.elapsed(), cpu: cpu() - cpu0, bytes };
    consumer.close();
    run
}

fn ours_async(server: &Server, slot: &str, end: Lsn) -> Run {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let info = ConnInfo::parse(Some(&server.conninfo("postgres", None)), |_| None).unwrap();
    runtime.block_on(async {
        let (started, cpu0) = (Instant::now(), cpu());
        let options = StreamOptions::new(ProtocolVersion::V1, &["bench_pub"]);
        let config = ConsumerConfig::new(slot, options).auto_confirm(true);
        let mut consumer = pgoutput_client::tokio::Consumer::connect(&info, config).await.unwrap();
        let (mut inserts, mut bytes) = (0, 0);
        loop {
            let event = consumer.next().await.unwrap().expect("the stream goes on");
            if let Some(row) = event.new_row() {
                inserts += 1;
                for column in row.iter() {
                    bytes += column.value::<Option<String>>().unwrap().map_or(0, |v| v.len());
                }
            }
            if event.confirmable_lsn() == Some(end) {
                break;
            }
        }
        let run = Run { inserts, wall: started.elapsed(), cpu: cpu() - cpu0, bytes };
        consumer.close().await;
        run
    })
}

fn theirs(server: &Server, slot: &str, end: Lsn) -> Run {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let conninfo = format!("{} replication=database", server.conninfo("postgres", None));
    runtime.block_on(async {
        let (started, cpu0) = (Instant::now(), cpu());
        let config = ReplicationStreamConfig::new(
            slot.to_owned(),
            "bench_pub".to_owned(),
            1,
            StreamingMode::Off,
            Duration::from_secs(10),
            Duration::from_secs(30),
            Duration::from_secs(60),
            RetryConfig::default(),
        )
        .with_existing_slot_required(true);
        let mut stream = LogicalReplicationStream::new(&conninfo, config).await.unwrap();
        stream.start(None).await.unwrap();
        let cancel = CancellationToken::new();
        let (mut inserts, mut bytes) = (0, 0);
        loop {
            let event = stream.next_event(&cancel).await.unwrap();
            match &event.event_type {
                EventType::Insert { data, .. } => {
                    inserts += 1;
                    for (_, value) in data.iter() {
                        bytes += value.as_str().map_or(0, |v| v.to_owned().len());
                    }
                }
                EventType::Commit { end_lsn, .. } if end_lsn.value() == end.0 => break,
                _ => {}
            }
            stream.shared_lsn_feedback.update_applied_lsn(event.lsn.value());
        }
        let run = Run { inserts, wall: started.elapsed(), cpu: cpu() - cpu0, bytes };
        let _ = stream.stop().await;
        run
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(5, |a| a.parse().unwrap());
    let rows: usize = args.next().map_or(200_000, |a| a.parse().unwrap());
    let binaries = find_servers().into_iter().next().expect("a PostgreSQL (PGOUTPUT_PG15_BIN)");
    let server = Server::start(&binaries).unwrap();
    println!("server: {}", server.version());
    let mut setup = String::from(
        "CREATE TABLE bench (id int PRIMARY KEY, name text, amount numeric, created timestamptz, active bool);\
         CREATE PUBLICATION bench_pub FOR TABLE bench;",
    );
    for i in 0..rounds {
        setup.push_str(&format!(
            "SELECT pg_create_logical_replication_slot('ours_{i}', 'pgoutput') IS NOT NULL;\
             SELECT pg_create_logical_replication_slot('async_{i}', 'pgoutput') IS NOT NULL;\
             SELECT pg_create_logical_replication_slot('theirs_{i}', 'pgoutput') IS NOT NULL;"
        ));
    }
    server.psql(&setup).unwrap();
    // Transactions of 1,000 rows each.
    for start in (0..rows).step_by(1000) {
        server
            .psql(&format!(
                "INSERT INTO bench SELECT g, 'name ' || g, g * 1.25, now(), g % 2 = 0 \
                 FROM generate_series({}, {}) g;",
                start + 1,
                (start + 1000).min(rows)
            ))
            .unwrap();
    }
    let end: Lsn = server
        .query_one(&format!(
            "SELECT max(lsn) FROM pg_logical_slot_peek_binary_changes('ours_0', NULL, NULL, \
             'proto_version', '1', 'publication_names', 'bench_pub');"
        ))
        .unwrap()
        .parse()
        .unwrap();
    println!("{rows} rows in {} transactions; last commit ends at {end}", rows.div_ceil(1000));
    println!("round  ours: inserts/s  CPU ns/insert   async: inserts/s  CPU ns/insert   pg_walstream: inserts/s  CPU ns/insert");
    let (mut ratio_rate, mut ratio_cpu, mut async_rate, mut async_cpu) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds {
        // Alternate who goes first.
        let (a, c, b) = if i % 2 == 0 {
            let a = ours(&server, &format!("ours_{i}"), end);
            let c = ours_async(&server, &format!("async_{i}"), end);
            (a, c, theirs(&server, &format!("theirs_{i}"), end))
        } else {
            let b = theirs(&server, &format!("theirs_{i}"), end);
            let c = ours_async(&server, &format!("async_{i}"), end);
            (ours(&server, &format!("ours_{i}"), end), c, b)
        };
        assert_eq!((a.inserts, a.bytes), (b.inserts, b.bytes), "both read the same rows");
        assert_eq!((c.inserts, c.bytes), (b.inserts, b.bytes), "both read the same rows");
        let rate = |r: &Run| r.inserts as f64 / r.wall.as_secs_f64();
        let per = |r: &Run| r.cpu.as_nanos() as f64 / r.inserts as f64;
        println!(
            "{i:>5}  {:>17.0}  {:>13.0}   {:>16.0}  {:>13.0}   {:>23.0}  {:>13.0}",
            rate(&a),
            per(&a),
            rate(&c),
            per(&c),
            rate(&b),
            per(&b)
        );
        ratio_rate.push(rate(&a) / rate(&b));
        ratio_cpu.push(per(&b) / per(&a));
        async_rate.push(rate(&c) / rate(&b));
        async_cpu.push(per(&b) / per(&c));
    }
    println!(
        "median: async {:.2}x pg_walstream's inserts/s, {:.2}x less CPU per insert",
        median(async_rate),
        median(async_cpu)
    );
    println!(
        "median: blocking {:.2}x pg_walstream's inserts/s, {:.2}x less CPU per insert",
        median(ratio_rate),
        median(ratio_cpu)
    );
}
