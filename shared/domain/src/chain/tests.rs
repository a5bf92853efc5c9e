use super::*;
use serde_json::json;

fn data(value: Value) -> UserData {
    value.as_object().cloned().unwrap()
}

fn rule(value: Value) -> ChainRule {
    serde_json::from_value(value).unwrap()
}

fn values(pairs: &[(&str, Value)]) -> BTreeMap<String, Vec<Value>> {
    pairs
        .iter()
        .map(|(name, v)| {
            let list = match v {
                Value::Array(items) => items.clone(),
                other => vec![other.clone()],
            };
            ((*name).to_owned(), list)
        })
        .collect()
}

fn page() -> url::Url {
    url::Url::parse("https://api.example/items?page=1").unwrap()
}

#[test]
fn a_get_without_body_keeps_its_urls_id_and_a_post_body_is_part_of_the_identity() {
    let url = CanonicalUrl::parse("https://api.example/search").unwrap();
    assert_eq!(task_id(&url, None), url.task_id());
    assert_eq!(task_id(&url, Some(&data(json!({"sku": 1})))), url.task_id());
    assert_eq!(
        task_id(&url, Some(&data(json!({"_method": "GET"})))),
        url.task_id()
    );
    let post = |body: Value| task_id(&url, Some(&data(json!({"_method": "POST", "_body": body}))));
    let rust = post(json!({"q": "rust", "page": 1}));
    // Two bodies are two tasks; one body written in another key order is one.
    assert_ne!(rust, url.task_id());
    assert_ne!(rust, post(json!({"q": "go", "page": 1})));
    assert_eq!(rust, post(json!({"page": 1, "q": "rust"})));
    // A text body and a JSON string body with the same characters are different requests.
    assert_ne!(post(json!("q=rust")), post(json!({"q": "rust"})));
    // A POST without body is a task of its own too, and an id looks like any other.
    let bare = task_id(&url, Some(&data(json!({"_method": "post"}))));
    assert_ne!(bare, url.task_id());
    assert!(TaskId::parse(bare.as_str()).is_some());
}

#[test]
fn a_tasks_request_is_read_from_its_data_and_a_bad_one_is_refused_with_its_reason() {
    assert_eq!(TaskRequest::of_data(None), Ok(None));
    assert_eq!(TaskRequest::of_data(Some(&data(json!({"x": 1})))), Ok(None));
    let post = TaskRequest::of_data(Some(&data(json!({"_method": "POST", "_body": "a=1"}))));
    assert_eq!(
        post,
        Ok(Some(TaskRequest {
            method: HttpMethod::Post,
            body: Some(RequestBody::Text("a=1".into())),
        }))
    );
    let json_body =
        TaskRequest::of_data(Some(&data(json!({"_method": "POST", "_body": {"a": 1}}))));
    assert_eq!(
        json_body.unwrap().unwrap().body,
        Some(RequestBody::Json(json!({"a": 1})))
    );
    for (bad, reason) in [
        (json!({"_method": "DELETE"}), "_method \"DELETE\" is not"),
        (json!({"_method": 7}), "_method 7 is not"),
        (json!({"_body": {"a": 1}}), "_body needs _method \"POST\""),
        (
            json!({"_method": "GET", "_body": "x"}),
            "_body needs _method",
        ),
    ] {
        let error = TaskRequest::of_data(Some(&data(bad.clone()))).unwrap_err();
        assert!(error.to_string().contains(reason), "{bad}: {error}");
    }
    // Written back, a request reads the same; links drop it.
    let request = TaskRequest {
        method: HttpMethod::Post,
        body: Some(RequestBody::Json(json!({"q": [1, 2]}))),
    };
    let mut written = data(json!({"sku": 3}));
    request.write_to(&mut written);
    assert_eq!(TaskRequest::of_data(Some(&written)), Ok(Some(request)));
    assert_eq!(without_request(written), data(json!({"sku": 3})));
}

