#!/usr/bin/env python3
"""Offline checks of infra/template.yaml against what the code expects.

Plain python3 + PyYAML. Each check returns the problems it found; the script prints one line per
failed check, runs every check a second time on a deliberately broken copy of the template (each
must then fail, so none of them passes vacuously) and ends with `N passed, M failed`.
"""

import copy
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cfn_template as cfn  # noqa: E402

SETTINGS_RS = cfn.REPO_ROOT / "shared" / "aws" / "src" / "settings.rs"
SWEEPER_EVENT = cfn.REPO_ROOT / "events" / "sweeper-schedule.json"
# The DynamoDB adapter's own copy of the index definition (used for tests and local tables).
SCHEMA_RS = cfn.REPO_ROOT / "shared" / "aws" / "src" / "dynamodb" / "schema.rs"
STACK_RS = cfn.REPO_ROOT / "shared" / "aws" / "src" / "stack.rs"
# The cost model's crawler (`LAMBDA`): priced as the template deploys it.
COST_RS = cfn.REPO_ROOT / "bench" / "src" / "cost.rs"
DASHBOARD_JSON = cfn.INFRA_DIR / "dashboard.json"
# What the functions write (kept equal to the code by a unit test in shared/lambda/src/metrics.rs)
# and the EMF structure CloudWatch requires of it.
EMF_SAMPLES = cfn.INFRA_DIR / "metrics" / "emf-samples.jsonl"
EMF_SCHEMA = cfn.INFRA_DIR / "metrics" / "emf-schema.json"
SEARCH = re.compile(r"SEARCH\('\{(\w+),([\w,]+)\} MetricName=\"(\w+)\"'")

FUNCTION_NAMES = {"seeder", "crawler", "sweeper", "deliverer"}
# Read by the Lambda runtime's logging setup, not through settings.rs.
ENV_OUTSIDE_SETTINGS = {"RUST_LOG"}
# Read by the CLI only (`trawl --stack`): no function gets it.
ENV_CLI_ONLY = {"TRAWL_STACK"}

# The indexes exactly as the DynamoDB adapter queries them, in the template's order.
STATUS_INDEX = {
    "IndexName": "status-index",
    "KeySchema": [("gsi_pk", "HASH"), ("updated", "RANGE")],
    "NonKeyAttributes": [
        "crawl_id", "task_id", "url", "status", "depth",
        "retries", "lease_until", "next_attempt", "next_fetch", "enqueued",
    ],
}
# A host's tasks by due time (the host turn's work); the same summary as the status index, so
# it projects `updated` too (the status index's key).
HOST_INDEX = {
    "IndexName": "host-index",
    "KeySchema": [("hk", "HASH"), ("due", "RANGE")],
    "NonKeyAttributes": STATUS_INDEX["NonKeyAttributes"] + ["updated"],
}
# One lane's tasks of a host by due time (a turn's work in a crawl with lanes); the host
# index's range key and summary.
LANE_INDEX = {
    "IndexName": "lane-index",
    "KeySchema": [("lk", "HASH"), ("due", "RANGE")],
    "NonKeyAttributes": HOST_INDEX["NonKeyAttributes"],
}
# A host's roster (host passes): keys only, written once when a task is created.
ROSTER_INDEX = {
    "IndexName": "roster-index",
    "KeySchema": [("rk", "HASH"), ("rpos", "RANGE")],
    "NonKeyAttributes": None,
}
INDEXES = [STATUS_INDEX, HOST_INDEX, LANE_INDEX, ROSTER_INDEX]
ATTRIBUTE_TYPES = {
    "pk": "S", "gsi_pk": "S", "updated": "N", "hk": "S", "due": "N", "lk": "S",
    "rk": "S", "rpos": "N",
}

# The AWS actions each function's code uses; its role may grant these and nothing else.
ALLOWED_ACTIONS = {
    "seeder": {
        "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:GetItem", "dynamodb:Query",
        "sqs:SendMessage", "s3:GetObject", "s3:PutObject",
        "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes",
    },
    "crawler": {
        "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query",
        "s3:PutObject", "s3:GetObject", "s3:DeleteObject",
        "sqs:SendMessage", "sqs:ReceiveMessage", "sqs:DeleteMessage",
        "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes",
        "ssm:GetParameter",
    },
    "sweeper": {
        "dynamodb:Query", "dynamodb:UpdateItem", "dynamodb:GetItem", "dynamodb:PutItem",
        "sqs:SendMessage", "sqs:GetQueueAttributes",
    },
    "deliverer": {
        "dynamodb:Query", "dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
        "s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket",
        "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts",
        "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:SendMessage",
    },
}
# The crawler's event sources: the crawl queue and the priority crawl queue (the turns of hosts with
# priority work), each with the parameter capping its consumers.
CRAWLER_QUEUES = {"CrawlQueue": "MaxConcurrency", "PriorityCrawlQueue": "PriorityMaxConcurrency"}
LOG_ACTIONS = {"logs:CreateLogStream", "logs:PutLogEvents"}
DATA_SERVICES = ("dynamodb:", "s3:", "sqs:", "ssm:")


# ------------------------------------------------------------------ helpers

def as_list(value):
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def ref_target(value):
    """The logical id a `Ref` / `GetAtt` points at, else None."""
    if isinstance(value, dict):
        if "Ref" in value:
            return value["Ref"]
        if "Fn::GetAtt" in value:
            return value["Fn::GetAtt"][0]
    return None


def resource_alternatives(value):
    """Each resource a statement may end up with: both branches of an `!If`, each list item."""
    for item in as_list(value):
        if isinstance(item, dict) and "Fn::If" in item:
            _, when_true, when_false = item["Fn::If"]
            yield from resource_alternatives(when_true)
            yield from resource_alternatives(when_false)
        else:
            yield item


