//! A Kafka-protocol broker of a test's own, a TLS front for it, and an
//! independent client to read what the relay wrote.

use crate::{free_port, self_signed_cert, suffix, wait_until};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A test-owned Kafka-protocol broker (tansu, memory storage) on a free port.
/// `POSTBOX_TANSU_BIN` names the binary (`./scripts/test.sh` installs it).
pub struct KafkaBroker {
    port: u16,
    child: Option<Child>,
    tls: Option<TlsFront>,
}

/// A TLS terminator (socat) in front of the broker: tansu 0.6 speaks plain
/// TCP only, so clients reach it through this to prove their TLS settings.
struct TlsFront {
    port: u16,
    dir: std::path::PathBuf,
    child: Child,
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl KafkaBroker {
    fn bin() -> String {
        std::env::var("POSTBOX_TANSU_BIN").unwrap_or_else(|_| {
            panic!("POSTBOX_TANSU_BIN is not set: run the tests through ./scripts/test.sh, which installs the broker (tests/python/requirements.txt)")
        })
    }

    /// Start one and wait until it accepts connections.
    pub async fn start() -> Self {
        let mut b = KafkaBroker {
            port: free_port(),
            child: None,
            tls: None,
        };
        b.restart().await;
        b
    }

    /// Start one reachable only through TLS: a fresh self-signed certificate
    /// for 127.0.0.1 ([`KafkaBroker::tls_ca`]) served by a socat terminator on
    /// [`KafkaBroker::bootstrap`], which the broker advertises.
    pub async fn start_tls() -> Self {
        let dir = std::env::temp_dir().join(format!("postbox-kafka-tls-{}", suffix()));
        self_signed_cert(&dir);
        let (port, tls_port) = (free_port(), free_port());
        let child = Command::new("socat")
            .arg(format!(
                "OPENSSL-LISTEN:{tls_port},bind=127.0.0.1,reuseaddr,fork,verify=0,cert={},key={}",
                dir.join("cert.pem").display(),
                dir.join("key.pem").display()
            ))
            .arg(format!("TCP:127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run socat (./scripts/test.sh installs it)");
        let mut b = KafkaBroker {
            port,
            child: None,
            tls: Some(TlsFront {
                port: tls_port,
                dir,
                child,
            }),
        };
        b.restart().await;
        wait_until(
            Duration::from_secs(10),
            "the TLS front to listen",
            || async move {
                tokio::net::TcpStream::connect(("127.0.0.1", tls_port))
                    .await
                    .is_ok()
            },
        )
        .await;
        b
    }

    /// The CA file (the self-signed certificate) of a [`KafkaBroker::start_tls`] broker.
    pub fn tls_ca(&self) -> std::path::PathBuf {
        self.tls
            .as_ref()
            .expect("not a TLS broker")
            .dir
            .join("cert.pem")
    }

    /// `127.0.0.1:<port>`: where clients connect (the TLS front, if any).
    pub fn bootstrap(&self) -> String {
        format!(
            "127.0.0.1:{}",
            self.tls.as_ref().map_or(self.port, |t| t.port)
        )
    }

    /// (Re)start on the same port. Storage is in memory: topics must be created again.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "broker already running");
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let advertised = format!("tcp://{}", self.bootstrap());
        let child = Command::new(Self::bin())
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &advertised,
                "--storage-engine",
                "memory://tansu/",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start the tansu broker");
        self.child = Some(child);
        let port = self.port;
        wait_until(
            Duration::from_secs(20),
            "the Kafka broker to listen",
            || async move {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
            },
        )
        .await;
    }

    /// Create a topic with `partitions` partitions.
    pub fn create_topic(&self, name: &str, partitions: u32) {
        let out = Command::new(Self::bin())
            .args([
                "topic",
                "create",
                name,
                "--partitions",
                &partitions.to_string(),
                "--broker",
                &format!("tcp://127.0.0.1:{}", self.port),
            ])
            .output()
            .expect("tansu topic create");
        assert!(
            out.status.success(),
            "creating topic {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// SIGKILL the broker (its memory storage goes with it).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for KafkaBroker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Read at least `count` messages of `topic` with the independent Python
/// client (confluent-kafka), then what else arrives until the topic has been
/// quiet for a second; one JSON object per message.
pub async fn kafka_consume_independent(
    bootstrap: &str,
    topic: &str,
    count: usize,
    timeout_s: u32,
) -> Vec<serde_json::Value> {
    let python = std::env::var("POSTBOX_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("POSTBOX_TEST_PYTHON is not set: run the tests through ./scripts/test.sh")
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/python/consume.py");
    let out = tokio::process::Command::new(python)
        .args([
            script,
            bootstrap,
            topic,
            &count.to_string(),
            &timeout_s.to_string(),
        ])
        .output()
        .await
        .expect("run consume.py");
    assert!(
        out.status.success(),
        "independent consumer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("consume.py prints JSON lines"))
        .collect()
}