#[test]
fn json_values_follow_a_pointer_with_stars_and_leave_out_what_is_no_value() {
    let doc = json!({
        "meta": {"next": "abc", "none": null, "blank": " ", "a/b": 1},
        "items": [{"id": 1}, {"id": 2}, {"name": "x"}, {"id": null}],
        "tags": ["a", "", "b"],
    });
    assert_eq!(json_values(&doc, "/meta/next"), [json!("abc")]);
    assert_eq!(json_values(&doc, "/meta/a~1b"), [json!(1)]);
    assert_eq!(json_values(&doc, "/items/*/id"), [json!(1), json!(2)]);
    assert_eq!(json_values(&doc, "/items/1/id"), [json!(2)]);
    assert_eq!(json_values(&doc, "/tags"), [json!("a"), json!("b")]);
    for empty in [
        "/meta/none",
        "/meta/blank",
        "/missing",
        "/items/9/id",
        "/tags/*/x",
    ] {
        assert!(json_values(&doc, empty).is_empty(), "{empty}");
    }
    assert_eq!(json_values(&json!(5), ""), [json!(5)]);
}

#[test]
fn a_url_template_is_filled_encoded_and_resolved_and_a_list_field_makes_several_requests() {
    let cursor = rule(json!({
        "fields": {"next_cursor": {"json": "/next"}},
        "url": "/items?cursor={next_cursor}",
    }));
    let ChainStep::Next(next) = next_requests(
        &cursor,
        &page(),
        &values(&[("next_cursor", json!("a b&c"))]),
        0,
    ) else {
        panic!("no next request");
    };
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].url, "https://api.example/items?cursor=a+b%26c");
    assert_eq!(next[0].request, None);
    assert_eq!(next[0].carried, data(json!({"next_cursor": "a b&c"})));

    // A template that is one field alone takes it as a URL (relative to the page).
    let link = rule(json!({"fields": {"next": {"item": "next"}}, "url": "{next}"}));
    let ChainStep::Next(next) =
        next_requests(&link, &page(), &values(&[("next", json!("/p/2?x=1"))]), 3)
    else {
        panic!("no next request");
    };
    assert_eq!(next[0].url, "https://api.example/p/2?x=1");

    // A list makes one request per value; a single value goes into each.
    let detail = rule(json!({
        "fields": {"id": {"json": "/items/*/id"}, "q": {"json": "/q"}},
        "url": "https://api.example/item/{id}?q={q}",
        "method": "POST",
        "body": {"id": "{id}", "label": "item {id} of {q}"},
    }));
    let found = values(&[("id", json!([7, 8, 9])), ("q", json!("shoes"))]);
    let ChainStep::Next(next) = next_requests(&detail, &page(), &found, 0) else {
        panic!("no next request");
    };
    let urls: Vec<&str> = next.iter().map(|n| n.url.as_str()).collect();
    assert_eq!(
        urls,
        [
            "https://api.example/item/7?q=shoes",
            "https://api.example/item/8?q=shoes",
            "https://api.example/item/9?q=shoes",
        ]
    );
    // The body keeps a lone field's JSON type and fills text around the others.
    assert_eq!(
        next[1].request,
        Some(TaskRequest {
            method: HttpMethod::Post,
            body: Some(RequestBody::Json(
                json!({"id": 8, "label": "item 8 of shoes"})
            )),
        })
    );
    assert_eq!(next[2].carried, data(json!({"id": 9, "q": "shoes"})));
}

#[test]
fn a_chain_stops_at_a_field_without_value_at_its_cap_and_at_a_value_that_makes_no_url() {
    let cursor = rule(json!({
        "fields": {"c": {"json": "/next"}},
        "url": "/items?cursor={c}",
        "max_steps": 3,
    }));
    assert_eq!(
        next_requests(&cursor, &page(), &values(&[]), 0),
        ChainStep::Stop(ChainStop::Empty { field: "c".into() })
    );
    assert_eq!(
        next_requests(&cursor, &page(), &values(&[("c", json!([]))]), 0),
        ChainStop::Empty { field: "c".into() }.into_step()
    );
    // The page at step 3 took the chain's last step: the cap comes before its values.
    let found = values(&[("c", json!("x"))]);
    assert!(matches!(
        next_requests(&cursor, &page(), &found, 2),
        ChainStep::Next(_)
    ));
    assert_eq!(
        next_requests(&cursor, &page(), &found, 3),
        ChainStep::Stop(ChainStop::Cap { max_steps: 3 })
    );
    // An object cannot fill a URL.
    let ChainStep::Stop(ChainStop::Invalid { detail }) =
        next_requests(&cursor, &page(), &values(&[("c", json!({"a": 1}))]), 0)
    else {
        panic!("an object filled a URL");
    };
    assert!(detail.contains("not a string or a number"), "{detail}");
    // A list is cut at the fan-out bound.
    let many = values(&[("c", Value::Array((0..500).map(Value::from).collect()))]);
    let ChainStep::Next(next) = next_requests(&cursor, &page(), &many, 0) else {
        panic!("no next request");
    };
    assert_eq!(next.len(), MAX_FANOUT);
}

