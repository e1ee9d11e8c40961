//! The deployment artefacts in `deploy/`: the container image (built from
//! scratch by `scripts/container.sh`, then run), the systemd unit and the
//! Kubernetes manifests, each checked by the tool made for it.

use crate::support::*;
use std::process::Command;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// podman, with this machine's quirks: its cgroups are in hybrid mode,
/// which crun refuses and runc accepts, and it may not raise the rlimits
/// podman asks for by default.
fn podman(args: &[&str]) -> Command {
    let mut c = Command::new("podman");
    if Command::new("runc").arg("--version").output().is_ok() {
        c.args(["--runtime", "runc"]);
    }
    c.args(args);
    c
}

const RUN_LIMITS: [&str; 4] = [
    "--ulimit",
    "nofile=4096:4096",
    "--ulimit",
    "nproc=4096:4096",
];

fn ok(c: &mut Command) -> String {
    let out = c.output().expect("spawn");
    assert!(
        out.status.success(),
        "{c:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The image holds everything the relay needs: it starts as a non-root
/// user, relays events from PostgreSQL to Redis, answers its probes, and
/// stops cleanly on SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_container_image_runs_the_relay() {
    let ctx = Ctx::new("image").await;
    let tag = format!("postbox-test:{}", ctx.schema.replace('_', "-"));
    ok(Command::new(format!("{ROOT}/scripts/container.sh")).args(["--tag", &tag, "--binary", BIN]));
    let version = ok(podman(&["run", "--rm"])
        .args(RUN_LIMITS)
        .arg(&tag)
        .arg("--version"));
    assert!(version.starts_with("postbox "), "{version}");

    ctx.produce((1..=10).map(|i| ctx.event("k", i)).collect())
        .await;
    let port = postbox_testkit::free_port().to_string();
    let name = format!("relay-{}", ctx.schema.replace('_', "-"));
    let mut args: Vec<String> = vec![
        "run".into(),
        "-d".into(),
        "--name".into(),
        name.clone(),
        "--network".into(),
        "host".into(),
    ];
    args.extend(RUN_LIMITS.iter().map(|s| s.to_string()));
    args.push(tag.clone());
    args.push("relay".into());
    args.extend(ctx.relay_args());
    args.extend([
        "--redis-url".into(),
        postbox_testkit::redis_url(),
        "--admin-listen".into(),
        format!("127.0.0.1:{port}"),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(&mut podman(&args));
    let logs = || ok(&mut podman(&["logs", &name]));
    wait_until(
        LONG,
        "the relay in the container sent every event",
        || async { ctx.unsent().await == 0 },
    )
    .await;
    let view = RedisView::new(&postbox_testkit::redis_url(), &ctx.queue).await;
    assert_eq!(view.wait_len().await, 10, "{}", logs());
    let ready = reqwest::get(format!("http://127.0.0.1:{port}/readyz"))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200, "{}", logs());
    let user = ok(&mut podman(&[
        "inspect",
        "--format",
        "{{.Config.User}}",
        &tag,
    ]));
    assert_eq!(user.trim(), "65532:65532", "not root");
    ok(&mut podman(&["stop", "--time", "20", &name]));
    let code = ok(&mut podman(&[
        "inspect",
        "--format",
        "{{.State.ExitCode}}",
        &name,
    ]));
    assert_eq!(code.trim(), "0", "SIGTERM: a clean stop\n{}", logs());
    let _ = podman(&["rm", &name]).output();
    let _ = podman(&["rmi", &tag]).output();
    ctx.cleanup().await;
}

/// `systemd-analyze verify` accepts the unit (its binary path pointed at
/// the one under test: verify checks that it exists).
#[test]
fn the_systemd_unit_verifies() {
    let unit = std::fs::read_to_string(format!("{ROOT}/deploy/systemd/postbox-relay.service"))
        .unwrap()
        .replace("/usr/local/bin/postbox", BIN);
    let dir = std::env::temp_dir().join(format!("postbox-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("postbox-relay.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian's systemd package)");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Kubernetes manifests validate against the API's schemas
/// (`kubernetes-validate`, which ships them: no cluster needed), and the
/// Deployment's probes name the relay's admin endpoints.
#[test]
fn the_kubernetes_manifests_validate() {
    let python = std::env::var("POSTBOX_TEST_PYTHON")
        .expect("POSTBOX_TEST_PYTHON is not set: run the tests through ./scripts/test.sh");
    let manifest = format!("{ROOT}/deploy/kubernetes/relay.yaml");
    // The venv's console script, beside its python.
    let tool = std::path::Path::new(&python).with_file_name("kubernetes-validate");
    let out = Command::new(tool)
        .args([
            "--strict",
            "--quiet",
            "--kubernetes-version",
            "1.33.0",
            &manifest,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&manifest).unwrap();
    for needle in [
        "path: /healthz",
        "path: /readyz",
        "--admin-listen=0.0.0.0:9187",
    ] {
        assert!(text.contains(needle), "{needle}");
    }
}
