//! See `postbox_relay::fuzzing::identifiers` for what this target checks.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| postbox_relay::fuzzing::identifiers(data));
