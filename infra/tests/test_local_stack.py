#!/usr/bin/env python3
"""infra/local_stack.py against a moto server on 127.0.0.1: it creates what the template defines,
runs a second time without error, and hands out exactly the environment names settings.rs reads.

Plain python3 (boto3, moto[server], PyYAML). Prints `N passed, M failed`; exits non-zero on failure.
"""

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import boto3  # noqa: E402

import cfn_template as cfn  # noqa: E402
import local_stack  # noqa: E402
from test_template import ENV_CLI_ONLY, settings_env_names  # noqa: E402

STARTUP_SECONDS = 30


def readme_delivery_pattern(bucket):
    """The event pattern of the README's "When a delivery lands", for `bucket`."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### When a delivery lands", 1)[1]
    pattern = section.split("```json", 1)[1].split("```", 1)[0]
    return pattern.replace("YOUR-TRAWL-BUCKET", bucket)


def delivery_signals(session, s3, bucket):
    """Routes the README's rule to a new queue, puts a delivery's files in `bucket`, and returns
    the object keys of the events the queue received."""
    sqs = boto3.client("sqs", **session)
    events = boto3.client("events", **session)
    queue = sqs.create_queue(QueueName="delivery-signals")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="trawl-delivered", EventPattern=readme_delivery_pattern(bucket))
    events.put_targets(Rule="trawl-delivered", Targets=[{"Id": "1", "Arn": arn}])
    generation = "trawl/deliveries/crawl=c/run=r/gen-000000/"
    for name in ("manifest-00000.jsonl.gz", "summary.json", "_SUCCESS"):
        s3.put_object(Bucket=bucket, Key=generation + name, Body=b"")
    received = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    return [json.loads(m["Body"])["detail"]["object"]["key"] for m in received.get("Messages", [])]


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def moto_server():
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start on {endpoint}") from None
                time.sleep(0.2)
        yield endpoint
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


def main():
    template = cfn.load()
    results = []

    def check(title, ok, detail=""):
        results.append(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {title}" + ("" if ok else f": {detail}"))

    with moto_server() as endpoint, tempfile.TemporaryDirectory() as tmp:
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            os.environ[name] = "testing"
        env_file = Path(tmp) / "trawl.env"
        args = ["--stack", "t", "--env-file", str(env_file)]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            env = local_stack.run(args)
            again = local_stack.run(args)
        check("a second run succeeds with the same environment", env == again, f"{env} != {again}")

        check("the environment points the functions at the emulator",
              env.get("AWS_ENDPOINT_URL") == endpoint and env.get("AWS_ACCESS_KEY_ID") == "testing", f"{env}")
        names = {name for name in env if name.startswith("TRAWL_")}
        check("every other name is RUST_LOG or AWS_*",
              all(n == "RUST_LOG" or n.startswith(("TRAWL_", "AWS_")) for n in env), f"{sorted(env)}")
        functions_read = settings_env_names() - ENV_CLI_ONLY
        check("environment names == settings.rs constants (the functions')", names == functions_read,
              f"{sorted(names ^ functions_read)}")
        written = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
        check("--env-file holds the printed environment", written == env, f"{written}")

        session = {"endpoint_url": endpoint, "region_name": "us-east-1"}
        table_props = template["Resources"]["Table"]["Properties"]
        table = boto3.client("dynamodb", **session).describe_table(TableName=env["TRAWL_TABLE"])["Table"]
        check("table key schema from the template", table["KeySchema"] == table_props["KeySchema"],
              f"{table['KeySchema']}")
        made = {i["IndexName"]: i for i in table.get("GlobalSecondaryIndexes", [])}
        for wanted_index in table_props["GlobalSecondaryIndexes"]:
            index = made.get(wanted_index["IndexName"], {})
            check(f"{wanted_index['IndexName']} from the template",
                  (index.get("KeySchema"), index.get("Projection"))
                  == (wanted_index["KeySchema"], wanted_index["Projection"]),
                  f"{index}")

        sqs = boto3.client("sqs", **session)
        crawl = sqs.get_queue_attributes(QueueUrl=env["TRAWL_QUEUE_URL"], AttributeNames=["All"])["Attributes"]
        visibility = template["Mappings"]["CrawlQueueVisibility"][
            str(template["Parameters"]["CrawlerTimeout"]["Default"])]["Seconds"]
        check("crawl queue is standard, kept 14 days, with the mapped visibility timeout",
              (crawl.get("FifoQueue"), crawl.get("MessageRetentionPeriod"), crawl.get("VisibilityTimeout"))
              == (None, "1209600", str(visibility)),
              f"{crawl}")
        check("crawl queue redrives to a dead-letter queue after 5 receives",
              '"maxReceiveCount": 5' in crawl.get("RedrivePolicy", ""), f"{crawl.get('RedrivePolicy')}")
        delivery = sqs.get_queue_attributes(QueueUrl=env["TRAWL_DELIVERY_QUEUE_URL"],
                                            AttributeNames=["All"])["Attributes"]
        check("delivery queue is standard with a dead-letter queue",
              "FifoQueue" not in delivery and "RedrivePolicy" in delivery, f"{delivery}")

        s3 = boto3.client("s3", **session)
        block = s3.get_public_access_block(Bucket=env["TRAWL_BUCKET"])["PublicAccessBlockConfiguration"]
        check("bucket blocks public access", all(block.values()) and len(block) == 4, f"{block}")
        rules = s3.get_bucket_lifecycle_configuration(Bucket=env["TRAWL_BUCKET"])["Rules"]
        check("bucket aborts incomplete multipart uploads",
              any(r.get("AbortIncompleteMultipartUpload", {}).get("DaysAfterInitiation") == 1 for r in rules),
              f"{rules}")
        signals = delivery_signals(session, s3, env["TRAWL_BUCKET"])
        check("a delivery's _SUCCESS reaches a queue through the README's rule, nothing else does",
              signals == ["trawl/deliveries/crawl=c/run=r/gen-000000/_SUCCESS"], f"{signals}")

    del os.environ["AWS_ENDPOINT_URL"]
    with contextlib.redirect_stderr(io.StringIO()):
        refused = local_stack.main() == 1
    check("refuses to run without AWS_ENDPOINT_URL", refused)

    failed = results.count(False)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
