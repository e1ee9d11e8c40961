//! The three services' business logic. Each handler runs inside the inbox
//! transaction of the message that triggered it and writes its state change
//! and its next events (through the outbox) in that same transaction, so a
//! step and its consequence commit together or not at all. Every handler is
//! also idempotent on its own state (a second delivery that slipped past the
//! inbox, e.g. a republished compensation, changes nothing).

use crate::model::*;
use crate::Error;
use postbox::sql::render;
use postbox::{Event, Outbox};
use postbox_relay::BoxError;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// What a handler did, for logs and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Reserved,
    Rejected,
    Sold,
    Released,
    Charged,
    Declined,
    Confirmed,
    Cancelled,
    /// The state says it was already done (or there is nothing to undo).
    NoOp,
    /// An event this service does not react to.
    Ignored,
}

/// The queries of one service, rendered for its schema once.
struct Sql {
    order_insert: String,
    order_finish: String,
    order_status: String,
    reservation_exists: String,
    stock_reserve: String,
    reservation_insert: String,
    reservation_settle: String,
    stock_sell: String,
    stock_release: String,
    charge_insert: String,
}

/// One service of one deployment.
pub struct Saga {
    pub service: Service,
    names: Names,
    outbox: Outbox,
    sql: Sql,
}

impl Saga {
    pub fn new(names: &Names, service: Service) -> Result<Self, Error> {
        let schema = names.schema(service);
        let r = |t: &str| render(t, schema);
        Ok(Saga {
            service,
            names: names.clone(),
            outbox: Outbox::new(schema.as_str())?,
            sql: Sql {
                order_insert: r(include_str!("../sql/order_insert.sql")),
                order_finish: r(include_str!("../sql/order_finish.sql")),
                order_status: r(include_str!("../sql/order_status.sql")),
                reservation_exists: r(include_str!("../sql/reservation_exists.sql")),
                stock_reserve: r(include_str!("../sql/stock_reserve.sql")),
                reservation_insert: r(include_str!("../sql/reservation_insert.sql")),
                reservation_settle: r(include_str!("../sql/reservation_settle.sql")),
                stock_sell: r(include_str!("../sql/stock_sell.sql")),
                stock_release: r(include_str!("../sql/stock_release.sql")),
                charge_insert: r(include_str!("../sql/charge_insert.sql")),
            },
        })
    }

    /// Write `event` for service `to`, keyed by the order so that all events
    /// of one order reach a service in the order they were caused.
    async fn emit(
        &self,
        tx: &mut PgConnection,
        to: Service,
        event: &str,
        e: &OrderEvent,
    ) -> Result<(), BoxError> {
        let ev = Event::new(self.names.topic(to), event, serde_json::to_value(e)?)
            .key(e.order_id.to_string());
        self.outbox.enqueue(tx, ev).await?;
        Ok(())
    }

    /// The orders service's entry point: the order and its `order.created`
    /// in one transaction (what its HTTP API would call).
    pub async fn place_order(&self, pool: &PgPool, o: &NewOrder) -> Result<Uuid, Error> {
        debug_assert_eq!(self.service, Service::Orders);
        let mut tx = pool.begin().await?;
        let id: Uuid = sqlx::query_scalar(&self.sql.order_insert)
            .bind(&o.sku)
            .bind(o.qty)
            .bind(o.amount_cents)
            .bind(&o.card)
            .fetch_one(&mut *tx)
            .await?;
        let e = OrderEvent {
            order_id: id,
            sku: o.sku.clone(),
            qty: o.qty,
            amount_cents: o.amount_cents,
            card: o.card.clone(),
            reason: None,
        };
        self.emit(&mut tx, Service::Inventory, ORDER_CREATED, &e)
            .await?;
        tx.commit().await?;
        Ok(id)
    }

    /// The orders service's read side: (status, cancel reason) of an order.
    pub async fn order_status(
        &self,
        pool: &PgPool,
        id: Uuid,
    ) -> Result<Option<(String, Option<String>)>, Error> {
        debug_assert_eq!(self.service, Service::Orders);
        Ok(sqlx::query_as(&self.sql.order_status)
            .bind(id)
            .fetch_optional(pool)
            .await?)
    }

    /// React to `event` inside the caller's (inbox) transaction.
    pub async fn handle(
        &self,
        tx: &mut PgConnection,
        event: &str,
        payload: &serde_json::Value,
    ) -> Result<Step, BoxError> {
        let e: OrderEvent = serde_json::from_value(payload.clone())
            .map_err(|err| format!("{event}: payload is not an order event: {err}"))?;
        let step = match (self.service, event) {
            (Service::Inventory, ORDER_CREATED) => self.reserve(tx, &e).await?,
            (Service::Inventory, PAYMENT_COMPLETED) => self.settle(tx, &e, true).await?,
            (Service::Inventory, PAYMENT_FAILED) => self.settle(tx, &e, false).await?,
            (Service::Payments, INVENTORY_RESERVED) => self.charge(tx, &e).await?,
            (Service::Orders, PAYMENT_COMPLETED) => self.finish(tx, &e, CONFIRMED, None).await?,
            (Service::Orders, INVENTORY_REJECTED | INVENTORY_RELEASED) => {
                let reason = e.reason.as_deref().unwrap_or("unknown");
                self.finish(tx, &e, CANCELLED, Some(reason)).await?
            }
            // Not ours: consumed (so it does not block its partition) and ignored.
            _ => Step::Ignored,
        };
        tracing::debug!(service = %self.service, event, order = %e.order_id, ?step, "handled");
        Ok(step)
    }

