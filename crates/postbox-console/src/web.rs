//! What every handler shares: who is calling (bearer token or session
//! cookie), the CSRF check, and errors as JSON or as a page.

use crate::auth::{Role, User};
use crate::{Console, OpsError};
use axum::extract::FromRequestParts;
use axum::http::{header, request::Parts, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

/// The session cookie's name.
pub(crate) const COOKIE: &str = "postbox_console";

/// A failed request: its status and what to tell the caller.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
        }
    }
    /// A failure of the server's own (the database refused or is gone):
    /// its text may name tables, hosts or roles, so the caller gets an id
    /// and the log gets the text under that id.
    pub(crate) fn internal(e: &dyn std::fmt::Display) -> Failure {
        let id = format!("{:016x}", rand::random::<u64>());
        tracing::error!(error_id = %id, error = %e, "console request failed");
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error (error id {id}): the console could not complete the request; its log has the cause under error_id={id}"),
        )
    }
    pub(crate) fn bad(message: impl Into<String>) -> Failure {
        Failure::new(StatusCode::BAD_REQUEST, message)
    }
    pub(crate) fn not_found(message: impl Into<String>) -> Failure {
        Failure::new(StatusCode::NOT_FOUND, message)
    }
    pub(crate) fn forbidden() -> Failure {
        Failure::new(
            StatusCode::FORBIDDEN,
            "this needs the admin role; your user is a viewer",
        )
    }
}

impl From<OpsError> for Failure {
    fn from(e: OpsError) -> Failure {
        if e.is_bad_input() {
            let status = match e {
                OpsError::SelectionChanged { .. } => StatusCode::CONFLICT,
                _ => StatusCode::BAD_REQUEST,
            };
            return Failure::new(status, e.to_string());
        }
        Failure::internal(&e)
    }
}

impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Failure {
        OpsError::from(e).into()
    }
}

/// As JSON: `{"error": "..."}`.
impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (
            self.status,
            axum::Json(serde_json::json!({ "error": self.message })),
        )
            .into_response()
    }
}

/// The signed-in caller.
pub(crate) struct Caller {
    pub(crate) user: User,
    /// The session cookie, when signed in by browser (None for a bearer token).
    pub(crate) cookie: Option<String>,
}

impl Caller {
    pub(crate) fn admin(&self) -> Result<(), Failure> {
        match self.user.role {
            Role::Admin => Ok(()),
            Role::Viewer => Err(Failure::forbidden()),
        }
    }

    /// A request that changes something, made with the session cookie, must
    /// carry the session's CSRF token.
    pub(crate) fn csrf(&self, console: &Console, token: Option<&str>) -> Result<(), Failure> {
        let Some(cookie) = &self.cookie else {
            return Ok(());
        };
        match token {
            Some(t) if console.0.signer.csrf_ok(cookie, t) => Ok(()),
            _ => Err(Failure::new(
                StatusCode::FORBIDDEN,
                "missing or wrong CSRF token: reload the page and try again",
            )),
        }
    }

    /// The CSRF token forms of this session carry.
    pub(crate) fn csrf_token(&self, console: &Console) -> String {
        self.cookie
            .as_deref()
            .map(|c| console.0.signer.csrf(c))
            .unwrap_or_default()
    }
}

pub(crate) fn cookie_value(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_owned())
}

fn identify(console: &Console, headers: &HeaderMap) -> Option<Caller> {
    let inner = &console.0;
    if let Some(auth) = headers.get(header::AUTHORIZATION) {
        let token = auth.to_str().ok()?.strip_prefix("Bearer ")?.trim();
        return inner.users.by_token(token).map(|u| Caller {
            user: u.clone(),
            cookie: None,
        });
    }
    let cookie = cookie_value(headers)?;
    let user = inner.signer.user_of(&inner.users, &cookie)?.clone();
    Some(Caller {
        user,
        cookie: Some(cookie),
    })
}

/// A caller of the API: 401 without valid credentials.
pub(crate) struct ApiCaller(pub(crate) Caller);

impl FromRequestParts<Console> for ApiCaller {
    type Rejection = Failure;
    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, Failure> {
        identify(console, &parts.headers).map(ApiCaller).ok_or_else(|| {
            Failure::new(
                StatusCode::UNAUTHORIZED,
                "sign in: send `Authorization: Bearer <token>` with a token of the console's users file",
            )
        })
    }
}

/// A caller of a page: sent to the sign-in page without a session.
pub(crate) struct PageCaller(pub(crate) Caller);

impl FromRequestParts<Console> for PageCaller {
    type Rejection = Response;
    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, Response> {
        identify(console, &parts.headers)
            .map(PageCaller)
            .ok_or_else(|| Redirect::to(&format!("{}/login", console.0.base)).into_response())
    }
}
