//! The link graph the capacity simulator crawls: `hosts` hosts of Zipf(1) sizes (as
//! `Workload::zipf`), each page linking to
//! - the host's template: its first `TEMPLATE` pages, and one popular host's home page (a share
//!   button), the same on every page of the host;
//! - its `CHILDREN` children in the host (page p: pages p·CHILDREN+1 …), so that following
//!   links from a host's home page reaches every page of it;
//! - `CROSS` pages of other hosts drawn by Zipf(1) popularity (the biggest hosts are the most
//!   linked: a handful of them from most pages), half their home page and half any page.
//!
//! Deterministic: a page's links are drawn from a generator seeded by the page.

use crate::frontier::Workload;

/// A host's own pages on every one of its pages (home, about, contact).
const TEMPLATE: u64 = 3;
/// Pages of its own host each page links to for the first time (a tree from the home page).
const CHILDREN: u64 = 3;
/// Links to pages of other hosts per page.
const CROSS: usize = 4;

/// A link: (host, page of that host).
pub type Link = (usize, u64);

pub struct LinkGraph {
    /// Pages per host, biggest (and most linked) first.
    pub sizes: Vec<u64>,
    /// Cumulative Zipf(1) popularity by rank.
    popularity: Vec<f64>,
}

impl LinkGraph {
    pub fn new(urls: u64, hosts: usize) -> Self {
        let sizes = Workload::zipf(urls, hosts).sizes;
        let mut sum = 0.0;
        let popularity = (1..=sizes.len())
            .map(|rank| {
                sum += 1.0 / rank as f64;
                sum
            })
            .collect();
        Self { sizes, popularity }
    }

    pub fn urls(&self) -> u64 {
        self.sizes.iter().sum()
    }

    /// A host drawn by popularity.
    fn popular(&self, rng: &mut fastrand::Rng) -> usize {
        let total = self.popularity.last().copied().unwrap_or(0.0);
        let x = rng.f64() * total;
        self.popularity
            .partition_point(|&c| c <= x)
            .min(self.sizes.len().saturating_sub(1))
    }

    /// The popular host every page of `host` links to (its template's share button).
    pub fn template_host(&self, host: usize) -> usize {
        self.popular(&mut fastrand::Rng::with_seed(host as u64))
    }

    /// The links of `page` of `host`, template first.
    pub fn links(&self, host: usize, page: u64) -> Vec<Link> {
        let size = self.sizes[host];
        let mut links: Vec<Link> = (0..TEMPLATE.min(size)).map(|p| (host, p)).collect();
        links.push((self.template_host(host), 0));
        let first = page * CHILDREN + 1;
        links.extend(
            (first..first + CHILDREN)
                .filter(|&c| c < size)
                .map(|c| (host, c)),
        );
        let mut rng = fastrand::Rng::with_seed(((host as u64) << 32) ^ page ^ 0x5eed);
        for _ in 0..CROSS {
            let to = self.popular(&mut rng);
            let page = if rng.bool() {
                0
            } else {
                rng.u64(0..self.sizes[to])
            };
            links.push((to, page));
        }
        links
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashSet};

    #[test]
    fn following_links_from_the_home_pages_reaches_every_page_once_known() {
        let graph = LinkGraph::new(5_000, 200);
        let mut known: HashSet<Link> = (0..graph.sizes.len()).map(|h| (h, 0)).collect();
        let mut todo: Vec<Link> = known.iter().copied().collect();
        while let Some((host, page)) = todo.pop() {
            for link in graph.links(host, page) {
                assert!(link.1 < graph.sizes[link.0], "{link:?} past its host");
                if known.insert(link) {
                    todo.push(link);
                }
            }
        }
        assert_eq!(known.len() as u64, graph.urls());
        // The same page, the same links.
        assert_eq!(graph.links(7, 3), graph.links(7, 3));
    }

    #[test]
    fn every_page_carries_its_template_and_a_handful_of_hosts_are_linked_from_most_pages() {
        let graph = LinkGraph::new(50_000, 5_000);
        let mut pages = 0;
        let mut linking_top = 0;
        let mut linked_hosts = vec![0u64; graph.sizes.len()];
        for host in 0..graph.sizes.len() {
            let share = graph.template_host(host);
            for page in 0..graph.sizes[host] {
                let links = graph.links(host, page);
                let others: BTreeSet<usize> = links
                    .iter()
                    .map(|&(h, _)| h)
                    .filter(|&h| h != host)
                    .collect();
                assert!(links.contains(&(host, 0)) && links.contains(&(share, 0)));
                pages += 1;
                if others.iter().any(|&h| h < 5) {
                    linking_top += 1;
                }
                for h in others {
                    linked_hosts[h] += 1;
                }
            }
        }
        // The 5 most popular hosts (of 5,000) are linked from most pages, the first the most.
        assert!(linking_top * 2 > pages, "{linking_top} of {pages}");
        let most = linked_hosts.iter().copied().max().unwrap();
        assert_eq!(linked_hosts[0], most);
        assert!(linked_hosts[0] > 100 * linked_hosts[1_000].max(1));
    }
}