impl ChainStop {
    fn into_step(self) -> ChainStep {
        ChainStep::Stop(self)
    }
}

#[test]
fn a_next_tasks_data_carries_the_values_its_step_and_its_request_within_the_bound() {
    let rule = rule(json!({
        "fields": {"c": {"json": "/next"}},
        "url": "/items",
        "method": "POST",
        "body": {"cursor": "{c}"},
        "carry": "prev",
    }));
    let ChainStep::Next(next) = next_requests(&rule, &page(), &values(&[("c", json!("k"))]), 4)
    else {
        panic!("no next request");
    };
    let inherited = data(json!({"sku": 1, "_method": "POST", "_body": {"cursor": "old"}}));
    let made = chained_data(Some(inherited), &rule, &next[0], 4).unwrap();
    assert_eq!(
        made,
        data(
            json!({"sku": 1, "prev": {"c": "k"}, "_chain": 5, "_method": "POST", "_body": {"cursor": "k"}})
        )
    );
    assert_eq!(step_of(Some(&made)), 5);
    let url = CanonicalUrl::parse(&next[0].url).unwrap();
    assert_ne!(task_id(&url, Some(&made)), url.task_id());
    // Data past the bound stops the chain with the reason.
    let big = data(json!({"blob": "x".repeat(MAX_USER_DATA_BYTES)}));
    let Err(ChainStop::Invalid { detail }) = chained_data(Some(big), &rule, &next[0], 0) else {
        panic!("data over the bound taken");
    };
    assert!(detail.contains("4096"), "{detail}");
}

#[test]
fn a_rule_naming_an_unknown_field_or_a_bad_pointer_or_body_is_refused_with_a_typed_error() {
    let extractors: Vec<Extractor> = serde_json::from_value(json!([
        {"name": "list", "fields": {"next": {"css": "a.next", "value": "attr(href)"}}}
    ]))
    .unwrap();
    let base = json!({"fields": {"c": {"json": "/next"}}, "url": "/items?cursor={c}"});
    assert_eq!(
        rule(base.clone()).validate("chains[0]", &extractors),
        Ok(())
    );
    let with = |key: &str, value: Value| {
        let mut r = base.clone();
        r[key] = value;
        rule(r).validate("chains[0]", &extractors)
    };
    assert!(matches!(
        with("url", json!("/items?cursor={cursor}")),
        Err(ChainConfigError::UnknownField { name, .. }) if name == "cursor"
    ));
    assert!(matches!(
        with("url", json!("/items?cursor={c")),
        Err(ChainConfigError::Template { .. })
    ));
    assert!(matches!(
        with("fields", json!({"c": {"json": "next"}})),
        Err(ChainConfigError::Pointer { .. })
    ));
    assert!(matches!(
        with("fields", json!({"c": {"item": "nosuch"}})),
        Err(ChainConfigError::ItemField { field, .. }) if field == "nosuch"
    ));
    assert_eq!(with("fields", json!({"c": {"item": "next"}})), Ok(()));
    let body = with("body", json!({"x": "{c}"})).unwrap_err();
    assert!(
        body.to_string().contains("body needs method POST"),
        "{body}"
    );
    let mut post = base.clone();
    post["method"] = json!("POST");
    post["body"] = json!({"x": "{nope}"});
    assert!(matches!(
        rule(post).validate("chains[0]", &extractors),
        Err(ChainConfigError::UnknownField { name, .. }) if name == "nope"
    ));
    for (key, value) in [
        ("max_steps", json!(0)),
        ("carry", json!("_chain")),
        ("fields", json!({})),
    ] {
        let error = with(key, value).unwrap_err();
        assert!(error.to_string().starts_with("chains[0]: "), "{error}");
    }
    // An unknown key is refused by the parser.
    assert!(
        serde_json::from_value::<ChainRule>(json!({"fields": {}, "url": "x", "next": 1})).is_err()
    );
}

