#!/usr/bin/env python3
"""The CDK app (infra/cdk) against the SAM template (infra/template.yaml): the same stack.

Plain python3 + PyYAML. Reads the synthesised template (`make cdk-synth` writes
infra/cdk/cdk.out/Trawl.template.json) and the SAM template, expands the SAM resources the way the
SAM transform does (a function becomes an AWS::Lambda::Function plus its event source mappings,
schedules and their roles) and compares resource by resource: the CDK app gives its resources the
SAM template's logical ids. Intrinsic functions are compared in one normal form, so `!Sub
${Bucket.Arn}/*` and CDK's `Fn::Join` of the same parts are equal. Each check then runs on a
deliberately drifted copy of one side and must fail, and the script ends with `N passed, M failed`.

Usage: python3 infra/tests/test_cdk_matches_sam.py [path/to/cdk.out]
"""

import copy
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cfn_template as cfn  # noqa: E402

CDK_OUT = cfn.INFRA_DIR / "cdk" / "cdk.out"
SWEEPER_EVENT = cfn.REPO_ROOT / "events" / "sweeper-schedule.json"

# CDK's additions that have no SAM counterpart: its version metadata, and the bootstrap-version
# parameter and rule of its default synthesizer.
CDK_ONLY_TYPES = {"AWS::CDK::Metadata"}
CDK_ONLY_PARAMETERS = {"BootstrapVersion"}
# CDK attaches a role's grants as a separate AWS::IAM::Policy; they are compared as the role's.
POLICY_TYPE = "AWS::IAM::Policy"

PARAMETER_KEYS = ("Type", "Default", "AllowedValues", "AllowedPattern", "MinValue", "MaxValue")
QUEUE_KEYS = (
    "FifoQueue", "ContentBasedDeduplication", "VisibilityTimeout", "MessageRetentionPeriod",
    "SqsManagedSseEnabled", "RedrivePolicy",
)
QUEUE_DEFAULTS = {"FifoQueue": "false", "ContentBasedDeduplication": "false"}
FUNCTION_KEYS = (
    "Runtime", "Architectures", "Handler", "MemorySize", "Timeout", "Role", "LoggingConfig",
    "RecursiveLoop", "Description",
)
MAPPING_KEYS = (
    "EventSourceArn", "FunctionName", "BatchSize", "FunctionResponseTypes", "ScalingConfig",
    "MaximumBatchingWindowInSeconds", "Enabled",
)
ALARM_KEYS = (
    "Namespace", "MetricName", "Dimensions", "Statistic", "Period", "EvaluationPeriods",
    "Threshold", "ComparisonOperator", "TreatMissingData", "AlarmActions",
)
# Lambda's default for these when a template leaves them out.
FUNCTION_DEFAULTS = {"RecursiveLoop": "Terminate", "Architectures": ["x86_64"]}


# ------------------------------------------------------------------ normal form

def norm(node):
    """Intrinsics in one form: Ref/GetAtt/Sub/Join become `${...}` strings, scalars strings
    (CloudFormation reads 10 and "10" alike), If/FindInMap/Equals/Not stay structural."""
    if isinstance(node, list):
        return [norm(item) for item in node]
    if isinstance(node, bool):
        return "true" if node else "false"
    if isinstance(node, (int, float)):
        return str(int(node)) if float(node).is_integer() else str(node)
    if not isinstance(node, dict):
        return node
    if len(node) == 1:
        (key, arg), = node.items()
        if key == "Ref":
            return "${%s}" % arg
        if key == "Fn::GetAtt":
            parts = arg.split(".", 1) if isinstance(arg, str) else arg
            return "${%s.%s}" % tuple(parts)
        if key == "Fn::Sub":
            if isinstance(arg, list):
                text, variables = arg
                for name, value in variables.items():
                    text = text.replace("${%s}" % name, str(norm(value)))
                return text
            return arg
        if key == "Fn::Join":
            separator, parts = arg
            parts = norm(parts)
            if isinstance(parts, list) and all(isinstance(p, str) for p in parts):
                return separator.join(parts)
            return {"Join": [separator, parts]}
        if key.startswith("Fn::"):
            return {key[4:]: norm(arg)}
    return {key: norm(value) for key, value in node.items()}


def key(value):
    """A hashable, order-stable form of a normalised value."""
    return json.dumps(value, sort_keys=True)


def as_list(value):
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def props(resource):
    return resource.get("Properties", {})


def compare(label, sam_value, cdk_value):
    """[] when the two normalise equal, else one problem line."""
    if key(norm(sam_value)) == key(norm(cdk_value)):
        return []
    return [f"{label}: SAM {key(norm(sam_value))} != CDK {key(norm(cdk_value))}"]


