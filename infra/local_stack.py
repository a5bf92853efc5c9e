#!/usr/bin/env python3
"""Creates trawl's table, bucket and queues on a local AWS emulator (moto server).

The definitions come from infra/template.yaml itself, so the local stack cannot drift from the
deployed one. Safe to run again: existing resources are kept (queues get the template's attributes
again; a table whose keys or indexes differ from the template is reported, not dropped).

Usage: AWS_ENDPOINT_URL=http://127.0.0.1:5000 python3 infra/local_stack.py [--env-file PATH]
Prints the environment the functions need locally (TRAWL_TABLE=..., AWS_ENDPOINT_URL=..., one per line).
"""

import argparse
import json
import os
import re
import sys

import boto3
from botocore.exceptions import BotoCoreError, ClientError

import cfn_template as cfn

DEFAULT_STACK = "trawl-local"

# CloudFormation AWS::SQS::Queue properties -> SQS queue attributes (the ones SQS takes as-is).
SQS_ATTRIBUTES = {
    "FifoQueue", "ContentBasedDeduplication", "VisibilityTimeout", "MessageRetentionPeriod",
    "DelaySeconds", "ReceiveMessageWaitTimeSeconds", "MaximumMessageSize", "SqsManagedSseEnabled",
    "DeduplicationScope", "FifoThroughputLimit", "RedrivePolicy",
}
BUCKET_PROPERTIES = {
    "BucketEncryption", "PublicAccessBlockConfiguration", "OwnershipControls", "LifecycleConfiguration",
    "NotificationConfiguration",
}
LIFECYCLE_RULE_KEYS = {"Id", "Status", "Prefix", "AbortIncompleteMultipartUpload", "ExpirationInDays"}


class LocalStackError(Exception):
    pass


def kebab(logical_id):
    return re.sub(r"(?<!^)(?=[A-Z])", "-", logical_id).lower()


def attribute_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


