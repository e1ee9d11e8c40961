//! The Node.js implementation of a chat service (`examples/chat/node`, on the
//! postbox npm package): the same API, page, SQL and inbox handler, started
//! with the same flags as `chat serve`, so either service of the demo and of
//! the chaos harness can run in either language.

use crate::Error;
use std::path::PathBuf;

/// A service of the chat, as chosen on the command line.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// The `consumers` service (sends the seed's messages).
    Consumers,
    /// The `workers` service (receives them through its inbox).
    Workers,
}

impl Service {
    /// Its name, as `--service` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Service::Consumers => "consumers",
            Service::Workers => "workers",
        }
    }
}

fn dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/node"))
}

/// Fail unless Node and the service's packages are installed.
pub fn check_installed() -> Result<(), Error> {
    if !dir()
        .join("node_modules/@postbox-rs/postbox/dist/esm/index.js")
        .is_file()
    {
        return Err(format!(
            "the Node chat service is not installed: run `npm ci` in {} and `npm run build` in clients/node \
             (./scripts/demo.sh --node <service> does both)",
            dir().display()
        )
        .into());
    }
    Ok(())
}

/// The program and arguments that run a service in Node, given the
/// arguments of `chat serve` (without `serve`).
pub fn command(serve_args: Vec<String>) -> (PathBuf, Vec<String>) {
    let mut args = vec![dir().join("service.mjs").display().to_string()];
    args.extend(serve_args);
    (PathBuf::from("node"), args)
}

/// How to run `service` with `serve_args` (the flags of `chat serve`): in
/// Node when it is the one `node` names, else as `chat_bin serve`.
pub fn service_command(
    node: Option<Service>,
    service: &str,
    chat_bin: &std::path::Path,
    serve_args: Vec<String>,
) -> (PathBuf, Vec<String>) {
    if node.is_some_and(|n| n.name() == service) {
        command(serve_args)
    } else {
        let mut args = vec!["serve".to_owned()];
        args.extend(serve_args);
        (chat_bin.to_owned(), args)
    }
}
