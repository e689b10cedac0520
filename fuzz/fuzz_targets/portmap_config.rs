#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cni_tests::fuzz::portmap_config(data));
