//! The headers every answer of the console carries: it may not be framed
//! (clickjacking a replay or purge button), and its pages may load nothing
//! but their own inline style, whose hash the policy names — no script at
//! all, so markup that slipped into a dead letter could not run even if it
//! escaped maud's escaping.

use axum::http::{header, HeaderValue};
use axum::response::Response;
use base64::Engine;
use sha2::{Digest, Sha256};
use std::sync::LazyLock;

/// `Content-Security-Policy`: the pages' one `<style>` by its hash, images
/// only as the inline SVG chart needs (none fetched), forms only to the
/// console itself, never inside a frame.
static POLICY: LazyLock<HeaderValue> = LazyLock::new(|| {
    let hash = base64::engine::general_purpose::STANDARD
        .encode(Sha256::digest(crate::pages::STYLE.as_bytes()));
    HeaderValue::from_str(&format!(
        "default-src 'none'; style-src 'sha256-{hash}'; img-src 'self' data:; \
         form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ))
    .expect("a header value")
});

/// Add the security headers to `res`.
pub(crate) async fn headers(mut res: Response) -> Response {
    let h = res.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, POLICY.clone());
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    res
}