def function_by_code(template):
    """{package name: (logical id, resource)} from each function's CodeUri."""
    found = {}
    for logical, function in cfn.functions(template).items():
        code_uri = str(function.get("Properties", {}).get("CodeUri", ""))
        found[code_uri.rstrip("/").rsplit("/", 1)[-1]] = (logical, function)
    return found


def role_statements(template, function):
    role_id = ref_target(function.get("Properties", {}).get("Role"))
    role = template["Resources"].get(role_id, {}) if role_id else {}
    for policy in role.get("Properties", {}).get("Policies", []):
        yield from as_list(policy.get("PolicyDocument", {}).get("Statement"))


def sqs_events(template):
    """(function logical id, function, event properties) for every SQS event source."""
    for logical, function in cfn.functions(template).items():
        for event in function.get("Properties", {}).get("Events", {}).values():
            if event.get("Type") == "SQS":
                yield logical, function, event.get("Properties", {})


def dead_letter_queues(template):
    dlqs = {}
    for logical, queue in cfn.resources_of_type(template, "AWS::SQS::Queue").items():
        redrive = queue.get("Properties", {}).get("RedrivePolicy")
        if redrive:
            dlqs[ref_target(redrive.get("deadLetterTargetArn"))] = logical
    return dlqs


def settings_env_names():
    text = SETTINGS_RS.read_text(encoding="utf-8")
    return set(re.findall(r'pub const ENV_\w+\s*:\s*&str\s*=\s*"([^"]+)"', text))


def settings_read_by_function():
    """{package name: the variable names its settings struct reads}, from each
    `impl FromEnv for <Function>Settings { const VARIABLES ... = &[ENV_...]; }` in settings.rs."""
    text = SETTINGS_RS.read_text(encoding="utf-8")
    consts = dict(re.findall(r'pub const (ENV_\w+)\s*:\s*&str\s*=\s*"([^"]+)"', text))
    found = {}
    for reader, listed in re.findall(
        r"impl FromEnv for (\w+)Settings\s*\{\s*const VARIABLES[^=]*=\s*&\[([^\]]*)\]", text
    ):
        if reader.lower() in FUNCTION_NAMES:
            found[reader.lower()] = {consts.get(c, c) for c in re.findall(r"ENV_\w+", listed)}
    return found


# ------------------------------------------------------------------ checks

def check_no_wildcard_data_resources(template):
    problems = []
    for name, (logical, function) in function_by_code(template).items():
        props = function.get("Properties", {})
        # SAM-generated roles (Policies / no Role) get managed policies scoped to every queue.
        if "Policies" in props or ref_target(props.get("Role")) is None:
            problems.append(f"{logical}: must use an explicit Role from this template, not SAM Policies")
        role = template["Resources"].get(ref_target(props.get("Role")), {})
        if role.get("Properties", {}).get("ManagedPolicyArns"):
            problems.append(f"{logical}: role attaches managed policies (their scope is not ours)")
        for statement in role_statements(template, function):
            actions = as_list(statement.get("Action"))
            if statement.get("Effect") != "Allow":
                continue
            data_actions = [a for a in actions if a.startswith(DATA_SERVICES)]
            for resource in resource_alternatives(statement.get("Resource")):
                if data_actions and (resource == "*" or not isinstance(resource, dict)):
                    problems.append(
                        f"{logical}: {data_actions} on {resource!r}; use a Ref/GetAtt/Sub of this stack's resources"
                    )
            extra = set(actions) - ALLOWED_ACTIONS.get(name, set()) - LOG_ACTIONS
            if extra:
                problems.append(f"{logical}: grants actions its code does not use: {sorted(extra)}")
    return problems


def check_report_batch_item_failures(template):
    problems = []
    events = list(sqs_events(template))
    crawler = function_by_code(template).get("crawler", (None,))[0]
    if crawler not in {logical for logical, _, _ in events}:
        problems.append("the crawler has no SQS event source")
    for logical, _, props in events:
        if "ReportBatchItemFailures" not in as_list(props.get("FunctionResponseTypes")):
            problems.append(f"{logical}: SQS event lacks FunctionResponseTypes: [ReportBatchItemFailures]")
        if logical == crawler:
            if ref_target(props.get("BatchSize")) != "BatchSize":
                problems.append(f"{logical}: BatchSize must come from the BatchSize parameter")
            # Each crawl queue's consumers are capped by a parameter of their own.
            wanted = CRAWLER_QUEUES.get(ref_target(props.get("Queue")))
            maximum = props.get("ScalingConfig", {}).get("MaximumConcurrency")
            if wanted is None or ref_target(maximum) != wanted:
                problems.append(
                    f"{logical}: its event on {ref_target(props.get('Queue'))} must be one of "
                    f"{sorted(CRAWLER_QUEUES)} with ScalingConfig.MaximumConcurrency !Ref its parameter"
                )
    return problems


def check_visibility_timeouts(template):
    problems = []
    resources = template["Resources"]
    for logical, function, props in sqs_events(template):
        queue_id = ref_target(props.get("Queue"))
        queue = resources.get(queue_id, {}).get("Properties", {})
        visibility = queue.get("VisibilityTimeout", 30)
        timeout = cfn.function_property(template, function, "Timeout") or 3
        names = cfn.referenced_parameters(template, [visibility, timeout])
        for params in cfn.parameter_assignments(template, names):
            resolve = cfn.Resolver(template, params)
            vis, tmo = int(resolve(visibility)), int(resolve(timeout))
            if vis < 6 * tmo:
                problems.append(
                    f"{queue_id}: visibility timeout {vis}s < 6 x {logical} timeout {tmo}s (parameters {dict(sorted((k, params[k]) for k in names))})"
                )
    return problems


