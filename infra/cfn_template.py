"""Reads infra/template.yaml for the offline checks and the local stack.

PyYAML's safe loader rejects CloudFormation's short-form tags (`!Ref`, `!GetAtt`, `!Sub`, ...);
this loader turns each into its long form (`{"Ref": ...}`, `{"Fn::GetAtt": [...]}`), the shape
CloudFormation itself uses, so callers handle one form only.
"""

import itertools
from pathlib import Path

import yaml

INFRA_DIR = Path(__file__).resolve().parent
REPO_ROOT = INFRA_DIR.parent
TEMPLATE_PATH = INFRA_DIR / "template.yaml"


class TemplateError(Exception):
    """The template uses a construct these tools cannot evaluate offline."""


class CfnLoader(yaml.SafeLoader):
    pass


def _construct_tag(loader, tag_suffix, node):
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if tag_suffix == "Ref":
        return {"Ref": value}
    if tag_suffix == "GetAtt" and isinstance(value, str):
        resource, _, attribute = value.partition(".")
        return {"Fn::GetAtt": [resource, attribute]}
    if tag_suffix == "Condition":
        return {"Condition": value}
    return {f"Fn::{tag_suffix}": value}


CfnLoader.add_multi_constructor("!", _construct_tag)


def load(path=TEMPLATE_PATH):
    with open(path, encoding="utf-8") as handle:
        return yaml.load(handle, Loader=CfnLoader)


def resources_of_type(template, resource_type):
    return {
        name: resource
        for name, resource in template.get("Resources", {}).items()
        if resource.get("Type") == resource_type
    }


def functions(template):
    return resources_of_type(template, "AWS::Serverless::Function")


def function_property(template, function, name):
    """A function property as SAM sees it: the function's own value, else the Globals one."""
    own = function.get("Properties", {})
    if name in own:
        return own[name]
    return template.get("Globals", {}).get("Function", {}).get(name)


def function_environment(template, function):
    """Environment variables after SAM merges Globals into the function (the function wins)."""
    merged = dict(
        template.get("Globals", {})
        .get("Function", {})
        .get("Environment", {})
        .get("Variables", {})
    )
    merged.update(
        function.get("Properties", {}).get("Environment", {}).get("Variables", {})
    )
    return merged


def parameter_defaults(template):
    return {
        name: str(spec["Default"])
        for name, spec in template.get("Parameters", {}).items()
        if "Default" in spec
    }


def parameter_assignments(template, names):
    """Every combination of values the named parameters can take: AllowedValues when the template
    lists them, else the default. Checks run on each, so no deploy-time choice breaks them."""
    params = template.get("Parameters", {})
    choices = []
    for name in sorted(names):
        spec = params.get(name)
        if spec is None:
            raise TemplateError(f"unknown parameter {name}")
        values = spec.get("AllowedValues") or [spec.get("Default")]
        choices.append([(name, str(v)) for v in values if v is not None])
    base = parameter_defaults(template)
    for combination in itertools.product(*choices):
        assignment = dict(base)
        assignment.update(dict(combination))
        yield assignment


def referenced_parameters(template, node):
    """Names of the template parameters a value refers to with Ref."""
    params = template.get("Parameters", {})
    found = set()
    if isinstance(node, dict):
        if set(node) == {"Ref"} and node["Ref"] in params:
            found.add(node["Ref"])
        for value in node.values():
            found |= referenced_parameters(template, value)
    elif isinstance(node, list):
        for value in node:
            found |= referenced_parameters(template, value)
    return found


class Resolver:
    """Evaluates intrinsic functions for one parameter assignment.

    `resource_value(logical_id, attribute_or_None)` supplies what a resource Ref / GetAtt
    stands for (e.g. a queue's URL or ARN in the local stack); without it they are errors.
    """

    def __init__(self, template, params=None, resource_value=None):
        self.template = template
        self.params = dict(parameter_defaults(template))
        self.params.update(params or {})
        self.params.setdefault("AWS::Region", "us-east-1")
        self.params.setdefault("AWS::AccountId", "123456789012")
        self.params.setdefault("AWS::StackName", "trawl-local")
        self.params.setdefault("AWS::Partition", "aws")
        self.resource_value = resource_value

    def __call__(self, node):
        if isinstance(node, list):
            return [self(item) for item in node]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (key, arg), = node.items()
            handler = {
                "Ref": self._ref,
                "Fn::GetAtt": self._get_att,
                "Fn::FindInMap": self._find_in_map,
                "Fn::If": self._if,
                "Fn::Sub": self._sub,
                "Fn::Join": self._join,
                "Fn::Equals": self._equals,
                "Fn::Not": self._not,
            }.get(key)
            if handler is not None:
                return handler(arg)
            if key.startswith("Fn::"):
                raise TemplateError(f"cannot evaluate {key} offline")
        return {key: self(value) for key, value in node.items()}

    def _resource(self, logical_id, attribute):
        if logical_id not in self.template.get("Resources", {}):
            raise TemplateError(f"reference to unknown resource {logical_id}")
        if self.resource_value is None:
            raise TemplateError(f"no value for resource {logical_id}")
        return self.resource_value(logical_id, attribute)

    def _ref(self, name):
        if name == "AWS::NoValue":
            return None
        if name in self.params:
            return self.params[name]
        return self._resource(name, None)

    def _get_att(self, arg):
        resource, attribute = arg
        return self._resource(resource, attribute)

    def _find_in_map(self, arg):
        top, second, third = (self(part) for part in arg)
        try:
            return self.template["Mappings"][top][str(second)][third]
        except KeyError as missing:
            raise TemplateError(f"FindInMap {top}/{second}/{third}: no {missing}") from None

    def condition(self, name):
        return bool(self(self.template["Conditions"][name]))

    def _if(self, arg):
        name, when_true, when_false = arg
        return self(when_true if self.condition(name) else when_false)

    def _equals(self, arg):
        left, right = (self(part) for part in arg)
        return str(left) == str(right)

    def _not(self, arg):
        (inner,) = arg
        return not self(inner)

    def _join(self, arg):
        separator, parts = arg
        return separator.join(str(self(part)) for part in parts)

    def _sub(self, arg):
        if isinstance(arg, list):
            text, variables = arg
            local = {name: self(value) for name, value in variables.items()}
        else:
            text, local = arg, {}
        out, rest = [], text
        while "${" in rest:
            before, _, after = rest.partition("${")
            name, _, rest = after.partition("}")
            out.append(before)
            if name in local:
                out.append(str(local[name]))
            elif "." in name and name.split(".", 1)[0] not in self.params:
                resource, attribute = name.split(".", 1)
                out.append(str(self._resource(resource, attribute)))
            else:
                out.append(str(self._ref(name)))
        out.append(rest)
        return "".join(out)
