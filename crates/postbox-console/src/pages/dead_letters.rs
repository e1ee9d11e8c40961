//! Dead-letter pages: groups by error fingerprint, a group's (or any
//! filter's) dead letters a page at a time, one dead letter whole, and the
//! replay/purge flow: a confirmation page with the exact count, then the act.

use super::{failure_page, layout};
use crate::api::{parse_side, FilterQuery};
use crate::ops::dead_letters::{self, Action, Filter, Side};
use crate::web::{Caller, Failure, PageCaller};
use crate::Console;
use axum::extract::{Form, Path, Query, State};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup};
use postbox::sql::Queries;
use serde::Deserialize;

/// The hidden fields that carry a selection from page to page.
fn selection_fields(side: Side, f: &Filter) -> Markup {
    let opt = |v: &Option<String>| v.clone().unwrap_or_default();
    let num = |v: Option<f64>| v.map(|n| n.to_string()).unwrap_or_default();
    let ids: Vec<String> = f.ids.iter().map(i64::to_string).collect();
    html! {
        input type="hidden" name="side" value=(side.as_str());
        input type="hidden" name="consumer" value=(opt(&f.consumer));
        input type="hidden" name="topic" value=(opt(&f.topic));
        input type="hidden" name="key" value=(opt(&f.key));
        input type="hidden" name="error" value=(opt(&f.error));
        input type="hidden" name="fingerprint" value=(opt(&f.fingerprint));
        input type="hidden" name="older_than_seconds" value=(num(f.older_than_seconds));
        input type="hidden" name="newer_than_seconds" value=(num(f.newer_than_seconds));
        input type="hidden" name="ids" value=(ids.join(","));
    }
}

/// Replay and purge buttons for a selection (admins only).
fn action_buttons(
    c: &Console,
    caller: &Caller,
    schema: &str,
    side: Side,
    f: &Filter,
    label: &str,
) -> Markup {
    if caller.admin().is_err() {
        return html! {};
    }
    html! {
        @for action in [Action::Replay, Action::Purge] {
            form.inline method="post" action={ (c.0.base) "/schemas/" (schema) "/dead-letters/confirm" } {
                input type="hidden" name="csrf" value=(caller.csrf_token(c));
                input type="hidden" name="action" value=(action.as_str());
                (selection_fields(side, f))
                button type="submit" class=(if action == Action::Purge { "danger" } else { "" })
                    data-action=(action.as_str()) { (if action == Action::Replay { "Replay" } else { "Purge" }) " " (label) }
                " "
            }
        }
    }
}

fn query_string(side: Side, f: &Filter) -> String {
    let mut parts = vec![format!("side={}", side.as_str())];
    let mut add = |k: &str, v: &str| {
        if !v.is_empty() {
            parts.push(format!("{k}={}", percent(v)));
        }
    };
    for (k, v) in [
        ("consumer", &f.consumer),
        ("topic", &f.topic),
        ("key", &f.key),
        ("error", &f.error),
        ("fingerprint", &f.fingerprint),
    ] {
        add(k, v.as_deref().unwrap_or(""));
    }
    if let Some(n) = f.older_than_seconds {
        add("older_than_seconds", &n.to_string());
    }
    if let Some(n) = f.newer_than_seconds {
        add("newer_than_seconds", &n.to_string());
    }
    parts.join("&")
}

/// Percent-encode a query value (everything but unreserved characters).
fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn filter_form(c: &Console, schema: &str, side: Side, f: &Filter) -> Markup {
    let opt = |v: &Option<String>| v.clone().unwrap_or_default();
    html! {
        form.filters method="get" action={ (c.0.base) "/schemas/" (schema) "/dead-letters" } {
            label { "Side " select name="side" {
                option value="relay" selected[side == Side::Relay] { "relay" }
                option value="consumer" selected[side == Side::Consumer] { "consumer" }
            } } " "
            label { "Topic " input name="topic" value=(opt(&f.topic)); } " "
            label { "Key " input name="key" value=(opt(&f.key)); } " "
            @if side == Side::Consumer { label { "Consumer " input name="consumer" value=(opt(&f.consumer)); } " " }
            label { "Error contains " input name="error" value=(opt(&f.error)); } " "
            label { "Newer than (s) " input name="newer_than_seconds" value=(f.newer_than_seconds.map(|n| n.to_string()).unwrap_or_default()); } " "
            button type="submit" { "Filter" }
        }
    }
}