class LocalStack:
    def __init__(self, template, stack, session_args):
        self.template = template
        self.stack = stack
        self.region = session_args["region_name"]
        self.dynamodb = boto3.client("dynamodb", **session_args)
        self.s3 = boto3.client("s3", **session_args)
        self.sqs = boto3.client("sqs", **session_args)
        # logical id -> {None: Ref value, "Arn": ..., ...}
        self.created = {}
        self.resolve = cfn.Resolver(
            template, {"AWS::StackName": stack, "AWS::Region": self.region}, self._value
        )

    def _value(self, logical_id, attribute):
        try:
            return self.created[logical_id][attribute]
        except KeyError:
            raise LocalStackError(
                f"{logical_id}.{attribute or 'Ref'} is not available locally (not created yet, or not a local resource)"
            ) from None

    # ---------------------------------------------------------------- DynamoDB
    def create_table(self, logical_id, properties):
        props = self.resolve(properties)
        name = f"{self.stack}-{kebab(logical_id)}"
        wanted = {
            "AttributeDefinitions": props["AttributeDefinitions"],
            "KeySchema": props["KeySchema"],
            "BillingMode": props["BillingMode"],
        }
        if props.get("GlobalSecondaryIndexes"):
            wanted["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
        try:
            existing = self.dynamodb.describe_table(TableName=name)["Table"]
        except ClientError as err:
            if err.response["Error"]["Code"] != "ResourceNotFoundException":
                raise
            existing = self.dynamodb.create_table(TableName=name, **wanted)["TableDescription"]
            print(f"created table {name}", file=sys.stderr)
        else:
            self._compare_table(name, existing, wanted)
            print(f"table {name} exists", file=sys.stderr)
        pitr = props.get("PointInTimeRecoverySpecification", {}).get("PointInTimeRecoveryEnabled")
        if pitr:
            self.dynamodb.update_continuous_backups(
                TableName=name,
                PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True},
            )
        self.created[logical_id] = {None: name, "Arn": existing["TableArn"]}

    @staticmethod
    def _compare_table(name, existing, wanted):
        def shape(indexes):
            return sorted(
                (i["IndexName"], json.dumps(i["KeySchema"]), json.dumps(i["Projection"], sort_keys=True))
                for i in indexes or []
            )

        if existing["KeySchema"] != wanted["KeySchema"] or shape(
            existing.get("GlobalSecondaryIndexes")
        ) != shape(wanted.get("GlobalSecondaryIndexes")):
            raise LocalStackError(
                f"table {name} exists with other keys or indexes than the template; delete it and run again"
            )

    # ---------------------------------------------------------------- S3
    def create_bucket(self, logical_id, properties):
        unknown = set(properties) - BUCKET_PROPERTIES
        if unknown:
            raise LocalStackError(f"{logical_id}: bucket properties not applied locally: {sorted(unknown)}")
        props = self.resolve(properties)
        name = f"{self.stack}-{kebab(logical_id)}"
        create = {"Bucket": name}
        if self.region != "us-east-1":
            create["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        try:
            self.s3.head_bucket(Bucket=name)
            print(f"bucket {name} exists", file=sys.stderr)
        except ClientError as err:
            if err.response["Error"]["Code"] not in ("404", "NoSuchBucket", "NotFound"):
                raise
            self.s3.create_bucket(**create)
            print(f"created bucket {name}", file=sys.stderr)
        if "BucketEncryption" in props:
            # CloudFormation's ServerSideEncryptionByDefault is the API's ApplyServerSideEncryptionByDefault.
            rules = [
                {
                    ("ApplyServerSideEncryptionByDefault" if key == "ServerSideEncryptionByDefault" else key): value
                    for key, value in rule.items()
                }
                for rule in props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
            ]
            self.s3.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={"Rules": rules})
        if "PublicAccessBlockConfiguration" in props:
            self.s3.put_public_access_block(
                Bucket=name, PublicAccessBlockConfiguration=props["PublicAccessBlockConfiguration"]
            )
        if "OwnershipControls" in props:
            self.s3.put_bucket_ownership_controls(Bucket=name, OwnershipControls=props["OwnershipControls"])
        if "LifecycleConfiguration" in props:
            rules = [self._lifecycle_rule(logical_id, r) for r in props["LifecycleConfiguration"]["Rules"]]
            self.s3.put_bucket_lifecycle_configuration(
                Bucket=name, LifecycleConfiguration={"Rules": rules}
            )
        if "NotificationConfiguration" in props:
            self.s3.put_bucket_notification_configuration(
                Bucket=name, NotificationConfiguration=self._notifications(logical_id, props["NotificationConfiguration"])
            )
        self.created[logical_id] = {None: name, "Arn": f"arn:aws:s3:::{name}"}

    @staticmethod
    def _notifications(logical_id, config):
        """A bucket's NotificationConfiguration: only the EventBridge switch is applied locally."""
        unknown = set(config) - {"EventBridgeConfiguration"}
        if unknown:
            raise LocalStackError(f"{logical_id}: notification properties not applied locally: {sorted(unknown)}")
        enabled = config["EventBridgeConfiguration"].get("EventBridgeEnabled") in (True, "true")
        return {"EventBridgeConfiguration": {}} if enabled else {}

    @staticmethod
    def _lifecycle_rule(logical_id, rule):
        unknown = set(rule) - LIFECYCLE_RULE_KEYS
        if unknown:
            raise LocalStackError(f"{logical_id}: lifecycle rule keys not applied locally: {sorted(unknown)}")
        converted = {"Status": rule["Status"], "Filter": {"Prefix": rule.get("Prefix", "")}}
        if "Id" in rule:
            converted["ID"] = rule["Id"]
        if "AbortIncompleteMultipartUpload" in rule:
            converted["AbortIncompleteMultipartUpload"] = rule["AbortIncompleteMultipartUpload"]
        if "ExpirationInDays" in rule:
            converted["Expiration"] = {"Days": rule["ExpirationInDays"]}
        return converted

    # ---------------------------------------------------------------- SQS
    def create_queue(self, logical_id, properties):
        unknown = set(properties) - SQS_ATTRIBUTES
        if unknown:
            raise LocalStackError(f"{logical_id}: queue properties not applied locally: {sorted(unknown)}")
        props = self.resolve(properties)
        fifo = props.get("FifoQueue") is True
        name = f"{self.stack}-{kebab(logical_id)}" + (".fifo" if fifo else "")
        attributes = {key: attribute_text(value) for key, value in props.items()}
        try:
            url = self.sqs.get_queue_url(QueueName=name)["QueueUrl"]
        except ClientError as err:
            if err.response["Error"]["Code"] not in ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"):
                raise
            url = self.sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
            print(f"created queue {name}", file=sys.stderr)
        else:
            # FifoQueue cannot change after creation; the name (.fifo) already fixes it.
            attributes.pop("FifoQueue", None)
            self.sqs.set_queue_attributes(QueueUrl=url, Attributes=attributes)
            print(f"queue {name} exists", file=sys.stderr)
        arn = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self.created[logical_id] = {None: url, "Arn": arn, "QueueName": name}

    def create_all(self):
        for logical_id, resource in cfn.resources_of_type(self.template, "AWS::DynamoDB::Table").items():
            self.create_table(logical_id, resource.get("Properties", {}))
        for logical_id, resource in cfn.resources_of_type(self.template, "AWS::S3::Bucket").items():
            self.create_bucket(logical_id, resource.get("Properties", {}))
        pending = dict(cfn.resources_of_type(self.template, "AWS::SQS::Queue"))
        # Dead-letter queues first: a source queue's RedrivePolicy needs their ARN.
        while pending:
            ready = [
                logical_id
                for logical_id, resource in pending.items()
                if not (referenced_resources(resource.get("Properties", {})) & set(pending))
            ]
            if not ready:
                raise LocalStackError(f"queues reference each other in a cycle: {sorted(pending)}")
            for logical_id in ready:
                self.create_queue(logical_id, pending.pop(logical_id).get("Properties", {}))

    def function_environment(self):
        """The union of all functions' environments, with local names and parameter defaults."""
        env = {}
        for logical_id, function in cfn.functions(self.template).items():
            for name, value in cfn.function_environment(self.template, function).items():
                resolved = str(self.resolve(value))
                if env.get(name, resolved) != resolved:
                    raise LocalStackError(f"{name} differs between functions ({logical_id})")
                env[name] = resolved
        return env


