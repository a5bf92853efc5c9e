// trawl's stack in CDK: the same resources, properties and permissions as infra/template.yaml.
// infra/tests/test_cdk_matches_sam.py compares the synthesised template with the SAM one, so a
// change to either must be made to both.
//
// Logical ids are set to the SAM template's (Table, CrawlQueue, CrawlerFunction, ...): the two
// templates then read alike, and the comparison can match resources and references by name.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  Aws,
  CfnCondition,
  CfnMapping,
  CfnOutput,
  CfnParameter,
  CfnResource,
  Duration,
  Fn,
  RemovalPolicy,
  Stack,
  StackProps,
  Token,
  Validations,
} from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as scheduler from 'aws-cdk-lib/aws-scheduler';
import * as targets from 'aws-cdk-lib/aws-scheduler-targets';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { RustFunction } from 'cargo-lambda-cdk';
import { Construct, IConstruct } from 'constructs';

const REPO_ROOT = join(__dirname, '..', '..', '..');

// Crawler timeouts a deployment may choose; the crawl queue's visibility timeout is 6x the chosen
// one (AWS's guidance for SQS event sources), looked up from a mapping so the two cannot drift.
const CRAWLER_TIMEOUTS = [30, 60, 120, 300, 600, 900];
const VISIBILITY_PER_TIMEOUT = 6;

// The deliverer's timeout (seconds); the delivery queue's visibility timeout is 6x it.
const DELIVERER_TIMEOUT = 900;
// The seeder's timeout (seconds); the seed queue's visibility timeout is 6x it.
const SEEDER_TIMEOUT = 300;

const LOG_RETENTION_DAYS = [
  1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922,
  3288, 3653,
];

// What the DynamoDB adapter (shared/aws/src/dynamodb) stores in the status index besides its keys.
const STATUS_INDEX_ATTRIBUTES = [
  'crawl_id',
  'task_id',
  'url',
  'status',
  'depth',
  'retries',
  'lease_until',
  'next_attempt',
  'next_fetch',
  'enqueued',
];

// The host index projects the same, and `updated` (the status index's sort key), so that a task
// summary is read from either index alike.
const HOST_INDEX_ATTRIBUTES = [...STATUS_INDEX_ATTRIBUTES, 'updated'];

const DLQ_RETENTION = Duration.days(14);
const QUEUE_RETENTION = Duration.days(14);
const MAX_RECEIVE_COUNT = 5;

/** Gives a construct's CloudFormation resource the logical id it has in the SAM template. */
function samLogicalId(construct: IConstruct, logicalId: string): void {
  (construct.node.defaultChild as CfnResource).overrideLogicalId(logicalId);
}

