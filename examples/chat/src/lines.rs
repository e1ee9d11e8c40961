//! Follow what a child process prints, line by line (the demo, its tests and
//! the chaos harness all read their services this way).

use tokio::io::AsyncBufReadExt;
use tokio::process::Child;

/// Hand every line the child writes on stdout and stderr to `on_line`, from
/// background tasks that end when the child closes its pipes.
pub fn forward_lines<F>(child: &mut Child, on_line: F)
where
    F: Fn(&str) + Clone + Send + Sync + 'static,
{
    let streams = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
    ];
    for stream in streams.into_iter().flatten() {
        let on_line = on_line.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                on_line(&line);
            }
        });
    }
}
