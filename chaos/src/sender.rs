//! The load of every scenario: chat messages POSTed to the consumers
//! service, each recorded in the history as sent, saved or indeterminate.

use crate::history::{History, Kind, Msg};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Sends messages from the consumers service and records what became of each.
#[derive(Clone)]
pub struct Sender {
    pub port: u16,
    pub history: History,
    /// Next message number per chat.
    next: Arc<Mutex<HashMap<i64, u32>>>,
}

/// How one POST went.
enum Outcome {
    /// The service answered.
    Status(u16, String),
    /// Never reached the service (connection refused: it is being deployed).
    NotReached(std::io::Error),
    /// Sent, but the connection broke before an answer.
    Broken(std::io::Error),
}

impl Sender {
    pub fn new(port: u16, history: History) -> Self {
        Sender {
            port,
            history,
            next: Arc::default(),
        }
    }

    fn take_number(&self, chat: i64) -> u32 {
        let mut next = self.next.lock().unwrap();
        let n = next.entry(chat).or_insert(1);
        *n += 1;
        *n - 1
    }

    /// Send the chat's next message; returns the message that was saved.
    pub async fn send_next(&self, chat: i64) -> Result<Msg, chat::Error> {
        let n = self.take_number(chat);
        self.send(Msg { chat, n }).await
    }

    /// Send `m`, record it as saved once the API says 201, and return it.
    ///
    /// Connection refused (the service is being deployed; the request never
    /// reached it) is retried with the same message. A 5xx or a connection
    /// broken after the request was sent leaves it unknown whether it was
    /// stored: the message is recorded as indeterminate and the sender goes
    /// on with a new message number, so a retry can never look like a
    /// duplicate; the returned message is the one finally saved.
    pub async fn send(&self, mut m: Msg) -> Result<Msg, chat::Error> {
        {
            let mut next = self.next.lock().unwrap();
            let n = next.entry(m.chat).or_insert(1);
            *n = (*n).max(m.n + 1);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        self.history.push(Kind::Sending(m));
        loop {
            let outcome = tokio::time::timeout(Duration::from_secs(30), self.post(m))
                .await
                .map_err(|_| format!("{m}: no answer within 30 s"))?;
            match outcome {
                Outcome::Status(201, _) => {
                    self.history.push(Kind::Saved(m));
                    return Ok(m);
                }
                Outcome::Status(status, answer) if status < 500 => {
                    return Err(format!("{m} refused: HTTP {status} {answer}").into())
                }
                Outcome::NotReached(e) => {
                    if Instant::now() > deadline {
                        return Err(format!("{m} could not be sent: {e}").into());
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Outcome::Status(_, _) | Outcome::Broken(_) => {
                    self.history.push(Kind::Indeterminate(m));
                    if Instant::now() > deadline {
                        let why = match outcome {
                            Outcome::Status(s, a) => format!("HTTP {s} {a}"),
                            Outcome::Broken(e) => e.to_string(),
                            Outcome::NotReached(_) => unreachable!(),
                        };
                        return Err(format!("{m} could not be sent: {why}").into());
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    m = Msg {
                        chat: m.chat,
                        n: self.take_number(m.chat),
                    };
                    self.history.push(Kind::Sending(m));
                }
            }
        }
    }

    /// One POST on a fresh connection (HTTP/1.1, `Connection: close`).
    async fn post(&self, m: Msg) -> Outcome {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = match tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await {
            Ok(s) => s,
            Err(e) => return Outcome::NotReached(e),
        };
        let body = serde_json::json!({ "body": m.body() }).to_string();
        let req = format!(
            "POST /api/chats/{}/messages HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            m.chat,
            self.port,
            body.len()
        );
        let mut buf = Vec::new();
        if let Err(e) = s.write_all(req.as_bytes()).await {
            return Outcome::Broken(e);
        }
        if let Err(e) = s.read_to_end(&mut buf).await {
            return Outcome::Broken(e);
        }
        let text = String::from_utf8_lossy(&buf);
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .filter(|_| text.starts_with("HTTP/"));
        match status {
            Some(status) => Outcome::Status(
                status,
                text.split_once("\r\n\r\n")
                    .map_or("", |(_, b)| b)
                    .to_owned(),
            ),
            // Closed without a (whole) answer.
            None => Outcome::Broken(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("no HTTP answer ({} bytes)", buf.len()),
            )),
        }
    }
}
