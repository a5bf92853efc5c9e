//! What the `trawl` binary refuses, and how: one line naming the input and the problem, no
//! secret echoed, nothing created or changed by a refused run.

use crate::cli::{assert_one_error_line, temp_dir, trawl};

#[tokio::test]
async fn a_refused_url_never_echoes_its_password() {
    // GIVEN URLs holding a password, as a proxy, a seed, a sitemap and a seeds file's line
    let dir = temp_dir("redact");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
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
