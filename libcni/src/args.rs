//! CNI_ARGS (`K=V;K2=V2`) parsing with Go `types.LoadArgs` rules: keys are case-sensitive,
//! unknown keys are an error unless `IgnoreUnknown` is `1`/`true`.

use crate::error::{Error, code};
use sysproc::goquote::{quote, quote_list};

/// The pairs of a CNI_ARGS string, in order. Empty input has none.
pub fn parse_pairs(args: &str) -> Result<Vec<(String, String)>, Error> {
    if args.is_empty() {
        return Ok(vec![]);
    }
    args.split(';')
        .map(|pair| match split_pair(pair) {
            Some((k, v)) => Ok((k.to_string(), v.to_string())),
            None => Err(args_error(format!("ARGS: invalid pair {}", quote(pair)))),
        })
        .collect()
}

/// One `K=V` pair: exactly one `=` (Go splits on every `=` and wants two parts); either
/// side may be empty.
pub fn split_pair(pair: &str) -> Option<(&str, &str)> {
    pair.split_once('=').filter(|(_, v)| !v.contains('='))
}

/// The values of the `known` keys; any other key is refused unless `IgnoreUnknown` is true.
/// `IgnoreUnknown` itself is always known.
pub fn load(args: &str, known: &[&str]) -> Result<Vec<(String, String)>, Error> {
    let mut values = Vec::new();
    let mut unknown = Vec::new();
    let mut ignore_unknown = false;
    for (k, v) in parse_pairs(args)? {
        if k == "IgnoreUnknown" {
            ignore_unknown = parse_bool(&v).map_err(|e| {
                args_error(format!(
                    "ARGS: error parsing value of pair \"{k}={v}\": {e}"
                ))
            })?;
        } else if known.contains(&k.as_str()) {
            values.push((k, v));
        } else {
            unknown.push(format!("{k}={v}"));
        }
    }
    if !unknown.is_empty() && !ignore_unknown {
        return Err(args_error(format!(
            "ARGS: unknown args {}",
            quote_list(&unknown)
        )));
    }
    Ok(values)
}

/// The value of one key from `load`'s output.
pub fn get<'a>(values: &'a [(String, String)], key: &str) -> Option<&'a str> {
    values
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn parse_bool(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        _ => Err(format!("boolean unmarshal error: invalid input {v}")),
    }
}

// CNI_ARGS is an environment variable, so its errors are code 4 (the Go plugins return an
// untyped error here, which skel turns into 999).
fn args_error(msg: String) -> Error {
    Error::new(code::INVALID_ENVIRONMENT_VARIABLES, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs() {
        assert!(parse_pairs("").unwrap().is_empty());
        assert_eq!(
            parse_pairs("IP=10.0.0.2;MAC=aa").unwrap(),
            vec![
                ("IP".into(), "10.0.0.2".into()),
                ("MAC".into(), "aa".into())
            ]
        );
        assert_eq!(
            parse_pairs("IP=1;x").unwrap_err().msg,
            "ARGS: invalid pair \"x\""
        );
        assert_eq!(
            parse_pairs("a=b=c").unwrap_err().msg,
            "ARGS: invalid pair \"a=b=c\""
        );
        assert_eq!(
            parse_pairs("a=b;").unwrap_err().msg,
            "ARGS: invalid pair \"\""
        );
        assert_eq!(parse_pairs("IP=1;x").unwrap_err().code, 4);
    }

    #[test]
    fn known_unknown_and_ignore() {
        let v = load("IP=10.0.0.2", &["IP"]).unwrap();
        assert_eq!(get(&v, "IP"), Some("10.0.0.2"));
        assert_eq!(
            load("ip=10.0.0.2;K8S_POD_NAME=x", &["IP"]).unwrap_err().msg,
            "ARGS: unknown args [\"ip=10.0.0.2\" \"K8S_POD_NAME=x\"]"
        );
        // IgnoreUnknown counts wherever it stands and in any case.
        let v = load("K8S_POD_NAME=x;IP=10.0.0.3;IgnoreUnknown=TRUE", &["IP"]).unwrap();
        assert_eq!(get(&v, "IP"), Some("10.0.0.3"));
        assert!(load("X=1;IgnoreUnknown=1", &[]).is_ok());
        assert!(load("X=1;IgnoreUnknown=0", &[]).is_err());
        assert!(
            load("IgnoreUnknown=maybe", &[])
                .unwrap_err()
                .msg
                .contains("boolean unmarshal error")
        );
    }
}
