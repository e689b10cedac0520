use super::*;
use serde_json::json;
use std::collections::BTreeMap;

#[derive(Debug, Default, PartialEq, Deserialize)]
struct Range {
    #[serde(default)]
    subnet: String,
    #[serde(rename = "rangeStart", default)]
    range_start: Option<String>,
}

#[derive(Debug, Default, PartialEq, Deserialize)]
struct Net {
    #[serde(rename = "type", default)]
    plugin_type: String,
    #[serde(default = "yes")]
    keep: bool,
    #[serde(default)]
    mtu: i64,
    #[serde(default)]
    ranges: Vec<Vec<Range>>,
    #[serde(default)]
    args: Option<Args>,
    #[serde(default)]
    caps: BTreeMap<String, i64>,
}

#[derive(Debug, Default, PartialEq, Deserialize)]
struct Args {
    #[serde(default)]
    cni: Option<Mac>,
}

#[derive(Debug, Default, PartialEq, Deserialize)]
struct Mac {
    #[serde(default)]
    mac: Option<String>,
}

fn yes() -> bool {
    true
}

fn net(s: &str) -> Result<Net, String> {
    from_slice(s.as_bytes()).map_err(|e| e.to_string())
}

fn nested(levels: usize, inner: &str) -> String {
    format!("{}{inner}{}", "[".repeat(levels), "]".repeat(levels))
}

#[test]
fn struct_fields_match_case_insensitively_map_keys_do_not() {
    let n = net(
        r#"{"TYPE":"bridge","Ranges":[[{"Subnet":"10.0.0.0/24","RangeStart":"10.0.0.5"}]],
        "caps":{"A":1,"a":2}}"#,
    )
    .unwrap();
    assert_eq!(n.plugin_type, "bridge");
    assert_eq!(
        n.ranges,
        vec![vec![Range {
            subnet: "10.0.0.0/24".into(),
            range_start: Some("10.0.0.5".into())
        }]]
    );
    assert_eq!(n.caps, BTreeMap::from([("A".into(), 1), ("a".into(), 2)]));
    // Go's fold: the Kelvin sign is a k, the long s an s; other non-ASCII letters match nothing.
    #[derive(Deserialize)]
    struct Ks {
        #[serde(default)]
        kind: String,
        #[serde(default)]
        subnet: String,
    }
    let k: Ks = from_slice("{\"\u{212A}IND\":\"x\",\"\u{17F}ubnet\":\"y\"}".as_bytes()).unwrap();
    assert_eq!((k.kind.as_str(), k.subnet.as_str()), ("x", "y"));
    let k: Ks = from_slice("{\"k\u{130}nd\":\"x\"}".as_bytes()).unwrap();
    assert_eq!(k.kind, "");
}

