//! The invariant checker: loads the final state of the three schemas and
//! judges it against what the orders dictate. [`judge`] is a pure function of
//! that state, so its unit tests feed it broken states on purpose.

use crate::model::*;
use crate::Error;
use postbox::sql::render;
use sqlx::PgPool;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write;
use uuid::Uuid;

/// How an order must end, known when it is placed (the card and whether its
/// product is in stock decide it: regular products hold enough for every order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expected {
    Confirmed,
    Cancelled(&'static str),
}

/// What the run promised the checker.
#[derive(Clone, Debug, Default)]
pub struct Expectations {
    pub outcome: HashMap<Uuid, Expected>,
    pub initial_stock: BTreeMap<String, i64>,
}

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct OrderRow {
    pub id: Uuid,
    pub sku: String,
    pub qty: i32,
    pub amount_cents: i64,
    pub status: String,
    pub cancel_reason: Option<String>,
}

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ProductRow {
    pub sku: String,
    pub stock: i64,
    pub reserved: i64,
    pub sold: i64,
}

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ChargeRow {
    pub order_id: Uuid,
    pub amount_cents: i64,
    pub status: String,
}

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ReservationRow {
    pub order_id: Uuid,
    pub sku: String,
    pub qty: i64,
    pub state: String,
}

/// Everything the three services hold at the end of a run.
#[derive(Clone, Debug, Default)]
pub struct State {
    pub orders: Vec<OrderRow>,
    pub products: Vec<ProductRow>,
    pub reservations: Vec<ReservationRow>,
    pub charges: Vec<ChargeRow>,
    /// Outbox rows not yet sent, over the three schemas.
    pub unsent: i64,
    pub dead_letters: i64,
    /// Event ids written to each service's inbound topic (from all outboxes).
    pub written: BTreeMap<Service, Vec<String>>,
    /// Message ids in each service's inbox.
    pub consumed: BTreeMap<Service, HashSet<String>>,
}

/// Every row `sql` returns.
async fn all<T>(pool: &PgPool, sql: &str) -> Result<Vec<T>, sqlx::Error>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    sqlx::query_as(sql).fetch_all(pool).await
}

impl State {
    /// Read the three schemas.
    pub async fn load(pool: &PgPool, names: &Names) -> Result<State, Error> {
        let q = |t: &str, s: Service| render(t, names.schema(s));
        let mut st = State {
            orders: all(
                pool,
                &q(include_str!("../sql/check_orders.sql"), Service::Orders),
            )
            .await?,
            products: all(
                pool,
                &q(
                    include_str!("../sql/check_products.sql"),
                    Service::Inventory,
                ),
            )
            .await?,
            reservations: all(
                pool,
                &q(
                    include_str!("../sql/check_reservations.sql"),
                    Service::Inventory,
                ),
            )
            .await?,
            charges: all(
                pool,
                &q(include_str!("../sql/check_charges.sql"), Service::Payments),
            )
            .await?,
            ..Default::default()
        };
        let by_topic: HashMap<String, Service> =
            Service::ALL.iter().map(|&s| (names.topic(s), s)).collect();
        for s in Service::ALL {
            let rows: Vec<(String, String, bool)> =
                all(pool, &q(include_str!("../sql/check_outbox.sql"), s)).await?;
            for (id, topic, sent) in rows {
                st.unsent += i64::from(!sent);
                let to = by_topic
                    .get(&topic)
                    .ok_or_else(|| format!("{s} wrote to an unknown topic {topic:?}"))?;
                st.written.entry(*to).or_default().push(id);
            }
            st.dead_letters +=
                sqlx::query_scalar::<_, i64>(&q(include_str!("../sql/check_dead_letters.sql"), s))
                    .fetch_one(pool)
                    .await?;
            let ids: Vec<String> =
                sqlx::query_scalar(&q(include_str!("../sql/check_inbox.sql"), s))
                    .bind(names.consumer(s))
                    .fetch_all(pool)
                    .await?;
            st.consumed.insert(s, ids.into_iter().collect());
        }
        Ok(st)
    }

    /// Orders not yet CONFIRMED or CANCELLED.
    pub fn pending(&self) -> usize {
        self.orders.iter().filter(|o| o.status == PENDING).count()
    }