/// Form and query values as a side and a filter (empty fields are unset).
fn selection(q: &FilterQuery) -> Result<(Side, Filter), Failure> {
    Ok((q.side.unwrap_or_default(), q.filter()?))
}

/// HTML forms send every field, numbers included, as text.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct FormQuery {
    side: Option<String>,
    consumer: Option<String>,
    topic: Option<String>,
    key: Option<String>,
    error: Option<String>,
    fingerprint: Option<String>,
    older_than_seconds: Option<String>,
    newer_than_seconds: Option<String>,
    ids: Option<String>,
    after: Option<String>,
    action: Option<String>,
    confirmed: Option<String>,
    csrf: Option<String>,
}

impl FormQuery {
    fn parse(&self) -> Result<FilterQuery, Failure> {
        let num = |name: &str, v: &Option<String>| -> Result<Option<f64>, Failure> {
            match v.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
                None => Ok(None),
                Some(s) => s
                    .parse()
                    .map(Some)
                    .map_err(|_| Failure::bad(format!("{name}: {s:?} is not a number of seconds"))),
            }
        };
        let side = match self.side.as_deref().filter(|s| !s.is_empty()) {
            None => None,
            Some(s) => Some(parse_side(s)?),
        };
        let after = match self.after.as_deref().filter(|s| !s.is_empty()) {
            None => None,
            Some(s) => Some(
                s.parse()
                    .map_err(|_| Failure::bad(format!("after: {s:?} is not an id")))?,
            ),
        };
        Ok(FilterQuery {
            side,
            consumer: self.consumer.clone(),
            topic: self.topic.clone(),
            key: self.key.clone(),
            older_than_seconds: num("older_than_seconds", &self.older_than_seconds)?,
            newer_than_seconds: num("newer_than_seconds", &self.newer_than_seconds)?,
            error: self.error.clone(),
            fingerprint: self.fingerprint.clone(),
            ids: self.ids.clone(),
            limit: None,
            after,
        })
    }
}

pub(super) async fn groups(
    State(c): State<Console>,
    PageCaller(caller): PageCaller,
    Path(name): Path<String>,
    Query(q): Query<FormQuery>,
) -> Response {
    let result = async {
        let s = c.schema(&name)?;
        let (side, filter) = selection(&q.parse()?)?;
        let mut conn = c.0.pool.acquire().await?;
        let groups = dead_letters::groups(&mut conn, &Queries::new(s), side, &filter, 100).await?;
        Ok::<_, Failure>((side, filter, groups))
    }
    .await;
    let (side, filter, groups) = match result {
        Ok(r) => r,
        Err(e) => return failure_page(&c, Some(&caller), e),
    };
    let base = &c.0.base;
    let body = html! {
        (filter_form(&c, &name, side, &filter))
        @if groups.is_empty() {
            p.ok data-figure="groups" { "No " (side.as_str()) " dead letters match." }
        } @else {
            table data-figure="groups" {
                tr { th { "Dead letters" } th { "Error (fingerprint)" } th { "Topics" } th { "First" } th { "Last" } th {} }
                @for g in &groups {
                    @let group = Filter { fingerprint: Some(g.fingerprint.clone()), ..filter.clone() };
                    tr data-fingerprint=(g.fingerprint) {
                        td.n { (g.count) }
                        td { code { (g.fingerprint) } br; span.muted { "e.g. " (g.example_error) } }
                        td { @for t in &g.topics { code { (t) } " " } }
                        td { (g.first_dead_at.format("%Y-%m-%d %H:%M:%S")) }
                        td { (g.last_dead_at.format("%Y-%m-%d %H:%M:%S")) }
                        td {
                            a href={ (base) "/schemas/" (name) "/dead-letters/list?" (query_string(side, &group)) } { "Open" } " "
                            (action_buttons(&c, &caller, &name, side, &group, "group"))
                        }
                    }
                }
            }
        }
    };
    layout(
        &c,
        Some(&caller),
        &format!("Dead letters: {name} ({})", side.as_str()),
        body,
    )
    .into_response()
}

