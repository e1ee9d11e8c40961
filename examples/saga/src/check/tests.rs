//! [`judge`] fed broken final states on purpose.

use super::*;

/// A consistent final state: one confirmed order, one cancelled after a
/// declined card, one cancelled for a shortage.
fn healthy() -> (Expectations, State) {
    let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let order = |id, sku: &str, status: &str, reason: Option<&str>| OrderRow {
        id,
        sku: sku.into(),
        qty: 2,
        amount_cents: 500,
        status: status.into(),
        cancel_reason: reason.map(Into::into),
    };
    let ex = Expectations {
        outcome: HashMap::from([
            (a, Expected::Confirmed),
            (b, Expected::Cancelled(REASON_PAYMENT_DECLINED)),
            (c, Expected::Cancelled(REASON_OUT_OF_STOCK)),
        ]),
        initial_stock: BTreeMap::from([("sku-1".into(), 10), ("sku-0".into(), 0)]),
    };
    let st = State {
        orders: vec![
            order(a, "sku-1", CONFIRMED, None),
            order(b, "sku-1", CANCELLED, Some(REASON_PAYMENT_DECLINED)),
            order(c, "sku-0", CANCELLED, Some(REASON_OUT_OF_STOCK)),
        ],
        products: vec![
            ProductRow {
                sku: "sku-1".into(),
                stock: 8,
                reserved: 0,
                sold: 2,
            },
            ProductRow {
                sku: "sku-0".into(),
                stock: 0,
                reserved: 0,
                sold: 0,
            },
        ],
        reservations: vec![],
        charges: vec![
            ChargeRow {
                order_id: a,
                amount_cents: 500,
                status: "completed".into(),
            },
            ChargeRow {
                order_id: b,
                amount_cents: 500,
                status: "failed".into(),
            },
        ],
        written: BTreeMap::from([(Service::Inventory, vec!["e1".into()])]),
        consumed: BTreeMap::from([(Service::Inventory, HashSet::from(["e1".into()]))]),
        ..Default::default()
    };
    (ex, st)
}

fn failing(v: &Verdict) -> Vec<&'static str> {
    v.failed().iter().map(|c| c.name).collect()
}

#[test]
fn a_consistent_state_passes() {
    let (ex, st) = healthy();
    let v = judge(&ex, &st);
    assert!(v.ok(), "{}", v.table());
    assert_eq!(v.count(CONFIRMED, None), 1);
    assert_eq!(v.count(CANCELLED, Some(REASON_OUT_OF_STOCK)), 1);
}

#[test]
fn detects_a_double_charge_and_a_charged_cancellation() {
    let (ex, mut st) = healthy();
    // The confirmed order charged twice; the declined one charged after all.
    let a = st.orders[0].id;
    st.charges.push(ChargeRow {
        order_id: a,
        amount_cents: 500,
        status: "completed".into(),
    });
    st.charges[1].status = "completed".into();
    assert_eq!(
        failing(&judge(&ex, &st)),
        [
            "no payment for a cancelled order",
            "at most one successful charge per order"
        ]
    );
}

#[test]
fn detects_a_stuck_order_and_lost_units() {
    let (ex, mut st) = healthy();
    st.orders[0].status = PENDING.into();
    st.products[0].reserved = 2;
    st.products[0].sold = 0;
    st.reservations.push(ReservationRow {
        order_id: st.orders[0].id,
        sku: "sku-1".into(),
        qty: 2,
        state: "held".into(),
    });
    let v = judge(&ex, &st);
    assert_eq!(
        failing(&v),
        [
            "every order CONFIRMED or CANCELLED",
            "each outcome fits its card and stock",
            "no reservation left held",
        ]
    );
    // Units that vanish break conservation.
    st.products[0].reserved = 0;
    st.reservations.clear();
    assert!(failing(&judge(&ex, &st)).contains(&"stock + reserved + sold conserved per product"));
}

#[test]
fn detects_unsent_and_lost_events() {
    let (ex, mut st) = healthy();
    st.unsent = 3;
    st.written
        .get_mut(&Service::Inventory)
        .unwrap()
        .push("e2".into());
    st.consumed
        .get_mut(&Service::Inventory)
        .unwrap()
        .insert("e9".into());
    let v = judge(&ex, &st);
    assert_eq!(
        failing(&v),
        [
            "outbox unsent = 0, no dead letters",
            "every event consumed by its service"
        ]
    );
    assert!(!st.settled());
    assert!(v.table().contains("FAIL"));
}
