//! The fuzz targets' seeds and past findings (`fuzz/corpus/<target>/seed-*`),
//! replayed through the same checks on every test run, so a fixed finding
//! stays fixed. `./scripts/fuzz.sh` runs the fuzzers themselves.

use postbox_relay::fuzzing;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("seed-"))
        {
            check(&std::fs::read(&path).unwrap());
            seen += 1;
        }
    }
    assert!(seen > 0, "no seeds in {}", dir.display());
}

#[test]
fn fuzz_seeds_and_findings_still_pass() {
    replay("identifiers", fuzzing::identifiers);
    replay("trace_context", fuzzing::trace_context);
    replay("relay_settings", fuzzing::relay_settings);
    replay("pgoutput", fuzzing::pgoutput);
    replay("headers", fuzzing::headers);
}