def compare_removal(logical, sam_resource, cdk_resource):
    """Deletion and replacement policies (CloudFormation's default is Delete)."""
    problems = []
    for name in ("DeletionPolicy", "UpdateReplacePolicy"):
        problems += compare(
            f"{logical}.{name}", sam_resource.get(name, "Delete"), cdk_resource.get(name, "Delete"),
        )
    return problems


def compare_keys(label, sam_props, cdk_props, keys, defaults=None):
    defaults = defaults or {}
    problems = []
    for name in keys:
        sam_value = sam_props.get(name, defaults.get(name))
        cdk_value = cdk_props.get(name, defaults.get(name))
        problems += compare(f"{label}.{name}", sam_value, cdk_value)
    return problems


# ------------------------------------------------------------------ SAM expansion

def expand_sam(template):
    """The SAM template's resources as the transform emits them (the parts compared here).

    Functions merge Globals; each SQS event becomes `<Function><Event>` (an event source mapping),
    each ScheduleV2 event `<Function><Event>` (an AWS::Scheduler::Schedule) and, without a RoleArn,
    `<Function><Event>Role`; a function without Role gets `<Function>Role`. Any other event type is
    an error, so a new one cannot slip past this comparison.
    """
    out = copy.deepcopy(template)
    resources = {}
    globals_function = template.get("Globals", {}).get("Function", {})
    for logical, resource in template.get("Resources", {}).items():
        if resource.get("Type") != "AWS::Serverless::Function":
            resources[logical] = copy.deepcopy(resource)
            continue
        own = props(resource)
        function_props = {
            name: copy.deepcopy(value)
            for name, value in {**globals_function, **own}.items()
            if name not in ("Events", "CodeUri", "Environment")
        }
        function_props["Environment"] = {
            "Variables": cfn.function_environment(template, resource)
        }
        resources[logical] = {"Type": "AWS::Lambda::Function", "Properties": function_props}
        if "Role" not in own:
            resources[f"{logical}Role"] = {"Type": "AWS::IAM::Role", "Properties": {}}
        for event_name, event in own.get("Events", {}).items():
            event_props = event.get("Properties", {})
            event_id = f"{logical}{event_name}"
            if event["Type"] == "SQS":
                mapping = {
                    name: value for name, value in event_props.items() if name != "Queue"
                }
                mapping["EventSourceArn"] = event_props["Queue"]
                mapping["FunctionName"] = {"Ref": logical}
                resources[event_id] = {
                    "Type": "AWS::Lambda::EventSourceMapping", "Properties": mapping,
                }
            elif event["Type"] == "ScheduleV2":
                role_arn = event_props.get("RoleArn")
                target = {
                    "Arn": {"Fn::GetAtt": [logical, "Arn"]},
                    "RoleArn": role_arn or {"Fn::GetAtt": [f"{event_id}Role", "Arn"]},
                }
                for name in ("Input", "RetryPolicy", "DeadLetterConfig"):
                    if name in event_props:
                        target[name] = event_props[name]
                resources[event_id] = {
                    "Type": "AWS::Scheduler::Schedule",
                    "Properties": {
                        "ScheduleExpression": event_props["ScheduleExpression"],
                        "FlexibleTimeWindow": event_props.get("FlexibleTimeWindow", {"Mode": "OFF"}),
                        "Target": target,
                    },
                }
                if not role_arn:
                    resources[f"{event_id}Role"] = {
                        "Type": "AWS::IAM::Role",
                        "Properties": {
                            "AssumeRolePolicyDocument": {
                                "Version": "2012-10-17",
                                "Statement": [{
                                    "Effect": "Allow",
                                    "Principal": {"Service": "scheduler.amazonaws.com"},
                                    "Action": "sts:AssumeRole",
                                }],
                            },
                            "Policies": [{
                                "PolicyName": f"{event_id}LambdaPolicy",
                                "PolicyDocument": {"Statement": [{
                                    "Effect": "Allow",
                                    "Action": "lambda:InvokeFunction",
                                    "Resource": {"Fn::GetAtt": [logical, "Arn"]},
                                }]},
                            }],
                        },
                    }
            else:
                raise cfn.TemplateError(
                    f"{logical}: event type {event['Type']} is not expanded by this comparison"
                )
    out["Resources"] = resources
    out.pop("Transform", None)
    out.pop("Globals", None)
    return out


def translator_expansion(path=cfn.TEMPLATE_PATH):
    """The real SAM transform's resources (through cfn-lint, which runs it offline), or None when
    cfn-lint or its internal transform entry point is not available."""
    try:
        from cfnlint.decode import decode
        from cfnlint.template.transforms._sam import Transform
    except ImportError:
        return None
    template, _ = decode(str(path))
    transform = Transform(str(path), template, "us-east-1")
    transform.transform_template()
    return getattr(transform, "_template", {}).get("Resources")