#[test]
fn a_given_up_request_is_tried_again_with_its_parameter_changed_a_bounded_number_of_times() {
    let retry: RetryWith = serde_json::from_value(json!({
        "match": "/items", "on_status": [500], "param": "page", "add": 1, "max": 2
    }))
    .unwrap();
    assert_eq!(retry.validate("retry_with[0]"), Ok(()));
    let url = url::Url::parse("https://api.example/items?page=4&q=a").unwrap();
    // In the query, when the body has no such field.
    let first = retried(&retry, &url, None, Some(500)).unwrap();
    assert_eq!(first.url, "https://api.example/items?page=5&q=a");
    assert_eq!(first.data, data(json!({"_retried": 1})));
    // In the JSON body first.
    let posted = data(json!({"_method": "POST", "_body": {"page": 9}, "_retried": 1}));
    let second = retried(&retry, &url, Some(&posted), Some(500)).unwrap();
    assert_eq!(second.url, url.as_str());
    assert_eq!(
        second.data,
        data(json!({"_method": "POST", "_body": {"page": 10}, "_retried": 2}))
    );
    // Not for a status the rule does not list, nor once spent, nor without the parameter.
    assert_eq!(
        retried(&retry, &url, None, Some(404)),
        Err(NoRetry::NotListed)
    );
    assert_eq!(retried(&retry, &url, None, None), Err(NoRetry::NotListed));
    assert_eq!(
        retried(&retry, &url, Some(&second.data), Some(500)),
        Err(NoRetry::Spent { max: 2 })
    );
    let plain = url::Url::parse("https://api.example/items?page=last").unwrap();
    assert!(matches!(
        retried(&retry, &plain, None, Some(500)),
        Err(NoRetry::NoParam { .. })
    ));
    // A changed request is another task.
    let before = CanonicalUrl::parse(url.as_str()).unwrap();
    let after = CanonicalUrl::parse(&first.url).unwrap();
    assert_ne!(task_id(&before, None), task_id(&after, Some(&first.data)));
    for (key, value) in [
        ("add", json!(0)),
        ("max", json!(11)),
        ("on_status", json!([42])),
    ] {
        let mut bad = serde_json::to_value(&retry).unwrap();
        bad[key] = value;
        let bad: RetryWith = serde_json::from_value(bad).unwrap();
        assert!(bad.validate("retry_with[0]").is_err(), "{key}");
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn body() -> impl Strategy<Value = Vec<(String, i64)>> {
        proptest::collection::vec(("[a-d]{1,2}", -3i64..3), 0..6)
    }

    proptest! {
        /// A body's id does not depend on the order its keys were written in; two different
        /// bodies are two ids; a GET is its URL's id whatever else its data holds.
        #[test]
        fn identity_is_the_url_method_and_body_and_nothing_else(a in body(), b in body(), extra in "[a-z]{0,8}") {
            let url = CanonicalUrl::parse("https://api.example/search").unwrap();
            let post = |pairs: &[(String, i64)]| {
                let body: serde_json::Map<String, Value> =
                    pairs.iter().map(|(k, v)| (k.clone(), Value::from(*v))).collect();
                let mut data = UserData::new();
                data.insert("note".into(), Value::from(extra.clone()));
                data.insert(METHOD_KEY.into(), Value::from("POST"));
                data.insert(BODY_KEY.into(), Value::Object(body.clone()));
                (task_id(&url, Some(&data)), body)
            };
            let reversed: Vec<_> = a.iter().rev().cloned().collect();
            let (id_a, body_a) = post(&a);
            let (id_rev, _) = post(&reversed);
            let (id_b, body_b) = post(&b);
            // Reversed, a repeated key keeps its other value: the same id only for the same body.
            let (_, body_rev) = post(&reversed);
            prop_assert_eq!(id_a == id_rev, body_a == body_rev);
            prop_assert_eq!(id_a == id_b, body_a == body_b);
            prop_assert_ne!(&id_a, &url.task_id());
            let get = data(json!({"note": extra, "_method": "GET"}));
            prop_assert_eq!(task_id(&url, Some(&get)), url.task_id());
        }

        /// Whatever values a page gives, a rule makes at most `MAX_FANOUT` requests, each an
        /// absolute URL carrying exactly the rule's fields, or stops with a reason.
        #[test]
        fn next_requests_are_bounded_and_carry_the_rules_fields(
            ids in proptest::collection::vec(proptest::option::of(0u32..1000), 0..150),
            cursor in proptest::option::of("[a-z0-9 &/]{0,6}"),
            step in 0u32..8,
        ) {
            let rule = rule(json!({
                "fields": {"id": {"json": "/ids"}, "c": {"json": "/c"}},
                "url": "/item/{id}?c={c}", "max_steps": 5,
            }));
            let doc = json!({"ids": ids, "c": cursor});
            let values: BTreeMap<String, Vec<Value>> = [("id", "/ids"), ("c", "/c")]
                .into_iter()
                .map(|(name, pointer)| (name.to_owned(), json_values(&doc, pointer)))
                .collect();
            match next_requests(&rule, &page(), &values, step) {
                ChainStep::Next(next) => {
                    prop_assert!(step < 5);
                    prop_assert!(!next.is_empty() && next.len() <= MAX_FANOUT);
                    prop_assert_eq!(next.len(), values["id"].len().min(MAX_FANOUT));
                    for request in next {
                        prop_assert!(CanonicalUrl::parse(&request.url).is_ok(), "{}", request.url);
                        let keys: Vec<&String> = request.carried.keys().collect();
                        prop_assert_eq!(keys, ["c", "id"]);
                    }
                }
                ChainStep::Stop(ChainStop::Cap { .. }) => prop_assert!(step >= 5),
                ChainStep::Stop(ChainStop::Empty { field }) => {
                    prop_assert!(values[&field].is_empty());
                }
                ChainStep::Stop(other) => prop_assert!(false, "{:?}", other),
            }
        }
    }
}

#[test]
fn urls_giving_one_dedup_key_are_one_task_and_a_bad_key_is_refused() {
    let a = CanonicalUrl::parse("https://shop.example/p/12?ref=home").unwrap();
    let b = CanonicalUrl::parse("https://shop.example/item/12").unwrap();
    let keyed = |key: Value| data(json!({ "_key": key, "sku": 12 }));
    // Two URLs, one key: one task, whose id is no URL's.
    let sku = task_id(&a, Some(&keyed(json!("sku-12"))));
    assert_eq!(sku, task_id(&b, Some(&keyed(json!("sku-12")))));
    assert_eq!(sku, TaskId::of_key("sku-12"));
    assert_ne!(sku, a.task_id());
    assert_ne!(sku, task_id(&a, Some(&keyed(json!("sku-13")))));
    // The key goes before the request: a keyed POST is known by its key.
    let post = data(json!({"_key": "sku-12", "_method": "POST", "_body": {"q": 1}}));
    assert_eq!(task_id(&a, Some(&post)), sku);
    // Anything but a string of 1 to 512 bytes is refused where data enters trawl.
    for bad in [json!(12), json!(""), json!(null), json!("x".repeat(513))] {
        assert_eq!(
            TaskRequest::of_data(Some(&keyed(bad.clone()))),
            Err(RequestError::Key(bad.to_string())),
            "{bad}"
        );
    }
    assert_eq!(
        TaskRequest::of_data(Some(&keyed(json!("x".repeat(512))))),
        Ok(None)
    );
}

#[test]
fn a_routes_key_does_not_replace_a_seeds_own_and_a_link_does_not_inherit_one() {
    let own = data(json!({"_key": "mine", "n": 1}));
    assert_eq!(
        keyed(Some(own.clone()), Some("route".into())),
        Some(own.clone())
    );
    assert_eq!(
        keyed(Some(data(json!({"n": 1}))), Some("route".into())),
        Some(data(json!({"n": 1, "_key": "route"})))
    );
    assert_eq!(keyed(None, None), None);
    assert_eq!(without_request(own), data(json!({"n": 1})));
}

#[test]
fn a_chain_stops_reason_is_its_serialised_tag() {
    for stop in [
        ChainStop::Empty {
            field: "next".into(),
        },
        ChainStop::Cap { max_steps: 3 },
        ChainStop::NotJson,
        ChainStop::invalid("a list"),
    ] {
        let json = serde_json::to_value(&stop).unwrap();
        assert_eq!(json["reason"], stop.reason(), "{json}");
    }
}