def referenced_resources(node):
    found = set()
    if isinstance(node, dict):
        if "Ref" in node:
            found.add(node["Ref"])
        if "Fn::GetAtt" in node:
            found.add(node["Fn::GetAtt"][0])
        for value in node.values():
            found |= referenced_resources(value)
    elif isinstance(node, list):
        for value in node:
            found |= referenced_resources(value)
    return found


def run(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", default=os.environ.get("TRAWL_LOCAL_STACK", DEFAULT_STACK),
                        help="prefix of the local resource names (default %(default)s)")
    parser.add_argument("--env-file", help="also write the environment to this file")
    args = parser.parse_args(argv)
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint:
        # Never fall through to real AWS.
        raise LocalStackError("AWS_ENDPOINT_URL is not set (e.g. http://127.0.0.1:5000 for moto_server)")
    session_args = {
        "endpoint_url": endpoint,
        "region_name": os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        "aws_access_key_id": os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
        "aws_secret_access_key": os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
    }
    stack = LocalStack(cfn.load(), args.stack, session_args)
    stack.create_all()
    env = stack.function_environment()
    # The functions, run locally (`cargo lambda watch --env-file ...`), talk to the same emulator,
    # with throwaway credentials so they never pick up real ones.
    env.update({
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": session_args["region_name"],
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    })
    lines = "".join(f"{name}={value}\n" for name, value in sorted(env.items()))
    if args.env_file:
        with open(args.env_file, "w", encoding="utf-8") as handle:
            handle.write(lines)
    sys.stdout.write(lines)
    return env


def main():
    try:
        run()
    except (LocalStackError, cfn.TemplateError, ClientError, BotoCoreError) as err:
        print(f"local_stack: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
