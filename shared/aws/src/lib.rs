//! trawl-aws: the AWS adapters of trawl-core's ports, through the real SDK. SDK errors are
//! classified once, by type, in `errors`; `app` builds each reader's App from its settings.

pub mod app;
pub mod clients;
pub mod dynamodb;
pub mod errors;
#[cfg(feature = "seed")]
pub mod manifest;
pub mod s3;
pub mod settings;
pub mod sqs;
pub mod ssm;
pub mod stack;
