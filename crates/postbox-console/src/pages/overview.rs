//! The overview (every schema: lag per topic, consumers, relays, halted
//! keys) and the audit page.

use super::{age, failure_page, layout};
use crate::ops::status::RelayState;
use crate::ops::{audit, delivered, halted, status};
use crate::web::{Failure, PageCaller};
use crate::Console;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup};
use postbox::sql::Queries;
use postbox::PARTITIONS;

async fn schema_section(c: &Console, s: &postbox::SchemaName) -> Result<Markup, Failure> {
    let mut conn = c.0.pool.acquire().await?;
    let st = status::schema_status(&mut conn, s).await?;
    let halted = halted::halted_keys(&mut conn, &Queries::new(s), 50).await?;
    let minutes = delivered::last_hour(&mut conn, &Queries::new(s)).await?;
    let base = &c.0.base;
    let lag = st.oldest_pending_age_seconds.map_or("-".to_owned(), age);
    Ok(html! {
        section data-schema=(st.schema) {
            h2 { "Schema " code { (st.schema) } }
            (relay_banner(&st))
            div.cards {
                div.card { "Pending" b data-figure="pending" { (st.pending) } }
                div.card { "Lag (oldest pending)" b data-figure="lag" { (lag) } }
                div.card { "Retrying" b { (st.retrying) } }
                div.card { "Scheduled" b data-figure="scheduled" { (st.scheduled) }
                    @if let Some(next) = st.next_scheduled_in_seconds { " next in " (age(next.max(0.0))) } }
                div.card { "Dead letters" b data-figure="dead-letters" {
                    a href={ (base) "/schemas/" (st.schema) "/dead-letters" } { (st.dead_letters) } } }
                div.card { "Consumer dead letters" b {
                    a href={ (base) "/schemas/" (st.schema) "/dead-letters?side=consumer" } { (st.consumer_dead_letters) } } }
            }
            p.muted { "Wake-up: " code { (st.wake_up) } " · read path: " code { (st.read_path) } }
            (chart(&minutes))
            @if !st.topics.is_empty() {
                table {
                    tr { th { "Topic" } th { "Pending" } th { "Oldest pending" } th { "Retrying" } th { "Dead letters" } }
                    @for t in &st.topics {
                        tr {
                            td { code { (t.topic) } }
                            td.n { (t.pending) }
                            td.n { (t.oldest_pending_age_seconds.map_or("-".to_owned(), age)) }
                            td.n { (t.retrying) }
                            td.n { @if t.dead_letters > 0 {
                                a href={ (base) "/schemas/" (st.schema) "/dead-letters?topic=" (t.topic) } { (t.dead_letters) }
                            } @else { "0" } }
                        }
                    }
                }
            }
            @if !st.consumers.is_empty() {
                table {
                    tr { th { "Consumer" } th { "Dead letters" } th { "Replay waiting" } }
                    @for k in &st.consumers {
                        tr { td { code { (k.consumer) } } td.n { (k.dead_letters) } td.n { (k.replay_waiting) } }
                    }
                }
            }
            h3 id={ "relays-" (st.schema) } { "Relays" }
            @if st.relays.is_empty() {
                p.bad data-figure="relays" { "No relay runs: all " (PARTITIONS) " partitions are unowned." }
            } @else {
                p data-figure="relays" {
                    (st.relays.len()) " instance(s); " (st.partitions_owned) " of " (PARTITIONS) " partitions owned"
                    @if !st.partitions_unowned.is_empty() { span.bad { " · unowned: " (st.partitions_unowned) } }
                    @if st.relays_cannot_publish > 0 { span.bad { " · " (st.relays_cannot_publish) " cannot publish" } }
                    @if st.relays_stale > 0 { span.warn { " · " (st.relays_stale) " stale" } }
                }
                table.relays data-figure="relay-table" {
                    tr { th { "Instance" } th { "State" } th { "Host" } th { "Version" } th { "Sessions" } th { "Partitions" }
                         th { "Client" } th { "Session start" } th { "Last query" } th { "Last publish" } }
                    @for r in &st.relays {
                        @let none = r.sessions == 0;
                        tr data-relay=(r.instance) data-state=(r.state.as_str()) {
                            td { code { (r.instance) } }
                            td { (badge(r.state)) }
                            td { (r.health.as_ref().map_or("-", |h| h.host.as_str())) }
                            td { (r.version.as_deref().unwrap_or("?")) }
                            td.n { (r.sessions) }
                            td { (if r.partition_ranges.is_empty() { "-" } else { r.partition_ranges.as_str() }) }
                            td { (if none { "-" } else { r.client_addr.as_deref().unwrap_or("local") }) }
                            td { (if none { "-".to_owned() } else { r.session_start.map_or("?".to_owned(), |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string()) }) }
                            td { (if none { "-".to_owned() } else { r.last_active.map_or("?".to_owned(), ago) }) }
                            td { (r.health.as_ref().map_or("-".to_owned(), |h| h.last_publish_at.map_or("never".to_owned(), ago))) }
                        }
                        // What it is doing in words, under its row.
                        tr.summary data-state=(r.state.as_str()) { td colspan="10" { (r.summary) } }
                    }
                }
            }
            h3 { "Halted keys" }
            @if halted.is_empty() {
                p.ok data-figure="halted" { "None: every key flows." }
            } @else {
                table data-figure="halted" {
                    tr { th { "Key" } th { "Topic" } th { "Event" } th { "Attempts" } th { "State" } th { "Last error" } }
                    @for h in &halted {
                        tr {
                            td { code { (h.key.as_deref().unwrap_or("-")) } }
                            td { code { (h.topic) } }
                            td { code { (h.event_id) } }
                            td.n { (h.attempts) }
                            td { @if h.blocked { span.bad { "blocked until an operator acts" } }
                                 @else if let Some(t) = h.next_attempt_at { "retry at " (t.format("%H:%M:%S UTC")) } }
                            td { (h.last_error.as_deref().unwrap_or("")) }
                        }
                    }
                }
            }
        }
    })
}

