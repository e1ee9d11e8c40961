//! The JSON API, `/api/v1/…`: what the pages show, for scripts and other
//! UIs. Described by `/api/v1/openapi.json` (openapi.rs).

use crate::ops::dead_letters::{self, Action, Filter, Side};
use crate::ops::{audit, delivered, halted, status};
use crate::web::{ApiCaller, Failure};
use crate::Console;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Json, Router};
use postbox::sql::Queries;
use serde::Deserialize;
use serde_json::{json, Value};

pub(crate) fn routes() -> Router<Console> {
    Router::new()
        .route("/api/v1/openapi.json", get(crate::openapi::document))
        .route("/api/v1/schemas", get(schemas))
        .route("/api/v1/schemas/{schema}", get(schema))
        .route("/api/v1/schemas/{schema}/halted-keys", get(halted_keys))
        .route(
            "/api/v1/schemas/{schema}/delivered",
            get(delivered_last_hour),
        )
        .route("/api/v1/schemas/{schema}/dead-letters", get(list))
        .route("/api/v1/schemas/{schema}/dead-letters/groups", get(groups))
        .route(
            "/api/v1/schemas/{schema}/dead-letters/{side}/{id}",
            get(one),
        )
        .route("/api/v1/schemas/{schema}/dead-letters/replay", post(replay))
        .route("/api/v1/schemas/{schema}/dead-letters/purge", post(purge))
        .route("/api/v1/schemas/{schema}/audit", get(audit_list))
}

/// Dead-letter filters as query parameters (`ids` comma-separated).
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct FilterQuery {
    pub(crate) side: Option<Side>,
    pub(crate) consumer: Option<String>,
    pub(crate) topic: Option<String>,
    pub(crate) key: Option<String>,
    pub(crate) older_than_seconds: Option<f64>,
    pub(crate) newer_than_seconds: Option<f64>,
    pub(crate) error: Option<String>,
    pub(crate) fingerprint: Option<String>,
    pub(crate) ids: Option<String>,
    pub(crate) limit: Option<i64>,
    pub(crate) after: Option<i64>,
}