def check_expansion_matches_translator(sam, _cdk, translated):
    """expand_sam emits what the SAM transform emits: the same resources and, for the generated
    functions, mappings and schedules, the same properties (bar code location, SAM's tag and a
    schedule name SAM derives from the logical id)."""
    ours = sam["Resources"]
    problems = only_in(
        "expanded resource",
        {(k, r["Type"]) for k, r in translated.items()},
        {(k, r["Type"]) for k, r in ours.items()},
    )
    generated = ("AWS::Lambda::Function", "AWS::Lambda::EventSourceMapping", "AWS::Scheduler::Schedule")
    for logical, resource in ours.items():
        if resource["Type"] not in generated or logical not in translated:
            continue
        theirs = {
            name: value for name, value in props(translated[logical]).items()
            if name not in ("Code", "Tags", "Name")
        }
        problems += compare(f"{logical} (translator)", theirs, props(resource))
    return problems


# ------------------------------------------------------------------ helpers

def compared_resources(template, cdk):
    """Resources without CDK's extra kinds (its attached role policies are compared as roles)."""
    skipped = CDK_ONLY_TYPES | ({POLICY_TYPE} if cdk else set())
    return {
        logical: resource
        for logical, resource in template.get("Resources", {}).items()
        if resource.get("Type") not in skipped
    }


def of_type(template, resource_type):
    return cfn.resources_of_type(template, resource_type)


def role_statements(template, role_id):
    """A role's statements: its inline policies and every AWS::IAM::Policy attached to it."""
    resources = template.get("Resources", {})
    for policy in props(resources.get(role_id, {})).get("Policies", []):
        yield from as_list(policy.get("PolicyDocument", {}).get("Statement"))
    for resource in resources.values():
        if resource.get("Type") != POLICY_TYPE:
            continue
        if {"Ref": role_id} in props(resource).get("Roles", []):
            yield from as_list(props(resource).get("PolicyDocument", {}).get("Statement"))


def permissions(template, role_id):
    """{(effect, action, normalised resource)} a role's statements grant."""
    granted = set()
    for statement in role_statements(template, role_id):
        for action in as_list(statement.get("Action")):
            for resource in as_list(statement.get("Resource")):
                granted.add((statement.get("Effect"), action, key(norm(resource))))
    return granted


def trust(role):
    """{(principal service, action)} a role's trust policy allows."""
    found = set()
    for statement in as_list(props(role).get("AssumeRolePolicyDocument", {}).get("Statement")):
        for service in as_list(statement.get("Principal", {}).get("Service")):
            for action in as_list(statement.get("Action")):
                found.add((service, action))
    return found


def only_in(label, sam_set, cdk_set):
    problems = []
    for item in sorted(sam_set - cdk_set, key=str):
        problems.append(f"{label}: only in SAM: {item}")
    for item in sorted(cdk_set - sam_set, key=str):
        problems.append(f"{label}: only in CDK: {item}")
    return problems


# ------------------------------------------------------------------ checks (sam, cdk) -> problems

def check_resource_types(sam, cdk):
    sam_types = Counter(r["Type"] for r in compared_resources(sam, False).values())
    cdk_types = Counter(r["Type"] for r in compared_resources(cdk, True).values())
    problems = []
    for resource_type in sorted(set(sam_types) | set(cdk_types)):
        if sam_types[resource_type] != cdk_types[resource_type]:
            problems.append(
                f"{resource_type}: SAM {sam_types[resource_type]}, CDK {cdk_types[resource_type]}"
            )
    return problems


def check_logical_ids(sam, cdk):
    sam_ids = {(k, r["Type"]) for k, r in compared_resources(sam, False).items()}
    cdk_ids = {(k, r["Type"]) for k, r in compared_resources(cdk, True).items()}
    return only_in("resource", sam_ids, cdk_ids)


def check_resource_conditions(sam, cdk):
    """A resource created only under a condition is so on both sides (the re-seed schedule)."""
    problems = []
    cdk_resources = compared_resources(cdk, True)
    for logical, resource in compared_resources(sam, False).items():
        other = cdk_resources.get(logical)
        if other is not None:
            problems += compare(f"{logical}.Condition", resource.get("Condition"), other.get("Condition"))
    return problems


def check_parameters(sam, cdk):
    sam_params = sam.get("Parameters", {})
    cdk_params = {
        name: spec for name, spec in cdk.get("Parameters", {}).items()
        if name not in CDK_ONLY_PARAMETERS
    }
    problems = only_in("parameter", set(sam_params), set(cdk_params))
    for name in sorted(set(sam_params) & set(cdk_params)):
        problems += compare_keys(name, sam_params[name], cdk_params[name], PARAMETER_KEYS)
    return problems


def check_conditions_and_mappings(sam, cdk):
    return (
        compare("Conditions", sam.get("Conditions", {}), cdk.get("Conditions", {}))
        + compare("Mappings", sam.get("Mappings", {}), cdk.get("Mappings", {}))
    )


