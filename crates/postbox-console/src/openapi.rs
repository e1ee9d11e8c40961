//! The API's OpenAPI 3.1 description, served at `/api/v1/openapi.json`.
//! The API tests check that every route is described here.

use axum::Json;
use serde_json::{json, Value};

fn filter_params() -> Value {
    let p = |name: &str, ty: &str, text: &str| json!({"name": name, "in": "query", "required": false, "schema": {"type": ty}, "description": text});
    json!([
        {"name": "side", "in": "query", "required": false, "schema": {"type": "string", "enum": ["relay", "consumer"], "default": "relay"},
         "description": "The relay's dead letters (outbox_dead_letter) or the consumers' (inbox_dead_letter)."},
        p("consumer", "string", "Only this consumer (side=consumer)."),
        p("topic", "string", "Only this topic."),
        p("key", "string", "Only this key."),
        p("older_than_seconds", "number", "Only those dead-lettered more than this many seconds ago."),
        p("newer_than_seconds", "number", "Only those dead-lettered less than this many seconds ago."),
        p("error", "string", "Only those whose last error contains this text (case-insensitive)."),
        p("fingerprint", "string", "Only this error group."),
        p("ids", "string", "Only these dead-letter ids, comma-separated."),
        p("limit", "integer", "At most this many (1 to 1000, default 100)."),
    ])
}

/// The schema, the filters, and (for pages) `after`.
fn params(paged: bool) -> Value {
    let mut all = vec![schema_param()];
    all.extend(filter_params().as_array().cloned().unwrap_or_default());
    if paged {
        all.push(
            json!({"name": "after", "in": "query", "schema": {"type": "integer"},
            "description": "The next page: the previous page's next_after."}),
        );
    }
    Value::Array(all)
}

fn ok(description: &str, schema: Value) -> Value {
    json!({
        "200": {"description": description, "content": {"application/json": {"schema": schema}}},
        "400": {"$ref": "#/components/responses/BadRequest"},
        "401": {"$ref": "#/components/responses/Unauthorized"},
        "404": {"$ref": "#/components/responses/NotFound"}
    })
}

fn schema_param() -> Value {
    json!({"name": "schema", "in": "path", "required": true, "schema": {"type": "string"}, "description": "A postbox schema the console serves."})
}

