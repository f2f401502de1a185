//! Streams captured from real PostgreSQL 15 and 18 (the CLI tests' data), turned into JSON
//! lines as `pgoutput decode` prints them, replay through the test server to the same
//! bytes for the options they were captured with.

use pgoutput_codec::server::{Publication, Script, StreamOptions, TestServer};
use pgoutput_codec::{Decoder, ProtocolVersion, Streaming};
use pgoutput_tests::unhex;

#[test]
fn captured_streams_replay_byte_for_byte() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/tests/data");
    let mut replayed = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let command = text
            .lines()
            .find_map(|l| l.strip_prefix("# pgoutput decode "))
            .expect("the capture says how it was decoded");
        let words: Vec<&str> = command.split_whitespace().collect();
        let arg = |name: &str| words.iter().position(|w| *w == name).map(|i| words[i + 1]);
        let version =
            ProtocolVersion::from_number(arg("--proto-version").unwrap().parse().unwrap()).unwrap();
        let streaming = match arg("--streaming") {
            Some("on") => Streaming::On,
            Some("parallel") => Streaming::Parallel,
            _ => Streaming::Off,
        };
        let header = text.lines().next().unwrap();
        let binary = header.contains("binary true");
        let two_phase = header.contains("two-phase: true");
        let payloads: Vec<Vec<u8>> = text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(unhex)
            .collect();
        let mut decoder = Decoder::new(version, streaming).unwrap();
        let json: Vec<String> = payloads
            .iter()
            .map(|p| serde_json::to_string(&decoder.decode(p).unwrap()).unwrap())
            .collect();
        let script = Script::from_json_lines(&json.join("\n")).unwrap();
        let server = TestServer::builder()
            .publication(Publication::all_tables("pub"))
            .script(script)
            .start()
            .unwrap();
        let options = StreamOptions::new(version, &["pub"])
            .streaming(streaming)
            .binary(binary)
            .two_phase(two_phase)
            .messages(true);
        let rendered: Vec<Vec<u8>> = server
            .render(&options)
            .unwrap()
            .into_iter()
            .map(|f| f.payload)
            .collect();
        for (i, (got, want)) in rendered.iter().zip(&payloads).enumerate() {
            assert_eq!(
                pgoutput_tests::hex(got),
                pgoutput_tests::hex(want),
                "{}: message {i} differs",
                path.display()
            );
        }
        assert_eq!(rendered.len(), payloads.len(), "{}", path.display());
        replayed += 1;
    }
    assert_eq!(replayed, 7);
}
