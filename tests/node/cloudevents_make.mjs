// Writes one CloudEvent with the official Node SDK (cloudevents 10) in every
// binding it has for brokers postbox serves (HTTP, Kafka) and both content
// modes, and prints them as a JSON array of {writer, headers, body, key}:
// what other producers send postbox's consumers.
import { CloudEvent, HTTP, Kafka } from "cloudevents";

const event = new CloudEvent({
  id: "e-1",
  source: "//shop/orders",
  type: "order.paid",
  subject: "order-7",
  partitionkey: "order-7",
  time: "2026-12-07T10:00:00.123Z",
  traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
  tenant: "acme corp",
  datacontenttype: "application/json",
  data: { amount: 42, note: 'é "%' },
});
const text = (v) => (typeof v === "string" ? v : JSON.stringify(v));
const strings = (h) => Object.fromEntries(Object.entries(h).map(([k, v]) => [k, String(v)]));
const out = [];
for (const [mode, to] of [["binary", HTTP.binary], ["structured", HTTP.structured]]) {
  const m = to(event);
  out.push({ writer: `node http ${mode}`, headers: strings(m.headers), body: text(m.body) });
}
for (const [mode, to] of [["binary", Kafka.binary], ["structured", Kafka.structured]]) {
  const m = to(event);
  out.push({ writer: `node kafka ${mode}`, headers: strings(m.headers), body: text(m.value), key: m.key });
}
console.log(JSON.stringify(out));