def check_queues(template):
    problems = []
    queues = cfn.resources_of_type(template, "AWS::SQS::Queue")
    crawler_queues = [
        ref_target(props.get("Queue"))
        for logical, _, props in sqs_events(template)
        if logical == function_by_code(template).get("crawler", (None,))[0]
    ]
    if sorted(crawler_queues) != sorted(CRAWLER_QUEUES):
        problems.append(f"the crawler consumes {sorted(crawler_queues)}; it must consume {sorted(CRAWLER_QUEUES)}")
    for crawler_queue in crawler_queues:
        crawl = queues.get(crawler_queue, {}).get("Properties", {})
        # Host turns are delayed per message (DelaySeconds), which FIFO queues refuse.
        if crawler_queue not in queues or crawl.get("FifoQueue") or "ContentBasedDeduplication" in crawl:
            problems.append(f"{crawler_queue}: crawl queue must be a standard queue (no FifoQueue, no ContentBasedDeduplication)")
    # The priority queue is the crawl queue's twin: the same visibility, retention and dead letters.
    crawl, priority = (queues.get(q, {}).get("Properties", {}) for q in CRAWLER_QUEUES)
    for key in ("VisibilityTimeout", "MessageRetentionPeriod", "RedrivePolicy"):
        if crawl.get(key) != priority.get(key):
            problems.append(f"PriorityCrawlQueue: {key} {priority.get(key)!r} differs from the crawl queue's {crawl.get(key)!r}")
    dlqs = dead_letter_queues(template)
    for logical, queue in queues.items():
        props = queue.get("Properties", {})
        if logical in dlqs:
            source = queues[dlqs[logical]].get("Properties", {})
            if bool(props.get("FifoQueue")) != bool(source.get("FifoQueue")):
                problems.append(f"{logical}: a dead-letter queue must match its source queue's FIFO type")
            continue
        if int(props.get("MessageRetentionPeriod", 345600)) != 1209600:
            problems.append(f"{logical}: keep messages 14 days (SQS's default 4 loses waiting work)")
        redrive = props.get("RedrivePolicy")
        if not redrive:
            problems.append(f"{logical}: has no dead-letter queue")
        elif int(redrive.get("maxReceiveCount", 0)) <= 1:
            problems.append(f"{logical}: maxReceiveCount must be > 1")
    return problems


def check_bucket(template):
    problems = []
    buckets = cfn.resources_of_type(template, "AWS::S3::Bucket")
    policies = cfn.resources_of_type(template, "AWS::S3::BucketPolicy").values()
    if not buckets:
        problems.append("no S3 bucket")
    for logical, bucket in buckets.items():
        props = bucket.get("Properties", {})
        block = props.get("PublicAccessBlockConfiguration", {})
        for flag in ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"):
            if block.get(flag) is not True:
                problems.append(f"{logical}: public access not blocked ({flag} is not true)")
        if not props.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration"):
            problems.append(f"{logical}: no default encryption")
        rules = props.get("LifecycleConfiguration", {}).get("Rules", [])
        if not any(r.get("Status") == "Enabled" and r.get("AbortIncompleteMultipartUpload") for r in rules):
            problems.append(f"{logical}: no lifecycle rule aborting incomplete multipart uploads")
        eventbridge = props.get("NotificationConfiguration", {}).get("EventBridgeConfiguration", {})
        if eventbridge.get("EventBridgeEnabled") is not True:
            problems.append(f"{logical}: S3 events not sent to EventBridge (no delivery signal)")
        tls_only = False
        for policy in policies:
            policy_props = policy.get("Properties", {})
            if ref_target(policy_props.get("Bucket")) != logical:
                continue
            for statement in as_list(policy_props.get("PolicyDocument", {}).get("Statement")):
                secure = statement.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport")
                if statement.get("Effect") == "Deny" and str(secure).lower() == "false":
                    tls_only = True
        if not tls_only:
            problems.append(f"{logical}: no bucket policy denying requests without TLS")
    return problems


def check_functions(template):
    problems = []
    by_code = function_by_code(template)
    if set(by_code) != FUNCTION_NAMES:
        problems.append(f"functions found for packages {sorted(by_code)}, expected {sorted(FUNCTION_NAMES)}")
    log_groups = cfn.resources_of_type(template, "AWS::Logs::LogGroup")
    for name, (logical, function) in by_code.items():
        get = lambda prop: cfn.function_property(template, function, prop)  # noqa: E731
        if get("Architectures") != ["arm64"]:
            problems.append(f"{logical}: Architectures is {get('Architectures')!r}, expected ['arm64']")
        if get("Runtime") != "provided.al2023":
            problems.append(f"{logical}: Runtime is {get('Runtime')!r}, expected provided.al2023")
        if get("Handler") != "bootstrap":
            problems.append(f"{logical}: Handler is {get('Handler')!r}, expected bootstrap")
        if function.get("Metadata", {}).get("BuildMethod") != "rust-cargolambda":
            problems.append(f"{logical}: Metadata.BuildMethod must be rust-cargolambda")
        if get("CodeUri") != f"../functions/{name}":
            problems.append(f"{logical}: CodeUri {get('CodeUri')!r}, expected ../functions/{name}")
        logging = get("LoggingConfig") or {}
        if logging.get("LogFormat") != "JSON":
            problems.append(f"{logical}: LoggingConfig.LogFormat must be JSON")
        group = log_groups.get(ref_target(logging.get("LogGroup")))
        if group is None:
            problems.append(f"{logical}: LoggingConfig.LogGroup must reference a log group of this template")
        elif "RetentionInDays" not in group.get("Properties", {}):
            problems.append(f"{ref_target(logging.get('LogGroup'))}: no RetentionInDays")
    for name in ("crawler", "seeder"):
        function = by_code.get(name, (None, {}))[1]
        if function.get("Properties", {}).get("RecursiveLoop") != "Allow":
            problems.append(f"{name}: RecursiveLoop must be Allow (it feeds the queue that triggers it)")
    return problems


