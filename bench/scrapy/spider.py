"""The Scrapy side of trawl-bench's local crawl: the same fixture site, the same concurrency,
robots.txt obeyed, every page's body written to a file. Prints one JSON line: pages stored.

Run by trawl-bench with the interpreter of its own virtualenv (bench/README.md):
    python spider.py START_URL OUT_DIR CONCURRENCY
"""

import hashlib
import json
import os
import sys
from urllib.parse import urlparse

import scrapy
from scrapy.crawler import CrawlerProcess


class SiteSpider(scrapy.Spider):
    name = "fixture"

    def __init__(self, start, out, **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start]
        self.allowed_domains = [urlparse(start).hostname]
        self.out = out
        # Scrapy fetches its start URL again when a page links to it (start requests bypass the
        # duplicate filter): pages are counted once each.
        self.stored = set()

    def parse(self, response):
        # Stored like trawl's bodies: one file per page, named by its md5.
        body = response.body
        name = hashlib.md5(body).hexdigest()
        with open(os.path.join(self.out, name), "wb") as f:
            f.write(body)
        self.stored.add(response.url)
        yield from response.follow_all(css="a")

    def closed(self, reason):
        print(json.dumps({"pages": len(self.stored), "reason": reason}), flush=True)


def main():
    start, out, concurrency = sys.argv[1], sys.argv[2], int(sys.argv[3])
    process = CrawlerProcess(
        settings={
            "CONCURRENT_REQUESTS": concurrency,
            "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency,
            "DOWNLOAD_DELAY": 0,
            "ROBOTSTXT_OBEY": True,
            "LOG_LEVEL": "WARNING",
            "TELNETCONSOLE_ENABLED": False,
            "COOKIES_ENABLED": False,
            "DEPTH_LIMIT": 0,
        }
    )
    process.crawl(SiteSpider, start=start, out=out)
    process.start()


if __name__ == "__main__":
    main()
