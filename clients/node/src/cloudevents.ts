// CloudEvents 1.0 as consumers read them: a message a CloudEvents producer
// wrote (the relay with `format = "cloudevents"`, or any other), in either
// content mode, becomes the same `Message` postbox's own format gives. The
// rules of the Rust library's `postbox::cloudevents::read`, which every
// broker wrapper here applies.
import { Message } from "./message.js";
import { TRACEPARENT, TRACESTATE } from "./trace.js";
import { CE_CONTENT_TYPE, CE_PREFIX, CE_PREFIX_AMQP, CE_PREFIX_AMQP_JMS, CE_PREFIX_KAFKA } from "./wire.js";

const PREFIXES = [CE_PREFIX, CE_PREFIX_KAFKA, CE_PREFIX_AMQP, CE_PREFIX_AMQP_JMS];

/**
 * `m` read as the CloudEvent it carries, as a new message: id = the event's
 * `id`, event = `type`, key = `partitionkey` (else the broker's key, else
 * `subject`), payload = its data, and each attribute as a header
 * `ce-<name>` (read with `message.cloudevent(name)`), with `traceparent` and
 * `tracestate` also under their own names. `m` itself when it is no
 * CloudEvent. `contentType`: the protocol's content type where it is not a
 * header (AMQP's property).
 */
export function readCloudEvent(m: Message, contentType?: string | null): Message {
  const type = contentType ?? headerOf(m, CE_CONTENT_TYPE);
  let attributes: [string, string][];
  let payload = m.payload;
  if (type?.toLowerCase().startsWith("application/cloudevents")) {
    const read = structured(m.payload);
    if (!read) return m;
    [attributes, payload] = read;
  } else {
    attributes = [];
    for (const [name, value] of m.headers) {
      const a = attributeOf(name);
      if (a) attributes.push([a.name, a.encoded ? percentDecoded(value) : value]);
    }
    if (!attributes.some(([n]) => n === "id")) return m;
    if (type) {
      attributes = attributes.filter(([n]) => n !== "datacontenttype");
      attributes.push(["datacontenttype", type]);
    }
  }
  // AMQP's binding sends `time` as an AMQP timestamp (milliseconds since the
  // epoch); it reads as the RFC 3339 text the other bindings carry.
  attributes = attributes.map(([n, v]) =>
    n === "time" && /^\d+$/.test(v) ? [n, new Date(Number(v)).toISOString()] : [n, v],
  );
  const get = (name: string) => attributes.find(([n]) => n === name)?.[1];
  const out = new Message(get("id") ?? m.id, m.topic);
  out.event = get("type") ?? m.event;
  out.key = get("partitionkey") ?? m.key ?? get("subject") ?? null;
  out.payload = payload;
  out.source = m.source;
  out.headers = m.headers.filter(([n]) => n.toLowerCase() !== CE_CONTENT_TYPE && !attributeOf(n));
  for (const name of [TRACEPARENT, TRACESTATE]) {
    const v = get(name);
    if (v !== undefined && !out.headers.some(([n]) => n === name)) out.headers.push([name, v]);
  }
  for (const [name, value] of attributes) out.headers.push([`${CE_PREFIX}${name}`, value]);
  return out;
}

function headerOf(m: Message, name: string): string | undefined {
  return m.headers.find(([n]) => n.toLowerCase() === name)?.[1];
}

/** The attribute a binary-mode header carries, by any binding's prefix. */
function attributeOf(header: string): { name: string; encoded: boolean } | null {
  for (const p of PREFIXES) {
    if (header.length > p.length && header.slice(0, p.length).toLowerCase() === p.toLowerCase()) {
      return { name: header.slice(p.length).toLowerCase(), encoded: p === CE_PREFIX };
    }
  }
  return null;
}

/** HTTP's `%XX` sequences decoded; anything else kept. */
function percentDecoded(text: string): string {
  const bytes: number[] = [];
  const raw = Buffer.from(text, "utf8");
  for (let i = 0; i < raw.length; i++) {
    const hex = raw.subarray(i + 1, i + 3).toString("latin1");
    if (raw[i] === 0x25 && /^[0-9a-fA-F]{2}$/.test(hex)) {
      bytes.push(parseInt(hex, 16));
      i += 2;
    } else bytes.push(raw[i]!);
  }
  return Buffer.from(bytes).toString("utf8");
}

/** A JSON-format event: its attributes as text, its data as bytes. */
function structured(body: Buffer): [[string, string][], Buffer] | null {
  let event: unknown;
  try {
    event = JSON.parse(body.toString("utf8"));
  } catch {
    return null;
  }
  if (typeof event !== "object" || event === null || Array.isArray(event)) return null;
  const e = event as Record<string, unknown>;
  if (!["specversion", "id", "type"].every((k) => typeof e[k] === "string")) return null;
  const dct = typeof e.datacontenttype === "string" ? e.datacontenttype.toLowerCase() : null;
  const json = dct === null || dct.startsWith("application/json") || dct.includes("+json") || dct.startsWith("text/json");
  const attributes: [string, string][] = [];
  let data = Buffer.alloc(0);
  for (const [name, value] of Object.entries(e)) {
    if (name === "data") {
      data = typeof value === "string" && !json ? Buffer.from(value, "utf8") : Buffer.from(JSON.stringify(value));
    } else if (name === "data_base64") {
      if (typeof value !== "string") return null;
      data = Buffer.from(value, "base64");
    } else if (typeof value === "string") attributes.push([name, value]);
    else if (value !== null && value !== undefined) attributes.push([name, JSON.stringify(value)]);
  }
  return [attributes, data];
}