def check_environment(template):
    """Each function gets exactly the variables its settings struct reads (plus RUST_LOG)."""
    problems = []
    wanted = settings_env_names()
    read_by = settings_read_by_function()
    if not wanted:
        return [f"no `pub const ENV_*: &str` found in {SETTINGS_RS}"]
    if set(read_by) != FUNCTION_NAMES:
        return [f"`impl FromEnv for <Function>Settings` found for {sorted(read_by)} in {SETTINGS_RS}"]
    used = set()
    for name, (logical, function) in function_by_code(template).items():
        env = cfn.function_environment(template, function)
        used |= set(env)
        for var, value in env.items():
            if not (isinstance(value, dict) and set(value) & {"Ref", "Fn::GetAtt"}):
                problems.append(f"{logical}: {var} must be set with !Ref or !GetAtt, not {value!r}")
        given = set(env) - ENV_OUTSIDE_SETTINGS
        unread = given - read_by.get(name, set())
        missing = read_by.get(name, set()) - given
        if unread:
            problems.append(f"{logical}: sets variables {name} does not read: {sorted(unread)}")
        if missing:
            problems.append(f"{logical}: lacks variables {name} reads: {sorted(missing)}")
    unset = wanted - used - ENV_CLI_ONLY
    if unset:
        problems.append(f"settings.rs names no function gets: {sorted(unset)}")
    return problems


def check_table(template):
    problems = []
    tables = cfn.resources_of_type(template, "AWS::DynamoDB::Table")
    if len(tables) != 1:
        return [f"expected one DynamoDB table, found {len(tables)}"]
    (logical, table), = tables.items()
    props = table.get("Properties", {})
    if props.get("BillingMode") != "PAY_PER_REQUEST":
        problems.append(f"{logical}: BillingMode must be PAY_PER_REQUEST")
    if props.get("PointInTimeRecoverySpecification", {}).get("PointInTimeRecoveryEnabled") is not True:
        problems.append(f"{logical}: point-in-time recovery is off")
    keys = [(k["AttributeName"], k["KeyType"]) for k in props.get("KeySchema", [])]
    if keys != [("pk", "HASH")]:
        problems.append(f"{logical}: key schema {keys}, expected [('pk', 'HASH')]")
    types = {a["AttributeName"]: a["AttributeType"] for a in props.get("AttributeDefinitions", [])}
    if types != ATTRIBUTE_TYPES:
        problems.append(f"{logical}: attribute definitions {types}, expected {ATTRIBUTE_TYPES}")
    indexes = props.get("GlobalSecondaryIndexes", [])
    names = [i.get("IndexName") for i in indexes]
    if names != [i["IndexName"] for i in INDEXES]:
        problems.append(f"{logical}: indexes {names}, expected {[i['IndexName'] for i in INDEXES]}")
    for index, wanted in zip(indexes, INDEXES):
        name = wanted["IndexName"]
        index_keys = [(k["AttributeName"], k["KeyType"]) for k in index.get("KeySchema", [])]
        if index_keys != wanted["KeySchema"]:
            problems.append(f"{logical}: {name} keys {index_keys}, expected {wanted['KeySchema']}")
        projection = index.get("Projection", {})
        kind = "KEYS_ONLY" if wanted["NonKeyAttributes"] is None else "INCLUDE"
        if projection.get("ProjectionType") != kind:
            problems.append(f"{logical}: {name} projection must be {kind}")
        if projection.get("NonKeyAttributes") != wanted["NonKeyAttributes"]:
            problems.append(
                f"{logical}: {name} attributes {projection.get('NonKeyAttributes')}, expected {wanted['NonKeyAttributes']}"
            )
    return problems


def check_adapter_schema(template):
    """The adapter's index constants (STATUS_INDEX / PROJECTED, HOST_INDEX and LANE_INDEX /
    HOST_PROJECTED) and
    the attributes its create_table defines equal the template's."""
    text = SCHEMA_RS.read_text(encoding="utf-8")
    (table,) = cfn.resources_of_type(template, "AWS::DynamoDB::Table").values()
    indexes = {i["IndexName"]: i for i in table["Properties"]["GlobalSecondaryIndexes"]}
    problems = []
    pairs = (
        ("STATUS_INDEX", "PROJECTED"),
        ("HOST_INDEX", "HOST_PROJECTED"),
        ("LANE_INDEX", "HOST_PROJECTED"),
    )
    for name_const, projected_const in pairs:
        name = re.search(rf'pub const {name_const}\s*:\s*&str\s*=\s*"([^"]+)"', text)
        projected = re.search(
            rf"pub const {projected_const}\s*:\s*\[&str;\s*\d+\]\s*=\s*\[([^\]]*)\]", text
        )
        if not (name and projected):
            problems.append(f"{SCHEMA_RS}: {name_const} or {projected_const} not found")
            continue
        index = indexes.get(name.group(1))
        if index is None:
            problems.append(f"schema.rs {name_const} {name.group(1)!r} is not an index of the template")
            continue
        attributes = re.findall(r'"([^"]+)"', projected.group(1))
        if attributes != index["Projection"]["NonKeyAttributes"]:
            problems.append(
                f"schema.rs {projected_const} {attributes} != template {index['Projection']['NonKeyAttributes']}"
            )
        for key in index["KeySchema"]:
            if f'"{key["AttributeName"]}"' not in text:
                problems.append(f"schema.rs does not name the {name.group(1)} key {key['AttributeName']!r}")
    for attribute in table["Properties"]["AttributeDefinitions"]:
        wanted = {"S": "ScalarAttributeType::S", "N": "ScalarAttributeType::N"}[attribute["AttributeType"]]
        if f'attr("{attribute["AttributeName"]}", {wanted})' not in text:
            problems.append(f"schema.rs does not define {attribute['AttributeName']!r} as {wanted}")
    roster = re.search(r'pub const ROSTER_INDEX\s*:\s*&str\s*=\s*"([^"]+)"', text)
    if roster is None or roster.group(1) not in indexes:
        problems.append("schema.rs ROSTER_INDEX is not an index of the template")
    elif "projection: Projected::KeysOnly" not in text:
        problems.append("schema.rs does not create the roster index keys only")
    if len(indexes) != 4:
        problems.append(f"the template has {len(indexes)} indexes; schema.rs creates 4")
    return problems