fn act(summary: &str) -> Value {
    let mut responses = ok(
        "What was done",
        json!({"type": "object", "properties": {
        "action": {"type": "string"}, "side": {"type": "string"}, "count": {"type": "integer"}}}),
    );
    responses["403"] = json!({"$ref": "#/components/responses/Forbidden"});
    responses["409"] = json!({"description": "The selection holds another count than confirmed_count; nothing was done.",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
    json!({"post": {
        "summary": summary,
        "description": "Admin role. With a session cookie, send the session's CSRF token in `x-csrf-token`. Recorded in the audit table.",
        "parameters": [schema_param()],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Selection"}}}},
        "responses": responses
    }})
}

/// One relay instance of a schema's status (`ops::status::Instance`).
fn relay() -> Value {
    let opt = |ty: &str| json!({"type": [ty, "null"]});
    let time = json!({"type": ["string", "null"], "format": "date-time"});
    json!({"type": "object", "properties": {
        "instance": {"type": "string", "description": "`postbox-relay:<pid>:<id>@<version>`: the prefix of its sessions' application_name (without `@<version>` for a relay known by its health record alone)."},
        "version": opt("string"), "process_id": opt("integer"),
        "sessions": {"type": "integer", "description": "Its worker sessions on this schema (0 for a relay standing by, or one whose sessions ended)."},
        "backend_pids": {"type": "array", "items": {"type": "integer"}},
        "partitions": {"type": "array", "items": {"type": "integer"}},
        "partition_ranges": {"type": "string"},
        "client_addr": opt("string"), "session_start": time.clone(), "last_active": time,
        "state": {"type": "string", "enum": ["publishing", "cannot_publish", "standing_by", "stale", "unknown"],
            "description": "publishing: every sink publishes. cannot_publish: a sink cannot publish and it owns partitions, whose events wait. standing_by: a sink cannot publish; it owns nothing while relays that can publish serve. stale: its health record was not renewed (killed, or cut off from PostgreSQL). unknown: no health record (a relay before migration 0013, or not a relay)."},
        "summary": {"type": "string", "description": "The state in words: which sink, since when, why, and what happens to its partitions."},
        "health": {"oneOf": [{"$ref": "#/components/schemas/RelayHealth"}, {"type": "null"}]}
    }})
}

/// A relay's own report (`outbox_relays`, migration 0013).
fn relay_health() -> Value {
    let time = json!({"type": ["string", "null"], "format": "date-time"});
    let sink = json!({"type": "object", "properties": {
        "sink": {"type": "string"}, "state": {"type": "string", "enum": ["publishing", "unavailable"]},
        "since": time.clone(), "error": {"type": ["string", "null"]}, "last_publish_at": time.clone()}});
    json!({"type": "object", "properties": {
        "version": {"type": "string"}, "host": {"type": "string"},
        "started_at": {"type": "string", "format": "date-time"}, "reported_at": {"type": "string", "format": "date-time"},
        "stale": {"type": "boolean"}, "reported_seconds_ago": {"type": "number"},
        "taking_partitions": {"type": "boolean", "description": "False while it stands by."},
        "owned_partitions": {"type": "integer"},
        "unavailable_since": time.clone(), "unavailable_seconds": {"type": ["number", "null"]},
        "last_publish_at": time.clone(),
        "confirmed_at": time,
        "sent_last_interval": {"type": "integer"}, "interval_ms": {"type": "integer"},
        "sinks": {"type": "array", "items": sink}
    }})
}

/// `GET /api/v1/openapi.json`: no sign-in needed (it holds no data).
pub(crate) async fn document() -> Json<Value> {
    Json(json!({
        "openapi": "3.1.0",
        "info": {
            "title": "postbox console API",
            "version": "1",
            "description": "Lag, relays, halted keys and dead letters of postbox schemas; replay and purge. Every endpoint but this one needs `Authorization: Bearer <token>` (a token of the console's users file) or a console session cookie."
        },
        "security": [{"bearer": []}],
        "paths": {
            "/api/v1/schemas": {"get": {
                "summary": "Every served schema's status",
                "responses": ok("One status per schema", json!({"type": "array", "items": {"$ref": "#/components/schemas/SchemaStatus"}}))
            }},
            "/api/v1/schemas/{schema}": {"get": {
                "summary": "One schema's status: pending events and lag per topic, dead letters, consumers, relays and their partitions",
                "parameters": [schema_param()],
                "responses": ok("The status", json!({"$ref": "#/components/schemas/SchemaStatus"}))
            }},
            "/api/v1/schemas/{schema}/halted-keys": {"get": {
                "summary": "Keys whose next event waits out a backoff or is blocked",
                "parameters": [schema_param(), {"name": "limit", "in": "query", "schema": {"type": "integer"}}],
                "responses": ok("Halted keys, by key", json!({"type": "array", "items": {"type": "object"}}))
            }},
            "/api/v1/schemas/{schema}/delivered": {"get": {
                "summary": "Events delivered per minute over the last hour (all topics), oldest first, as the relays count them",
                "parameters": [schema_param()],
                "responses": ok("Sixty minutes", json!({"type": "array", "items": {"type": "object", "properties": {
                    "minute": {"type": "string", "format": "date-time"}, "delivered": {"type": "integer"}}}}))
            }},
            "/api/v1/schemas/{schema}/dead-letters": {"get": {
                "summary": "A page of dead letters, by id",
                "parameters": params(true),
                "responses": ok("The page", json!({"type": "object", "properties": {
                    "items": {"type": "array", "items": {"$ref": "#/components/schemas/DeadLetter"}},
                    "matching": {"type": "integer", "description": "How many match from this page on."},
                    "next_after": {"type": ["integer", "null"]}}}))
            }},
            "/api/v1/schemas/{schema}/dead-letters/groups": {"get": {
                "summary": "Dead letters grouped by error fingerprint, largest first",
                "parameters": params(false),
                "responses": ok("The groups", json!({"type": "array", "items": {"type": "object", "properties": {
                    "fingerprint": {"type": "string"}, "count": {"type": "integer"},
                    "first_dead_at": {"type": "string", "format": "date-time"},
                    "last_dead_at": {"type": "string", "format": "date-time"},
                    "example_error": {"type": "string"},
                    "topics": {"type": "array", "items": {"type": "string"}}}}}))
            }},
            "/api/v1/schemas/{schema}/dead-letters/{side}/{id}": {"get": {
                "summary": "One dead letter, whole",
                "parameters": [schema_param(),
                    {"name": "side", "in": "path", "required": true, "schema": {"type": "string", "enum": ["relay", "consumer"]}},
                    {"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}],
                "responses": ok("The dead letter", json!({"$ref": "#/components/schemas/DeadLetter"}))
            }},
            "/api/v1/schemas/{schema}/dead-letters/replay": act("Replay the selected dead letters (relay side: back into the outbox; consumer side: run again by the consumer)"),
            "/api/v1/schemas/{schema}/dead-letters/purge": act("Delete the selected dead letters for good"),
            "/api/v1/schemas/{schema}/audit": {"get": {
                "summary": "The replays and purges made through the console, newest first",
                "parameters": [schema_param(),
                    {"name": "limit", "in": "query", "schema": {"type": "integer"}},
                    {"name": "before", "in": "query", "schema": {"type": "integer"}, "description": "Only entries with smaller ids (the next page)."}],
                "responses": ok("Audit entries", json!({"type": "array", "items": {"type": "object", "properties": {
                    "id": {"type": "integer"}, "at": {"type": "string", "format": "date-time"}, "actor": {"type": "string"},
                    "action": {"type": "string"}, "selection": {"type": "object"}, "count": {"type": "integer"}}}}))
            }},
            "/api/v1/openapi.json": {"get": {"summary": "This document", "security": [], "responses": {"200": {"description": "OpenAPI 3.1"}}}}
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {
                "BadRequest": {"description": "Bad input; `error` says which and why.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                "Unauthorized": {"description": "No valid token or session.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                "Forbidden": {"description": "A viewer asked for an admin action, or the CSRF token is missing.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                "NotFound": {"description": "No such schema or dead letter.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
            },
            "schemas": {
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}},
                "Selection": {"type": "object", "properties": {
                    "side": {"type": "string", "enum": ["relay", "consumer"], "default": "relay"},
                    "filter": {"type": "object", "properties": {
                        "consumer": {"type": "string"}, "topic": {"type": "string"}, "key": {"type": "string"},
                        "older_than_seconds": {"type": "number"}, "newer_than_seconds": {"type": "number"},
                        "error": {"type": "string"}, "fingerprint": {"type": "string"},
                        "ids": {"type": "array", "items": {"type": "integer"}}}},
                    "all": {"type": "boolean", "description": "Select every dead letter of the side (needed when the filter is empty)."},
                    "confirmed_count": {"type": "integer", "description": "The count you expect to touch; another count refuses with 409."}}},
                "DeadLetter": {"type": "object", "properties": {
                    "side": {"type": "string"}, "id": {"type": "integer"}, "message_id": {"type": "string"},
                    "consumer": {"type": ["string", "null"]}, "topic": {"type": "string"}, "event": {"type": ["string", "null"]},
                    "key": {"type": ["string", "null"]}, "payload": {}, "headers": {}, "attempts": {"type": "integer"},
                    "last_error": {"type": "string"}, "fingerprint": {"type": "string"},
                    "dead_at": {"type": "string", "format": "date-time"}, "pending_elsewhere": {"type": "boolean"}}},
                "SchemaStatus": {"type": "object", "description": "As `postbox status --json` prints it.", "properties": {
                    "schema": {"type": "string"}, "read_path": {"type": "string"}, "wake_up": {"type": "string"},
                    "pending": {"type": "integer"}, "oldest_pending_age_seconds": {"type": ["number", "null"]},
                    "retrying": {"type": "integer"}, "dead_letters": {"type": "integer"}, "consumer_dead_letters": {"type": "integer"},
                    "scheduled": {"type": "integer"}, "next_scheduled_in_seconds": {"type": ["number", "null"]},
                    "topics": {"type": "array", "items": {"type": "object"}}, "consumers": {"type": "array", "items": {"type": "object"}},
                    "relays": {"type": "array", "items": {"$ref": "#/components/schemas/Relay"}},
                    "relays_cannot_publish": {"type": "integer", "description": "Relays that own partitions while a sink of theirs cannot publish: their keys wait."},
                    "relays_stale": {"type": "integer", "description": "Relays whose health record was not renewed in time."},
                    "partitions_owned": {"type": "integer"},
                    "partitions_unowned": {"type": "string"}}},
                "Relay": relay(),
                "RelayHealth": relay_health()
            }
        }
    }))
}
