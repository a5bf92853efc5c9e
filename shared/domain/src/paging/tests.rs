use super::*;
use proptest::prelude::*;

fn range(t: &str, start: Option<i64>, stop: Option<i64>, step: Option<i64>) -> PageTemplate {
    PageTemplate {
        start,
        stop,
        step,
        ..PageTemplate::open(t, None)
    }
}

fn pattern(template: &PageTemplate) -> PagePattern {
    PagePattern::new(template, |url| url).unwrap()
}

#[test]
fn ranges_follow_python_semantics() {
    let t = range("http://x/p/{page}", Some(1), Some(6), Some(2));
    assert_eq!(t.validate(), Ok(3));
    let pages: Vec<_> = (0..4).map(|i| t.page(i, None)).collect();
    assert_eq!(
        pages,
        [
            Some("http://x/p/1".into()),
            Some("http://x/p/3".into()),
            Some("http://x/p/5".into()),
            None
        ]
    );
    let down = range("http://x/?p={page}", Some(3), Some(0), Some(-1));
    assert_eq!(down.validate(), Ok(3));
    assert_eq!(down.page(2, None).as_deref(), Some("http://x/?p=1"));
    assert_eq!(range_len(0, 10, 1), 10);
    assert_eq!(range_len(5, 5, 1), 0);
    assert_eq!(range_len(0, 10, -1), 0);
    assert_eq!(t.seeded_pages(), 3);
}

#[test]
fn values_open_templates_and_invalid_ones() {
    let t = PageTemplate {
        values: Some(vec!["a".into(), "b".into()]),
        ..PageTemplate::open("https://x/cat/{page}/", None)
    };
    assert_eq!(t.validate(), Ok(2));
    assert_eq!(t.page(1, None).as_deref(), Some("https://x/cat/b/"));

    // Without stop or values: open-ended from 1 (or its start), its cap the page count, and
    // only its first page seeded.
    let open = PageTemplate::open("https://x/list?page={page}", None);
    assert!(open.is_open());
    assert_eq!(open.validate(), Ok(DEFAULT_OPEN_PAGES));
    assert_eq!(open.seeded_pages(), 1);
    assert_eq!(open.page(0, None).as_deref(), Some("https://x/list?page=1"));
    let capped = PageTemplate {
        max_pages: Some(3),
        yields: Some(Yield::Items),
        ..PageTemplate::open("https://x/list?page={page}", Some(0))
    };
    assert_eq!(capped.validate(), Ok(3));
    assert_eq!(
        capped.page(2, None).as_deref(),
        Some("https://x/list?page=2")
    );
    assert_eq!(capped.page(3, None), None);

    let bad = [
        (
            range("http://x/p", Some(1), Some(2), None),
            TemplateError::NoPlaceholder("http://x/p".into()),
        ),
        (
            range("http://{page}.x/", Some(1), Some(2), None),
            TemplateError::PlaceholderInHost("http://{page}.x/".into()),
        ),
        (
            PageTemplate::open("http://x.{since}/{page}", None),
            TemplateError::PlaceholderInHost("http://x.{since}/{page}".into()),
        ),
        (
            range("/relative/{page}", Some(1), Some(2), None),
            TemplateError::NotAbsolute("/relative/{page}".into()),
        ),
        (
            PageTemplate::open("ftp://x/{page}", None),
            TemplateError::NotAbsolute("ftp://x/{page}".into()),
        ),
        (
            range("http://x/{page}", Some(1), Some(5), Some(0)),
            TemplateError::ZeroStep("http://x/{page}".into()),
        ),
        (
            range("http://x/{page}", None, Some(5), None),
            TemplateError::Shape("http://x/{page}".into()),
        ),
        (
            range("http://x/{page}", Some(5), Some(1), None),
            TemplateError::Empty("http://x/{page}".into()),
        ),
        (
            range("http://x/{page}", Some(0), Some(2_000_000), None),
            TemplateError::TooMany {
                template: "http://x/{page}".into(),
                count: 2_000_000,
            },
        ),
        (
            PageTemplate {
                max_pages: Some(5),
                ..range("http://x/{page}", Some(1), Some(3), None)
            },
            TemplateError::OpenOnly("http://x/{page}".into()),
        ),
        (
            PageTemplate {
                max_pages: Some(0),
                ..PageTemplate::open("http://x/{page}", None)
            },
            TemplateError::Empty("http://x/{page}".into()),
        ),
        (
            PageTemplate::open("http://x/{page}{since}", None),
            TemplateError::Adjacent("http://x/{page}{since}".into()),
        ),
    ];
    for (template, error) in bad {
        assert_eq!(template.validate(), Err(error), "{template:?}");
    }
}