def check_stack_queues(template):
    """`create_stack` (stack.rs: trawl setup, the tests, the bench) makes the template's queues:
    two queues, each with a dead-letter queue, its retention and maxReceiveCount."""
    text = STACK_RS.read_text(encoding="utf-8")
    problems = []
    constants = {}
    for name in ("MESSAGE_RETENTION_SECONDS", "MAX_RECEIVE_COUNT"):
        found = re.search(rf"pub const {name}\s*:\s*u32\s*=\s*([0-9_]+)\s*;", text)
        if found is None:
            problems.append(f"{STACK_RS}: {name} not found")
        else:
            constants[name] = int(found.group(1).replace("_", ""))
    if problems:
        return problems
    queues = cfn.resources_of_type(template, "AWS::SQS::Queue")
    dlqs = dead_letter_queues(template)
    sources = [logical for logical in queues if logical not in dlqs]
    if len(sources) != 4 or len(dlqs) != 3:
        problems.append(
            f"the template has queues {sorted(sources)} with dead-letter queues {sorted(dlqs)}; "
            "stack.rs makes four queues (the crawl queues share theirs) and three dead-letter queues"
        )
    for logical, queue in queues.items():
        props = queue.get("Properties", {})
        retention = int(props.get("MessageRetentionPeriod", 345600))
        if retention != constants["MESSAGE_RETENTION_SECONDS"]:
            problems.append(
                f"{logical}: MessageRetentionPeriod {retention} != stack.rs "
                f"MESSAGE_RETENTION_SECONDS {constants['MESSAGE_RETENTION_SECONDS']}"
            )
        redrive = props.get("RedrivePolicy")
        if redrive and int(redrive.get("maxReceiveCount", 0)) != constants["MAX_RECEIVE_COUNT"]:
            problems.append(
                f"{logical}: maxReceiveCount {redrive.get('maxReceiveCount')} != stack.rs "
                f"MAX_RECEIVE_COUNT {constants['MAX_RECEIVE_COUNT']}"
            )
    return problems


def check_outputs(template):
    """`trawl --stack` reads the variables from the outputs stack.rs lists (OUTPUT_VARIABLES):
    each must exist, and give what the template gives the functions under that variable."""
    text = STACK_RS.read_text(encoding="utf-8")
    consts = dict(re.findall(r'pub const (ENV_\w+)\s*:\s*&str\s*=\s*"([^"]+)"',
                             SETTINGS_RS.read_text(encoding="utf-8")))
    block = re.search(r"pub const OUTPUT_VARIABLES[^=]*=\s*\[(.*?)\];", text, re.S)
    if block is None:
        return [f"{STACK_RS}: OUTPUT_VARIABLES not found"]
    pairs = re.findall(r'\("(\w+)",\s*(ENV_\w+)\)', block.group(1))
    if not pairs:
        return [f"{STACK_RS}: OUTPUT_VARIABLES lists nothing"]
    given = {}
    for _, function in function_by_code(template).values():
        for var, value in cfn.function_environment(template, function).items():
            given[var] = value
    problems = []
    outputs = template.get("Outputs", {})
    for output, const in pairs:
        variable = consts.get(const, const)
        if output not in outputs:
            problems.append(f"no output {output} (stack.rs reads {variable} from it)")
        elif variable in given and outputs[output].get("Value") != given[variable]:
            problems.append(
                f"output {output} is {outputs[output].get('Value')!r}; the functions get "
                f"{variable} = {given[variable]!r}"
            )
    return problems


def emitted_metrics():
    """{(metric name, dimensions)} of the sample EMF lines, each line checked against the EMF
    schema; raises ValueError on a line that does not conform."""
    import jsonschema

    schema = json.loads(EMF_SCHEMA.read_text(encoding="utf-8"))
    emitted = set()
    for line in EMF_SAMPLES.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        jsonschema.validate(record, schema)
        for directive in record["_aws"]["CloudWatchMetrics"]:
            for dimensions in directive["Dimensions"]:
                missing = [d for d in dimensions if not isinstance(record.get(d), str)]
                if missing:
                    raise ValueError(f"EMF line without dimension values {missing}: {line}")
                for metric in directive["Metrics"]:
                    value = record.get(metric["Name"])
                    values = value if isinstance(value, list) else [value]
                    if not values or len(values) > 100 or not all(isinstance(v, (int, float)) for v in values):
                        raise ValueError(f"EMF line without a value for {metric['Name']}: {line}")
                    emitted.add((directive["Namespace"], metric["Name"], tuple(dimensions)))
    return emitted


def dashboard_body(template):
    dashboards = cfn.resources_of_type(template, "AWS::CloudWatch::Dashboard")
    if len(dashboards) != 1:
        raise ValueError(f"expected one dashboard, found {len(dashboards)}")
    body = next(iter(dashboards.values()))["Properties"]["DashboardBody"]
    return json.loads(body["Fn::Sub"] if isinstance(body, dict) else body)


def dashboard_metrics(body):
    """{(namespace, metric, dimensions)} of SEARCH expressions, and [metric array] of the rest."""
    searched, listed = set(), []
    for widget in body.get("widgets", []):
        for metric in widget.get("properties", {}).get("metrics", []):
            for item in metric:
                if isinstance(item, dict) and "expression" in item:
                    for namespace, dims, name in SEARCH.findall(item["expression"]):
                        searched.add((namespace, name, tuple(dims.split(","))))
            if metric and isinstance(metric[0], str):
                listed.append(metric)
    return searched, listed


