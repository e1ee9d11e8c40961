//! The HTML pages: server-rendered with maud (checked at compile time), plain
//! forms and links, no script needed. Every form that changes something
//! carries the session's CSRF token.

mod dead_letters;
mod overview;

use crate::web::{Caller, Failure, PageCaller, COOKIE};
use crate::Console;
use axum::extract::{Form, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::{html, Markup, DOCTYPE};
use serde::Deserialize;

pub(crate) fn routes() -> Router<Console> {
    Router::new()
        .route("/", get(overview::overview))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/schemas/{schema}/dead-letters", get(dead_letters::groups))
        .route(
            "/schemas/{schema}/dead-letters/list",
            get(dead_letters::list),
        )
        .route(
            "/schemas/{schema}/dead-letters/{side}/{id}",
            get(dead_letters::one),
        )
        .route(
            "/schemas/{schema}/dead-letters/confirm",
            post(dead_letters::confirm),
        )
        .route(
            "/schemas/{schema}/dead-letters/act",
            post(dead_letters::act),
        )
        .route("/schemas/{schema}/audit", get(overview::audit))
}

pub(crate) const STYLE: &str = "
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:.6em 1.2em;display:flex;gap:1.2em;align-items:center;flex-wrap:wrap}
header a{color:#cfe0ff;text-decoration:none}header form{margin-left:auto}
main{padding:1em 1.2em;max-width:1280px}
table{border-collapse:collapse;background:#fff;margin:.5em 0 1.2em;width:100%}
th,td{border:1px solid #dde1e7;padding:.3em .55em;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font:12.5px ui-monospace,monospace}pre{background:#fff;border:1px solid #dde1e7;padding:.6em;overflow:auto;max-height:24em}
.bad{color:#b3261e;font-weight:600}.ok{color:#1b7f3b}.muted{color:#667085}
.notice{background:#e8f3ec;border:1px solid #9fd3b0;padding:.5em .8em}.error{background:#fdecea;border:1px solid #f1aeb5;padding:.5em .8em}
form.inline{display:inline}button{cursor:pointer}.danger{background:#b3261e;color:#fff;border:0;padding:.35em .8em}
.filters input{width:9em}.cards{display:flex;gap:1em;flex-wrap:wrap}.card{background:#fff;border:1px solid #dde1e7;padding:.6em 1em;min-width:9em}
.card b{display:block;font-size:1.5em}
.warn{color:#8a5300;font-weight:600}.warning{background:#fff4e0;border:1px solid #f0c36d;padding:.5em .8em}
.banner{margin:.5em 0 1em}.banner ul{margin:.3em 0 0;padding-left:1.2em}
.badge{display:inline-block;padding:.05em .55em;border-radius:.8em;font-size:.85em;font-weight:600;white-space:nowrap;border:1px solid transparent}
.state-publishing{background:#e8f3ec;color:#1b7f3b;border-color:#9fd3b0}.state-cannot_publish{background:#b3261e;color:#fff}
.state-standing_by,.state-stale{background:#fff4e0;color:#8a5300;border-color:#f0c36d}.state-unknown{background:#eef1f5;color:#667085;border-color:#dde1e7}
tr[data-state=cannot_publish] td{background:#fdecea}tr[data-state=standing_by] td,tr[data-state=stale] td{background:#fffaf0}
table.relays tr[data-relay] td{border-bottom:0;white-space:nowrap}table.relays tr.summary td{border-top:0;padding-top:0;color:#3d4555}
";

/// A whole page around `body`.
pub(crate) fn layout(c: &Console, caller: Option<&Caller>, title: &str, body: Markup) -> Markup {
    let base = &c.0.base;
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                // No icon to fetch: a browser's /favicon.ico request would 404.
                link rel="icon" href="data:,";
                title { (title) " · postbox console" }
                style { (maud::PreEscaped(STYLE)) }
            }
            body {
                header {
                    strong { "postbox console" }
                    a href=(c.home()) { "Overview" }
                    @for s in &c.0.schemas {
                        a href={ (base) "/schemas/" (s.as_str()) "/dead-letters" } { "Dead letters: " (s.as_str()) }
                        a href={ (base) "/schemas/" (s.as_str()) "/audit" } { "Audit: " (s.as_str()) }
                    }
                    @if let Some(caller) = caller {
                        form.inline method="post" action={ (base) "/logout" } {
                            input type="hidden" name="csrf" value=(caller.csrf_token(c));
                            span.muted { (caller.user.name) " (" (role(caller)) ") " }
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
}

fn role(caller: &Caller) -> &'static str {
    match caller.user.role {
        crate::auth::Role::Admin => "admin",
        crate::auth::Role::Viewer => "viewer",
    }
}

/// A failure as a page.
pub(crate) fn failure_page(c: &Console, caller: Option<&Caller>, f: Failure) -> Response {
    let body = html! { p.error { (f.message) } p { a href=(c.home()) { "Back to the overview" } } };
    (f.status, layout(c, caller, "Something went wrong", body)).into_response()
}

async fn login_page(State(c): State<Console>) -> Markup {
    login_form(&c, None)
}

fn login_form(c: &Console, problem: Option<&str>) -> Markup {
    layout(
        c,
        None,
        "Sign in",
        html! {
            @if let Some(p) = problem { p.error { (p) } }
            form method="post" action={ (c.0.base) "/login" } {
                p { label { "Token " input type="password" name="token" autocomplete="current-password" autofocus; } }
                p { button type="submit" { "Sign in" } }
            }
            p.muted { "Your token is in the console's users file (ask whoever runs it)." }
        },
    )
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(State(c): State<Console>, Form(f): Form<LoginForm>) -> Response {
    let Some(user) = c.0.users.by_token(f.token.trim()) else {
        return (
            StatusCode::UNAUTHORIZED,
            login_form(&c, Some("Unknown token.")),
        )
            .into_response();
    };
    let session = c.0.signer.session(user);
    let path = if c.0.base.is_empty() {
        "/"
    } else {
        c.0.base.as_str()
    };
    let cookie = format!(
        "{COOKIE}={session}; Path={path}; HttpOnly; SameSite=Strict; Max-Age={}",
        crate::auth::SESSION.as_secs()
    );
    tracing::info!(user = %user.name, "console sign-in");
    ([(header::SET_COOKIE, cookie)], Redirect::to(c.home())).into_response()
}

#[derive(Deserialize)]
struct CsrfForm {
    csrf: Option<String>,
}

async fn logout(
    State(c): State<Console>,
    PageCaller(caller): PageCaller,
    Form(f): Form<CsrfForm>,
) -> Response {
    if let Err(e) = caller.csrf(&c, f.csrf.as_deref()) {
        return failure_page(&c, Some(&caller), e);
    }
    let path = if c.0.base.is_empty() {
        "/"
    } else {
        c.0.base.as_str()
    };
    (
        [(
            header::SET_COOKIE,
            format!("{COOKIE}=; Path={path}; HttpOnly; SameSite=Strict; Max-Age=0"),
        )],
        Redirect::to(&format!("{}/login", c.0.base)),
    )
        .into_response()
}

pub(crate) use crate::ops::status::age;
