// The waits of the inbox loop: the handler's retry policy with jittered
// backoff, waits that shutdown cuts short, and where log lines go.

/** How often a failing handler runs, and the waits in between, before the message becomes a dead letter. */
export interface RetryPolicy {
  /** Handler runs before the message is dead-lettered (at least 1). */
  attempts: number;
  /**
   * Wait before the second run, in ms; doubled for each further one. Each
   * wait is drawn between half and all of that (jitter spreads instances
   * apart): 200 waits 100–200 ms.
   */
  backoffMinMs: number;
  /** The longest wait between two runs, in ms. */
  backoffMaxMs: number;
}

/** What `retry` options take: any part of a policy. */
export type RetryOptions = Partial<RetryPolicy> & {
  /** @deprecated The former name of `backoffMinMs`, read for one more release. */
  backoffMs?: number;
};

/** 5 runs, waiting about 1 s, 2 s, 4 s, 8 s in between. */
export const DEFAULT_RETRY: RetryPolicy = { attempts: 5, backoffMinMs: 1000, backoffMaxMs: 60_000 };

/** The policy `options` describe over the defaults, with a warning for a former name. */
export function retryPolicy(options: RetryOptions | undefined, log: Logger): RetryPolicy {
  const { backoffMs, ...rest } = options ?? {};
  const policy: RetryPolicy = { ...DEFAULT_RETRY, ...rest };
  if (backoffMs !== undefined) {
    log.warn("retry.backoffMs is deprecated and will be removed: write retry.backoffMinMs");
    if (rest.backoffMinMs === undefined) policy.backoffMinMs = backoffMs;
  }
  policy.attempts = Math.max(1, Math.floor(policy.attempts));
  return policy;
}

/** Where log lines go (`console` by default, without `info`). */
export interface Logger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

/** Warnings and errors to the console; `info` dropped. */
export const defaultLogger: Logger = {
  info: () => {},
  warn: (m, f) => console.warn(`postbox: ${m}`, f ?? ""),
  error: (m, f) => console.error(`postbox: ${m}`, f ?? ""),
};

/** The wait after the `failures`-th failed run: doubling, capped, from its upper half (jitter). */
export function delay(policy: RetryPolicy, failures: number): number {
  const full = Math.min(policy.backoffMinMs * 2 ** Math.min(failures - 1, 20), policy.backoffMaxMs);
  // Whole milliseconds: timers take no finer, and logs show `520`, not `519.7697988514768`.
  return Math.round(full / 2 + (full / 2) * Math.random());
}

/** An error's message and its causes, joined by ": ". */
export function chain(err: unknown): string {
  const parts: string[] = [];
  let e: unknown = err;
  for (let i = 0; e !== undefined && e !== null && i < 8; i++) {
    parts.push(e instanceof Error ? e.message : String(e));
    e = e instanceof Error ? e.cause : undefined;
  }
  return parts.filter((p, i) => p !== parts[i - 1]).join(": ");
}

/** Wait `ms`; `false` if `signal` aborted first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const done = (ok: boolean) => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      resolve(ok);
    };
    const onAbort = () => done(false);
    const timer = setTimeout(() => done(true), ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * The same error again and again (a client reconnecting in a loop) is logged
 * once, then at most once per `everyMs` with how many were left out, so a
 * failing connection cannot fill a disk with one line.
 */
export class RepeatedErrors {
  readonly #seen = new Map<string, { at: number; left: number }>();
  constructor(readonly everyMs = 30_000) {}

  /** What to log for `text` now, or `null` to leave it out. */
  line(text: string, now: number = Date.now()): string | null {
    const seen = this.#seen.get(text);
    if (seen && now - seen.at < this.everyMs) {
      seen.left += 1;
      return null;
    }
    const left = seen?.left ?? 0;
    if (this.#seen.size > 100) this.#seen.clear();
    this.#seen.set(text, { at: now, left: 0 });
    return left > 0 ? `${text} (and ${left} times more in ${Math.round(this.everyMs / 1000)} s)` : text;
  }
}

