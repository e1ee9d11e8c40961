//! The saga end to end against real PostgreSQL, Redis and the tansu broker,
//! with real `postbox relay` and `saga serve` processes; each test in schemas,
//! topics and a broker of its own, so they run in parallel. Needs the
//! `postbox` binary next to `saga` (`cargo build -p postbox-cli`) and the
//! Kafka peers (`source scripts/lib.sh && ensure_kafka_peers`).

use postbox_testkit::{unique_schema, wait_until};
use saga::check::{judge, Expectations, Expected, State};
use saga::infra::{Options, World};
use saga::model::*;
use saga::run::{execute, Fault, RunArgs};
use saga::services::{Saga, Step};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(60);

fn binaries() -> (PathBuf, PathBuf) {
    let saga = PathBuf::from(env!("CARGO_BIN_EXE_saga"));
    let postbox = saga.with_file_name("postbox");
    assert!(
        postbox.exists(),
        "{} not built: cargo build -p postbox-cli (./scripts/test.sh builds the workspace)",
        postbox.display()
    );
    (saga, postbox)
}

async fn world(broker: Broker, stock: &[(&str, i64)]) -> World {
    let (saga_bin, postbox_bin) = binaries();
    World::start(Options {
        broker,
        database_url: postbox_testkit::database_url(),
        prefix: Some(unique_schema("saga")),
        stock: stock.iter().map(|(s, n)| (s.to_string(), *n)).collect(),
        saga_bin,
        postbox_bin,
        verbose: std::env::var("SAGA_VERBOSE").is_ok(),
    })
    .await
    .unwrap()
}

fn order(sku: &str, qty: i32, card: &str) -> NewOrder {
    NewOrder {
        sku: sku.into(),
        qty,
        amount_cents: 700 * i64::from(qty),
        card: card.into(),
    }
}

/// Place one order, wait until it is final and nothing is left in flight,
/// and check every invariant; returns the final state.
async fn saga_of_one(w: &World, o: NewOrder, expected: Expected, stock: &[(&str, i64)]) -> State {
    let orders = Saga::new(&w.names, Service::Orders).unwrap();
    let id = orders.place_order(&w.pool, &o).await.unwrap();
    wait_until(WAIT, "the saga to settle", || async {
        State::load(&w.pool, &w.names).await.unwrap().settled()
    })
    .await;
    let st = State::load(&w.pool, &w.names).await.unwrap();
    let ex = Expectations {
        outcome: HashMap::from([(id, expected)]),
        initial_stock: stock.iter().map(|(s, n)| (s.to_string(), *n)).collect(),
    };
    let v = judge(&ex, &st);
    assert!(v.ok(), "{}", v.table());
    st
}

fn product<'a>(st: &'a State, sku: &str) -> &'a saga::check::ProductRow {
    st.products.iter().find(|p| p.sku == sku).unwrap()
}

