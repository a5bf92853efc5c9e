//! What the `trawl` binary refuses, and how: one line naming the input and the problem, no
//! secret echoed, nothing created or changed by a refused run.

use crate::cli::{assert_one_error_line, temp_dir, trawl};
use std::path::PathBuf;

/// A new directory for a test, and the data directory path inside it (not created).
fn dir_and_data(name: &str) -> (PathBuf, String) {
    let dir = temp_dir(name);
    let data = dir.join("data").to_str().unwrap().to_owned();
    (dir, data)
}

#[tokio::test]
async fn a_refused_url_never_echoes_its_password() {
    // GIVEN URLs holding a password, as a proxy, a seed, a sitemap and a seeds file's line
    let (dir, data) = dir_and_data("redact");
    let data = data.as_str();
    let seeds = dir.join("seeds.txt");
    std::fs::write(&seeds, "http://bob:hunter2@example.com/\n").unwrap();
    let seeds = seeds.to_str().unwrap();
    let cases: [(&[&str], &str); 5] = [
        (
            &[
                "http://example.com/",
                "--proxy",
                "http://bob:hunter2@proxy:3128",
            ],
            "--proxy-basic-env",
        ),
        (
            &[
                "http://example.com/",
                "--proxy",
                "ftp://bob:hunter2@proxy:21",
            ],
            "--proxy",
        ),
        (&["http://bob:hunter2@example.com/"], "credentials"),
        (
            &["--sitemap", "https://bob:hunter2@example.com/s.xml"],
            "credentials",
        ),
        (&["--seeds-file", seeds], "credentials"),
    ];
    for (given, problem) in cases {
        let mut args = vec!["crawl", "--data-dir", data];
        args.extend(given);
        for json in [false, true] {
            if json {
                args.push("--json");
            }
            // WHEN the crawl is asked for
            let output = trawl(&args, &dir).await;

            // THEN it is refused on one line that shows the URL without the password
            assert_one_error_line(&args, &output, 2, problem, "://***@");
            let printed = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            assert!(!printed.contains("hunter2"), "{args:?}: {printed}");
        }
    }
    assert!(!std::path::Path::new(data).exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_refused_crawl_creates_nothing() {
    // GIVEN configurations that are not JSON, or name an invalid pattern, and a header with a
    // line break
    let (dir, data) = dir_and_data("refused-creates-nothing");
    let data = data.as_str();
    let file = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let not_json = file("not-json.json", "{scope");
    let bad_pattern = file("pattern.json", r#"{"scope": {"exclude": ["(abc"]}}"#);
    let bad_per_host = file("per-host.json", r#"{"politeness": {"per_host": 0}}"#);
    let cases: [(&[&str], &str); 4] = [
        (&["--config", &not_json], "not a crawl configuration"),
        (&["--config", &bad_pattern], "exclude"),
        (&["--config", &bad_per_host], "politeness.per_host"),
        (&["--header", "X-Split: a\r\nInjected: b"], "fetch.headers"),
    ];
    for (given, problem) in cases {
        let mut args = vec!["crawl", "http://example.com/", "--data-dir", data];
        args.extend(given);

        // WHEN the crawl is asked for
        let output = trawl(&args, &dir).await;

        // THEN it is refused, and no data directory (nor an empty trawl.db) is left behind
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(problem), "{args:?}: {stderr}");
        assert!(
            !std::path::Path::new(data).exists(),
            "{args:?} created {data}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_config_naming_an_unset_variable_is_refused_at_start_naming_it() {
    // GIVEN a site, and a configuration whose credentials are read from variables not set
    let site = crate::cli::linked_site(1).await;
    let (dir, data) = dir_and_data("unset-variable");
    let data = data.as_str();
    let bearer = dir.join("bearer.json");
    std::fs::write(
        &bearer,
        format!(
            r#"{{"fetch": {{"auth": [{{"host": "{}", "bearer": {{"env": "TRAWL_TEST_UNSET_TOKEN"}}}}]}}}}"#,
            site.addr()
        ),
    )
    .unwrap();
    let proxy = dir.join("proxy.json");
    std::fs::write(
        &proxy,
        r#"{"fetch": {"proxies": [{"url": "http://127.0.0.1:9",
            "username": {"env": "TRAWL_TEST_UNSET_USER"}, "password": {"env": "TRAWL_TEST_UNSET_PASSWORD"}}]}}"#,
    )
    .unwrap();
    let start = site.url("/p/0.html");
    for (config, variable) in [
        (&bearer, "TRAWL_TEST_UNSET_TOKEN"),
        (&proxy, "TRAWL_TEST_UNSET_USER"),
    ] {
        let args = [
            "crawl",
            &start,
            "--allow-private-networks",
            "--config",
            config.to_str().unwrap(),
            "--data-dir",
            data,
        ];

        // WHEN it is crawled
        let output = trawl(&args, &dir).await;

        // THEN the crawl is refused at start, naming the variable, as the flags are
        assert_one_error_line(&args, &output, 2, variable, "is not set");
    }
    // AND the server was never asked, nor anything created
    assert_eq!(site.total_hits(), 0);
    assert!(!std::path::Path::new(data).exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn every_refused_configuration_is_one_line_naming_the_field_and_the_problem() {
    // GIVEN configurations with a bad CSS selector, XPath or regular expression in each place
    // that takes one
    let (dir, data) = dir_and_data("config-one-line");
    let data = data.as_str();
    let extract =
        |field: &str| format!(r#"{{"extract": [{{"name": "x", "fields": {{"t": {field}}}}}]}}"#);
    let cases = [
        (
            extract(r#"{"css": "a >"}"#),
            "extract[0].fields.t",
            "dangling combinator",
        ),
        (
            extract(r#"{"css": "a[["}"#),
            "extract[0].fields.t",
            "attribute selector",
        ),
        (
            extract(r#"{"css": ":nope"}"#),
            "extract[0].fields.t",
            "unsupported pseudo",
        ),
        (
            extract(r#"{"xpath": "//a[["}"#),
            "extract[0].fields.t",
            "invalid XPath",
        ),
        (
            extract(r#"{"css": "a", "regex": "[z"}"#),
            "extract[0].fields.t",
            "unclosed character class",
        ),
        (
            r#"{"extract": [{"name": "x", "match": "(abc", "fields": {"t": {"css": "a"}}}]}"#
                .to_owned(),
            "extract[0]",
            "unclosed group",
        ),
        (
            r#"{"scope": {"include": ["ok", "(abc"]}}"#.to_owned(),
            "include",
            "unclosed group",
        ),
        (
            r#"{"recrawl": {"rules": [{"match": "(abc", "interval_ms": 60000}]}}"#.to_owned(),
            "recrawl.rules[0]",
            "unclosed group",
        ),
        (
            r#"{"recrawl": {"soft_404": [{"match": "(abc", "selector": "h1"}]}}"#.to_owned(),
            "recrawl.soft_404[0]",
            "unclosed group",
        ),
        (
            r#"{"fetch": {"rules": [{"match": "(abc", "headers": {"X-A": "b"}}]}}"#.to_owned(),
            "fetch.rules[0]",
            "unclosed group",
        ),
    ];
    for (i, (config, field, problem)) in cases.iter().enumerate() {
        let path = dir.join(format!("config-{i}.json"));
        std::fs::write(&path, config).unwrap();
        let args = [
            "crawl",
            "http://example.com/",
            "--config",
            path.to_str().unwrap(),
            "--data-dir",
            data,
        ];

        // WHEN a crawl is asked for with it
        let output = trawl(&args, &dir).await;

        // THEN it is refused on one line naming the field and the problem, and nothing more
        assert_one_error_line(&args, &output, 2, field, problem);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("report this"), "{config}: {stderr}");
    }

    // AND so are the patterns of `recrawl --only` and `refetch --match`
    let crawl = trawl(&["crawl", "http://127.0.0.1:9/", "--data-dir", data], &dir).await;
    assert_eq!(crawl.status.code(), Some(3), "a crawl to rewind");
    for (command, flag) in [("recrawl", "--only"), ("refetch", "--match")] {
        let args = [command, flag, "(abc", "--detach", "--data-dir", data];
        let output = trawl(&args, &dir).await;
        assert_one_error_line(&args, &output, 2, &flag[2..], "unclosed group");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn purging_an_unknown_crawl_fails_on_one_line_and_a_known_one_once() {
    // GIVEN a data directory with one crawl
    let site = crate::cli::linked_site(2).await;
    let (dir, data) = dir_and_data("purge-unknown");
    let data = data.as_str();
    let start = site.url("/p/0.html");
    let crawl = trawl(
        &[
            "crawl",
            &start,
            "--allow-private-networks",
            "--crawl-id",
            "known",
            "--data-dir",
            data,
        ],
        &dir,
    )
    .await;
    assert!(
        crawl.status.success(),
        "{}",
        String::from_utf8_lossy(&crawl.stderr)
    );

    // WHEN a crawl that is not there is purged, THEN it fails on one line, as other commands do
    let args = ["purge", "--crawl-id", "nope", "--data-dir", data];
    let output = trawl(&args, &dir).await;
    assert_one_error_line(&args, &output, 1, "no crawl \"nope\"", "see `trawl status`");

    // AND the known crawl is purged once; a second purge finds nothing
    let args = ["purge", "--crawl-id", "known", "--data-dir", data];
    let output = trawl(&args, &dir).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let again = trawl(&args, &dir).await;
    assert_one_error_line(&args, &again, 1, "no crawl \"known\"", "see `trawl status`");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_damaged_database_is_refused_at_open_never_crawled_over() {
    // GIVEN a crawled site, its database checkpointed (all of it in trawl.db), and copies of
    // the data directory whose trawl.db is overwritten in the middle or cut to half its size
    let site = crate::cli::linked_site(20).await;
    let start = site.url("/p/0.html");
    let dir = temp_dir("damaged-db");
    let crawled = dir.join("crawled");
    let crawl = [
        "crawl",
        &start,
        "--allow-private-networks",
        "--crawl-id",
        "c",
    ];
    let mut args = crawl.to_vec();
    args.extend(["--data-dir", crawled.to_str().unwrap()]);
    let output = trawl(&args, &dir).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    rusqlite::Connection::open(crawled.join("trawl.db"))
        .unwrap()
        .pragma_update(None, "wal_checkpoint", "TRUNCATE")
        .unwrap();
    let good = std::fs::read(crawled.join("trawl.db")).unwrap();
    const PAGE: usize = 4096;
    assert!(
        good.len() >= 8 * PAGE,
        "pages enough to damage: {}",
        good.len()
    );
    let mut overwritten = good.clone();
    let middle = good.len() / 2 / PAGE * PAGE;
    overwritten[middle..middle + PAGE].fill(0xA5);
    let halved = good[..good.len() / 2].to_vec();
    let hits = site.total_hits();

    for (name, content) in [("overwritten", overwritten), ("halved", halved)] {
        let data = dir.join(name);
        std::fs::create_dir(&data).unwrap();
        let db = data.join("trawl.db");
        std::fs::write(&db, &content).unwrap();
        let data = data.to_str().unwrap();
        let commands: [&[&str]; 3] = [
            &crawl,
            &["status", "--json"],
            &["tasks", "list", "--status", "succeeded"],
        ];
        for command in commands {
            let mut args = command.to_vec();
            args.extend(["--data-dir", data]);

            // WHEN a crawl or any other command runs there
            let output = trawl(&args, &dir).await;

            // THEN it is refused on one line naming the file and the damage, which is left as
            // it was
            assert_one_error_line(&args, &output, 1, "damaged", "move it away or restore it");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(stderr.contains(db.to_str().unwrap()), "{args:?}: {stderr}");
            assert!(std::fs::read(&db).unwrap() == content, "{name}: untouched");
        }
    }
    // AND nothing was fetched again
    assert_eq!(site.total_hits(), hits);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn following_the_blocked_hint_crawls_the_refused_seeds() {
    // GIVEN a crawl of a loopback site without --allow-private-networks: its seed refused
    let site = crate::cli::linked_site(3).await;
    let start = site.url("/p/0.html");
    let (dir, data) = dir_and_data("blocked-hint");
    let data = data.as_str();
    let crawl = [
        "crawl",
        &start,
        "--crawl-id",
        "c",
        "--max-pages",
        "50",
        "--data-dir",
        data,
    ];
    let mut first = crawl.to_vec();
    first.push("--json");
    let output = trawl(&first, &dir).await;
    assert_one_error_line(&first, &output, 3, "blocked", "--update-config");
    assert_eq!(site.total_hits(), 0);

    // WHEN the user does what the hint says, and nothing else: the same command with the
    // flags it names
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("the same crawl command with --allow-private-networks --update-config"),
        "{stderr}"
    );
    assert!(!stderr.contains("trawl retry"), "no retry needed: {stderr}");
    let mut again = crawl.to_vec();
    again.extend(["--allow-private-networks", "--update-config"]);
    let output = trawl(&again, &dir).await;

    // THEN the update re-admits the refused seed, and the site is crawled
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{said}");
    assert!(
        said.contains("1 refused task(s) re-admitted by the updated config"),
        "{said}"
    );
    let status = trawl(&["status", "--json", "--data-dir", data], &dir).await;
    let status = crate::cli::json_of(&status);
    assert_eq!(status["crawls"][0]["counts"]["succeeded"], 3, "{status}");
    let _ = std::fs::remove_dir_all(dir);
}