def check_table(sam, cdk):
    problems = []
    for logical, table in of_type(sam, "AWS::DynamoDB::Table").items():
        other = cdk["Resources"].get(logical)
        if other is None:
            problems.append(f"{logical}: missing in CDK")
            continue
        sam_props, cdk_props = props(table), props(other)
        problems += compare_keys(
            logical, sam_props, cdk_props,
            ("KeySchema", "BillingMode", "PointInTimeRecoverySpecification"),
        )
        problems += only_in(
            f"{logical}.AttributeDefinitions",
            {key(norm(a)) for a in sam_props.get("AttributeDefinitions", [])},
            {key(norm(a)) for a in cdk_props.get("AttributeDefinitions", [])},
        )
        sam_indexes = {i["IndexName"]: i for i in sam_props.get("GlobalSecondaryIndexes", [])}
        cdk_indexes = {i["IndexName"]: i for i in cdk_props.get("GlobalSecondaryIndexes", [])}
        problems += only_in(f"{logical} index", set(sam_indexes), set(cdk_indexes))
        for name in sorted(set(sam_indexes) & set(cdk_indexes)):
            sam_index, cdk_index = sam_indexes[name], cdk_indexes[name]
            problems += compare(f"{name}.KeySchema", sam_index["KeySchema"], cdk_index["KeySchema"])
            sam_projection = dict(sam_index.get("Projection", {}))
            cdk_projection = dict(cdk_index.get("Projection", {}))
            # The projected attributes are a set; their order means nothing to DynamoDB.
            problems += only_in(
                f"{name}.NonKeyAttributes",
                set(sam_projection.pop("NonKeyAttributes", [])),
                set(cdk_projection.pop("NonKeyAttributes", [])),
            )
            problems += compare(f"{name}.Projection", sam_projection, cdk_projection)
        problems += compare_removal(logical, table, other)
    return problems


def check_bucket(sam, cdk):
    problems = []
    for logical, bucket in of_type(sam, "AWS::S3::Bucket").items():
        other = cdk["Resources"].get(logical)
        if other is None:
            problems.append(f"{logical}: missing in CDK")
            continue
        problems += compare_keys(
            logical, props(bucket), props(other),
            ("BucketEncryption", "PublicAccessBlockConfiguration", "OwnershipControls"),
        )
        sam_rules = {r.get("Id"): r for r in props(bucket).get("LifecycleConfiguration", {}).get("Rules", [])}
        cdk_rules = {r.get("Id"): r for r in props(other).get("LifecycleConfiguration", {}).get("Rules", [])}
        problems += only_in(f"{logical} lifecycle rule", set(sam_rules), set(cdk_rules))
        for rule_id in sorted(set(sam_rules) & set(cdk_rules), key=str):
            problems += compare(f"{logical} rule {rule_id}", sam_rules[rule_id], cdk_rules[rule_id])
        problems += compare_removal(logical, bucket, other)
    return problems


def tls_denials(template):
    """{(bucket, normalised resources)} that a bucket policy denies without TLS."""
    found = set()
    for policy in of_type(template, "AWS::S3::BucketPolicy").values():
        bucket = key(norm(props(policy).get("Bucket")))
        for statement in as_list(props(policy).get("PolicyDocument", {}).get("Statement")):
            condition = statement.get("Condition", {}).get("Bool", {})
            if (
                statement.get("Effect") == "Deny"
                and "s3:*" in as_list(statement.get("Action"))
                and norm(condition.get("aws:SecureTransport")) == "false"
            ):
                resources = sorted(key(norm(r)) for r in as_list(statement.get("Resource")))
                found.add((bucket, tuple(resources)))
    return found


def check_bucket_policy(sam, cdk):
    return only_in("TLS-only bucket policy", tls_denials(sam), tls_denials(cdk))


def check_queues(sam, cdk):
    problems = []
    for logical, queue in of_type(sam, "AWS::SQS::Queue").items():
        other = cdk["Resources"].get(logical)
        if other is None or other.get("Type") != "AWS::SQS::Queue":
            problems.append(f"{logical}: no such queue in CDK")
            continue
        problems += compare_keys(logical, props(queue), props(other), QUEUE_KEYS, QUEUE_DEFAULTS)
    return problems


def check_functions(sam, cdk):
    problems = []
    for logical, function in of_type(sam, "AWS::Lambda::Function").items():
        other = cdk["Resources"].get(logical)
        if other is None or other.get("Type") != "AWS::Lambda::Function":
            problems.append(f"{logical}: no such function in CDK")
            continue
        sam_props, cdk_props = props(function), props(other)
        problems += compare_keys(logical, sam_props, cdk_props, FUNCTION_KEYS, FUNCTION_DEFAULTS)
        sam_env = sam_props.get("Environment", {}).get("Variables", {})
        cdk_env = cdk_props.get("Environment", {}).get("Variables", {})
        problems += only_in(f"{logical} environment", set(sam_env), set(cdk_env))
        for name in sorted(set(sam_env) & set(cdk_env)):
            problems += compare(f"{logical} ${name}", sam_env[name], cdk_env[name])
    return problems


