#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgoutput_tests::fuzz::raw(data));
