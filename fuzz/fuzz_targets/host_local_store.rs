#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cni_tests::fuzz::host_local_store(data));