def check_event_source_mappings(sam, cdk):
    problems = []
    for logical, mapping in of_type(sam, "AWS::Lambda::EventSourceMapping").items():
        other = cdk["Resources"].get(logical)
        if other is None or other.get("Type") != "AWS::Lambda::EventSourceMapping":
            problems.append(f"{logical}: no such event source mapping in CDK")
            continue
        problems += compare_keys(logical, props(mapping), props(other), MAPPING_KEYS)
    return problems


def check_schedules(sam, cdk):
    problems = []
    expected_input = json.loads(SWEEPER_EVENT.read_text(encoding="utf-8"))
    for logical, schedule in of_type(sam, "AWS::Scheduler::Schedule").items():
        other = cdk["Resources"].get(logical)
        if other is None or other.get("Type") != "AWS::Scheduler::Schedule":
            problems.append(f"{logical}: no such schedule in CDK")
            continue
        sam_props, cdk_props = props(schedule), props(other)
        problems += compare_keys(
            logical, sam_props, cdk_props, ("ScheduleExpression", "FlexibleTimeWindow"),
        )
        # Unset: the schedule is enabled and in UTC, which CDK writes out.
        problems += compare(
            f"{logical}.State", sam_props.get("State", "ENABLED"), cdk_props.get("State", "ENABLED"),
        )
        problems += compare(
            f"{logical}.ScheduleExpressionTimezone",
            sam_props.get("ScheduleExpressionTimezone", "Etc/UTC"),
            cdk_props.get("ScheduleExpressionTimezone", "Etc/UTC"),
        )
        sam_target, cdk_target = sam_props.get("Target", {}), cdk_props.get("Target", {})
        problems += compare_keys(f"{logical}.Target", sam_target, cdk_target, ("Arn", "RoleArn", "Input"))
        # The sweeper's input is a fixed event; the re-seed schedule's is a parameter.
        if logical == "SweeperFunctionSchedule":
            for name, target in (("SAM", sam_target), ("CDK", cdk_target)):
                if json.loads(target.get("Input", "null")) != expected_input:
                    problems.append(f"{logical}: {name} Input differs from {SWEEPER_EVENT.name}")
        problems += compare(
            f"{logical}.RetryPolicy.MaximumRetryAttempts",
            sam_target.get("RetryPolicy", {}).get("MaximumRetryAttempts", 185),
            cdk_target.get("RetryPolicy", {}).get("MaximumRetryAttempts", 185),
        )
        # 86400 s (a day) is the service's default maximum event age, which CDK writes out.
        problems += compare(
            f"{logical}.RetryPolicy.MaximumEventAgeInSeconds",
            sam_target.get("RetryPolicy", {}).get("MaximumEventAgeInSeconds", 86400),
            cdk_target.get("RetryPolicy", {}).get("MaximumEventAgeInSeconds", 86400),
        )
    return problems


def check_log_groups(sam, cdk):
    problems = []
    for logical, group in of_type(sam, "AWS::Logs::LogGroup").items():
        other = cdk["Resources"].get(logical)
        if other is None or other.get("Type") != "AWS::Logs::LogGroup":
            problems.append(f"{logical}: no such log group in CDK")
            continue
        problems += compare_keys(logical, props(group), props(other), ("LogGroupName", "RetentionInDays"))
        problems += compare_removal(logical, group, other)
    return problems


def check_alarms(sam, cdk):
    problems = []
    for logical, alarm in of_type(sam, "AWS::CloudWatch::Alarm").items():
        other = cdk["Resources"].get(logical)
        if other is None or other.get("Type") != "AWS::CloudWatch::Alarm":
            problems.append(f"{logical}: no such alarm in CDK")
            continue
        problems += compare_keys(logical, props(alarm), props(other), ALARM_KEYS)
    return problems


def dashboard_bodies(template):
    """{logical id: the dashboard body as data} (both sides write it as one `Fn::Sub` string)."""
    bodies = {}
    for logical, dashboard in of_type(template, "AWS::CloudWatch::Dashboard").items():
        body = props(dashboard).get("DashboardBody")
        bodies[logical] = json.loads(body["Fn::Sub"] if isinstance(body, dict) else body)
    return bodies


def check_dashboards(sam, cdk):
    sam_bodies, cdk_bodies = dashboard_bodies(sam), dashboard_bodies(cdk)
    problems = only_in("dashboard", set(sam_bodies), set(cdk_bodies))
    for logical in sorted(set(sam_bodies) & set(cdk_bodies)):
        if sam_bodies[logical] != cdk_bodies[logical]:
            problems.append(f"{logical}: the dashboard bodies differ")
    return problems