pub(super) async fn list(
    State(c): State<Console>,
    PageCaller(caller): PageCaller,
    Path(name): Path<String>,
    Query(q): Query<FormQuery>,
) -> Response {
    let result = async {
        let s = c.schema(&name)?;
        let fq = q.parse()?;
        let (side, filter) = selection(&fq)?;
        let mut conn = c.0.pool.acquire().await?;
        let page =
            dead_letters::list(&mut conn, &Queries::new(s), side, &filter, 50, fq.after).await?;
        Ok::<_, Failure>((side, filter, page))
    }
    .await;
    let (side, filter, page) = match result {
        Ok(r) => r,
        Err(e) => return failure_page(&c, Some(&caller), e),
    };
    let base = &c.0.base;
    let body = html! {
        p { (page.matching) " dead letter(s) match. " (action_buttons(&c, &caller, &name, side, &filter, "all matching")) }
        table data-figure="dead-letters" {
            tr { th { "Id" } th { "Topic" } th { "Key" } @if side == Side::Consumer { th { "Consumer" } } th { "Attempts" } th { "Dead at" } th { "Last error" } }
            @for d in &page.items {
                tr {
                    td { a href={ (base) "/schemas/" (name) "/dead-letters/" (side.as_str()) "/" (d.id) } { (d.id) } }
                    td { code { (d.topic) } }
                    td { code { (d.key.as_deref().unwrap_or("-")) } }
                    @if side == Side::Consumer { td { code { (d.consumer.as_deref().unwrap_or("")) } } }
                    td.n { (d.attempts) }
                    td { (d.dead_at.format("%Y-%m-%d %H:%M:%S")) }
                    td { (d.last_error) }
                }
            }
        }
        @if let Some(after) = page.next_after {
            a href={ (base) "/schemas/" (name) "/dead-letters/list?" (query_string(side, &filter)) "&after=" (after) } { "Next page" }
        }
    };
    layout(&c, Some(&caller), &format!("Dead letters: {name}"), body).into_response()
}

pub(super) async fn one(
    State(c): State<Console>,
    PageCaller(caller): PageCaller,
    Path((name, side, id)): Path<(String, String, String)>,
) -> Response {
    let result = async {
        let s = c.schema(&name)?;
        let side = parse_side(&side)?;
        let id: i64 = id
            .parse()
            .map_err(|_| Failure::bad(format!("{id:?} is not a dead-letter id")))?;
        let mut conn = c.0.pool.acquire().await?;
        let d = dead_letters::get(&mut conn, &Queries::new(s), side, id)
            .await?
            .ok_or_else(|| {
                Failure::not_found(format!(
                    "no {} dead letter {id} in schema {s}",
                    side.as_str()
                ))
            })?;
        Ok::<_, Failure>((side, d))
    }
    .await;
    let (side, d) = match result {
        Ok(r) => r,
        Err(e) => return failure_page(&c, Some(&caller), e),
    };
    let just = Filter {
        ids: vec![d.id],
        ..Filter::default()
    };
    let body = html! {
        p { (action_buttons(&c, &caller, &name, side, &just, "this one")) }
        pre data-figure="dead-letter" { (serde_json::to_string_pretty(&d).unwrap_or_default()) }
    };
    layout(
        &c,
        Some(&caller),
        &format!("Dead letter {} ({})", d.id, side.as_str()),
        body,
    )
    .into_response()
}

fn action_of(q: &FormQuery) -> Result<Action, Failure> {
    match q.action.as_deref() {
        Some("replay") => Ok(Action::Replay),
        Some("purge") => Ok(Action::Purge),
        other => Err(Failure::bad(format!(
            "action {other:?} is neither replay nor purge"
        ))),
    }
}