#[test]
fn the_last_of_repeated_or_case_variant_keys_wins() {
    assert_eq!(net(r#"{"type":"a","Type":"b"}"#).unwrap().plugin_type, "b");
    assert_eq!(net(r#"{"Type":"b","type":"a"}"#).unwrap().plugin_type, "a");
    assert_eq!(net(r#"{"mtu":1,"mtu":2}"#).unwrap().mtu, 2);
    // The repeat moves "Type" after "type": document order decides.
    assert_eq!(
        net(r#"{"Type":"1","type":"2","Type":"3"}"#)
            .unwrap()
            .plugin_type,
        "3"
    );
    let v: Value = from_slice(br#"{"a":1,"b":2,"a":3}"#).unwrap();
    assert_eq!(v, json!({"b":2,"a":3}));
    assert_eq!(
        field(&json!({"mac":"x","MAC":"y"}), "mac"),
        Some(&json!("y"))
    );
    assert_eq!(
        field(&json!({"MAC":"y","mac":null}), "mac"),
        Some(&json!("y"))
    );
    assert_eq!(field(&json!({"MAC":"y"}), "ma"), None);
    assert_eq!(field(&json!(5), "mac"), None);
}

#[test]
fn null_leaves_struct_fields_at_their_default() {
    let n = net(r#"{"type":null,"keep":null,"mtu":null,"ranges":null,"args":null}"#).unwrap();
    assert_eq!(
        n,
        Net {
            keep: true,
            ..Default::default()
        }
    );
    assert!(net("null").unwrap().keep);
    let v: Vec<String> = from_slice(br#"["a",null]"#).unwrap();
    assert_eq!(v, ["a", ""]);
}

#[test]
fn wrong_types_are_errors_naming_the_field() {
    assert_eq!(
        net(r#"{"args":{"cni":{"mac":5}}}"#).unwrap_err(),
        "args.cni.mac: invalid type: integer `5`, expected a string"
    );
    assert_eq!(
        net(r#"{"ranges":[[{"subnet":"a"},{"subnet":[]}]]}"#).unwrap_err(),
        "ranges[0][1].subnet: invalid type: sequence, expected a string"
    );
    assert_eq!(
        net(r#"{"args":"x"}"#).unwrap_err(),
        "args: invalid type: string \"x\", expected struct Args"
    );
    assert_eq!(
        net(r#"{"args":[]}"#).unwrap_err(),
        "args: invalid type: sequence, expected struct Args"
    );
    assert_eq!(
        net(r#"{"mtu":1.5}"#).unwrap_err(),
        "mtu: invalid type: floating point `1.5`, expected i64"
    );
    assert!(
        net(r#"{"type":"a"} x"#)
            .unwrap_err()
            .contains("trailing characters")
    );
    assert!(net(r#"{"type":"#).unwrap_err().contains("EOF"));
}

#[test]
fn nesting_up_to_go_limit_decodes_on_a_test_thread_deeper_is_an_error() {
    // Test threads have 2 MiB of stack: the deep work must happen elsewhere.
    for levels in [1_000, MAX_DEPTH - 1] {
        let doc = format!(r#"{{"type":"t","unknown":{}}}"#, nested(levels, "1"));
        assert_eq!(net(&doc).unwrap().plugin_type, "t", "{levels}");
    }
    let objects = format!("{}1{}", r#"{"a":"#.repeat(MAX_DEPTH), "}".repeat(MAX_DEPTH));
    assert!(from_slice::<serde::de::IgnoredAny>(objects.as_bytes()).is_ok());
    for levels in [MAX_DEPTH + 1, 100_000] {
        let err = net(&nested(levels, "")).unwrap_err();
        assert_eq!(
            err, "exceeded max depth: JSON nested deeper than 10000 levels",
            "{levels}"
        );
    }
    // Brackets inside strings do not count.
    let doc = format!(r#"{{"type":"{}"}}"#, "[".repeat(MAX_DEPTH * 2));
    assert_eq!(net(&doc).unwrap().plugin_type.len(), MAX_DEPTH * 2);
    let doc = format!(r#"{{"type":"\"{}"}}"#, "[".repeat(MAX_DEPTH * 2));
    assert!(net(&doc).is_ok());
}

#[test]
fn a_deep_value_can_be_kept_and_dropped_on_a_main_sized_stack() {
    // The plugins run on the main thread (8 MiB); a kept 10,000-level value fits there.
    std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(|| {
            let v: Value = from_slice(nested(MAX_DEPTH, "7").as_bytes()).unwrap();
            let mut inner = &v;
            while let Value::Array(a) = inner {
                inner = &a[0];
            }
            assert_eq!(inner, &json!(7));
            let objects = format!("{}7{}", r#"{"a":"#.repeat(MAX_DEPTH), "}".repeat(MAX_DEPTH));
            let v: Value = from_slice(objects.as_bytes()).unwrap();
            let mut inner = &v;
            while let Value::Object(m) = inner {
                inner = &m["a"];
            }
            assert_eq!(inner, &json!(7));
        })
        .unwrap()
        .join()
        .unwrap();
}

/// The lazy decoder and the whole-document one agree, errors included, and unknown keys
/// of any type or depth are skipped by the lazy one.
#[test]
fn lazy_and_built_documents_decode_alike() {
    let inputs = [
        r#"{"type":"b","Type":"c","mtu":"x"}"#,
        r#"{"ranges":[[{"subnet":1}]]}"#,
        r#"{"ranges":[[{"SUBNET":"a","subnet":"b"}]],"caps":{"a":1,"a":2},"args":null}"#,
        r#"{"junk":[[[{"x":[1,2,{"y":null}]}]]],"keep":false,"mtu":-3}"#,
        r#"{"mtu":1e3}"#,
        r#"["not","an","object"]"#,
        r#"null"#,
        r#"{"args":{"cni":{"mac":7}}}"#,
    ];
    for input in inputs {
        let lazy = net(input);
        let built = with_document(input.as_bytes(), from_value::<Net>)
            .unwrap()
            .map_err(|e| e.to_string());
        assert_eq!(lazy, built, "{input}");
    }
    let m = pick_keys(br#"{"a":[1],"b":{"deep":[[[]]]},"a":2}"#, &["a"]).unwrap();
    assert_eq!(Value::Object(m), json!({"a": 2}));
    assert_eq!(
        pick_keys(b"[1]", &["a"]).unwrap_err().to_string(),
        "invalid type: sequence, expected a map"
    );
}
