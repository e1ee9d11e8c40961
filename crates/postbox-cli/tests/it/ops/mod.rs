//! Operations: Prometheus metrics, health and readiness, retention, the
//! roles the relay, producers and consumers run as, TLS to PostgreSQL and Redis.

mod health;
mod retention;
mod roles;
mod tls;
