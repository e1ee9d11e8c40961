//! The console as a service: browser sessions and CSRF, its refusal to start
//! without users, and its least-privilege role.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_session_needs_the_csrf_token_to_act() {
    let ctx = Ctx::new("con_csrf").await;
    seed(&ctx).await;
    let console = ConsoleProcess::start(&ctx.schema, &["--base-path", "/postbox"]).await;
    let c = Client::new(&console);
    let s = &ctx.schema;
    // Served under the base path only.
    assert_eq!(c.get("/api/v1/openapi.json", None).await.0, 404);
    let (status, doc) = c.get("/postbox/api/v1/openapi.json", None).await;
    assert_eq!(status, 200);
    for path in [
        "/api/v1/schemas",
        "/api/v1/schemas/{schema}",
        "/api/v1/schemas/{schema}/halted-keys",
        "/api/v1/schemas/{schema}/delivered",
        "/api/v1/schemas/{schema}/dead-letters",
        "/api/v1/schemas/{schema}/dead-letters/groups",
        "/api/v1/schemas/{schema}/dead-letters/{side}/{id}",
        "/api/v1/schemas/{schema}/dead-letters/replay",
        "/api/v1/schemas/{schema}/dead-letters/purge",
        "/api/v1/schemas/{schema}/audit",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} is described");
    }

    // Sign in with a token: a session cookie scoped to the base path.
    let resp = with_form(
        c.http.post(format!("{}/postbox/login", c.base)),
        &[("token", ADMIN)],
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status().as_u16(), 303);
    let cookie = resp.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Strict")
            && cookie.contains("Path=/postbox"),
        "{cookie}"
    );
    let session = cookie.split(';').next().unwrap().to_owned();
    let slash = c
        .http
        .get(format!("{}/postbox/", c.base))
        .send()
        .await
        .unwrap();
    assert_eq!(slash.status().as_u16(), 308, "/postbox/ leads to /postbox");
    let page = c
        .http
        .get(format!("{}/postbox", c.base))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains(s.as_str()) && html.contains("csrf"), "{html}");
    assert!(!html.contains(ADMIN), "the token is never rendered");
    let csrf = html
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap()
        .to_owned();

    // The API with that cookie but without the token: refused.
    let replay = format!("{}/postbox/api/v1/schemas/{s}/dead-letters/replay", c.base);
    let body = json!({"filter": {"topic": "big"}});
    let r = with_json(c.http.post(&replay).header("cookie", &session), &body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    assert!(r.text().await.unwrap().contains("CSRF"));
    // A page form without it: refused too, nothing done.
    let confirm = format!("{}/postbox/schemas/{s}/dead-letters/act", c.base);
    let r = with_form(
        c.http.post(&confirm).header("cookie", &session),
        &[
            ("action", "purge"),
            ("side", "relay"),
            ("topic", "big"),
            ("confirmed", "2"),
        ],
    )
    .send()
    .await
    .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    assert_eq!(ctx.dead_letters().await.len(), 5);
    // With it: done.
    let r = with_form(
        c.http.post(&confirm).header("cookie", &session),
        &[
            ("action", "purge"),
            ("side", "relay"),
            ("topic", "big"),
            ("confirmed", "2"),
            ("csrf", &csrf),
        ],
    )
    .send()
    .await
    .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.text().await.unwrap().contains("Purged 2"));
    assert_eq!(ctx.dead_letters().await.len(), 3);
    // The audit names what the form selected, not its empty fields.
    let (_, audit) = c
        .get(&format!("/postbox/api/v1/schemas/{s}/audit"), Some(VIEWER))
        .await;
    assert_eq!(audit[0]["selection"], json!({"topic": "big"}), "{audit}");
    assert_eq!(audit[0]["actor"], "alice");
    // Signing out needs the token too, and clears the cookie.
    let logout = format!("{}/postbox/logout", c.base);
    let r = with_form(c.http.post(&logout).header("cookie", &session), &[])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let r = with_form(
        c.http.post(&logout).header("cookie", &session),
        &[("csrf", &csrf)],
    )
    .send()
    .await
    .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    assert!(r.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .contains("Max-Age=0"));
    // A forged cookie is no session.
    let forged = session.replacen("alice", "vic", 1);
    let r = c
        .http
        .get(format!("{}/postbox", c.base))
        .header("cookie", forged)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303, "sent to sign in");
    ctx.cleanup().await;
}

#[tokio::test]
async fn the_console_refuses_to_start_without_users_or_with_a_bad_file() {
    let ctx = Ctx::new("con_users").await;
    let url = postbox_testkit::database_url();
    let run = |env: Option<&'static str>| {
        let (url, schema) = (url.clone(), ctx.schema.clone());
        async move {
            let mut cmd = tokio::process::Command::new(BIN);
            cmd.args([
                "console",
                "--database-url",
                &url,
                "--schema",
                &schema,
                "--listen",
                "127.0.0.1:0",
            ])
            .env_remove("POSTBOX_CONSOLE_USERS")
            .env_remove("POSTBOX_CONSOLE_USERS_FILE");
            if let Some(users) = env {
                cmd.env("POSTBOX_CONSOLE_USERS", users);
            }
            let out = tokio::time::timeout(LONG, cmd.output())
                .await
                .unwrap()
                .unwrap();
            assert!(!out.status.success());
            String::from_utf8_lossy(&out.stderr).into_owned()
        }
    };
    let e = run(None).await;
    assert!(e.contains("--users-file"), "{e}");
    let e = run(Some("bob superuser 0123456789abcdef0\n")).await;
    assert!(e.contains("line 1") && e.contains("viewer"), "{e}");
    ctx.cleanup().await;
}

/// As a role granted `--as console` only: every read, a replay and a purge
/// with the console's own statements, and the audit rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_runs_with_least_privilege() {
    let ctx = Ctx::new("con_role").await;
    seed(&ctx).await;
    let (role, as_role) = ctx.granted_role("console").await;
    let console = ConsoleProcess::start_as(as_role.as_str(), &ctx.schema, &[]).await;
    let c = Client::new(&console);
    let s = &ctx.schema;
    for path in [
        format!("/api/v1/schemas/{s}"),
        format!("/api/v1/schemas/{s}/halted-keys"),
        format!("/api/v1/schemas/{s}/delivered"),
        format!("/api/v1/schemas/{s}/dead-letters"),
        format!("/api/v1/schemas/{s}/dead-letters/groups?side=consumer"),
        format!("/api/v1/schemas/{s}/dead-letters/relay/1"),
        format!("/api/v1/schemas/{s}/audit"),
    ] {
        let (status, body) = c.get(&path, Some(VIEWER)).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let replay = json!({"filter": {"topic": "big"}, "confirmed_count": 2});
    let (status, body) = c
        .post(
            &format!("/api/v1/schemas/{s}/dead-letters/replay"),
            Some(ADMIN),
            replay,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let purge =
        json!({"side": "consumer", "filter": {"consumer": "shipping"}, "confirmed_count": 1});
    let (status, body) = c
        .post(
            &format!("/api/v1/schemas/{s}/dead-letters/purge"),
            Some(ADMIN),
            purge,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (_, audit) = c
        .get(&format!("/api/v1/schemas/{s}/audit"), Some(VIEWER))
        .await;
    assert!(!audit.as_array().unwrap().is_empty(), "{audit}");
    assert_eq!(ctx.unsent().await, 2, "replayed into the outbox");
    drop(console);
    ctx.cleanup().await;
    drop_role(&role).await;
}
