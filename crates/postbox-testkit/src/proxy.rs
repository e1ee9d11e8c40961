//! A TCP fault proxy: listens on a free loopback port and forwards every
//! connection to a target (the chaos harness's Redis and PostgreSQL, a
//! test's PostgreSQL), with faults switched on and off in-process:
//!
//! - `pass`: forward as is (no partition, no added latency);
//! - `partition`: a network partition — existing connections stay open but
//!   nothing is forwarded either way, and new connections are accepted and
//!   then hang (not refused); what was in flight is held, like TCP
//!   retransmitting, and delivered once healed;
//! - `heal`: end the partition (added latency stays);
//! - `reset`: close every connection (both sides see it closed);
//! - `vanish`: the connections open now go silent for good, as when the
//!   server's host disappears without a close; new connections pass;
//! - `latency(d)`: delay every chunk by `d` in each direction (a pipe delay:
//!   chunks keep their order and do not wait for each other).

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct State {
    partitioned: bool,
    latency: Duration,
    /// Connections numbered below this never forward again (`vanish`).
    vanished_below: u64,
}

/// A running fault proxy; dropping it closes every connection.
pub struct Proxy {
    port: u16,
    state: watch::Sender<State>,
    conns: Arc<Mutex<Vec<AbortHandle>>>,
    /// The number the next accepted connection gets.
    next: Arc<AtomicU64>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listen on a free loopback port and forward to `target`.
    pub async fn start(target: SocketAddr) -> io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let (state, _) = watch::channel(State::default());
        let conns: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let next: Arc<AtomicU64> = Arc::default();
        let accept = tokio::spawn(accept_loop(
            listener,
            target,
            state.subscribe(),
            conns.clone(),
            next.clone(),
        ));
        Ok(Proxy {
            port,
            state,
            conns,
            next,
            accept,
        })
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Forward as is: no partition, no added latency (connections that
    /// vanished stay silent).
    pub fn pass(&self) {
        self.state.send_modify(|s| {
            *s = State {
                vanished_below: s.vanished_below,
                ..State::default()
            }
        });
    }

    /// The connections open now stop forwarding either way and are never
    /// closed, as when the server's host disappears; new ones pass.
    pub fn vanish(&self) {
        let below = self.next.load(Ordering::SeqCst);
        self.state.send_modify(|s| s.vanished_below = below);
    }

    /// Stop forwarding both ways without closing anything; new connections hang.
    pub fn partition(&self) {
        self.state.send_modify(|s| s.partitioned = true);
    }

    /// End the partition: held data and hung connections go through.
    pub fn heal(&self) {
        self.state.send_modify(|s| s.partitioned = false);
    }

    /// Delay every chunk by `d` in each direction (zero: none).
    pub fn latency(&self, d: Duration) {
        self.state.send_modify(|s| s.latency = d);
    }

    /// Close every connection open now.
    pub fn reset(&self) {
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        let mut c = self.conns.lock().unwrap();
        c.retain(|h| !h.is_finished());
        c.len()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.reset();
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    state: watch::Receiver<State>,
    conns: Arc<Mutex<Vec<AbortHandle>>>,
    next: Arc<AtomicU64>,
) {
    loop {
        let client = match listener.accept().await {
            Ok((c, _)) => c,
            Err(_) => {
                // Out of descriptors or the like: do not spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let n = next.fetch_add(1, Ordering::SeqCst);
        let task = tokio::spawn(connection(client, target, n, state.clone()));
        let mut c = conns.lock().unwrap();
        c.retain(|h| !h.is_finished());
        c.push(task.abort_handle());
    }
}

/// Wait until connection `n` may forward (an error once the proxy is gone).
async fn wait_pass(state: &mut watch::Receiver<State>, n: u64) -> io::Result<State> {
    state
        .wait_for(|s| !s.partitioned && n >= s.vanished_below)
        .await
        .map(|s| *s)
        .map_err(|_| io::Error::other("proxy stopped"))
}

async fn connection(
    client: TcpStream,
    target: SocketAddr,
    n: u64,
    mut state: watch::Receiver<State>,
) {
    // Accepted; during a partition the client's connection hangs here.
    if wait_pass(&mut state, n).await.is_err() {
        return;
    }
    // Target down: the client sees its connection closed.
    let Ok(upstream) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (ur, uw) = upstream.into_split();
    // A clean end of one direction is passed on (half close); an error ends both.
    let _ = tokio::try_join!(pipe(cr, uw, n, state.clone()), pipe(ur, cw, n, state));
}

/// One direction: read chunks, hold each until its due time and while
/// partitioned, write them in order.
async fn pipe(
    mut r: OwnedReadHalf,
    mut w: OwnedWriteHalf,
    n: u64,
    state: watch::Receiver<State>,
) -> io::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let mut rs = state.clone();
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            wait_pass(&mut rs, n).await?;
            let n = r.read(&mut buf).await?;
            if n == 0 {
                // Dropping `tx` lets the writer drain and pass the end on.
                return Ok::<(), io::Error>(());
            }
            let due = Instant::now() + rs.borrow().latency;
            if tx.send((due, buf[..n].to_vec())).is_err() {
                return Ok(());
            }
        }
    };
    let mut ws = state;
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            wait_pass(&mut ws, n).await?;
            w.write_all(&chunk).await?;
        }
        // A close is a packet too: held while partitioned.
        wait_pass(&mut ws, n).await?;
        let _ = w.shutdown().await;
        Ok::<(), io::Error>(())
    };
    tokio::try_join!(reader, writer).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// An echo server on a free port.
    async fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn connect(p: &Proxy) -> TcpStream {
        TcpStream::connect(("127.0.0.1", p.port())).await.unwrap()
    }

    async fn round_trip(s: &mut TcpStream, what: &[u8]) -> Vec<u8> {
        s.write_all(what).await.unwrap();
        let mut got = vec![0u8; what.len()];
        s.read_exact(&mut got).await.unwrap();
        got
    }

    /// Nothing arrives within `d`, and the connection is not closed either.
    async fn silent_for(s: &mut TcpStream, d: Duration) {
        let mut b = [0u8; 1];
        let r = tokio::time::timeout(d, s.read(&mut b)).await;
        assert!(r.is_err(), "expected silence, got {r:?}");
    }

    #[tokio::test]
    async fn pass_forwards_both_ways() {
        let p = Proxy::start(echo().await).await.unwrap();
        let mut s = connect(&p).await;
        assert_eq!(round_trip(&mut s, b"ping").await, b"ping");
        assert_eq!(
            round_trip(&mut s, &[7u8; 100_000]).await,
            vec![7u8; 100_000]
        );
    }

    #[tokio::test]
    async fn partition_hangs_old_and_new_connections_until_healed() {
        let p = Proxy::start(echo().await).await.unwrap();
        let mut old = connect(&p).await;
        assert_eq!(round_trip(&mut old, b"before").await, b"before");
        p.partition();
        old.write_all(b"during").await.unwrap();
        // A new connection is accepted (not refused), then hangs.
        let mut new = connect(&p).await;
        new.write_all(b"new").await.unwrap();
        silent_for(&mut old, Duration::from_millis(300)).await;
        silent_for(&mut new, Duration::from_millis(10)).await;
        p.heal();
        // Nothing was closed: what was held goes through.
        let mut got = [0u8; 6];
        old.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"during");
        let mut got = [0u8; 3];
        new.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"new");
        assert_eq!(round_trip(&mut old, b"after").await, b"after");
    }

    #[tokio::test]
    async fn a_close_during_a_partition_is_held_until_healed() {
        // A server that reports when it sees its client's end of stream.
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = l.local_addr().unwrap();
        let (closed_tx, mut closed) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut b = [0u8; 64];
            while s.read(&mut b).await.is_ok_and(|n| n > 0) {}
            let _ = closed_tx.send(());
        });
        let p = Proxy::start(target).await.unwrap();
        let mut s = connect(&p).await;
        s.write_all(b"hello").await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        p.partition();
        drop(s);
        let early = tokio::time::timeout(Duration::from_millis(300), closed.recv()).await;
        assert!(
            early.is_err(),
            "the server saw the close through a partition"
        );
        p.heal();
        let seen = tokio::time::timeout(Duration::from_secs(5), closed.recv()).await;
        assert!(matches!(seen, Ok(Some(()))), "{seen:?}");
    }

    #[tokio::test]
    async fn latency_delays_each_way() {
        let p = Proxy::start(echo().await).await.unwrap();
        let mut s = connect(&p).await;
        round_trip(&mut s, b"warm").await;
        p.latency(Duration::from_millis(100));
        let t = Instant::now();
        assert_eq!(round_trip(&mut s, b"slow").await, b"slow");
        assert!(
            t.elapsed() >= Duration::from_millis(200),
            "{:?}",
            t.elapsed()
        );
        p.pass();
        let t = Instant::now();
        round_trip(&mut s, b"fast").await;
        assert!(
            t.elapsed() < Duration::from_millis(100),
            "{:?}",
            t.elapsed()
        );
    }

    #[tokio::test]
    async fn a_vanished_connection_stays_silent_while_new_ones_pass() {
        let p = Proxy::start(echo().await).await.unwrap();
        let mut old = connect(&p).await;
        round_trip(&mut old, b"before").await;
        p.vanish();
        old.write_all(b"lost").await.unwrap();
        silent_for(&mut old, Duration::from_millis(300)).await;
        let mut new = connect(&p).await;
        assert_eq!(round_trip(&mut new, b"after").await, b"after");
        // Nothing brings the old one back.
        p.pass();
        p.heal();
        silent_for(&mut old, Duration::from_millis(300)).await;
    }

    #[tokio::test]
    async fn reset_closes_every_connection() {
        let p = Proxy::start(echo().await).await.unwrap();
        let mut a = connect(&p).await;
        let mut b = connect(&p).await;
        round_trip(&mut a, b"a").await;
        round_trip(&mut b, b"b").await;
        assert_eq!(p.connections(), 2);
        p.reset();
        for s in [&mut a, &mut b] {
            let mut buf = [0u8; 1];
            // Closed: end of stream (or a reset), not silence.
            let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
                .await
                .expect("closed");
            assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
        }
        // The proxy itself still works.
        let mut c = connect(&p).await;
        assert_eq!(round_trip(&mut c, b"again").await, b"again");
    }
}
