//! `chat demo`: the whole system as real processes — both services and, as in
//! the seed, a separate `postbox relay` per service — then a scripted
//! conversation both ways and what each side shows.

use crate::http::Http;
use crate::setup::{self, service_url};
use crate::Error;
use postbox::SchemaName;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    setup: setup::SetupArgs,
    #[command(flatten)]
    broker: crate::broker::BrokerArgs,
    /// HTTP port of the consumers service (workers gets the next one).
    #[arg(long, default_value_t = 8081)]
    port: u16,
    /// Stop after the scripted conversation instead of serving until Ctrl-C.
    #[arg(long)]
    once: bool,
    /// Run this service with its Node.js implementation (examples/chat/node, on
    /// the postbox npm package) instead of Rust; BullMQ only.
    #[arg(long, value_name = "SERVICE")]
    node: Option<crate::node::Service>,
}

struct Proc {
    name: &'static str,
    child: Child,
}

fn spawn(
    name: &'static str,
    program: &std::path::Path,
    args: &[String],
    started: Instant,
) -> Result<Proc, Error> {
    let mut child = Command::new(program)
        .args(args)
        .env("RUST_LOG", "warn,sqlx=error")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    crate::lines::forward_lines(&mut child, move |line| {
        // Services print "<service>: ..." themselves; tag the rest.
        let t = started.elapsed().as_secs_f64();
        if line.starts_with(&format!("{name}: ")) {
            println!("  {t:6.2}s {line}");
        } else {
            println!("  {t:6.2}s {name}: {line}");
        }
    });
    Ok(Proc { name, child })
}

pub async fn run(a: Args) -> Result<(), Error> {
    let started = Instant::now();
    let exe = std::env::current_exe()?;
    let postbox = exe.with_file_name("postbox");
    if !postbox.exists() {
        return Err(format!(
            "{} not found: build it with `cargo build --release -p postbox-cli`",
            postbox.display()
        )
        .into());
    }
    if a.node.is_some() {
        if a.broker.broker != crate::broker::Broker::Bullmq {
            return Err("--node runs the Node.js service over BullMQ only: drop --broker".into());
        }
        crate::node::check_installed()?;
    }
    let mut setup_args = a.setup.clone();
    setup_args.reset = true;
    setup::run(setup_args).await?;

    let sides = [
        ("consumers", "workers", a.port),
        ("workers", "consumers", a.port + 1),
    ];
    let mut procs = Vec::new();
    for (service, peer, port) in sides {
        let schema = SchemaName::new(service)?;
        let url = service_url(&a.setup.admin_url, &schema, &a.setup.role_password)?;
        let name: &'static str = if service == "consumers" {
            "consumers"
        } else {
            "workers"
        };
        let serve_args: Vec<String> = [
            "--service".into(),
            service.into(),
            "--peer".into(),
            peer.into(),
            "--database-url".into(),
            url.clone(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
        ]
        .into_iter()
        .chain(a.broker.serve_args())
        .collect();
        let (program, args) = crate::node::service_command(a.node, service, &exe, serve_args);
        procs.push(spawn(name, &program, &args, started)?);
        let relay_name: &'static str = if service == "consumers" {
            "relay(consumers)"
        } else {
            "relay(workers)"
        };
        procs.push(spawn(
            relay_name,
            &postbox,
            &[
                "relay".into(),
                "--database-url".into(),
                url,
                "--schemas".into(),
                service.into(),
                "--workers".into(),
                "1".into(),
            ]
            .into_iter()
            .chain(a.broker.relay_args())
            .collect::<Vec<_>>(),
            started,
        )?);
    }

    let http = Http;
    let base = |port: u16| format!("http://127.0.0.1:{port}");
    for (service, _, port) in sides {
        let deadline = Instant::now() + Duration::from_secs(30);
        while http.get(&format!("{}/healthz", base(port))).await.is_err() {
            if Instant::now() > deadline {
                return Err(format!("{service} did not start on port {port}").into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    println!();
    println!("consumers page: {}/#chat-1", base(a.port));
    println!("workers page:   {}/#chat-1", base(a.port + 1));
    println!();

    let script: [(usize, i64, &str); 6] = [
        (0, 1, "Hi workers, order #1042 is ready for pickup"),
        (0, 1, "It goes to dock 3"),
        (1, 1, "Got it, sending a courier"),
        (0, 2, "Can someone check the invoice for #1042?"),
        (1, 2, "On it"),
        (1, 1, "Courier is on the way 🚚"),
    ];
    for (side, chat, body) in script {
        let port = sides[side].2;
        http.post_json(
            &format!("{}/api/chats/{chat}/messages", base(port)),
            &serde_json::json!({ "body": body }),
        )
        .await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Wait until both sides show all six messages, every sent one delivered.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut total = 0;
        let mut pending = 0;
        for (_, _, port) in sides {
            for chat in [1, 2] {
                let msgs = http
                    .get(&format!("{}/api/chats/{chat}/messages", base(port)))
                    .await?;
                for m in msgs.as_array().into_iter().flatten() {
                    total += 1;
                    pending += (m["state"] == "saved") as usize;
                }
            }
        }
        if total == 12 && pending == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "conversation incomplete: {total}/12 messages shown, {pending} not yet delivered"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    println!();
    for (service, _, port) in sides {
        println!("what {service} shows:");
        for chat in [1, 2] {
            let msgs = http
                .get(&format!("{}/api/chats/{chat}/messages", base(port)))
                .await?;
            println!("  chat {chat}");
            for m in msgs.as_array().into_iter().flatten() {
                let state = match m["state"].as_str() {
                    Some("delivered") => "✓✓ delivered",
                    Some("saved") => "✓ saved",
                    _ => "",
                };
                println!(
                    "    {:<9} {} {}",
                    m["from"].as_str().unwrap_or("?"),
                    m["body"].as_str().unwrap_or(""),
                    state
                );
            }
        }
    }
    println!();
    if !a.once {
        println!("open the pages above; Ctrl-C stops everything");
        tokio::signal::ctrl_c().await?;
    }
    for p in &mut procs {
        if let Some(pid) = p.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
    }
    for p in &mut procs {
        match tokio::time::timeout(Duration::from_secs(15), p.child.wait()).await {
            Ok(Ok(s)) if s.success() => {}
            other => eprintln!("{} did not stop cleanly: {other:?}", p.name),
        }
    }
    Ok(())
}
