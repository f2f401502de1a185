//! Every fuzz corpus input and every crash input the fuzzers ever found
//! (`fuzz/corpus/<target>/`, `fuzz/artifacts/<target>/`) through the same target functions
//! the fuzzers run, on stable: a regression fails `cargo test`.

use std::path::Path;

use pgoutput_tests::fuzz::TARGETS;

#[test]
fn every_corpus_and_crash_input_passes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    for (name, target) in TARGETS {
        let mut inputs = 0;
        for folder in ["corpus", "artifacts"] {
            let Ok(entries) = std::fs::read_dir(root.join(folder).join(name)) else {
                continue;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                let data = std::fs::read(&path).unwrap();
                let outcome = std::panic::catch_unwind(|| target(&data));
                assert!(outcome.is_ok(), "{name}: {} fails", path.display());
                inputs += 1;
            }
        }
        assert!(inputs > 0, "{name}: no corpus");
    }
}
