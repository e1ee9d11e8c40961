"""Reads an SQS queue with boto3 (an independent client) until it has at
least N messages and the queue has been quiet for a second, deletes them,
and prints one JSON array: [{messageId, body, attributes: {name: value},
groupId, dedupId}] — what the relay sent, as a Python service would see it.
Usage: python sqs_read.py <endpoint> <queue-url> <n> <timeout-s>"""
import json
import sys
import time

import boto3

endpoint, queue, n, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                   aws_access_key_id="test", aws_secret_access_key="test")
seen = []
deadline = time.time() + timeout
quiet_since = None
while time.time() < deadline:
    r = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                            MessageAttributeNames=["All"], AttributeNames=["All"])
    msgs = r.get("Messages", [])
    if not msgs:
        if len(seen) >= n:
            quiet_since = quiet_since or time.time()
            if time.time() - quiet_since > 1.0:
                break
        time.sleep(0.05)
        continue
    quiet_since = None
    for m in msgs:
        seen.append({
            "messageId": m["MessageId"],
            "body": m["Body"],
            "attributes": {k: v.get("StringValue") for k, v in m.get("MessageAttributes", {}).items()},
            "groupId": m.get("Attributes", {}).get("MessageGroupId"),
            "dedupId": m.get("Attributes", {}).get("MessageDeduplicationId"),
        })
        sqs.delete_message(QueueUrl=queue, ReceiptHandle=m["ReceiptHandle"])
if len(seen) < n:
    print(f"timed out with {len(seen)} of {n} messages", file=sys.stderr)
    sys.exit(2)
print(json.dumps(seen))