def check_dashboard(template):
    """The dashboard shows every metric the functions emit, by the dimensions they emit it
    with, and nothing else of namespace trawl; every queue's depth and age; each function's
    duration, throttles and concurrency; the table's throttles. Its body is infra/dashboard.json."""
    body = dashboard_body(template)
    problems = []
    if body != json.loads(DASHBOARD_JSON.read_text(encoding="utf-8")):
        problems.append("the template's DashboardBody differs from infra/dashboard.json")
    emitted = emitted_metrics()
    searched, listed = dashboard_metrics(body)
    for namespace, name, dims in sorted(searched - emitted):
        problems.append(f"dashboard shows {namespace}/{name} by {dims}, which no function emits")
    shown = {name for _, name, _ in searched}
    for _, name, _ in sorted(emitted):
        if name not in shown:
            problems.append(f"the functions emit {name}, which the dashboard does not show")
    refs = {(m[1], m[3]) for m in listed if len(m) >= 4}
    for logical in cfn.resources_of_type(template, "AWS::SQS::Queue"):
        for metric in ("ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage"):
            if (metric, "${%s.QueueName}" % logical) not in refs:
                problems.append(f"dashboard lacks {metric} of {logical}")
    for logical, _ in function_by_code(template).values():
        for metric in ("Duration", "Throttles", "ConcurrentExecutions"):
            if (metric, "${%s}" % logical) not in refs:
                problems.append(f"dashboard lacks {metric} of {logical}")
    for metric in ("ReadThrottleEvents", "WriteThrottleEvents"):
        if (metric, "${Table}") not in refs:
            problems.append(f"dashboard lacks the table's {metric}")
    return problems


def check_sweeper_schedule(template):
    problems = []
    logical, sweeper = function_by_code(template).get("sweeper", (None, {}))
    schedules = [
        event.get("Properties", {})
        for event in sweeper.get("Properties", {}).get("Events", {}).values()
        if event.get("Type") == "ScheduleV2"
    ]
    if len(schedules) != 1:
        return [f"sweeper: expected one ScheduleV2 event, found {len(schedules)}"]
    schedule = schedules[0]
    if ref_target(schedule.get("ScheduleExpression")) != "SweeperRate":
        problems.append(f"{logical}: ScheduleExpression must be !Ref SweeperRate")
    expected = json.loads(SWEEPER_EVENT.read_text(encoding="utf-8"))
    try:
        actual = json.loads(schedule.get("Input", ""))
    except (TypeError, json.JSONDecodeError) as err:
        return problems + [f"{logical}: schedule Input is not JSON ({err})"]
    if actual != expected:
        problems.append(f"{logical}: schedule Input {actual} differs from {SWEEPER_EVENT.name} {expected}")
    timeout = cfn.Resolver(template)(cfn.function_property(template, sweeper, "Timeout") or 3)
    budget = actual.get("time_budget_ms", 0)
    if int(timeout) * 1000 <= budget:
        problems.append(f"{logical}: timeout {timeout}s does not exceed the input's time_budget_ms {budget}")
    return problems


def check_reseed_schedule(template):
    """The optional re-seed schedule: created only when both parameters are set, it sends the
    ReseedRequest parameter to the seeder, and its role may do nothing else."""
    resources = template["Resources"]
    schedule, role = resources.get("ReseedSchedule"), resources.get("ReseedScheduleRole")
    if schedule is None or role is None:
        return ["ReseedSchedule and ReseedScheduleRole must exist"]
    problems = []
    for logical, resource in (("ReseedSchedule", schedule), ("ReseedScheduleRole", role)):
        if resource.get("Condition") != "HasReseedSchedule":
            problems.append(f"{logical}: must carry Condition HasReseedSchedule")
    condition = json.dumps(template.get("Conditions", {}).get("HasReseedSchedule"))
    for parameter in ("ReseedRate", "ReseedRequest"):
        if parameter not in condition:
            problems.append(f"HasReseedSchedule does not test {parameter}")
        if template.get("Parameters", {}).get(parameter, {}).get("Default") != "":
            problems.append(f"{parameter}: must default to empty (no schedule)")
    props = schedule.get("Properties", {})
    target = props.get("Target", {})
    seeder = function_by_code(template)["seeder"][0]
    if ref_target(props.get("ScheduleExpression")) != "ReseedRate":
        problems.append("ReseedSchedule: ScheduleExpression must be !Ref ReseedRate")
    if ref_target(target.get("Input")) != "ReseedRequest":
        problems.append("ReseedSchedule: Input must be !Ref ReseedRequest")
    if ref_target(target.get("Arn")) != seeder:
        problems.append(f"ReseedSchedule: must target {seeder}")
    if ref_target(target.get("RoleArn")) != "ReseedScheduleRole":
        problems.append("ReseedSchedule: must run as ReseedScheduleRole")
    grants = [
        (action, ref_target(statement.get("Resource")))
        for policy in role.get("Properties", {}).get("Policies", [])
        for statement in as_list(policy.get("PolicyDocument", {}).get("Statement"))
        for action in as_list(statement.get("Action"))
    ]
    if grants != [("lambda:InvokeFunction", seeder)]:
        problems.append(f"ReseedScheduleRole: grants {grants}, expected only invoking {seeder}")
    return problems


def check_alarms(template):
    problems = []
    alarms = cfn.resources_of_type(template, "AWS::CloudWatch::Alarm").values()
    watched = set()
    for alarm in alarms:
        props = alarm.get("Properties", {})
        for dimension in props.get("Dimensions", []):
            watched.add((props.get("MetricName"), ref_target(dimension.get("Value"))))
        actions = props.get("AlarmActions")
        if not (isinstance(actions, dict) and actions.get("Fn::If", [None])[0] == "HasAlarmTopic"):
            problems.append(f"alarm on {props.get('MetricName')}: AlarmActions must depend on HasAlarmTopic")
    for dlq in dead_letter_queues(template):
        if ("ApproximateNumberOfMessagesVisible", dlq) not in watched:
            problems.append(f"{dlq}: no alarm on visible messages")
    crawler = function_by_code(template).get("crawler", (None,))[0]
    for metric in ("Errors", "Throttles"):
        if (metric, crawler) not in watched:
            problems.append(f"{crawler}: no {metric} alarm")
    return problems