impl FilterQuery {
    pub(crate) fn filter(&self) -> Result<Filter, Failure> {
        let ids = match self.ids.as_deref().filter(|s| !s.trim().is_empty()) {
            None => Vec::new(),
            Some(s) => s
                .split(',')
                .map(|id| {
                    id.trim().parse::<i64>().map_err(|_| {
                        Failure::bad(format!(
                            "ids: {id:?} is not a dead-letter id (give numbers separated by commas)"
                        ))
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        // A form sends its empty fields too: those filter nothing, and are
        // left out of the confirmation page and the audit row.
        let given = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
        Ok(Filter {
            consumer: given(&self.consumer),
            topic: given(&self.topic),
            key: given(&self.key),
            older_than_seconds: self.older_than_seconds,
            newer_than_seconds: self.newer_than_seconds,
            error: given(&self.error),
            fingerprint: given(&self.fingerprint),
            ids,
        })
    }

    pub(crate) fn limit(&self, default: i64) -> Result<i64, Failure> {
        match self.limit {
            None => Ok(default),
            Some(n) if (1..=1000).contains(&n) => Ok(n),
            Some(n) => Err(Failure::bad(format!(
                "limit {n} is out of range: 1 to 1000"
            ))),
        }
    }
}

/// A malformed query string says which parameter and why.
fn query<T: serde::de::DeserializeOwned>(
    q: Result<Query<T>, axum::extract::rejection::QueryRejection>,
) -> Result<T, Failure> {
    q.map(|Query(v)| v)
        .map_err(|e| Failure::bad(format!("bad query string: {}", e.body_text())))
}

async fn conn(console: &Console) -> Result<sqlx::pool::PoolConnection<sqlx::Postgres>, Failure> {
    Ok(console.0.pool.acquire().await?)
}

async fn schemas(State(c): State<Console>, _: ApiCaller) -> Result<Json<Value>, Failure> {
    let mut conn = conn(&c).await?;
    let mut out = Vec::new();
    for s in &c.0.schemas {
        out.push(
            status::schema_status(&mut conn, s)
                .await
                .map_err(Failure::from)?,
        );
    }
    Ok(Json(json!(out)))
}

async fn schema(
    State(c): State<Console>,
    _: ApiCaller,
    Path(name): Path<String>,
) -> Result<Json<status::SchemaStatus>, Failure> {
    let s = c.schema(&name)?;
    let mut conn = conn(&c).await?;
    Ok(Json(status::schema_status(&mut conn, s).await?))
}

async fn delivered_last_hour(
    State(c): State<Console>,
    _: ApiCaller,
    Path(name): Path<String>,
) -> Result<Json<Vec<delivered::Minute>>, Failure> {
    let s = c.schema(&name)?;
    let mut conn = conn(&c).await?;
    Ok(Json(
        delivered::last_hour(&mut conn, &Queries::new(s)).await?,
    ))
}

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct LimitQuery {
    limit: Option<i64>,
    before: Option<i64>,
}

async fn halted_keys(
    State(c): State<Console>,
    _: ApiCaller,
    Path(name): Path<String>,
    q: Result<Query<LimitQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<halted::HaltedKey>>, Failure> {
    let q = query(q)?;
    let limit = FilterQuery {
        limit: q.limit,
        ..Default::default()
    }
    .limit(100)?;
    let s = c.schema(&name)?;
    let mut conn = conn(&c).await?;
    Ok(Json(
        halted::halted_keys(&mut conn, &Queries::new(s), limit).await?,
    ))
}

async fn list(
    State(c): State<Console>,
    _: ApiCaller,
    Path(name): Path<String>,
    q: Result<Query<FilterQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<dead_letters::Page>, Failure> {
    let q = query(q)?;
    let s = c.schema(&name)?;
    let mut conn = conn(&c).await?;
    let page = dead_letters::list(
        &mut conn,
        &Queries::new(s),
        q.side.unwrap_or_default(),
        &q.filter()?,
        q.limit(100)?,
        q.after,
    )
    .await?;
    Ok(Json(page))
}

async fn groups(
    State(c): State<Console>,
    _: ApiCaller,
    Path(name): Path<String>,
    q: Result<Query<FilterQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<dead_letters::Group>>, Failure> {
    let q = query(q)?;
    if q.after.is_some() {
        return Err(Failure::bad("groups have no pages: leave `after` out"));
    }
    let s = c.schema(&name)?;
    let mut conn = conn(&c).await?;
    let side = q.side.unwrap_or_default();
    let groups = dead_letters::groups(
        &mut conn,
        &Queries::new(s),
        side,
        &q.filter()?,
        q.limit(100)?,
    )
    .await?;
    Ok(Json(groups))
}

async fn one(
    State(c): State<Console>,
    _: ApiCaller,
    Path((name, side, id)): Path<(String, String, String)>,
) -> Result<Json<dead_letters::DeadLetter>, Failure> {
    let s = c.schema(&name)?;
    let side = parse_side(&side)?;
    let id: i64 = id
        .parse()
        .map_err(|_| Failure::bad(format!("{id:?} is not a dead-letter id")))?;
    let mut conn = conn(&c).await?;
    dead_letters::get(&mut conn, &Queries::new(s), side, id)
        .await?
        .map(Json)
        .ok_or_else(|| {
            Failure::not_found(format!(
                "no {} dead letter {id} in schema {s}",
                side.as_str()
            ))
        })
}

pub(crate) fn parse_side(s: &str) -> Result<Side, Failure> {
    match s {
        "relay" => Ok(Side::Relay),
        "consumer" => Ok(Side::Consumer),
        other => Err(Failure::bad(format!(
            "side {other:?} is neither `relay` nor `consumer`"
        ))),
    }
}

/// The body of a replay or purge.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActBody {
    #[serde(default)]
    side: Side,
    #[serde(default)]
    filter: Filter,
    /// Select every dead letter of the side when the filter is empty.
    #[serde(default)]
    all: bool,
    /// The count the caller expects to touch; a different count refuses (409).
    confirmed_count: Option<i64>,
}

async fn act(
    c: Console,
    caller: ApiCaller,
    headers: HeaderMap,
    name: String,
    body: Result<Json<ActBody>, axum::extract::rejection::JsonRejection>,
    action: Action,
) -> Result<Json<Value>, Failure> {
    let caller = caller.0;
    let token = headers.get("x-csrf-token").and_then(|v| v.to_str().ok());
    caller.csrf(&c, token)?;
    caller.admin()?;
    let Json(body) = body.map_err(|e| Failure::bad(format!("bad body: {}", e.body_text())))?;
    let s = c.schema(&name)?;
    let mut conn = conn(&c).await?;
    let asked = dead_letters::Act {
        side: body.side,
        action,
        filter: &body.filter,
        all: body.all,
        confirmed: body.confirmed_count,
    };
    let count = dead_letters::act(&mut conn, &Queries::new(s), &asked, &caller.user.name)
        .await?
        .len();
    Ok(Json(
        json!({ "action": action.as_str(), "side": body.side, "count": count }),
    ))
}

async fn replay(
    State(c): State<Console>,
    caller: ApiCaller,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Result<Json<ActBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, Failure> {
    act(c, caller, headers, name, body, Action::Replay).await
}

async fn purge(
    State(c): State<Console>,
    caller: ApiCaller,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Result<Json<ActBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, Failure> {
    act(c, caller, headers, name, body, Action::Purge).await
}

async fn audit_list(
    State(c): State<Console>,
    _: ApiCaller,
    Path(name): Path<String>,
    q: Result<Query<LimitQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<audit::AuditEntry>>, Failure> {
    let q = query(q)?;
    let limit = FilterQuery {
        limit: q.limit,
        ..Default::default()
    }
    .limit(100)?;
    let s = c.schema(&name)?;
    let mut conn = conn(&c).await?;
    Ok(Json(
        audit::list(&mut conn, &Queries::new(s), q.before, limit).await?,
    ))
}