pub(super) async fn confirm(
    State(c): State<Console>,
    PageCaller(caller): PageCaller,
    Path(name): Path<String>,
    Form(q): Form<FormQuery>,
) -> Response {
    let result = async {
        caller.csrf(&c, q.csrf.as_deref())?;
        caller.admin()?;
        let s = c.schema(&name)?;
        let action = action_of(&q)?;
        let (side, filter) = selection(&q.parse()?)?;
        filter.check(side)?;
        if filter.is_empty() {
            return Err(Failure::bad(
                "choose a group, a dead letter or a filter first",
            ));
        }
        let mut conn = c.0.pool.acquire().await?;
        let n = dead_letters::count(&mut conn, &Queries::new(s), side, &filter).await?;
        Ok::<_, Failure>((action, side, filter, n))
    }
    .await;
    let (action, side, filter, n) = match result {
        Ok(r) => r,
        Err(e) => return failure_page(&c, Some(&caller), e),
    };
    let verb = if action == Action::Replay {
        "Replay"
    } else {
        "Purge"
    };
    let body = html! {
        @if n == 0 {
            p.error { "No dead letters match this selection any more: nothing to do." }
        } @else {
            p data-figure="confirm-count" data-count=(n) {
                (verb) " " b { (n) } " " (side.as_str()) " dead letter(s) of schema " code { (name) } "?"
                @if action == Action::Purge { " They are deleted for good." }
                @if action == Action::Replay && side == Side::Relay { " They go back into the outbox and the relay sends them again." }
                @if action == Action::Replay && side == Side::Consumer { " A running consumer of their name runs them again." }
            }
            p.muted { "Selection: " code { (serde_json::to_string(&filter).unwrap_or_default()) } }
            form method="post" action={ (c.0.base) "/schemas/" (name) "/dead-letters/act" } {
                input type="hidden" name="csrf" value=(caller.csrf_token(&c));
                input type="hidden" name="action" value=(action.as_str());
                input type="hidden" name="confirmed" value=(n);
                (selection_fields(side, &filter))
                button type="submit" class=(if action == Action::Purge { "danger" } else { "" }) data-action="confirm" {
                    "Yes, " (verb.to_lowercase()) " " (n)
                }
            }
        }
        p { a href={ (c.0.base) "/schemas/" (name) "/dead-letters?side=" (side.as_str()) } { "Cancel" } }
    };
    layout(&c, Some(&caller), &format!("{verb} dead letters?"), body).into_response()
}

pub(super) async fn act(
    State(c): State<Console>,
    PageCaller(caller): PageCaller,
    Path(name): Path<String>,
    Form(q): Form<FormQuery>,
) -> Response {
    let result = async {
        caller.csrf(&c, q.csrf.as_deref())?;
        caller.admin()?;
        let s = c.schema(&name)?;
        let action = action_of(&q)?;
        let (side, filter) = selection(&q.parse()?)?;
        let confirmed: i64 = q
            .confirmed
            .as_deref()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| {
                Failure::bad(
                    "the confirmed count is missing: start again from the dead letters page",
                )
            })?;
        let mut conn = c.0.pool.acquire().await?;
        let asked = dead_letters::Act {
            side,
            action,
            filter: &filter,
            all: false,
            confirmed: Some(confirmed),
        };
        let n = dead_letters::act(&mut conn, &Queries::new(s), &asked, &caller.user.name)
            .await?
            .len();
        Ok::<_, Failure>((action, side, n))
    }
    .await;
    let (action, side, n) = match result {
        Ok(r) => r,
        Err(e) => return failure_page(&c, Some(&caller), e),
    };
    let done = if action == Action::Replay {
        "Replayed"
    } else {
        "Purged"
    };
    let body = html! {
        p.notice data-figure="done" data-count=(n) { (done) " " (n) " " (side.as_str()) " dead letter(s). Recorded in the audit." }
        p {
            a href={ (c.0.base) "/schemas/" (name) "/dead-letters?side=" (side.as_str()) } { "Back to the dead letters" } " · "
            a href={ (c.0.base) "/schemas/" (name) "/audit" } { "Audit" }
        }
    };
    layout(&c, Some(&caller), done, body).into_response()
}
