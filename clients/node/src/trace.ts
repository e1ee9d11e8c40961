// W3C trace context (https://www.w3.org/TR/trace-context/) carried by an
// event, so a consumer continues the producer's trace. Checked like the Rust
// library checks it.

/** Header name of the W3C trace parent. */
export const TRACEPARENT = "traceparent";
/** Header name of the W3C trace state. */
export const TRACESTATE = "tracestate";

/** Why `traceparent` is not a W3C trace context, or `null` when it is one. */
export function traceparentProblem(tp: string): string | null {
  const parts = tp.split("-");
  if (parts.length < 4) return "too few fields";
  const hex = (s: string, n: number) => s.length === n && /^[0-9a-f]*$/.test(s);
  const [version, traceId, parentId, flags] = parts as [string, string, string, string];
  if (!hex(version, 2) || version === "ff") return "bad version";
  if (version === "00" && parts.length !== 4) return "version 00 has exactly four fields";
  if (!hex(traceId, 32) || /^0+$/.test(traceId)) return "bad trace id";
  if (!hex(parentId, 16) || /^0+$/.test(parentId)) return "bad parent id";
  if (!hex(flags, 2)) return "bad flags";
  return null;
}