def function_roles(template):
    """{role logical id} of every function."""
    roles = set()
    for function in of_type(template, "AWS::Lambda::Function").values():
        role = norm(props(function).get("Role"))
        if isinstance(role, str) and role.startswith("${") and role.endswith(".Arn}"):
            roles.add(role[2:-5])
    return roles


def check_function_permissions(sam, cdk):
    """Each function role allows exactly the same actions on exactly the same resources."""
    problems = []
    for role_id in sorted(function_roles(sam)):
        role = cdk["Resources"].get(role_id)
        if role is None:
            problems.append(f"{role_id}: missing in CDK")
            continue
        problems += only_in(f"{role_id} trust", trust(sam["Resources"][role_id]), trust(role))
        problems += only_in(role_id, permissions(sam, role_id), permissions(cdk, role_id))
        for name, template in (("SAM", sam), ("CDK", cdk)):
            if props(template["Resources"][role_id]).get("ManagedPolicyArns"):
                problems.append(f"{role_id}: {name} attaches managed policies")
    return problems


def check_schedule_permissions(sam, cdk):
    """The schedule's role may invoke the sweeper. CDK's LambdaInvoke also allows the function's
    versions (`<arn>:*`), so SAM's grants must be a subset of CDK's, with the same actions."""
    problems = []
    for schedule in of_type(sam, "AWS::Scheduler::Schedule").values():
        role = norm(props(schedule)["Target"].get("RoleArn"))
        role_id = role[2:-5]
        if role_id not in cdk["Resources"]:
            problems.append(f"{role_id}: missing in CDK")
            continue
        problems += only_in(
            f"{role_id} trust", trust(sam["Resources"][role_id]), trust(cdk["Resources"][role_id]),
        )
        sam_grants, cdk_grants = permissions(sam, role_id), permissions(cdk, role_id)
        for grant in sorted(sam_grants - cdk_grants):
            problems.append(f"{role_id}: only in SAM: {grant}")
        problems += only_in(
            f"{role_id} actions", {g[:2] for g in sam_grants}, {g[:2] for g in cdk_grants},
        )
    return problems


def check_outputs(sam, cdk):
    sam_outputs, cdk_outputs = sam.get("Outputs", {}), cdk.get("Outputs", {})
    problems = only_in("output", set(sam_outputs), set(cdk_outputs))
    for name in sorted(set(sam_outputs) & set(cdk_outputs)):
        problems += compare(f"output {name}", sam_outputs[name].get("Value"), cdk_outputs[name].get("Value"))
    return problems


CHECKS = [
    ("resource types and counts", check_resource_types),
    ("logical ids", check_logical_ids),
    ("resource conditions", check_resource_conditions),
    ("parameters", check_parameters),
    ("conditions and mappings", check_conditions_and_mappings),
    ("table: keys, status-index, host-index, projections", check_table),
    ("bucket: encryption, public access, lifecycle", check_bucket),
    ("bucket policy: TLS only", check_bucket_policy),
    ("queues: type, visibility, retention, dead-letter", check_queues),
    ("functions: runtime, arch, memory, timeout, env", check_functions),
    ("event source mappings", check_event_source_mappings),
    ("schedules: sweeper and re-seed", check_schedules),
    ("log groups", check_log_groups),
    ("alarms", check_alarms),
    ("dashboard: same body", check_dashboards),
    ("function roles: same grants", check_function_permissions),
    ("schedule role", check_schedule_permissions),
    ("outputs", check_outputs),
]


# ------------------------------------------------------------------ drifted copies
# Each breaker edits the raw SAM template or the CDK template; the check named beside it must
# then report a problem.

def _sam_fn(sam, name):
    return sam["Resources"][name]["Properties"]


def _extra_queue(sam, cdk):
    cdk["Resources"]["ExtraQueue"] = {"Type": "AWS::SQS::Queue", "Properties": {}}


def _renamed_alarm(sam, cdk):
    cdk["Resources"]["ThrottlesAlarm"] = cdk["Resources"].pop("CrawlerThrottlesAlarm")


def _parameter_default(sam, cdk):
    cdk["Parameters"]["MaxConcurrency"]["Default"] = 20


def _mapping_value(sam, cdk):
    sam["Mappings"]["CrawlQueueVisibility"]["120"]["Seconds"] = 600


def _gsi_projection(sam, cdk):
    index = cdk["Resources"]["Table"]["Properties"]["GlobalSecondaryIndexes"][0]
    index["Projection"]["NonKeyAttributes"].remove("lease_until")


def _gsi_sort_key(sam, cdk):
    index = sam["Resources"]["Table"]["Properties"]["GlobalSecondaryIndexes"][0]
    index["KeySchema"][1]["AttributeName"] = "created"


def _table_not_retained(sam, cdk):
    cdk["Resources"]["Table"]["DeletionPolicy"] = "Delete"


