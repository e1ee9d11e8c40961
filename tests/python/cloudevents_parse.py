"""Parses messages the relay wrote as CloudEvents with the official Python
SDK (cloudevents 2.2), each by its protocol binding, and prints what it read.

Usage: python cloudevents_parse.py <file>; the file holds a JSON array of
{"binding": "http" | "kafka" | "amqp" | "job", "headers": {...}, "body": "...",
"key": ..., "content_type": ...} (see the conformance suite's cloudevents.rs).
"""

import json
import sys

from cloudevents.core.bindings import amqp, http, kafka
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

FORMAT = JSONFormat()


def parse(w):
    body = w["body"].encode("utf-8")
    binding = w["binding"]
    if binding == "http":
        return http.from_http(http.HTTPMessage(headers=w["headers"], body=body), FORMAT, CloudEvent)
    if binding == "kafka":
        headers = {k: v.encode("utf-8") for k, v in w["headers"].items()}
        return kafka.from_kafka(kafka.KafkaMessage(headers=headers, key=w.get("key"), value=body), FORMAT, CloudEvent)
    if binding == "amqp":
        message = amqp.AMQPMessage(
            properties={"content-type": w["content_type"]},
            application_properties=w["headers"],
            application_data=body,
        )
        return amqp.from_amqp(message, FORMAT, CloudEvent)
    if binding == "job":
        return FORMAT.read(CloudEvent, body)
    raise ValueError(f"unknown binding {binding!r}")


out = []
for w in json.load(open(sys.argv[1])):
    event = parse(w)
    attributes = {}
    for name, value in event.get_attributes().items():
        attributes[name] = value.isoformat() if hasattr(value, "isoformat") else value
    out.append({"attributes": attributes, "data": event.get_data()})
print(json.dumps(out))
