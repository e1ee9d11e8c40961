"""Independent Kafka client for the tests: read at least COUNT messages from
TOPIC, then whatever else arrives until the topic has been quiet for a second
(re-sends), and print one JSON line each (key, value, headers, partition,
offset).

usage: consume.py BROKERS TOPIC COUNT [TIMEOUT_S] [GROUP]
"""
import json
import sys
import time

from confluent_kafka import Consumer


def main() -> int:
    brokers, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 30.0
    group = sys.argv[5] if len(sys.argv) > 5 else f"independent-{time.time_ns()}"
    c = Consumer({
        "bootstrap.servers": brokers,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
    })
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + timeout
    quiet_since = None
    try:
        while True:
            if time.monotonic() > deadline:
                if got >= count:
                    break
                print(f"timed out after {timeout}s with {got} of {count} messages", file=sys.stderr)
                return 1
            m = c.poll(0.2)
            if m is None:
                if got >= count:
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since > 1.0:
                        break
                continue
            quiet_since = None
            if m.error():
                print(f"consumer error: {m.error()}", file=sys.stderr)
                continue
            headers = {k: (v.decode() if v is not None else None) for k, v in (m.headers() or [])}
            print(json.dumps({
                "key": m.key().decode() if m.key() is not None else None,
                "value": m.value().decode(),
                "headers": headers,
                "partition": m.partition(),
                "offset": m.offset(),
            }), flush=True)
            got += 1
    finally:
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