#[test]
fn since_is_the_checkpoint_percent_encoded_and_empty_without_one() {
    let t = PageTemplate::open("https://api.x/changes?since={since}&page={page}", None);
    assert_eq!(
        t.page(0, Some("2026-11-27T10:00:00.000Z")).as_deref(),
        Some("https://api.x/changes?since=2026-11-27T10%3A00%3A00.000Z&page=1")
    );
    assert_eq!(
        t.page(1, None).as_deref(),
        Some("https://api.x/changes?since=&page=2")
    );
}

#[test]
fn a_pattern_reads_its_pages_in_canonical_form_and_carries_since() {
    // GIVEN a template whose query canonicalisation sorts (`since` after `page`)
    let t = PageTemplate::open("https://api.x/changes?since={since}&page={page}", Some(1));
    let p = pattern(&t);

    // WHEN its first page, seeded with a checkpoint, is read back as a task URL
    let first = CanonicalUrl::parse(&t.page(0, Some("2026-11-27T10:00:00Z")).unwrap()).unwrap();
    let at = p.page_of(first.as_str()).unwrap();

    // THEN it is page index 0 with its since, and the next page keeps that since
    assert_eq!(at.index, 0);
    let PageStep::Next(next) = next_page(
        &p,
        &at,
        PageYield {
            new_links: 3,
            ..PageYield::default()
        },
    ) else {
        panic!("stopped");
    };
    let second = CanonicalUrl::parse(&t.page(1, Some("2026-11-27T10:00:00Z")).unwrap()).unwrap();
    assert_eq!(next, second.as_str());
    assert_eq!(p.page_of(&next).map(|a| a.index), Some(1));

    // AND URLs that are not its pages are not
    for other in [
        "https://api.x/changes?page=abc&since=",
        "https://api.x/changes?page=1",
        "https://api.x/other?page=1&since=",
        "https://api.x/changes?page=1&since=&x=1",
    ] {
        assert_eq!(p.page_of(other), None, "{other}");
    }
}

#[test]
fn a_page_goes_on_only_while_it_yields_by_its_rule_and_below_the_cap() {
    let t = |rule: Yield| PageTemplate {
        yields: Some(rule),
        max_pages: Some(3),
        ..PageTemplate::open("http://x/l?p={page}", Some(1))
    };
    let links = PageYield {
        new_links: 1,
        ..PageYield::default()
    };
    let items = PageYield {
        items: 2,
        ..PageYield::default()
    };
    let body = PageYield {
        body: true,
        ..PageYield::default()
    };
    let at = |index| PageOf {
        index,
        since: String::new(),
    };
    // (rule, what the page yielded, page index) → the step
    let table = [
        (Yield::NewLinks, links, 0, Some("http://x/l?p=2")),
        (Yield::NewLinks, items, 0, None),
        (Yield::Items, items, 1, Some("http://x/l?p=3")),
        (Yield::Items, links, 1, None),
        (Yield::Body, body, 0, Some("http://x/l?p=2")),
        (Yield::Body, PageYield::default(), 0, None),
    ];
    for (rule, yielded, index, expected) in table {
        let step = next_page(&pattern(&t(rule)), &at(index), yielded);
        match expected {
            Some(url) => assert_eq!(step, PageStep::Next(url.into()), "{rule:?}"),
            None => assert_eq!(
                step,
                PageStep::Stop(PagingStop::NothingYielded { rule }),
                "{rule:?} {yielded:?}"
            ),
        }
    }
    // The third page is the cap's: it stops whatever it yielded.
    assert_eq!(
        next_page(&pattern(&t(Yield::NewLinks)), &at(2), links),
        PageStep::Stop(PagingStop::Cap { max_pages: 3 })
    );
    assert_eq!(pattern(&t(Yield::NewLinks)).page_of("http://x/l?p=4"), None);
}

