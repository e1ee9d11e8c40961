//! See `postbox_relay::fuzzing::trace_context` for what this target checks.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| postbox_relay::fuzzing::trace_context(data));