/// At the top of a schema's section when a relay cannot publish (its keys
/// wait: red) or is stale (amber): each such relay and what it says.
fn relay_banner(st: &status::SchemaStatus) -> Markup {
    if st.relays_cannot_publish == 0 && st.relays_stale == 0 {
        return html! {};
    }
    let kind = if st.relays_cannot_publish > 0 {
        "banner error"
    } else {
        "banner warning"
    };
    html! {
        div class=(kind) role="alert" data-figure="relay-alert" {
            strong {
                @if st.relays_cannot_publish > 0 { (st.relays_cannot_publish) " relay(s) cannot publish" }
                @if st.relays_cannot_publish > 0 && st.relays_stale > 0 { ", " }
                @if st.relays_stale > 0 { (st.relays_stale) " relay(s) stale" }
            }
            " (" a href={ "#relays-" (st.schema) } { "relays" } ")"
            ul {
                @for r in st.relays.iter().filter(|r| matches!(r.state, RelayState::CannotPublish | RelayState::Stale)) {
                    li { code { (r.instance) } " " (r.summary) }
                }
            }
        }
    }
}

/// A relay's state as a badge: red when its keys wait, amber when it
/// stands by or is stale, green when it publishes.
fn badge(state: RelayState) -> Markup {
    let name = state.as_str();
    html! { span class={ "badge state-" (name) } { (name.replace('_', " ")) } }
}

/// How long ago `t` was: `42s ago`.
fn ago(t: chrono::DateTime<chrono::Utc>) -> String {
    age((chrono::Utc::now() - t).num_milliseconds() as f64 / 1000.0) + " ago"
}

/// Delivered per minute over the last hour, as bars (an inline SVG: no script).
fn chart(minutes: &[delivered::Minute]) -> Markup {
    let (w, h, bar) = (720.0_f64, 90.0_f64, 12.0_f64);
    let max = minutes
        .iter()
        .map(|m| m.delivered)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let total: i64 = minutes.iter().map(|m| m.delivered).sum();
    let last = minutes.last().map_or(0, |m| m.delivered);
    html! {
        figure data-figure="delivered" data-total=(total) {
            figcaption { "Delivered per minute, last hour: " b { (total) } " in all, " (last) " this minute (peak " (max as i64) ")" }
            svg width=(w) height=(h) viewBox={ "0 0 " (w) " " (h) } role="img" aria-label="events delivered per minute over the last hour" {
                rect x="0" y="0" width=(w) height=(h) fill="#fff" stroke="#dde1e7" {}
                @for (i, m) in minutes.iter().enumerate() {
                    @let bh = (m.delivered as f64 / max * (h - 10.0)).max(if m.delivered > 0 { 1.0 } else { 0.0 });
                    rect x=(i as f64 * bar + 1.0) y=(h - bh) width=(bar - 2.0) height=(bh) fill="#3b6fd8" {
                        title { (m.minute.format("%H:%M")) ": " (m.delivered) }
                    }
                }
            }
        }
    }
}

pub(super) async fn overview(State(c): State<Console>, PageCaller(caller): PageCaller) -> Response {
    let mut sections = Vec::new();
    for s in &c.0.schemas {
        match schema_section(&c, s).await {
            Ok(m) => sections.push(m),
            Err(e) => return failure_page(&c, Some(&caller), e),
        }
    }
    let body = html! {
        p.muted { "Figures as of this page's load; reload for fresh ones." }
        @for s in &sections { (s) }
    };
    layout(&c, Some(&caller), "Overview", body).into_response()
}

pub(super) async fn audit(
    State(c): State<Console>,
    PageCaller(caller): PageCaller,
    Path(name): Path<String>,
) -> Response {
    let result = async {
        let s = c.schema(&name)?;
        let mut conn = c.0.pool.acquire().await?;
        Ok::<_, Failure>(audit::list(&mut conn, &Queries::new(s), None, 200).await?)
    }
    .await;
    let rows = match result {
        Ok(rows) => rows,
        Err(e) => return failure_page(&c, Some(&caller), e),
    };
    let body = html! {
        @if rows.is_empty() { p.muted { "Nothing done through the console yet." } }
        @else {
            table data-figure="audit" {
                tr { th { "When" } th { "Who" } th { "Action" } th { "Rows" } th { "Selection" } }
                @for r in &rows {
                    tr {
                        td { (r.at.format("%Y-%m-%d %H:%M:%S UTC")) }
                        td { (r.actor) }
                        td { code { (r.action) } }
                        td.n { (r.count) }
                        td { code { (r.selection) } }
                    }
                }
            }
        }
    };
    layout(&c, Some(&caller), &format!("Audit: {name}"), body).into_response()
}
