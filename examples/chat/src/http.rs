//! A tiny HTTP/1.1 JSON client for loopback: the demo and tests talk to their own services.

use crate::Error;

/// A tiny HTTP/1.1 JSON client over a TCP socket: the demo talks to its own
/// services on loopback and needs nothing more.
#[derive(Default, Clone, Copy)]
pub struct Http;

impl Http {
    pub async fn get(&self, url: &str) -> Result<serde_json::Value, Error> {
        self.request("GET", url, None).await
    }
    pub async fn post_json(
        &self,
        url: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, Error> {
        self.request("POST", url, Some(body.to_string())).await
    }
    /// POST raw bytes; returns (status, parsed JSON body or Null) without failing on 4xx.
    pub async fn post_raw(&self, url: &str, body: &str) -> Result<(u16, serde_json::Value), Error> {
        self.exchange("POST", url, body).await
    }

    pub async fn request(
        &self,
        method: &str,
        url: &str,
        body: Option<String>,
    ) -> Result<serde_json::Value, Error> {
        let (status, json) = self
            .exchange(method, url, &body.unwrap_or_default())
            .await?;
        if !(200..300).contains(&status) {
            return Err(format!("{method} {url}: HTTP {status}: {json}").into());
        }
        Ok(json)
    }

    async fn exchange(
        &self,
        method: &str,
        url: &str,
        body: &str,
    ) -> Result<(u16, serde_json::Value), Error> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let u = url::Url::parse(url)?;
        let host = u.host_str().ok_or("no host")?;
        let port = u.port().ok_or("no port")?;
        let mut s = tokio::net::TcpStream::connect((host, port)).await?;
        let req = format!(
            "{method} {} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            u.path(),
            body.len()
        );
        s.write_all(req.as_bytes()).await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        let text = String::from_utf8_lossy(&buf);
        let (head, rest) = text.split_once("\r\n\r\n").ok_or("bad HTTP response")?;
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or("bad status")?;
        Ok((
            status,
            serde_json::from_str(rest).unwrap_or(serde_json::Value::Null),
        ))
    }
}