export class TrawlStack extends Stack {
  constructor(scope: Construct, id: string, props?: StackProps) {
    super(scope, id, props);

    // ------------------------------------------------------------ parameters
    const userAgent = new CfnParameter(this, 'UserAgent', {
      type: 'String',
      default: '',
      description:
        "Default User-Agent for crawls whose seed request names none (empty = the code's default).",
    });
    const maxConcurrency = new CfnParameter(this, 'MaxConcurrency', {
      type: 'Number',
      default: 10,
      minValue: 2,
      maxValue: 1000,
      description:
        'Cap on concurrent crawler invocations of the crawl queue (SQS event source ScalingConfig.MaximumConcurrency).',
    });
    const priorityMaxConcurrency = new CfnParameter(this, 'PriorityMaxConcurrency', {
      type: 'Number',
      default: 10,
      minValue: 2,
      maxValue: 1000,
      description:
        'Cap on concurrent crawler invocations of the priority crawl queue (its own event source ' +
        "mapping): the turns of hosts with priority work never wait behind the crawl queue's " +
        'backlog. The crawler may run MaxConcurrency + PriorityMaxConcurrency invocations at once.',
    });
    const priorityFrom = new CfnParameter(this, 'PriorityFrom', {
      type: 'Number',
      default: 1,
      minValue: 1,
      maxValue: 9,
      description:
        "The lowest priority (of a host's due work, 0 to 9) whose turns go to the priority crawl " +
        'queue (TRAWL_PRIORITY_FROM).',
    });
    const batchSize = new CfnParameter(this, 'BatchSize', {
      type: 'Number',
      default: 50,
      minValue: 1,
      maxValue: 100,
      description:
        'Crawl-queue messages (host turns) per crawler invocation. An invocation is billed for its ' +
        "wall time, mostly spent waiting on its hosts' politeness delays: more turns share it.",
    });
    const batchConcurrency = new CfnParameter(this, 'BatchConcurrency', {
      type: 'Number',
      default: 50,
      minValue: 1,
      maxValue: 100,
      description:
        'Messages of one batch the crawler fetches at once (BatchSize or more, so that no turn of a batch waits for another).',
    });
    const shards = new CfnParameter(this, 'Shards', {
      type: 'Number',
      default: 4,
      minValue: 1,
      maxValue: 256,
      description: 'Status-index shards per crawl and status (spreads hot GSI partitions).',
    });
    const perHost = new CfnParameter(this, 'PerHost', {
      type: 'Number',
      default: 1,
      minValue: 1,
      maxValue: 64,
      description: 'Default per-host parallelism for crawls whose seed request names none.',
    });
    const sweeperRate = new CfnParameter(this, 'SweeperRate', {
      type: 'String',
      default: 'rate(5 minutes)',
      allowedPattern: '^(rate|cron)\\(.+\\)$',
      description: 'EventBridge Scheduler expression for the sweeper.',
    });
    const crawlerTimeout = new CfnParameter(this, 'CrawlerTimeout', {
      type: 'Number',
      default: 120,
      allowedValues: CRAWLER_TIMEOUTS.map(String),
      description:
        "Crawler timeout in seconds. The crawl queue's visibility timeout is looked up from it " +
        "(6x, AWS's guidance for SQS event sources), so the two cannot drift apart.",
    });
    const prefix = new CfnParameter(this, 'Prefix', {
      type: 'String',
      default: 'pages/',
      description: 'Key prefix for everything trawl writes to the bucket.',
    });
    const secretParameterPath = new CfnParameter(this, 'SecretParameterPath', {
      type: 'String',
      default: '/trawl',
      allowedPattern: '^(/[A-Za-z0-9_.-]+)+$',
      description:
        'Parameter Store path of the named secrets crawls may use ({"ssm": "/trawl/api-token"} in ' +
        'fetch.auth and proxy credentials); the crawler may read the parameters under it and no others.',
    });
    const seedBucketArn = new CfnParameter(this, 'SeedBucketArn', {
      type: 'String',
      default: '',
      allowedPattern: '^(arn:aws[a-z-]*:s3:::[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])?$',
      description:
        'ARN of the bucket the seeder reads seed manifests from (empty = the trawl bucket).',
    });
    const alarmTopicArn = new CfnParameter(this, 'AlarmTopicArn', {
      type: 'String',
      default: '',
      allowedPattern: '^(arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]+(\\.fifo)?)?$',
      description: 'SNS topic notified by the alarms (empty = alarms without actions).',
    });
    const reseedRate = new CfnParameter(this, 'ReseedRate', {
      type: 'String',
      default: '',
      allowedPattern: '^((rate|cron)\\(.+\\))?$',
      description:
        'EventBridge Scheduler expression that sends ReseedRequest to the seeder, e.g. to re-read a ' +
        "crawl's sitemaps daily (empty = no schedule).",
    });
    const reseedRequest = new CfnParameter(this, 'ReseedRequest', {
      type: 'String',
      default: '',
      description:
        'The seed request the re-seed schedule sends, as JSON (the shape of events/seeder-*.json: ' +
        'a seed source, or an operation such as recrawl). Empty = no schedule.',
    });
    const logRetentionDays = new CfnParameter(this, 'LogRetentionDays', {
      type: 'Number',
      default: 30,
      allowedValues: LOG_RETENTION_DAYS.map(String),
      description: "Retention of the functions' log groups.",
    });
    const logLevel = new CfnParameter(this, 'LogLevel', {
      type: 'String',
      default: 'info',
      description: 'RUST_LOG filter for the functions (e.g. info, trawl_core=debug).',
    });

    const hasSeedBucket = new CfnCondition(this, 'HasSeedBucket', {
      expression: Fn.conditionNot(Fn.conditionEquals(seedBucketArn.valueAsString, '')),
    });
    const hasAlarmTopic = new CfnCondition(this, 'HasAlarmTopic', {
      expression: Fn.conditionNot(Fn.conditionEquals(alarmTopicArn.valueAsString, '')),
    });

    const hasReseedSchedule = new CfnCondition(this, 'HasReseedSchedule', {
      expression: Fn.conditionAnd(
        Fn.conditionNot(Fn.conditionEquals(reseedRate.valueAsString, '')),
        Fn.conditionNot(Fn.conditionEquals(reseedRequest.valueAsString, '')),
      ),
    });

    const crawlQueueVisibility = new CfnMapping(this, 'CrawlQueueVisibility', {
      mapping: Object.fromEntries(
        CRAWLER_TIMEOUTS.map((seconds) => [
          String(seconds),
          { Seconds: VISIBILITY_PER_TIMEOUT * seconds },
        ]),
      ),
    });

    // ------------------------------------------------------------ storage
    // The one definition of the key schema and the indexes besides the SAM template's; the
    // DynamoDB adapter in shared/aws/src/dynamodb uses exactly these names.
    const table = new dynamodb.Table(this, 'Table', {
      partitionKey: { name: 'pk', type: dynamodb.AttributeType.STRING },
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      removalPolicy: RemovalPolicy.RETAIN,
    });
    table.addGlobalSecondaryIndex({
      indexName: 'status-index',
      partitionKey: { name: 'gsi_pk', type: dynamodb.AttributeType.STRING },
      sortKey: { name: 'updated', type: dynamodb.AttributeType.NUMBER },
      projectionType: dynamodb.ProjectionType.INCLUDE,
      nonKeyAttributes: STATUS_INDEX_ATTRIBUTES,
    });
    // A host's tasks with work left, soonest due first: hk = {crawl_id}#{host}, due = when the
    // task is next claimable (removed once it is terminal: a sparse index).
    table.addGlobalSecondaryIndex({
      indexName: 'host-index',
      partitionKey: { name: 'hk', type: dynamodb.AttributeType.STRING },
      sortKey: { name: 'due', type: dynamodb.AttributeType.NUMBER },
      projectionType: dynamodb.ProjectionType.INCLUDE,
      nonKeyAttributes: HOST_INDEX_ATTRIBUTES,
    });
    // One lane's tasks of a host with work left (scope.lanes): lk = {crawl_id}#{host}#{lane},
    // written at seed for a task created in a lane, and host-index's `due` (a sparse index).
    table.addGlobalSecondaryIndex({
      indexName: 'lane-index',
      partitionKey: { name: 'lk', type: dynamodb.AttributeType.STRING },
      sortKey: { name: 'due', type: dynamodb.AttributeType.NUMBER },
      projectionType: dynamodb.ProjectionType.INCLUDE,
      nonKeyAttributes: HOST_INDEX_ATTRIBUTES,
    });
    // A host's roster (host passes): rk = {crawl_id}#{host}, rpos = the task's creation time,
    // written once when a task placed by time alone is created; keys only.
    table.addGlobalSecondaryIndex({
      indexName: 'roster-index',
      partitionKey: { name: 'rk', type: dynamodb.AttributeType.STRING },
      sortKey: { name: 'rpos', type: dynamodb.AttributeType.NUMBER },
      projectionType: dynamodb.ProjectionType.KEYS_ONLY,
    });
    samLogicalId(table, 'Table');

    const bucket = new s3.Bucket(this, 'Bucket', {
      encryption: s3.BucketEncryption.S3_MANAGED,
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
      // A bucket policy that denies every request not made over TLS.
      enforceSSL: true,
      lifecycleRules: [
        {
          // The deliverer writes large outputs as multipart uploads; a crash leaves parts behind.
          id: 'abort-incomplete-multipart-uploads',
          abortIncompleteMultipartUploadAfter: Duration.days(1),
        },
      ],
      removalPolicy: RemovalPolicy.RETAIN,
    });
    samLogicalId(bucket, 'Bucket');
    // The signal that a delivery landed (S3 events to EventBridge), set on the L1 resource as
    // the SAM template does: `eventBridgeEnabled` would add a custom resource and its function.
    (bucket.node.defaultChild as s3.CfnBucket).notificationConfiguration = {
      eventBridgeConfiguration: { eventBridgeEnabled: true },
    };
    if (bucket.policy) {
      samLogicalId(bucket.policy, 'BucketPolicy');
    }

    // ------------------------------------------------------------ queues
    const crawlDeadLetterQueue = new sqs.Queue(this, 'CrawlDeadLetterQueue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      retentionPeriod: DLQ_RETENTION,
    });
    samLogicalId(crawlDeadLetterQueue, 'CrawlDeadLetterQueue');

