// Parses messages the relay wrote as CloudEvents with the official Node SDK
// (cloudevents 10), each by its protocol binding, validates each event, and
// prints what it read.
// Usage: node cloudevents_parse.mjs <file>; the file holds a JSON array of
// {binding: "http" | "kafka" | "amqp" | "job", headers, body, key, content_type}.
import { readFileSync } from "node:fs";
import { CloudEvent, HTTP, Kafka } from "cloudevents";

function parse(w) {
  switch (w.binding) {
    case "http":
      return HTTP.toEvent({ headers: w.headers, body: w.body });
    case "kafka":
      return Kafka.toEvent({ headers: w.headers, key: w.key, value: w.body, body: w.body });
    case "amqp": {
      // The Node SDK has no AMQP binding: its HTTP binding reads the same
      // attributes under HTTP's names (`cloudEvents:` → `ce-`, the
      // content-type property → header).
      const headers = { "content-type": w.content_type };
      for (const [k, v] of Object.entries(w.headers)) {
        headers[k.startsWith("cloudEvents:") ? "ce-" + k.slice("cloudEvents:".length) : k] = v;
      }
      return HTTP.toEvent({ headers, body: w.body });
    }
    case "job":
      return new CloudEvent(JSON.parse(w.body), true);
    default:
      throw new Error(`unknown binding ${w.binding}`);
  }
}

const out = [];
for (const w of JSON.parse(readFileSync(process.argv[2], "utf8"))) {
  const event = parse(w);
  // The bindings build events unchecked; check each against the spec.
  event.validate();
  const { data, ...attributes } = event.toJSON();
  out.push({ attributes, data });
}
console.log(JSON.stringify(out));