def check_cost_model(template):
    """The bench prices the crawler as deployed: its memory size and a full batch of turns, all
    run at once; batches past 10 messages need a batching window."""
    problems = []
    source = COST_RS.read_text()
    model = {
        name: float(m.group(1))
        for name in ("memory_mb", "turns")
        if (m := re.search(rf"\b{name}: ([0-9.]+),", source))
    }
    crawler = _crawler(template)
    params = template["Parameters"]
    deployed = {"memory_mb": float(crawler["MemorySize"]), "turns": float(params["BatchSize"]["Default"])}
    for name, value in deployed.items():
        if model.get(name) != value:
            problems.append(f"bench/src/cost.rs LAMBDA.{name} is {model.get(name)}, the template deploys {value}")
    if params["BatchConcurrency"]["Default"] < params["BatchSize"]["Default"]:
        problems.append("BatchConcurrency's default is below BatchSize's: a batch's turns would wait for each other")
    if params["BatchSize"]["MaxValue"] > 10:
        for name in CRAWLER_QUEUES:
            window = crawler["Events"][name]["Properties"].get("MaximumBatchingWindowInSeconds", 0)
            if window < 1:
                problems.append(f"crawler event {name}: batches over 10 need MaximumBatchingWindowInSeconds >= 1")
    return problems


CHECKS = [
    ("no wildcard resources for DynamoDB/S3/SQS; only used actions", check_no_wildcard_data_resources),
    ("SQS events report batch item failures", check_report_batch_item_failures),
    ("visibility timeout >= 6 x function timeout", check_visibility_timeouts),
    ("queues: standard crawl queue, dead-letter queues", check_queues),
    ("bucket: public access blocked, encrypted, TLS only", check_bucket),
    ("functions: arm64, provided.al2023, rust-cargolambda", check_functions),
    ("each function's environment == what its settings.rs struct reads", check_environment),
    ("table, status-index, host-index and lane-index", check_table),
    ("indexes == the DynamoDB adapter's schema.rs", check_adapter_schema),
    ("queues == create_stack's (stack.rs)", check_stack_queues),
    ("outputs that --stack reads (stack.rs)", check_outputs),
    ("sweeper schedule input == events/sweeper-schedule.json", check_sweeper_schedule),
    ("optional re-seed schedule: conditional, invokes only the seeder", check_reseed_schedule),
    ("alarms", check_alarms),
    ("the cost model's crawler == the deployed one (memory, turns per batch)", check_cost_model),
    ("dashboard == the functions' EMF metrics (schema-checked), queues, Lambda, DynamoDB", check_dashboard),
]


# ------------------------------------------------------------------ broken copies

def _crawler(t):
    return function_by_code(t)["crawler"][1]["Properties"]


def _set_wildcard(t):
    statements = list(role_statements(t, function_by_code(t)["sweeper"][1]))
    statements[-1]["Resource"] = "*"


def _wildcard_seed_bucket(t):
    statements = list(role_statements(t, function_by_code(t)["seeder"][1]))
    statements[-1]["Resource"]["Fn::If"][1] = "*"


def _drop_batch_failures(t):
    _crawler(t)["Events"]["CrawlQueue"]["Properties"].pop("FunctionResponseTypes")


def _short_visibility(t):
    t["Mappings"]["CrawlQueueVisibility"]["900"]["Seconds"] = 900


def _fifo_crawl_queue(t):
    t["Resources"]["CrawlQueue"]["Properties"]["FifoQueue"] = True


def _priority_queue_unconsumed(t):
    del _crawler(t)["Events"]["PriorityCrawlQueue"]


def _priority_queue_short_visibility(t):
    t["Resources"]["PriorityCrawlQueue"]["Properties"]["VisibilityTimeout"] = 30


def _priority_queue_shared_cap(t):
    scaling = _crawler(t)["Events"]["PriorityCrawlQueue"]["Properties"]["ScalingConfig"]
    scaling["MaximumConcurrency"] = {"Ref": "MaxConcurrency"}


def _public_bucket(t):
    t["Resources"]["Bucket"]["Properties"]["PublicAccessBlockConfiguration"]["RestrictPublicBuckets"] = False


def _no_delivery_signal(t):
    del t["Resources"]["Bucket"]["Properties"]["NotificationConfiguration"]


def _bigger_crawler(t):
    _crawler(t)["MemorySize"] = 1024


def _no_batch_window(t):
    del _crawler(t)["Events"]["PriorityCrawlQueue"]["Properties"]["MaximumBatchingWindowInSeconds"]


def _x86(t):
    function_by_code(t)["deliverer"][1]["Properties"]["Architectures"] = ["x86_64"]


def _extra_env(t):
    function_by_code(t)["seeder"][1]["Properties"]["Environment"]["Variables"]["TRAWL_UNKNOWN"] = {"Ref": "Shards"}


def _missing_env(t):
    _crawler(t)["Environment"]["Variables"].pop("TRAWL_CONCURRENCY")


def _unread_env(t):
    function_by_code(t)["deliverer"][1]["Properties"]["Environment"]["Variables"]["TRAWL_QUEUE_URL"] = {
        "Ref": "CrawlQueue"
    }


def _global_env(t):
    t["Globals"]["Function"]["Environment"]["Variables"]["TRAWL_PER_HOST"] = {"Ref": "PerHost"}


def _gsi_attribute(t):
    t["Resources"]["Table"]["Properties"]["GlobalSecondaryIndexes"][0]["Projection"]["NonKeyAttributes"].pop()


def _host_index_key(t):
    t["Resources"]["Table"]["Properties"]["GlobalSecondaryIndexes"][1]["KeySchema"][1]["AttributeName"] = "updated"


