//! AWS clients, built once per process from one `SdkConfig`.
//!
//! The SDK reads `AWS_ENDPOINT_URL` (and per-service variants) itself, so pointing trawl at moto
//! or LocalStack needs no code path of its own; S3 then needs path-style addressing.

pub use aws_config::SdkConfig;

use aws_config::{BehaviorVersion, ConfigLoader};
use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};

/// Loads region, credentials and endpoint from the environment (the default provider chain).
pub async fn load_config() -> SdkConfig {
    config_loader().load().await
}

/// The SDK's default loader with trawl's HTTP client: rustls on ring. The workspace builds the SDK
/// without its default HTTPS client (aws-lc-rs), so a config loaded any other way has no client.
pub fn config_loader() -> ConfigLoader {
    let client = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    aws_config::defaults(BehaviorVersion::latest()).http_client(client)
}

/// The clients trawl uses, derived from one config.
#[derive(Debug, Clone)]
pub struct Clients {
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub s3: aws_sdk_s3::Client,
    pub sqs: aws_sdk_sqs::Client,
    /// The crawler's named secrets (`ssm::SsmSecrets`).
    pub ssm: aws_sdk_ssm::Client,
}

impl Clients {
    pub fn new(config: &SdkConfig) -> Self {
        // Emulators serve buckets by path, not by virtual host (which needs DNS per bucket).
        let s3_config = aws_sdk_s3::config::Builder::from(config)
            .force_path_style(config.endpoint_url().is_some())
            .build();
        Self {
            dynamodb: aws_sdk_dynamodb::Client::new(config),
            s3: aws_sdk_s3::Client::from_conf(s3_config),
            sqs: aws_sdk_sqs::Client::new(config),
            ssm: aws_sdk_ssm::Client::new(config),
        }
    }
}