    /// inventory ← order.created: reserve, or reject for a shortage.
    async fn reserve(&self, tx: &mut PgConnection, e: &OrderEvent) -> Result<Step, BoxError> {
        let existing: Option<String> = sqlx::query_scalar(&self.sql.reservation_exists)
            .bind(e.order_id)
            .fetch_optional(&mut *tx)
            .await?;
        if existing.is_some() {
            return Ok(Step::NoOp);
        }
        let took: Option<String> = sqlx::query_scalar(&self.sql.stock_reserve)
            .bind(&e.sku)
            .bind(e.qty)
            .fetch_optional(&mut *tx)
            .await?;
        let (state, step) = if took.is_some() {
            ("held", Step::Reserved)
        } else {
            ("rejected", Step::Rejected)
        };
        sqlx::query(&self.sql.reservation_insert)
            .bind(e.order_id)
            .bind(&e.sku)
            .bind(e.qty)
            .bind(state)
            .execute(&mut *tx)
            .await?;
        if step == Step::Reserved {
            self.emit(tx, Service::Payments, INVENTORY_RESERVED, e)
                .await?;
        } else {
            let rejected = OrderEvent {
                reason: Some(REASON_OUT_OF_STOCK.into()),
                ..e.clone()
            };
            self.emit(tx, Service::Orders, INVENTORY_REJECTED, &rejected)
                .await?;
        }
        Ok(step)
    }

    /// inventory ← payment.completed / payment.failed: sell the held units,
    /// or release them (the compensation) and tell the orders service.
    async fn settle(
        &self,
        tx: &mut PgConnection,
        e: &OrderEvent,
        paid: bool,
    ) -> Result<Step, BoxError> {
        let held: Option<(String, i32)> = sqlx::query_as(&self.sql.reservation_settle)
            .bind(e.order_id)
            .bind(if paid { "sold" } else { "released" })
            .fetch_optional(&mut *tx)
            .await?;
        let Some((sku, qty)) = held else {
            // Not held: already settled, or never reserved. Nothing to undo.
            return Ok(Step::NoOp);
        };
        if paid {
            sqlx::query(&self.sql.stock_sell)
                .bind(&sku)
                .bind(qty)
                .execute(&mut *tx)
                .await?;
            return Ok(Step::Sold);
        }
        sqlx::query(&self.sql.stock_release)
            .bind(&sku)
            .bind(qty)
            .execute(&mut *tx)
            .await?;
        let released = OrderEvent {
            reason: Some(
                e.reason
                    .clone()
                    .unwrap_or_else(|| REASON_PAYMENT_DECLINED.into()),
            ),
            ..e.clone()
        };
        self.emit(tx, Service::Orders, INVENTORY_RELEASED, &released)
            .await?;
        Ok(Step::Released)
    }

    /// payments ← inventory.reserved: charge the card once.
    async fn charge(&self, tx: &mut PgConnection, e: &OrderEvent) -> Result<Step, BoxError> {
        let declined = e.card == CARD_DECLINED;
        let (status, reason) = if declined {
            ("failed", Some(REASON_PAYMENT_DECLINED))
        } else {
            ("completed", None)
        };
        let inserted: Option<i64> = sqlx::query_scalar(&self.sql.charge_insert)
            .bind(e.order_id)
            .bind(e.amount_cents)
            .bind(status)
            .bind(reason)
            .fetch_optional(&mut *tx)
            .await?;
        if inserted.is_none() {
            // Charged (or declined) before: its events left with that charge.
            return Ok(Step::NoOp);
        }
        if declined {
            let failed = OrderEvent {
                reason: Some(REASON_PAYMENT_DECLINED.into()),
                ..e.clone()
            };
            self.emit(tx, Service::Inventory, PAYMENT_FAILED, &failed)
                .await?;
            return Ok(Step::Declined);
        }
        // Both services react to the charge: one outbox row for each.
        self.emit(tx, Service::Inventory, PAYMENT_COMPLETED, e)
            .await?;
        self.emit(tx, Service::Orders, PAYMENT_COMPLETED, e).await?;
        Ok(Step::Charged)
    }

    /// orders ← the saga's outcome: only a PENDING order moves.
    async fn finish(
        &self,
        tx: &mut PgConnection,
        e: &OrderEvent,
        status: &str,
        reason: Option<&str>,
    ) -> Result<Step, BoxError> {
        let moved: Option<Uuid> = sqlx::query_scalar(&self.sql.order_finish)
            .bind(e.order_id)
            .bind(status)
            .bind(reason)
            .fetch_optional(&mut *tx)
            .await?;
        Ok(match (moved, status) {
            (None, _) => Step::NoOp,
            (Some(_), CONFIRMED) => Step::Confirmed,
            (Some(_), _) => Step::Cancelled,
        })
    }
}