def _no_lifecycle(sam, cdk):
    cdk["Resources"]["Bucket"]["Properties"].pop("LifecycleConfiguration")


def _tls_policy_dropped(sam, cdk):
    del cdk["Resources"]["BucketPolicy"]


def _fifo_crawl_queue(sam, cdk):
    cdk["Resources"]["CrawlQueue"]["Properties"]["FifoQueue"] = True


def _host_index_dropped(sam, cdk):
    indexes = cdk["Resources"]["Table"]["Properties"]["GlobalSecondaryIndexes"]
    indexes[:] = [i for i in indexes if i["IndexName"] != "host-index"]


def _host_index_projection(sam, cdk):
    index = next(
        i for i in sam["Resources"]["Table"]["Properties"]["GlobalSecondaryIndexes"]
        if i["IndexName"] == "host-index"
    )
    index["Projection"]["NonKeyAttributes"].remove("updated")


def _receive_count(sam, cdk):
    sam["Resources"]["DeliveryQueue"]["Properties"]["RedrivePolicy"]["maxReceiveCount"] = 3


def _fixed_visibility(sam, cdk):
    cdk["Resources"]["CrawlQueue"]["Properties"]["VisibilityTimeout"] = 720


def _x86_function(sam, cdk):
    cdk["Resources"]["DelivererFunction"]["Properties"]["Architectures"] = ["x86_64"]


def _memory(sam, cdk):
    _sam_fn(sam, "CrawlerFunction")["MemorySize"] = 1024


def _env_name(sam, cdk):
    variables = cdk["Resources"]["SweeperFunction"]["Properties"]["Environment"]["Variables"]
    variables["TRAWL_DELIVERY_QUEUE"] = variables.pop("TRAWL_DELIVERY_QUEUE_URL")


def _global_env(sam, cdk):
    sam["Globals"]["Function"]["Environment"]["Variables"]["TRAWL_EXTRA"] = "1"


def _recursive_loop(sam, cdk):
    cdk["Resources"]["CrawlerFunction"]["Properties"].pop("RecursiveLoop")


def _batch_failures(sam, cdk):
    cdk["Resources"]["CrawlerFunctionCrawlQueue"]["Properties"].pop("FunctionResponseTypes")


def _batch_size(sam, cdk):
    _sam_fn(sam, "DelivererFunction")["Events"]["DeliveryQueue"]["Properties"]["BatchSize"] = 5


def _schedule_input(sam, cdk):
    target = cdk["Resources"]["SweeperFunctionSchedule"]["Properties"]["Target"]
    target["Input"] = '{"source": "trawl.sweeper", "max_pages": 10, "time_budget_ms": 50000}'


def _schedule_retries(sam, cdk):
    schedule = _sam_fn(sam, "SweeperFunction")["Events"]["Schedule"]["Properties"]
    schedule.pop("RetryPolicy")


def _log_retention(sam, cdk):
    cdk["Resources"]["CrawlerLogGroup"]["Properties"]["RetentionInDays"] = 14


def _alarm_threshold(sam, cdk):
    cdk["Resources"]["CrawlDeadLetterAlarm"]["Properties"]["Threshold"] = 5


def _extra_grant(sam, cdk):
    policy = next(
        r for r in cdk["Resources"].values()
        if r["Type"] == POLICY_TYPE and {"Ref": "SeederRole"} in r["Properties"]["Roles"]
    )
    policy["Properties"]["PolicyDocument"]["Statement"].append(
        {"Effect": "Allow", "Action": "s3:DeleteObject", "Resource": {"Fn::Sub": "${Bucket.Arn}/*"}}
    )


