#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cni_tests::fuzz::bridge_config(data));