    // Standard: a message is a host's turn, delayed until the host is due (per-message
    // DelaySeconds, which FIFO queues do not take). One worker at a time per host comes from the
    // host record's fenced turn, not from the queue.
    const crawlQueue = new sqs.Queue(this, 'CrawlQueue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      visibilityTimeout: Duration.seconds(
        Token.asNumber(crawlQueueVisibility.findInMap(crawlerTimeout.valueAsString, 'Seconds')),
      ),
      // SQS's longest (14 days), not its default 4: a turn waiting for a slow host must not
      // expire (a lost one is re-issued from the host record by the sweeper).
      retentionPeriod: QUEUE_RETENTION,
      deadLetterQueue: { queue: crawlDeadLetterQueue, maxReceiveCount: MAX_RECEIVE_COUNT },
    });
    samLogicalId(crawlQueue, 'CrawlQueue');

    // The turns of hosts whose due work has a priority of PriorityFrom or more: the crawl queue's
    // settings, its own consumers, the crawl queue's dead-letter queue. A turn is sent to one
    // queue or the other, never moved (the host record's epoch keeps one live turn per host).
    const priorityCrawlQueue = new sqs.Queue(this, 'PriorityCrawlQueue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      visibilityTimeout: Duration.seconds(
        Token.asNumber(crawlQueueVisibility.findInMap(crawlerTimeout.valueAsString, 'Seconds')),
      ),
      retentionPeriod: QUEUE_RETENTION,
      deadLetterQueue: { queue: crawlDeadLetterQueue, maxReceiveCount: MAX_RECEIVE_COUNT },
    });
    samLogicalId(priorityCrawlQueue, 'PriorityCrawlQueue');

    const deliveryDeadLetterQueue = new sqs.Queue(this, 'DeliveryDeadLetterQueue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      retentionPeriod: DLQ_RETENTION,
    });
    samLogicalId(deliveryDeadLetterQueue, 'DeliveryDeadLetterQueue');

    const deliveryQueue = new sqs.Queue(this, 'DeliveryQueue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      visibilityTimeout: Duration.seconds(VISIBILITY_PER_TIMEOUT * DELIVERER_TIMEOUT),
      retentionPeriod: QUEUE_RETENTION,
      deadLetterQueue: { queue: deliveryDeadLetterQueue, maxReceiveCount: MAX_RECEIVE_COUNT },
    });
    samLogicalId(deliveryQueue, 'DeliveryQueue');

    const seedDeadLetterQueue = new sqs.Queue(this, 'SeedDeadLetterQueue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      retentionPeriod: DLQ_RETENTION,
    });
    samLogicalId(seedDeadLetterQueue, 'SeedDeadLetterQueue');

    const seedQueue = new sqs.Queue(this, 'SeedQueue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      visibilityTimeout: Duration.seconds(VISIBILITY_PER_TIMEOUT * SEEDER_TIMEOUT),
      retentionPeriod: QUEUE_RETENTION,
      deadLetterQueue: { queue: seedDeadLetterQueue, maxReceiveCount: MAX_RECEIVE_COUNT },
    });
    samLogicalId(seedQueue, 'SeedQueue');

    // ------------------------------------------------------------ functions
    // Read by every function. Each function adds exactly the other variables its settings struct
    // reads (shared/aws/src/settings.rs; infra/tests/test_template.py checks the SAM template).
    const commonEnvironment: Record<string, string> = {
      TRAWL_TABLE: table.tableName,
      TRAWL_SHARDS: shards.valueAsString,
      RUST_LOG: logLevel.valueAsString,
    };

    // One log group, role and function per function package. The roles are explicit: the default
    // Lambda role carries AWSLambdaBasicExecutionRole, which may write to every log group.
    const rustFunction = (
      name: string,
      props: {
        description: string;
        timeout: Duration;
        memorySize?: number;
        environment?: Record<string, string>;
        recursiveLoop?: lambda.RecursiveLoop;
      },
    ): { fn: RustFunction; role: iam.Role } => {
      const title = name.charAt(0).toUpperCase() + name.slice(1);
      const logGroup = new logs.LogGroup(this, `${title}LogGroup`, {
        logGroupName: `/aws/lambda/${Aws.STACK_NAME}/${name}`,
        retention: logRetentionDays.valueAsNumber as logs.RetentionDays,
        removalPolicy: RemovalPolicy.DESTROY,
      });
      samLogicalId(logGroup, `${title}LogGroup`);
      const role = new iam.Role(this, `${title}Role`, {
        assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      });
      samLogicalId(role, `${title}Role`);
      // Only the function's own log group (logGroup.grantWrite would add its name-form ARN too).
      role.addToPrincipalPolicy(
        new iam.PolicyStatement({
          actions: ['logs:CreateLogStream', 'logs:PutLogEvents'],
          resources: [logGroup.logGroupArn],
        }),
      );
      const fn = new RustFunction(this, `${title}Function`, {
        manifestPath: join(REPO_ROOT, 'functions', name, 'Cargo.toml'),
        binaryName: name,
        architecture: lambda.Architecture.ARM_64,
        // The functions' profile (Cargo.toml): opt-level 3, thin LTO, one codegen unit.
        bundling: { profile: 'lambda-release' },
        description: props.description,
        role,
        timeout: props.timeout,
        memorySize: props.memorySize ?? 256,
        loggingFormat: lambda.LoggingFormat.JSON,
        logGroup,
        recursiveLoop: props.recursiveLoop,
        environment: { ...commonEnvironment, ...props.environment },
      });
      samLogicalId(fn, `${title}Function`);
      return { fn, role };
    };

    const seeder = rustFunction('seeder', {
      description:
        'Starts a crawl from a seed request or an S3 manifest (seed queue, or invoked directly).',
      timeout: Duration.seconds(SEEDER_TIMEOUT),
      // Deliberate: a seed that reaches the deadline sends its continuation to the seed queue
      // that triggers it; the loop ends with the source (each continuation starts further on).
      recursiveLoop: lambda.RecursiveLoop.ALLOW,
      environment: {
        TRAWL_BUCKET: bucket.bucketName,
        TRAWL_PREFIX: prefix.valueAsString,
        TRAWL_QUEUE_URL: crawlQueue.queueUrl,
        TRAWL_PRIORITY_QUEUE_URL: priorityCrawlQueue.queueUrl,
        TRAWL_PRIORITY_FROM: priorityFrom.valueAsString,
        TRAWL_SEED_QUEUE_URL: seedQueue.queueUrl,
        TRAWL_USER_AGENT: userAgent.valueAsString,
        TRAWL_PER_HOST: perHost.valueAsString,
      },
    });
    const crawler = rustFunction('crawler', {
      description: 'Fetches the pages of crawl-queue messages and enqueues the links it finds.',
      timeout: Duration.seconds(crawlerTimeout.valueAsNumber),
      memorySize: 512,
      // Deliberate: the crawler sends the links it discovers to the very queue that triggers it.
      // Lambda's recursive-loop detection would stop that after ~16 rounds and drop the messages;
      // the loop is bounded by the crawl's depth/page limits and the dedup in the task table.
      recursiveLoop: lambda.RecursiveLoop.ALLOW,
      environment: {
        TRAWL_BUCKET: bucket.bucketName,
        TRAWL_PREFIX: prefix.valueAsString,
        TRAWL_QUEUE_URL: crawlQueue.queueUrl,
        TRAWL_PRIORITY_QUEUE_URL: priorityCrawlQueue.queueUrl,
        TRAWL_PRIORITY_FROM: priorityFrom.valueAsString,
        TRAWL_CONCURRENCY: batchConcurrency.valueAsString,
        TRAWL_USER_AGENT: userAgent.valueAsString,
      },
    });
    const sweeper = rustFunction('sweeper', {
      description:
        'Re-queues expired leases and due retries; announces finished crawls to the deliverer.',
      // Above the schedule input's time_budget_ms (50 s).
      timeout: Duration.seconds(60),
      environment: {
        TRAWL_QUEUE_URL: crawlQueue.queueUrl,
        TRAWL_PRIORITY_QUEUE_URL: priorityCrawlQueue.queueUrl,
        TRAWL_PRIORITY_FROM: priorityFrom.valueAsString,
        TRAWL_DELIVERY_QUEUE_URL: deliveryQueue.queueUrl,
      },
    });
    const deliverer = rustFunction('deliverer', {
      description:
        "Writes a finished crawl's delivery (triggered by the sweeper through the delivery queue).",
      timeout: Duration.seconds(DELIVERER_TIMEOUT),
      memorySize: 1024,
      environment: {
        TRAWL_BUCKET: bucket.bucketName,
        TRAWL_PREFIX: prefix.valueAsString,
        TRAWL_DELIVERY_QUEUE_URL: deliveryQueue.queueUrl,
      },
    });

    // ------------------------------------------------------------ permissions
    // Each function gets the actions its code uses, on the resources it uses (grant(), not the
    // grantRead/grantWrite bundles, which add actions the code never calls).
    table.grant(
      seeder.role,
      'dynamodb:PutItem',
      'dynamodb:UpdateItem',
      'dynamodb:GetItem',
      'dynamodb:Query',
    );
    crawlQueue.grant(seeder.role, 'sqs:SendMessage');
    priorityCrawlQueue.grant(seeder.role, 'sqs:SendMessage');
    // Its own continuations, and the seed queue's event source mapping.
    seedQueue.grant(
      seeder.role,
      'sqs:SendMessage',
      'sqs:ReceiveMessage',
      'sqs:DeleteMessage',
      'sqs:GetQueueAttributes',
    );
    // The `reextract` operation: stored pages read, their items written beside them.
    seeder.role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ['s3:GetObject', 's3:PutObject'],
        resources: [bucket.arnForObjects('*')],
      }),
    );
    seeder.role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ['s3:GetObject'],
        resources: [
          Fn.conditionIf(
            hasSeedBucket.logicalId,
            `${seedBucketArn.valueAsString}/*`,
            bucket.arnForObjects('*'),
          ).toString(),
        ],
      }),
    );

    table.grant(
      crawler.role,
      'dynamodb:GetItem',
      'dynamodb:PutItem',
      'dynamodb:UpdateItem',
      'dynamodb:Query',
    );
    crawler.role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ['s3:PutObject', 's3:GetObject', 's3:DeleteObject'],
        resources: [bucket.arnForObjects('*')],
      }),
    );
    // Receive/Delete/GetQueueAttributes for the event source mapping; SendMessage for the links
    // it discovers; ChangeMessageVisibility to delay retries.
    for (const queue of [crawlQueue, priorityCrawlQueue]) {
      queue.grant(
        crawler.role,
        'sqs:SendMessage',
        'sqs:ReceiveMessage',
        'sqs:DeleteMessage',
        'sqs:ChangeMessageVisibility',
        'sqs:GetQueueAttributes',
      );
    }
    // Crawls' named secrets, read when a request needs them: this path's only.
    crawler.role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ['ssm:GetParameter'],
        resources: [
          `arn:${Aws.PARTITION}:ssm:${Aws.REGION}:${Aws.ACCOUNT_ID}:parameter${secretParameterPath.valueAsString}/*`,
        ],
      }),
    );

    table.grant(sweeper.role, 'dynamodb:Query', 'dynamodb:UpdateItem', 'dynamodb:GetItem', 'dynamodb:PutItem');
    // GetQueueAttributes: the crawl queues' depth (empty queues shorten the lost-message window).
    crawlQueue.grant(sweeper.role, 'sqs:SendMessage', 'sqs:GetQueueAttributes');
    priorityCrawlQueue.grant(sweeper.role, 'sqs:SendMessage', 'sqs:GetQueueAttributes');
    deliveryQueue.grant(sweeper.role, 'sqs:SendMessage');

    // BatchWriteItem: TaskStore::delete_tasks removes a delivered crawl's tasks in batches.
    table.grant(
      deliverer.role,
      'dynamodb:Query',
      'dynamodb:GetItem',
      'dynamodb:UpdateItem',
      'dynamodb:DeleteItem',
      'dynamodb:BatchWriteItem',
    );
    deliverer.role.addToPrincipalPolicy(
      new iam.PolicyStatement({ actions: ['s3:ListBucket'], resources: [bucket.bucketArn] }),
    );
    deliverer.role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: [
          's3:GetObject',
          's3:PutObject',
          's3:DeleteObject',
          's3:AbortMultipartUpload',
          's3:ListMultipartUploadParts',
        ],
        resources: [bucket.arnForObjects('*')],
      }),
    );
    // GetQueueAttributes: the event source mapping cannot be created without it. SendMessage: a
    // delivery longer than one invocation queues its continuation.
    deliveryQueue.grant(
      deliverer.role,
      'sqs:ReceiveMessage',
      'sqs:DeleteMessage',
      'sqs:GetQueueAttributes',
      'sqs:SendMessage',
    );

    // ------------------------------------------------------------ triggers
    // Event source mappings rather than SqsEventSource: that one also grants sqs:GetQueueUrl and
    // sqs:ChangeMessageVisibility, which the deliverer's code does not use.
    const crawlerTrigger = crawler.fn.addEventSourceMapping('CrawlQueue', {
      eventSourceArn: crawlQueue.queueArn,
      batchSize: batchSize.valueAsNumber,
      // Required past 10 messages a batch; 1 s is the least Lambda allows.
      maxBatchingWindow: Duration.seconds(1),
      reportBatchItemFailures: true,
      maxConcurrency: maxConcurrency.valueAsNumber,
    });
    samLogicalId(crawlerTrigger, 'CrawlerFunctionCrawlQueue');
    // Its own consumers: a priority turn waits only for other priority turns.
    const priorityTrigger = crawler.fn.addEventSourceMapping('PriorityCrawlQueue', {
      eventSourceArn: priorityCrawlQueue.queueArn,
      batchSize: batchSize.valueAsNumber,
      // Required past 10 messages a batch; 1 s is the least Lambda allows.
      maxBatchingWindow: Duration.seconds(1),
      reportBatchItemFailures: true,
      maxConcurrency: priorityMaxConcurrency.valueAsNumber,
    });
    samLogicalId(priorityTrigger, 'CrawlerFunctionPriorityCrawlQueue');
    const delivererTrigger = deliverer.fn.addEventSourceMapping('DeliveryQueue', {
      eventSourceArn: deliveryQueue.queueArn,
      batchSize: 1,
      reportBatchItemFailures: true,
    });
    samLogicalId(delivererTrigger, 'DelivererFunctionDeliveryQueue');
    // One request per invocation: each may take the whole timeout.
    const seederTrigger = seeder.fn.addEventSourceMapping('SeedQueue', {
      eventSourceArn: seedQueue.queueArn,
      batchSize: 1,
      reportBatchItemFailures: true,
    });
    samLogicalId(seederTrigger, 'SeederFunctionSeedQueue');

    // The sweeper's schedule input is events/sweeper-schedule.json itself (the file that
    // `cargo lambda invoke sweeper` uses), so the two cannot differ.
    const sweeperInput = readFileSync(join(REPO_ROOT, 'events', 'sweeper-schedule.json'), 'utf8');
    const scheduleRole = new iam.Role(this, 'SweeperFunctionScheduleRole', {
      assumedBy: new iam.ServicePrincipal('scheduler.amazonaws.com'),
    });
    samLogicalId(scheduleRole, 'SweeperFunctionScheduleRole');
    const schedule = new scheduler.Schedule(this, 'SweeperFunctionSchedule', {
      schedule: scheduler.ScheduleExpression.expression(sweeperRate.valueAsString),
      target: new targets.LambdaInvoke(sweeper.fn, {
        role: scheduleRole,
        input: scheduler.ScheduleTargetInput.fromText(sweeperInput.trim()),
        // A missed sweep is made up by the next one.
        retryAttempts: 0,
      }),
    });
    samLogicalId(schedule, 'SweeperFunctionSchedule');

    // Optional: re-seeds a crawl on a schedule. L1 resources, because the whole pair must carry
    // the condition (an L2 target would attach an unconditional policy to the role).
    const reseedRole = new iam.CfnRole(this, 'ReseedScheduleRole', {
      assumeRolePolicyDocument: {
        Version: '2012-10-17',
        Statement: [
          {
            Effect: 'Allow',
            Principal: { Service: 'scheduler.amazonaws.com' },
            Action: 'sts:AssumeRole',
          },
        ],
      },
      policies: [
        {
          policyName: 'invoke-seeder',
          policyDocument: {
            Version: '2012-10-17',
            Statement: [
              { Effect: 'Allow', Action: 'lambda:InvokeFunction', Resource: seeder.fn.functionArn },
            ],
          },
        },
      ],
    });
    reseedRole.overrideLogicalId('ReseedScheduleRole');
    reseedRole.cfnOptions.condition = hasReseedSchedule;
    const reseed = new scheduler.CfnSchedule(this, 'ReseedSchedule', {
      scheduleExpression: reseedRate.valueAsString,
      flexibleTimeWindow: { mode: 'OFF' },
      target: {
        arn: seeder.fn.functionArn,
        roleArn: reseedRole.attrArn,
        input: reseedRequest.valueAsString,
        // Seeding is idempotent, so a retried invocation does no harm.
        retryPolicy: { maximumRetryAttempts: 2 },
      },
    });
    reseed.overrideLogicalId('ReseedSchedule');
    reseed.cfnOptions.condition = hasReseedSchedule;
    Validations.of(reseed).acknowledge({
      id: 'CloudFormation-Validate::W1030',
      reason: 'The empty defaults mean no schedule: HasReseedSchedule is then false.',
    });

    // ------------------------------------------------------------ alarms
    const alarm = (
      id: string,
      description: string,
      metric: cloudwatch.IMetric,
    ): cloudwatch.Alarm => {
      const created = new cloudwatch.Alarm(this, id, {
        alarmDescription: description,
        metric,
        threshold: 0,
        evaluationPeriods: 1,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      });
      const resource = created.node.defaultChild as cloudwatch.CfnAlarm;
      resource.overrideLogicalId(id);
      // The topic is optional: without one the alarms exist but notify nobody.
      resource.alarmActions = Token.asList(
        Fn.conditionIf(hasAlarmTopic.logicalId, [alarmTopicArn.valueAsString], Aws.NO_VALUE),
      );
      Validations.of(created).acknowledge({
        id: 'CloudFormation-Validate::W1030',
        reason:
          "The topic ARN's empty default is only used when HasAlarmTopic is false, and then " +
          'AlarmActions is AWS::NoValue.',
      });
      return created;
    };
    const period = Duration.minutes(5);
    alarm(
      'CrawlDeadLetterAlarm',
      'Crawl turns reached the crawl dead-letter queue (from either crawl queue).',
      crawlDeadLetterQueue.metricApproximateNumberOfMessagesVisible({
        statistic: 'Maximum',
        period,
      }),
    );
    alarm(
      'DeliveryDeadLetterAlarm',
      'Delivery requests reached the delivery dead-letter queue.',
      deliveryDeadLetterQueue.metricApproximateNumberOfMessagesVisible({
        statistic: 'Maximum',
        period,
      }),
    );
    alarm(
      'SeedDeadLetterAlarm',
      'Seed requests reached the seed dead-letter queue.',
      seedDeadLetterQueue.metricApproximateNumberOfMessagesVisible({
        statistic: 'Maximum',
        period,
      }),
    );
    alarm(
      'CrawlerErrorsAlarm',
      'The crawler failed whole invocations (per-message failures are not counted here).',
      crawler.fn.metricErrors({ statistic: 'Sum', period }),
    );
    alarm(
      'CrawlerThrottlesAlarm',
      'The crawler was throttled (account concurrency below MaxConcurrency plus PriorityMaxConcurrency, its two event source mappings together).',
      crawler.fn.metricThrottles({ statistic: 'Sum', period }),
    );

    // ------------------------------------------------------------ dashboard
    // The body is infra/dashboard.json itself (the SAM template holds it compacted; infra/tests
    // check both): the functions' EMF metrics, queues, Lambda and DynamoDB.
    const dashboardBody = JSON.stringify(
      JSON.parse(readFileSync(join(REPO_ROOT, 'infra', 'dashboard.json'), 'utf8')),
    );
    const dashboard = new cloudwatch.CfnDashboard(this, 'Dashboard', {
      dashboardBody: Fn.sub(dashboardBody),
    });
    dashboard.overrideLogicalId('Dashboard');

    // ------------------------------------------------------------ outputs
    const output = (id: string, value: string, description?: string): void => {
      new CfnOutput(this, id, { value, description });
    };
    output('DashboardName', dashboard.ref, 'The CloudWatch dashboard of this stack.');
    output('TableName', table.tableName, 'DynamoDB table (TRAWL_TABLE).');
    output('BucketName', bucket.bucketName, 'S3 bucket (TRAWL_BUCKET).');
    output('CrawlQueueUrl', crawlQueue.queueUrl, 'Crawl queue (TRAWL_QUEUE_URL).');
    output(
      'PriorityCrawlQueueUrl',
      priorityCrawlQueue.queueUrl,
      'Priority crawl queue (TRAWL_PRIORITY_QUEUE_URL).',
    );
    output(
      'PriorityQueueFrom',
      priorityFrom.valueAsString,
      'The lowest priority whose turns go to the priority crawl queue (TRAWL_PRIORITY_FROM).',
    );
    output(
      'CrawlDeadLetterQueueUrl',
      crawlDeadLetterQueue.queueUrl,
      'Crawl dead-letter queue (of both crawl queues).',
    );
    output('DeliveryQueueUrl', deliveryQueue.queueUrl, 'Delivery queue (TRAWL_DELIVERY_QUEUE_URL).');
    output(
      'DeliveryDeadLetterQueueUrl',
      deliveryDeadLetterQueue.queueUrl,
      'Delivery dead-letter queue.',
    );
    output(
      'SeedQueueUrl',
      seedQueue.queueUrl,
      'Seed queue (TRAWL_SEED_QUEUE_URL); `trawl submit` sends seed requests to it.',
    );
    output('SeedDeadLetterQueueUrl', seedDeadLetterQueue.queueUrl, 'Seed dead-letter queue.');
    output('ShardCount', shards.valueAsString, 'Status-index shards (TRAWL_SHARDS).');
    output('KeyPrefix', prefix.valueAsString, 'Key prefix in the bucket (TRAWL_PREFIX).');
    output(
      'SeederFunctionName',
      seeder.fn.functionName,
      'The seeder (triggered by the seed queue; may also be invoked directly).',
    );
    output('CrawlerFunctionName', crawler.fn.functionName);
    output('SweeperFunctionName', sweeper.fn.functionName);
    output('DelivererFunctionName', deliverer.fn.functionName);
  }
}