def _wider_resource(sam, cdk):
    statements = sam["Resources"]["SweeperRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    statements[-1]["Resource"] = "*"


def _schedule_role_actions(sam, cdk):
    policy = next(
        r for r in cdk["Resources"].values()
        if r["Type"] == POLICY_TYPE and {"Ref": "SweeperFunctionScheduleRole"} in r["Properties"]["Roles"]
    )
    policy["Properties"]["PolicyDocument"]["Statement"][0]["Action"] = "lambda:*"


def _unconditional_reseed(sam, cdk):
    del cdk["Resources"]["ReseedSchedule"]["Condition"]


def _reseed_input(sam, cdk):
    sam["Resources"]["ReseedSchedule"]["Properties"]["Target"]["Input"] = '{"crawl_id": "fixed"}'


def _output_missing(sam, cdk):
    del cdk["Outputs"]["CrawlQueueUrl"]


def _dashboard_widget_dropped(sam, cdk):
    dashboard = cdk["Resources"]["Dashboard"]["Properties"]
    body = json.loads(dashboard["DashboardBody"]["Fn::Sub"])
    body["widgets"].pop()
    dashboard["DashboardBody"]["Fn::Sub"] = json.dumps(body)


BROKEN = [
    ("an extra CDK queue", _extra_queue, check_resource_types),
    ("an unconditional re-seed schedule", _unconditional_reseed, check_resource_conditions),
    ("a fixed re-seed input", _reseed_input, check_schedules),
    ("an alarm under another logical id", _renamed_alarm, check_logical_ids),
    ("another MaxConcurrency default", _parameter_default, check_parameters),
    ("another visibility mapping", _mapping_value, check_conditions_and_mappings),
    ("a GSI attribute not projected", _gsi_projection, check_table),
    ("another GSI sort key", _gsi_sort_key, check_table),
    ("no host-index in CDK", _host_index_dropped, check_table),
    ("host-index without updated", _host_index_projection, check_table),
    ("a table deleted with the stack", _table_not_retained, check_table),
    ("no lifecycle rules", _no_lifecycle, check_bucket),
    ("no TLS-only bucket policy", _tls_policy_dropped, check_bucket_policy),
    ("a FIFO crawl queue", _fifo_crawl_queue, check_queues),
    ("another maxReceiveCount", _receive_count, check_queues),
    ("a fixed crawl-queue visibility", _fixed_visibility, check_queues),
    ("an x86_64 function", _x86_function, check_functions),
    ("another memory size", _memory, check_functions),
    ("a renamed environment variable", _env_name, check_functions),
    ("an extra global environment variable", _global_env, check_functions),
    ("no recursive-loop setting", _recursive_loop, check_functions),
    ("no ReportBatchItemFailures", _batch_failures, check_event_source_mappings),
    ("another batch size", _batch_size, check_event_source_mappings),
    ("another schedule input", _schedule_input, check_schedules),
    ("default schedule retries", _schedule_retries, check_schedules),
    ("another log retention", _log_retention, check_log_groups),
    ("another alarm threshold", _alarm_threshold, check_alarms),
    ("an extra grant", _extra_grant, check_function_permissions),
    ("a Resource '*'", _wider_resource, check_function_permissions),
    ("lambda:* for the schedule", _schedule_role_actions, check_schedule_permissions),
    ("a missing output", _output_missing, check_outputs),
    ("a dashboard widget fewer", _dashboard_widget_dropped, check_dashboards),
]


def load_cdk(cdk_out):
    templates = sorted(Path(cdk_out).glob("*.template.json"))
    if len(templates) != 1:
        raise SystemExit(
            f"expected one *.template.json in {cdk_out}, found {len(templates)}: "
            "run `make cdk-synth` first"
        )
    with open(templates[0], encoding="utf-8") as handle:
        return json.load(handle)


def main(argv):
    cdk = load_cdk(argv[1] if len(argv) > 1 else CDK_OUT)
    raw_sam = cfn.load()
    sam = expand_sam(raw_sam)
    passed = failed = 0
    try:
        translated = translator_expansion()
    except (AttributeError, TypeError, ValueError) as err:
        print(f"skip SAM expansion == SAM translator: cfn-lint's transform changed ({err})")
        translated = None
    if translated is None:
        print("skip SAM expansion == SAM translator: cfn-lint's transform not available")
    else:
        problems = check_expansion_matches_translator(sam, cdk, translated)
        for problem in problems:
            print(f"FAIL SAM expansion == SAM translator: {problem}")
        drifted = copy.deepcopy(sam)
        drifted["Resources"]["DelivererFunctionDeliveryQueue"]["Properties"]["BatchSize"] = 10
        caught = bool(check_expansion_matches_translator(drifted, cdk, translated))
        if problems or not caught:
            failed += 1
            if not caught:
                print("FAIL the translator comparison accepted a drifted expansion")
        else:
            passed += 1
            print("ok   SAM expansion == SAM translator (cfn-lint's offline transform), and rejects drift")
    for title, check in CHECKS:
        try:
            problems = check(sam, cdk)
        except (KeyError, TypeError, ValueError, IndexError, cfn.TemplateError) as err:
            problems = [f"check crashed: {type(err).__name__}: {err}"]
        if problems:
            failed += 1
            for problem in problems:
                print(f"FAIL {title}: {problem}")
        else:
            passed += 1
            print(f"ok   {title}")
    for title, breaker, check in BROKEN:
        broken_sam, broken_cdk = copy.deepcopy(raw_sam), copy.deepcopy(cdk)
        try:
            breaker(broken_sam, broken_cdk)
            caught = bool(check(expand_sam(broken_sam), broken_cdk))
        except (KeyError, TypeError, ValueError, IndexError, StopIteration, cfn.TemplateError) as err:
            print(f"FAIL drifted copy ({title}) could not be made or checked: {type(err).__name__}: {err}")
            caught = None
        if caught:
            passed += 1
            print(f"ok   {check.__name__} rejects {title}")
        elif caught is False:
            failed += 1
            print(f"FAIL {check.__name__} accepted {title}")
        else:
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