def _host_index_unprojected(t):
    t["Resources"]["Table"]["Properties"]["GlobalSecondaryIndexes"][1]["Projection"]["NonKeyAttributes"].remove(
        "updated"
    )


def _dead_letter_receives(t):
    t["Resources"]["DeliveryQueue"]["Properties"]["RedrivePolicy"]["maxReceiveCount"] = 3


def _schedule_input(t):
    function_by_code(t)["sweeper"][1]["Properties"]["Events"]["Schedule"]["Properties"]["Input"] = '{"source": "x"}'


def _output_missing(t):
    del t["Outputs"]["SeedQueueUrl"]


def _output_elsewhere(t):
    t["Outputs"]["TableName"]["Value"] = {"Ref": "Bucket"}


def _dashboard_body(t, edit):
    dashboard = t["Resources"]["Dashboard"]["Properties"]
    body = json.loads(dashboard["DashboardBody"]["Fn::Sub"])
    edit(body)
    dashboard["DashboardBody"]["Fn::Sub"] = json.dumps(body)


def _dashboard_renamed_metric(t):
    def edit(body):
        metric = body["widgets"][0]["properties"]["metrics"][0][0]
        metric["expression"] = metric["expression"].replace("PagesFetched", "PagesFetchd")
    _dashboard_body(t, edit)


def _dashboard_no_seed_queue(t):
    def edit(body):
        for widget in body["widgets"]:
            metrics = widget["properties"]["metrics"]
            widget["properties"]["metrics"] = [m for m in metrics if "${SeedQueue.QueueName}" not in m]
    _dashboard_body(t, edit)


def _no_throttle_alarm(t):
    del t["Resources"]["CrawlerThrottlesAlarm"]


def _reseed_always(t):
    del t["Resources"]["ReseedSchedule"]["Condition"]


def _reseed_wider_role(t):
    statements = t["Resources"]["ReseedScheduleRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    statements.append({"Effect": "Allow", "Action": "lambda:InvokeFunction", "Resource": {"Fn::GetAtt": ["CrawlerFunction", "Arn"]}})


BROKEN = [
    ("a re-seed schedule without its condition", _reseed_always, check_reseed_schedule),
    ("a re-seed role that may invoke the crawler", _reseed_wider_role, check_reseed_schedule),
    ("a Resource: '*' on sqs:SendMessage", _set_wildcard, check_no_wildcard_data_resources),
    ("a Resource: '*' in one branch of an !If", _wildcard_seed_bucket, check_no_wildcard_data_resources),
    ("no ReportBatchItemFailures", _drop_batch_failures, check_report_batch_item_failures),
    ("visibility 900 s for a 900 s crawler", _short_visibility, check_visibility_timeouts),
    ("a FIFO crawl queue", _fifo_crawl_queue, check_queues),
    ("a priority crawl queue nothing consumes", _priority_queue_unconsumed, check_queues),
    ("a priority crawl queue unlike the crawl queue", _priority_queue_short_visibility, check_queues),
    ("a priority crawl queue capped by MaxConcurrency", _priority_queue_shared_cap, check_report_batch_item_failures),
    ("RestrictPublicBuckets false", _public_bucket, check_bucket),
    ("a bucket that sends no events to EventBridge", _no_delivery_signal, check_bucket),
    ("an x86_64 function", _x86, check_functions),
    ("a crawler of more memory than the cost model's", _bigger_crawler, check_cost_model),
    ("a batch of 50 turns without a batching window", _no_batch_window, check_cost_model),
    ("an env name settings.rs does not read", _extra_env, check_environment),
    ("a variable its function reads missing", _missing_env, check_environment),
    ("a variable the deliverer never reads", _unread_env, check_environment),
    ("a global variable not every function reads", _global_env, check_environment),
    ("a GSI attribute missing", _gsi_attribute, check_table),
    ("a host-index ranged by updated", _host_index_key, check_table),
    ("a host-index projection unlike schema.rs", _host_index_unprojected, check_adapter_schema),
    ("a maxReceiveCount unlike stack.rs", _dead_letter_receives, check_stack_queues),
    ("a schedule Input unlike the event file", _schedule_input, check_sweeper_schedule),
    ("no Throttles alarm", _no_throttle_alarm, check_alarms),
    ("no SeedQueueUrl output", _output_missing, check_outputs),
    ("a dashboard metric no function emits", _dashboard_renamed_metric, check_dashboard),
    ("a dashboard without the seed queue", _dashboard_no_seed_queue, check_dashboard),
    ("a TableName output naming the bucket", _output_elsewhere, check_outputs),
]


def main():
    template = cfn.load()
    passed = failed = 0
    for title, check in CHECKS:
        if check is check_adapter_schema and not SCHEMA_RS.exists():
            # Not counted either way: this branch predates the adapter.
            print(f"skip {title}: {SCHEMA_RS.relative_to(cfn.REPO_ROOT)} not present")
            continue
        try:
            problems = check(template)
        except (KeyError, TypeError, ValueError, cfn.TemplateError) as err:
            problems = [f"check crashed: {type(err).__name__}: {err}"]
        if problems:
            failed += 1
            for problem in problems:
                print(f"FAIL {title}: {problem}")
        else:
            passed += 1
            print(f"ok   {title}")
    for title, breaker, check in BROKEN:
        broken = copy.deepcopy(template)
        try:
            breaker(broken)
            caught = bool(check(broken))
        except (KeyError, TypeError, ValueError, IndexError, cfn.TemplateError) as err:
            print(f"FAIL broken copy ({title}) could not be made or checked: {type(err).__name__}: {err}")
            caught = None
        if caught:
            passed += 1
            print(f"ok   {check.__name__} rejects {title}")
        elif caught is False:
            failed += 1
            print(f"FAIL {check.__name__} accepted a template with {title}")
        else:
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