#[test]
fn bodies_yield_unless_blank_or_empty_json() {
    for (body, yields) in [
        (&b""[..], false),
        (b" \n\t", false),
        (b"<html><body>x</body></html>", true),
        (b"null", false),
        (b"[]", false),
        (b"{}", false),
        (b"[1]", true),
        (br#"{"results": [], "page": 21}"#, false),
        (br#"{"results": [{"id": 1}], "next": []}"#, true),
        (br#"{"id": 5}"#, true),
    ] {
        assert_eq!(
            body_yields(body),
            yields,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn templates_read_and_write_the_seed_requests_json() {
    let t: PageTemplate = serde_json::from_value(serde_json::json!({
        "template": "https://x/l?p={page}", "start": 2, "max_pages": 50, "while": "items"
    }))
    .unwrap();
    assert_eq!(t.yields, Some(Yield::Items));
    assert_eq!(t.cap(), 50);
    assert_eq!(
        serde_json::to_value(&t).unwrap()["while"],
        serde_json::json!("items")
    );
    let typo = serde_json::json!({"template": "https://x/{page}", "until": "items"});
    assert!(serde_json::from_value::<PageTemplate>(typo).is_err());
}

proptest! {
    /// Every page of an open-ended template is recognised as itself, and the next page the rule
    /// gives is the template's next one, up to the cap.
    #[test]
    fn every_page_reads_back_and_leads_to_the_next(
        start in -1_000i64..1_000,
        step in prop_oneof![-5i64..=-1, 1i64..=5],
        cap in 1u64..50,
        index in 0u64..60,
        since in "[ -~]{0,12}",
    ) {
        let t = PageTemplate {
            step: Some(step),
            max_pages: Some(cap),
            ..PageTemplate::open("http://x/a/{page}/b?s={since}&z=1", Some(start))
        };
        let p = pattern(&t);
        let Some(raw) = t.page(index, Some(&since)) else {
            prop_assert!(index >= cap);
            return Ok(());
        };
        let url = CanonicalUrl::parse(&raw).unwrap();
        let at = p.page_of(url.as_str()).unwrap();
        prop_assert_eq!(at.index, index);
        let yielded = PageYield { new_links: 1, ..PageYield::default() };
        match next_page(&p, &at, yielded) {
            PageStep::Next(next) => {
                prop_assert!(index + 1 < cap);
                let expected = CanonicalUrl::parse(&t.page(index + 1, Some(&since)).unwrap()).unwrap();
                prop_assert_eq!(next, expected.as_str().to_owned());
            }
            PageStep::Stop(stop) => {
                prop_assert_eq!(index + 1, cap);
                prop_assert_eq!(stop, PagingStop::Cap { max_pages: cap });
            }
        }
    }
}

#[test]
fn a_chain_ends_as_its_last_page_says() {
    let nothing = Some(PagingStop::NothingYielded {
        rule: Yield::NewLinks,
    });
    assert_eq!(
        chain_end("succeeded", nothing, None),
        ChainEnd::NothingYielded {
            rule: Yield::NewLinks
        }
    );
    assert_eq!(
        chain_end("succeeded", Some(PagingStop::Cap { max_pages: 9 }), None),
        ChainEnd::Cap { max_pages: 9 }
    );
    // A page fetched before that is now missing: its failure, whatever it recorded then.
    assert_eq!(
        chain_end("gone", nothing, Some("not_found".into())),
        ChainEnd::Failed {
            status: "gone".into(),
            error: Some("not_found".into())
        }
    );
    assert_eq!(chain_end("succeeded", None, None), ChainEnd::NotSeeded);
    assert_eq!(chain_end("failed", None, None), ChainEnd::Unfinished);
    assert_eq!(
        serde_json::to_value(ChainEnd::Cap { max_pages: 3 }).unwrap(),
        serde_json::json!({"reason": "cap", "max_pages": 3})
    );
}
