//! Label selectors (`metav1.LabelSelector`): `matchLabels` AND every `matchExpressions`
//! requirement; the empty selector matches everything. Built only from a checked
//! selector, so matching cannot fail.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::LabelSelector;

/// Labels of one object.
pub type Labels = BTreeMap<String, String>;

/// The label every namespace carries (the API server sets it; we add it too, so a
/// namespace object from an older server or a test still matches selectors on it).
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    Exists,
    DoesNotExist,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Selector {
    labels: Pairs,
    exprs: Vec<(String, Op)>,
}

/// `matchLabels` sorted by key: compared, ordered and shown as the map it was (shared set
/// names hash a selector's `Debug`), held in a tenth of a map's memory (a map's first
/// node is 544 bytes; 10,000 policies hold 30,000 selectors).
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Pairs(Vec<(String, String)>);

impl std::fmt::Debug for Pairs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| (k, v)))
            .finish()
    }
}

/// Why a selector cannot be used; `field` is relative to the selector.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error(
        "matchExpressions[{index}].operator: unknown operator {operator:?} (In, NotIn, Exists, DoesNotExist)"
    )]
    UnknownOperator { index: usize, operator: String },
    #[error("matchExpressions[{index}].values: operator {operator} needs at least one value")]
    NoValues { index: usize, operator: String },
    #[error("matchExpressions[{index}].values: operator {operator} takes no values")]
    UnwantedValues { index: usize, operator: String },
    #[error("matchExpressions[{index}].key: empty key")]
    EmptyKey { index: usize },
}

impl Selector {
    /// The empty selector: matches every object.
    pub fn everything() -> Selector {
        Selector::default()
    }

    /// Checks a selector from the API, the way the API server's validation does.
    pub fn new(raw: &LabelSelector) -> Result<Selector, SelectorError> {
        let mut exprs = Vec::with_capacity(raw.match_expressions.len());
        for (index, r) in raw.match_expressions.iter().enumerate() {
            if r.key.is_empty() {
                return Err(SelectorError::EmptyKey { index });
            }
            let values: BTreeSet<String> = r.values.iter().cloned().collect();
            let operator = r.operator.clone();
            let op = match r.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(SelectorError::NoValues { index, operator });
                }
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(SelectorError::UnwantedValues { index, operator });
                }
                "In" => Op::In(values),
                "NotIn" => Op::NotIn(values),
                "Exists" => Op::Exists,
                "DoesNotExist" => Op::DoesNotExist,
                _ => return Err(SelectorError::UnknownOperator { index, operator }),
            };
            exprs.push((r.key.clone(), op));
        }
        Ok(Selector {
            labels: Pairs(raw.match_labels.clone()),
            exprs,
        })
    }

    pub fn is_everything(&self) -> bool {
        self.labels.0.is_empty() && self.exprs.is_empty()
    }

    pub fn matches(&self, labels: &Labels) -> bool {
        self.labels.0.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.exprs.iter().all(|(k, op)| {
                let have = labels.get(k);
                match op {
                    Op::In(vs) => have.is_some_and(|v| vs.contains(v)),
                    // Like the API: an object without the key is "not in" any values.
                    Op::NotIn(vs) => !have.is_some_and(|v| vs.contains(v)),
                    Op::Exists => have.is_some(),
                    Op::DoesNotExist => have.is_none(),
                }
            })
    }
}

/// A namespace's labels as selectors see them: its own plus the automatic name label.
pub fn namespace_labels(name: &str, own: &Labels) -> Labels {
    let mut labels = own.clone();
    labels.insert(NAMESPACE_NAME_LABEL.to_string(), name.to_string());
    labels
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Requirement;

    fn labels(kv: &[(&str, &str)]) -> Labels {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            operator: op.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    fn sel(ml: &[(&str, &str)], exprs: Vec<Requirement>) -> Selector {
        Selector::new(&LabelSelector {
            match_labels: labels(ml).into_iter().collect(),
            match_expressions: exprs,
        })
        .unwrap()
    }

    #[test]
    fn match_labels_show_as_the_map_they_came_from() {
        // Shared set names hash a selector's Debug text: it must not change.
        let map = labels(&[("b", "2"), ("a", "1")]);
        let s = sel(&[("b", "2"), ("a", "1")], vec![]);
        assert_eq!(format!("{:?}", s.labels), format!("{map:?}"));
        assert!(s.matches(&map) && !s.matches(&labels(&[("a", "1")])));
    }

    #[test]
    fn empty_selector_matches_everything() {
        let s = sel(&[], vec![]);
        assert!(s.is_everything());
        assert!(s.matches(&labels(&[])));
        assert!(s.matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn match_labels_and_expressions_all_hold() {
        let s = sel(&[("app", "web")], vec![expr("tier", "In", &["a", "b"])]);
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "b")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "c")])));
        assert!(!s.matches(&labels(&[("app", "db"), ("tier", "a")])));
        assert!(!s.matches(&labels(&[("app", "web")])));
    }

    #[test]
    fn each_operator() {
        let not_in = sel(&[], vec![expr("k", "NotIn", &["x"])]);
        assert!(
            not_in.matches(&labels(&[])),
            "a missing key is not in the values"
        );
        assert!(not_in.matches(&labels(&[("k", "y")])));
        assert!(!not_in.matches(&labels(&[("k", "x")])));
        let exists = sel(&[], vec![expr("k", "Exists", &[])]);
        assert!(exists.matches(&labels(&[("k", "")])));
        assert!(!exists.matches(&labels(&[("j", "")])));
        let absent = sel(&[], vec![expr("k", "DoesNotExist", &[])]);
        assert!(!absent.matches(&labels(&[("k", "")])));
        assert!(absent.matches(&labels(&[("j", "")])));
    }

    #[test]
    fn bad_expressions_are_refused() {
        let raw = |r| LabelSelector {
            match_expressions: vec![r],
            ..Default::default()
        };
        let e = Selector::new(&raw(expr("k", "Gt", &["1"]))).unwrap_err();
        assert!(
            matches!(e, SelectorError::UnknownOperator { index: 0, .. }),
            "{e}"
        );
        let e = Selector::new(&raw(expr("k", "In", &[]))).unwrap_err();
        assert!(matches!(e, SelectorError::NoValues { .. }), "{e}");
        let e = Selector::new(&raw(expr("k", "Exists", &["v"]))).unwrap_err();
        assert!(matches!(e, SelectorError::UnwantedValues { .. }), "{e}");
        let e = Selector::new(&raw(expr("", "Exists", &[]))).unwrap_err();
        assert!(matches!(e, SelectorError::EmptyKey { .. }), "{e}");
    }

    #[test]
    fn namespace_name_label_is_added() {
        let l = namespace_labels("x", &labels(&[("team", "a")]));
        let s = sel(&[(NAMESPACE_NAME_LABEL, "x")], vec![]);
        assert!(s.matches(&l));
        assert_eq!(l.get("team").map(String::as_str), Some("a"));
    }
}
