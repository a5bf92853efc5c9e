#!/usr/bin/env node
// The trawl CDK app: one stack, the same as infra/template.yaml (the SAM template).
//
// TRAWL_CDK_SKIP_BUNDLING=1 synthesises without building the Rust functions: RustFunction normally
// runs `cargo lambda build` for each function during synthesis. With the variable set, the app tells
// CDK that no stack needs bundling (the `aws:cdk:bundling-stacks` context, the same switch
// `cdk list` and `cdk synth --exclusively` use), so each function's asset points at its unbuilt
// package directory. That template is for checks (`make cdk-check`), never for deploying.
import { Annotations, App } from 'aws-cdk-lib';
import { TrawlStack } from '../lib/trawl-stack';

const skipBundling = process.env.TRAWL_CDK_SKIP_BUNDLING === '1';

const app = new App({
  // postCliContext is applied after the CLI's own context, which would otherwise re-enable
  // bundling for the stacks `cdk synth` selects.
  postCliContext: skipBundling ? { 'aws:cdk:bundling-stacks': [] } : {},
});

const stack = new TrawlStack(app, 'Trawl', {
  description:
    'trawl: a web crawler on AWS Lambda (seeder, crawler, sweeper, deliverer); the CDK twin of infra/template.yaml.',
});

if (skipBundling) {
  Annotations.of(stack).addWarningV2(
    'trawl:skip-bundling',
    'TRAWL_CDK_SKIP_BUNDLING=1: the functions were not built; this template is for checks, do not deploy it.',
  );
}
