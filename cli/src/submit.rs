//! `trawl --backend aws submit`: hands a crawl to the deployed functions. The seed requests go
//! to the seed queue (the seeder's trigger) and the command returns at once; the seeder, crawler,
//! sweeper and deliverer do the rest, and `trawl status --watch` follows them.

use crate::args::CrawlArgs;
use crate::crawl::Plan;
use crate::error::CliError;
use crate::output;
use serde_json::json;
use trawl_aws::sqs::SqsSeedQueue;
use trawl_core::continuation::SeedQueue;
use trawl_core::seed::{SeedRequest, SeedSource};

/// Largest message body sent: SQS takes 256 KiB; the rest is room for its own framing.
const MAX_MESSAGE_BYTES: usize = 240 * 1024;

/// Sends the crawl's seed requests to the seed queue; prints the crawl id.
pub async fn run(
    seed_queue: Option<&SqsSeedQueue>,
    args: &CrawlArgs,
    plan: Plan,
    json: bool,
) -> Result<(), CliError> {
    let Some(seed_queue) = seed_queue else {
        return Err(CliError::Usage(
            "no seed queue: pass --stack NAME (a stack deployed with `make deploy`), or set \
             TRAWL_SEED_QUEUE_URL"
                .into(),
        ));
    };
    let crawl_id = plan.crawl_id().clone();
    let requests = fitted(plan.requests(args))?;
    if requests.is_empty() {
        return Err(CliError::Usage(
            "nothing to submit: give seed URLs, --seeds-file FILE, --sitemap URL, --pages \
             TEMPLATE or --checkpoint VALUE"
                .into(),
        ));
    }
    for request in &requests {
        seed_queue.send(request).await.map_err(|e| {
            CliError::other(format!(
                "{e}; nothing seeded twice if you submit again (seeding is idempotent)"
            ))
        })?;
    }
    if json {
        output::json(&json!({
            "crawl_id": crawl_id.as_str(),
            "requests": requests.len(),
            "seed_queue": seed_queue.url(),
        }));
    } else {
        output::line(format_args!(
            "submitted crawl {crawl_id} ({} seed request(s)); follow it with `trawl --backend aws \
             status --crawl-id {crawl_id} --watch`",
            requests.len()
        ));
    }
    Ok(())
}

/// The requests, URL lists split until each fits in a message (in order: a checkpoint stays on
/// the last one).
fn fitted(requests: Vec<SeedRequest>) -> Result<Vec<SeedRequest>, CliError> {
    let mut fitted = Vec::new();
    let mut pending: Vec<SeedRequest> = requests.into_iter().rev().collect();
    while let Some(request) = pending.pop() {
        let size = serde_json::to_vec(&request).map_err(CliError::other)?.len();
        if size <= MAX_MESSAGE_BYTES {
            fitted.push(request);
            continue;
        }
        match &request.source {
            SeedSource::Urls(urls) if urls.len() > 1 => {
                let (head, tail) = urls.split_at(urls.len() / 2);
                // The checkpoint is stored once the request's last part is seeded.
                pending.push(SeedRequest {
                    source: SeedSource::Urls(tail.to_vec()),
                    ..request.clone()
                });
                pending.push(SeedRequest {
                    source: SeedSource::Urls(head.to_vec()),
                    checkpoint: None,
                    ..request.clone()
                });
            }
            _ => {
                return Err(CliError::Usage(format!(
                    "a seed request of {size} bytes does not fit in an SQS message \
                     ({MAX_MESSAGE_BYTES} bytes): shorten the URLs or the options"
                )));
            }
        }
    }
    Ok(fitted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use trawl_domain::canonical::CrawlId;
    use trawl_domain::crawl::CrawlConfig;

    #[test]
    fn long_url_lists_are_split_in_order_into_requests_that_fit_a_message() {
        // GIVEN 10,000 URLs of ~100 bytes (about 1 MB: four messages' worth) and a sitemap
        let urls: Vec<String> = (0..10_000)
            .map(|i| format!("https://example.com/{i:0>80}"))
            .collect();
        let sources = vec![
            SeedSource::Urls(urls.clone()),
            SeedSource::Sitemaps(vec!["https://example.com/sitemap.xml".into()]),
        ];

        // WHEN their requests (the last one with a checkpoint) are fitted to messages
        let crawl = CrawlId::parse("c").unwrap();
        let count = sources.len();
        let requests: Vec<SeedRequest> = sources
            .into_iter()
            .enumerate()
            .map(|(i, source)| SeedRequest {
                crawl_id: crawl.clone(),
                config: Some(CrawlConfig::default()),
                source,
                cursor: None,
                update_config: false,
                checkpoint: (i + 1 == count).then(|| "since".to_owned()),
                priority: None,
            })
            .collect();
        let requests = fitted(requests).unwrap();

        // THEN each fits, the URLs keep their order and none is lost, the sitemap comes last
        assert!(requests.len() > 4);
        for request in &requests {
            assert!(serde_json::to_vec(request).unwrap().len() <= MAX_MESSAGE_BYTES);
        }
        let mut sent = Vec::new();
        for request in &requests[..requests.len() - 1] {
            let SeedSource::Urls(part) = &request.source else {
                panic!("URLs first");
            };
            sent.extend(part.iter().cloned());
        }
        assert_eq!(sent, urls);
        assert!(matches!(
            requests.last().unwrap().source,
            SeedSource::Sitemaps(_)
        ));
        // AND only the last carries the checkpoint (stored once everything before is seeded)
        let checkpoints: Vec<_> = requests.iter().map(|r| r.checkpoint.as_deref()).collect();
        assert_eq!(checkpoints.last(), Some(&Some("since")));
        assert!(
            checkpoints[..checkpoints.len() - 1]
                .iter()
                .all(Option::is_none)
        );
    }

    #[test]
    fn a_split_url_list_keeps_its_checkpoint_on_its_last_part() {
        let urls: Vec<String> = (0..10_000)
            .map(|i| format!("https://example.com/{i:0>80}"))
            .collect();
        let request = SeedRequest {
            crawl_id: CrawlId::parse("c").unwrap(),
            config: None,
            source: SeedSource::Urls(urls),
            cursor: None,
            update_config: false,
            checkpoint: Some("since".into()),
            priority: None,
        };
        let requests = fitted(vec![request]).unwrap();
        assert!(requests.len() > 1);
        let checkpoints: Vec<_> = requests.iter().map(|r| r.checkpoint.as_deref()).collect();
        assert_eq!(checkpoints.last(), Some(&Some("since")));
        assert!(
            checkpoints[..checkpoints.len() - 1]
                .iter()
                .all(Option::is_none)
        );
    }
}
