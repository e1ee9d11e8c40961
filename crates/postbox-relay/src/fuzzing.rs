//! Entry points for the fuzz targets (`fuzz/`, `./scripts/fuzz.sh`) and for
//! the test that replays their seeds and past findings: every parser of
//! outside input, each with the property it must keep. Compiled only with
//! the `fuzzing` feature; not an API.

use crate::OutboxEvent;
use postbox::trace::{check_traceparent, TRACEPARENT};

/// Schema and role names: an accepted name is safe to put into SQL as it is.
pub fn identifiers(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(name) = postbox::SchemaName::new(s) {
        let n = name.as_str();
        assert!(!n.is_empty() && n.len() <= 63, "{n:?}");
        assert!(
            n.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "{n:?} would need quoting"
        );
        assert!(!n.as_bytes()[0].is_ascii_digit(), "{n:?}");
    }
    let _ = postbox::RoleName::new(s);
}

/// The W3C trace-context parser, on strings and on JSON header objects: an
/// accepted `traceparent` has the exact shape.
pub fn trace_context(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        if check_traceparent(s).is_ok() {
            assert_eq!(s.len(), 55, "{s:?}");
            assert_eq!(s.matches('-').count(), 3, "{s:?}");
        }
        let _ = postbox::TraceContext::new(s);
    }
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        if let Some(tc) = postbox::TraceContext::from_json(&v) {
            assert!(check_traceparent(&tc.traceparent).is_ok());
        }
    }
}

/// `[relay]` settings as TOML, then the start-up checks; what the relay
/// prints of the URL has no password left where the URL keeps it (the
/// userinfo before the authority's last `@`, as the `url` crate and so sqlx
/// read it), and is what `Debug` shows. (The first version of this check
/// looked for the password anywhere in the output and was caught out by a
/// URL whose database name repeats it: `seed-finding-password-twice`.)
pub fn relay_settings(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = toml::from_str::<crate::Config>(s) else {
        return;
    };
    let _ = config.validate();
    let redacted = config.database_url.redacted();
    assert_eq!(password_of(&redacted), None, "{redacted}");
    assert!(format!("{config:?}").contains(&format!("{redacted:?}")));
}

fn password_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let userinfo = authority.rsplit_once('@')?.0;
    let pw = userinfo.split_once(':')?.1;
    (pw.len() >= 4 && pw != "***").then_some(pw)
}

/// The logical wake-up's pgoutput decoder, on messages separated by 0xFF
/// bytes (no pgoutput tag is 0xFF): decodes or ignores, never panics.
pub fn pgoutput(data: &[u8]) {
    let mut d = crate::wake_logical::decoder::Decoder::default();
    d.begin();
    for m in data.split(|b| *b == 0xFF) {
        d.change(m);
    }
    let _ = d.commit();
}

/// A row's `headers` as every sink forwards them: any JSON gives header
/// pairs, and a forwarded `traceparent` is always a valid one.
pub fn headers(data: &[u8]) {
    let Ok(headers) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let event = OutboxEvent {
        id: 1,
        event_id: uuid::Uuid::nil(),
        topic: "t".into(),
        event: "e".into(),
        key: None,
        payload: serde_json::Value::Null,
        headers,
        attempts: 0,
        created_at: chrono::Utc::now(),
        schema: "s".into(),
    };
    for (name, value) in crate::headers::forwarded(&event) {
        if name == TRACEPARENT {
            assert!(check_traceparent(&value).is_ok(), "{value:?}");
        }
    }
    let _ = crate::headers::trace_context(&event);
}
