"""Reads a delivery with warcio, the reference WARC reader (issue 29): every record of every
delivered `pages-*.warc.gz`, its digests checked, and, on the segment layout, each manifest
line's (object, offset, length) opened on its own, as a CDX index's reader would.

Usage: warcio_check.py DELIVERY_DIR. Prints one JSON object of counts; exits non-zero (with the
reason on stderr) when a record is unreadable or a manifest offset opens the wrong record.
"""

import glob
import gzip
import hashlib
import io
import json
import os
import sys

from warcio.archiveiterator import ArchiveIterator


def read_warc(path):
    """Reads every record of the WARC file at `path`, digests checked: how many there are, and
    the responses' target URIs."""
    records, uris = 0, []
    with open(path, "rb") as stream:
        for record in ArchiveIterator(stream, check_digests="raise"):
            record.content_stream().read()
            records += 1
            if record.rec_type == "response":
                uris.append(record.rec_headers.get_header("WARC-Target-URI"))
    return records, uris


def main(delivery):
    counts = {"files": 0, "records": 0, "responses": 0, "manifest_offsets": 0,
              "changed_files": 0, "changed_uris": []}
    for path in sorted(glob.glob(os.path.join(delivery, "pages-*.warc.gz"))):
        counts["files"] += 1
        records, uris = read_warc(path)
        counts["records"] += records
        counts["responses"] += len(uris)
    # The pages new or changed since the previous delivery (`--deliver-pages changed`).
    for path in sorted(glob.glob(os.path.join(delivery, "changed-*.warc.gz"))):
        counts["changed_files"] += 1
        counts["changed_uris"].extend(read_warc(path)[1])
    counts["changed_uris"].sort()
    for path in sorted(glob.glob(os.path.join(delivery, "manifest-*.jsonl.gz"))):
        with gzip.open(path, "rt") as lines:
            for line in lines:
                page = json.loads(line)
                if page.get("offset") is None:
                    continue
                # Only the span's bytes: the record must lie whole within them.
                with open(page["object"], "rb") as stream:
                    stream.seek(page["offset"])
                    span = io.BytesIO(stream.read(page["length"]))
                record = next(iter(ArchiveIterator(span, check_digests="raise")))
                body = record.content_stream().read()
                uri = record.rec_headers.get_header("WARC-Target-URI")
                wanted = page.get("final_url") or page["url"]
                problems = [
                    f"a {record.rec_type} record" if record.rec_type != "response" else None,
                    f"the record of {uri}" if uri != wanted else None,
                    "another body" if hashlib.md5(body).hexdigest() != page["md5"] else None,
                ]
                problems = [p for p in problems if p]
                if problems:
                    sys.exit(f"{page['url']}: offset {page['offset']} opens {', '.join(problems)}")
                counts["manifest_offsets"] += 1
    print(json.dumps(counts))


if __name__ == "__main__":
    main(sys.argv[1])