    /// Events written for `s` but not (yet) in its inbox.
    pub fn missing(&self, s: Service) -> Vec<String> {
        let got = self.consumed.get(&s);
        self.written
            .get(&s)
            .into_iter()
            .flatten()
            .filter(|id| !got.is_some_and(|g| g.contains(*id)))
            .cloned()
            .collect()
    }

    /// Events written but not (yet) in their consumer's inbox.
    pub fn undelivered(&self) -> usize {
        Service::ALL.iter().map(|&s| self.missing(s).len()).sum()
    }

    /// Nothing left to happen: every order final, every event sent and consumed.
    pub fn settled(&self) -> bool {
        self.pending() == 0 && self.unsent == 0 && self.undelivered() == 0
    }
}

/// One judged invariant.
#[derive(Clone, Debug)]
pub struct Check {
    pub name: &'static str,
    /// Empty when it holds; else what breaks it (a few examples).
    pub violations: Vec<String>,
}

impl Check {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// The checker's verdict and the counts for the summary.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub checks: Vec<Check>,
    /// (status, reason) → orders.
    pub outcomes: BTreeMap<(String, String), usize>,
    pub events_written: usize,
    pub events_consumed: usize,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.checks.iter().all(Check::ok)
    }

    pub fn failed(&self) -> Vec<&Check> {
        self.checks.iter().filter(|c| !c.ok()).collect()
    }

    /// Orders that ended with `status` (and, if given, `reason`).
    pub fn count(&self, status: &str, reason: Option<&str>) -> usize {
        self.outcomes
            .iter()
            .filter(|((s, r), _)| s == status && reason.is_none_or(|want| r == want))
            .map(|(_, n)| n)
            .sum()
    }

    /// The outcome and invariant tables.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "{:<48} {:>8}", "outcome", "orders");
        for ((status, reason), n) in &self.outcomes {
            let label = if reason.is_empty() {
                status.clone()
            } else {
                format!("{status} ({reason})")
            };
            let _ = writeln!(t, "  {label:<46} {n:>8}");
        }
        let _ = writeln!(
            t,
            "  {:<46} {:>8}",
            "total",
            self.outcomes.values().sum::<usize>()
        );
        let _ = writeln!(t);
        let _ = writeln!(t, "{:<48} {:>8}", "invariant", "result");
        for c in &self.checks {
            let result = if c.ok() {
                "ok".to_owned()
            } else {
                format!("FAIL ({})", c.violations.len())
            };
            let _ = writeln!(t, "  {:<46} {result:>8}", c.name);
            for v in c.violations.iter().take(5) {
                let _ = writeln!(t, "      {v}");
            }
        }
        t
    }
}

fn check(name: &'static str, violations: Vec<String>) -> Check {
    Check { name, violations }
}

