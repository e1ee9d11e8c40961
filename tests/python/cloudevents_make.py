"""Writes one CloudEvent with the official Python SDK (cloudevents 2.2) in
every binding it has (HTTP, Kafka, AMQP, RabbitMQ) and both content modes,
and prints them as a JSON array of {"writer", "binding", "headers", "body",
"key", "content_type"}: what other producers send postbox's consumers.
"""

import json
from datetime import datetime, timezone

from cloudevents.core.bindings import amqp, http, kafka, rabbitmq
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

FORMAT = JSONFormat()
event = CloudEvent(
    {
        "id": "e-1",
        "source": "//shop/orders",
        "type": "order.paid",
        "subject": "order-7",
        "partitionkey": "order-7",
        "time": datetime(2026, 12, 7, 10, 0, 0, 123456, tzinfo=timezone.utc),
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "tenant": "acme corp",
        "datacontenttype": "application/json",
    },
    {"amount": 42, "note": "é \"%"},
)


def text(v):
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


out = []
for mode, to in [("binary", http.to_binary), ("structured", http.to_structured)]:
    m = to(event, FORMAT)
    out.append({"writer": f"python http {mode}", "headers": m.headers, "body": text(m.body)})
for mode, to in [("binary", kafka.to_binary), ("structured", kafka.to_structured)]:
    m = to(event, FORMAT)
    headers = {k: text(v) for k, v in m.headers.items()}
    out.append({"writer": f"python kafka {mode}", "headers": headers, "body": text(m.value), "key": text(m.key)})
for mode, to in [("binary", amqp.to_binary), ("structured", amqp.to_structured)]:
    m = to(event, FORMAT)
    headers = {k: text(v) for k, v in m.application_properties.items()}
    ct = m.properties.get("content-type")
    out.append({"writer": f"python amqp {mode}", "headers": headers, "body": text(m.application_data), "content_type": ct})
for mode, to in [("binary", rabbitmq.to_binary), ("structured", rabbitmq.to_structured)]:
    m = to(event, FORMAT)
    out.append({"writer": f"python rabbitmq {mode}", "headers": m.headers, "body": text(m.body), "content_type": m.content_type})
print(json.dumps(out))