async fn happy_path(broker: Broker) {
    let stock = [("sku-a", 5)];
    let w = world(broker, &stock).await;
    let st = saga_of_one(&w, order("sku-a", 2, CARD_OK), Expected::Confirmed, &stock).await;
    let p = product(&st, "sku-a");
    assert_eq!(
        (p.stock, p.reserved, p.sold),
        (3, 0, 2),
        "reserved, then sold"
    );
    assert_eq!(st.reservations[0].state, "sold");
    assert_eq!(st.charges.len(), 1);
    assert_eq!(
        (st.charges[0].status.as_str(), st.charges[0].amount_cents),
        ("completed", 1400)
    );
    // order.created, inventory.reserved, payment.completed ×2 (inventory and orders).
    assert_eq!(st.written.values().map(Vec::len).sum::<usize>(), 4);
    w.stop(false).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn happy_path_over_kafka() {
    happy_path(Broker::Kafka).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn happy_path_over_bullmq() {
    happy_path(Broker::Bullmq).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payment_failure_releases_the_reservation_and_cancels() {
    let stock = [("sku-a", 5)];
    let w = world(Broker::Kafka, &stock).await;
    let st = saga_of_one(
        &w,
        order("sku-a", 2, CARD_DECLINED),
        Expected::Cancelled(REASON_PAYMENT_DECLINED),
        &stock,
    )
    .await;
    let p = product(&st, "sku-a");
    assert_eq!((p.stock, p.reserved, p.sold), (5, 0, 0), "units given back");
    assert_eq!(st.reservations[0].state, "released");
    assert_eq!(st.charges[0].status, "failed");
    w.stop(false).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_stock_cancels_without_reserving_or_charging() {
    let stock = [("sku-a", 1)];
    let w = world(Broker::Bullmq, &stock).await;
    let st = saga_of_one(
        &w,
        order("sku-a", 3, CARD_OK),
        Expected::Cancelled(REASON_OUT_OF_STOCK),
        &stock,
    )
    .await;
    let p = product(&st, "sku-a");
    assert_eq!((p.stock, p.reserved, p.sold), (1, 0, 0));
    assert_eq!(st.reservations[0].state, "rejected");
    assert!(st.charges.is_empty(), "payments never heard of it");
    w.stop(false).await.unwrap();
}

/// Compensations and steps delivered again behind the inbox's back (another
/// event id, e.g. a replayed dead letter) change nothing: each handler checks
/// the state it would move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_step_and_compensation_is_idempotent_on_its_own_state() {
    let pool = postbox_testkit::pool().await;
    let names = Names::new(&unique_schema("saga")).unwrap();
    saga::setup::install(&pool, &names, &[("sku-a".into(), 5)])
        .await
        .unwrap();
    let e = OrderEvent {
        order_id: Uuid::new_v4(),
        sku: "sku-a".into(),
        qty: 2,
        amount_cents: 1400,
        card: CARD_DECLINED.into(),
        reason: Some(REASON_PAYMENT_DECLINED.into()),
    };
    let payload = serde_json::to_value(&e).unwrap();
    let step = |s: Service, event: &'static str| {
        let (pool, names, payload) = (pool.clone(), names.clone(), payload.clone());
        async move {
            let saga = Saga::new(&names, s).unwrap();
            let mut tx = pool.begin().await.unwrap();
            let step = saga.handle(&mut tx, event, &payload).await.unwrap();
            tx.commit().await.unwrap();
            step
        }
    };
    use Service::*;
    assert_eq!(step(Inventory, ORDER_CREATED).await, Step::Reserved);
    assert_eq!(step(Inventory, ORDER_CREATED).await, Step::NoOp);
    assert_eq!(step(Payments, INVENTORY_RESERVED).await, Step::Declined);
    assert_eq!(step(Payments, INVENTORY_RESERVED).await, Step::NoOp);
    assert_eq!(step(Inventory, PAYMENT_FAILED).await, Step::Released);
    assert_eq!(
        step(Inventory, PAYMENT_FAILED).await,
        Step::NoOp,
        "nothing held any more"
    );
    assert_eq!(
        step(Inventory, PAYMENT_COMPLETED).await,
        Step::NoOp,
        "released units are not sold"
    );
    assert_eq!(
        step(Orders, INVENTORY_RELEASED).await,
        Step::NoOp,
        "no such order here"
    );
    let st = State::load(&pool, &names).await.unwrap();
    let p = product(&st, "sku-a");
    assert_eq!((p.stock, p.reserved, p.sold), (5, 0, 0));
    assert_eq!(st.charges.len(), 1);
    let written = |s: Service| st.written.get(&s).map_or(0, Vec::len);
    // One reservation request to payments, one payment.failed to inventory,
    // one inventory.released to orders — none twice.
    assert_eq!(
        (written(Payments), written(Inventory), written(Orders)),
        (1, 1, 1)
    );
    saga::setup::drop_all(&pool, &names).await.unwrap();
}

fn run_args(broker: Broker, orders: usize, faults: Vec<Fault>) -> RunArgs {
    RunArgs {
        orders,
        payment_failure_share: 0.15,
        out_of_stock_share: 0.15,
        broker,
        faults: Some(faults),
        seed: 7,
        rate: 40.0,
        fault_interval_ms: 400,
        settle_timeout_s: 50,
        database_url: postbox_testkit::database_url(),
        keep: false,
        verbose: std::env::var("SAGA_VERBOSE").is_ok(),
    }
}

async fn invariants_hold(a: RunArgs) {
    let (saga_bin, postbox_bin) = binaries();
    let report = execute(&a, saga_bin, postbox_bin).await.unwrap();
    let v = &report.verdict;
    assert!(v.ok(), "{}", report.summary(&a));
    assert_eq!(v.outcomes.values().sum::<usize>(), a.orders);
    assert!(v.count(CANCELLED, Some(REASON_PAYMENT_DECLINED)) > 0);
    assert!(v.count(CANCELLED, Some(REASON_OUT_OF_STOCK)) > 0);
    assert!(
        report.faults.get(&Fault::RelayKill).copied().unwrap_or(0) > 0,
        "no relay was killed: {:?}",
        report.faults
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invariants_hold_while_relays_and_services_are_killed_over_kafka() {
    invariants_hold(run_args(
        Broker::Kafka,
        150,
        vec![Fault::RelayKill, Fault::ServiceKill],
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invariants_hold_while_relays_are_killed_and_redis_restarts_over_bullmq() {
    invariants_hold(run_args(
        Broker::Bullmq,
        150,
        vec![Fault::RelayKill, Fault::BrokerRestart],
    ))
    .await;
}

#[test]
fn the_plan_is_reproducible_and_stocks_what_regular_orders_need() {
    let a = saga::run::plan(500, 0.1, 0.1, 42);
    let b = saga::run::plan(500, 0.1, 0.1, 42);
    let skus = |p: &saga::run::Plan| {
        p.orders
            .iter()
            .map(|(o, _)| o.sku.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(skus(&a), skus(&b));
    let mut need: BTreeMap<String, i64> = BTreeMap::new();
    for (o, _) in &a.orders {
        *need.entry(o.sku.clone()).or_default() += i64::from(o.qty);
    }
    for (sku, n) in need {
        let have = a.initial_stock[&sku];
        if sku == saga::run::SOLD_OUT {
            assert_eq!(have, 0);
        } else {
            assert!(have >= n, "{sku}: {have} < {n}");
        }
    }
}