/// Judge `st` against `ex`.
pub fn judge(ex: &Expectations, st: &State) -> Verdict {
    let orders: HashMap<Uuid, &OrderRow> = st.orders.iter().map(|o| (o.id, o)).collect();
    let mut completed: HashMap<Uuid, Vec<&ChargeRow>> = HashMap::new();
    for c in st.charges.iter().filter(|c| c.status == "completed") {
        completed.entry(c.order_id).or_default().push(c);
    }
    let mut checks = Vec::new();

    checks.push(check(
        "every order CONFIRMED or CANCELLED",
        st.orders
            .iter()
            .filter(|o| o.status != CONFIRMED && o.status != CANCELLED)
            .map(|o| format!("order {} is {}", o.id, o.status))
            .collect(),
    ));

    let mut mismatched: Vec<String> = ex
        .outcome
        .iter()
        .filter_map(|(id, want)| {
            let Some(o) = orders.get(id) else {
                return Some(format!("order {id} was placed but is missing"));
            };
            let fits = match want {
                Expected::Confirmed => o.status == CONFIRMED,
                Expected::Cancelled(r) => {
                    o.status == CANCELLED && o.cancel_reason.as_deref() == Some(r)
                }
            };
            (!fits).then(|| {
                format!(
                    "order {id}: expected {want:?}, got {} {:?}",
                    o.status, o.cancel_reason
                )
            })
        })
        .collect();
    mismatched.sort();
    checks.push(check("each outcome fits its card and stock", mismatched));

    let mut conservation = Vec::new();
    let mut leftover = Vec::new();
    let mut sold_vs_confirmed = Vec::new();
    let mut confirmed_qty: HashMap<&str, i64> = HashMap::new();
    for o in st.orders.iter().filter(|o| o.status == CONFIRMED) {
        *confirmed_qty.entry(o.sku.as_str()).or_default() += i64::from(o.qty);
    }
    let products: HashMap<&str, &ProductRow> =
        st.products.iter().map(|p| (p.sku.as_str(), p)).collect();
    for (sku, initial) in &ex.initial_stock {
        let Some(p) = products.get(sku.as_str()) else {
            conservation.push(format!("{sku}: product missing"));
            continue;
        };
        let total = p.stock + p.reserved + p.sold;
        if total != *initial {
            conservation.push(format!(
                "{sku}: stock {} + reserved {} + sold {} = {total}, initially {initial}",
                p.stock, p.reserved, p.sold
            ));
        }
        if p.reserved != 0 {
            leftover.push(format!("{sku}: {} units still reserved", p.reserved));
        }
        let want = confirmed_qty.get(sku.as_str()).copied().unwrap_or(0);
        if p.sold != want {
            sold_vs_confirmed.push(format!(
                "{sku}: sold {} but confirmed orders took {want}",
                p.sold
            ));
        }
    }
    for r in st.reservations.iter().filter(|r| r.state == "held") {
        leftover.push(format!(
            "order {} still holds {} × {}",
            r.order_id, r.qty, r.sku
        ));
    }
    checks.push(check(
        "stock + reserved + sold conserved per product",
        conservation,
    ));
    checks.push(check("no reservation left held", leftover));
    checks.push(check(
        "sold = quantity of confirmed orders",
        sold_vs_confirmed,
    ));

    checks.push(check(
        "no payment for a cancelled order",
        st.orders
            .iter()
            .filter(|o| o.status == CANCELLED && completed.contains_key(&o.id))
            .map(|o| {
                format!(
                    "order {} is cancelled ({:?}) but was charged",
                    o.id, o.cancel_reason
                )
            })
            .collect(),
    ));
    checks.push(check(
        "at most one successful charge per order",
        completed
            .iter()
            .filter(|(_, cs)| cs.len() > 1)
            .map(|(id, cs)| format!("order {id} charged {} times", cs.len()))
            .collect(),
    ));
    checks.push(check(
        "every confirmed order charged its amount",
        st.orders
            .iter()
            .filter(|o| o.status == CONFIRMED)
            .filter(|o| {
                !completed
                    .get(&o.id)
                    .is_some_and(|cs| cs.iter().any(|c| c.amount_cents == o.amount_cents))
            })
            .map(|o| {
                format!(
                    "order {} confirmed without a charge of {}",
                    o.id, o.amount_cents
                )
            })
            .collect(),
    ));

    let mut outbox = Vec::new();
    if st.unsent != 0 {
        outbox.push(format!("{} outbox rows unsent", st.unsent));
    }
    if st.dead_letters != 0 {
        outbox.push(format!("{} rows dead-lettered", st.dead_letters));
    }
    checks.push(check("outbox unsent = 0, no dead letters", outbox));

    let mut delivery = Vec::new();
    let (mut written, mut consumed) = (0, 0);
    for s in Service::ALL {
        let ids: HashSet<&String> = st.written.get(&s).into_iter().flatten().collect();
        let empty = HashSet::new();
        let got = st.consumed.get(&s).unwrap_or(&empty);
        written += ids.len();
        consumed += got.len();
        let missing = ids.iter().filter(|id| !got.contains(**id)).count();
        let unexpected = got.iter().filter(|id| !ids.contains(id)).count();
        if missing > 0 {
            delivery.push(format!(
                "{s}: {missing} events written for it never consumed"
            ));
        }
        if unexpected > 0 {
            delivery.push(format!("{s}: {unexpected} consumed events no outbox wrote"));
        }
    }
    checks.push(check("every event consumed by its service", delivery));

    let mut outcomes = BTreeMap::new();
    for o in &st.orders {
        *outcomes
            .entry((
                o.status.clone(),
                o.cancel_reason.clone().unwrap_or_default(),
            ))
            .or_default() += 1;
    }
    Verdict {
        checks,
        outcomes,
        events_written: written,
        events_consumed: consumed,
    }
}

#[cfg(test)]
mod tests;
