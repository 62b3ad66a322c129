//! The metric names a PromQL expression reads, for checking the rules and
//! the dashboard against the kernel's `/metrics`.
//!
//! A small scanner, enough for the expressions of deploy/observability:
//! label matchers (`{...}`), ranges (`[...]`), strings, comments and
//! numbers are skipped; an identifier followed by `(` is a function or aggregation; the
//! label lists after `by`, `without`, `on`, `ignoring`, `group_left` and
//! `group_right` are skipped; keywords and aggregations are dropped. What remains are the
//! names of series: metrics, or recorded names (with a `:`).

use std::collections::BTreeSet;

const KEYWORDS: [&str; 7] = ["and", "or", "unless", "bool", "offset", "Inf", "NaN"];
const LABEL_LISTS: [&str; 6] = ["by", "without", "on", "ignoring", "group_left", "group_right"];
/// Aggregations, which may be followed by `by (...)` before their `(`.
const AGGREGATIONS: [&str; 12] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];

/// Series names read by `expr`.
pub fn series_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => i = skip_string(&chars, i),
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '{' => i = skip_until(&chars, i, '}'),
            '[' => i = skip_until(&chars, i, ']'),
            c if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())) => {
                // Numbers, durations (5m), exponents (1e6).
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next].is_whitespace() {
                    next += 1;
                }
                let call = chars.get(next) == Some(&'(');
                if LABEL_LISTS.contains(&word.as_str()) {
                    if call {
                        i = skip_until(&chars, next, ')');
                    }
                } else if !call && !KEYWORDS.contains(&word.as_str()) && !AGGREGATIONS.contains(&word.as_str()) {
                    names.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// Index after the string that starts at `i`.
fn skip_string(chars: &[char], i: usize) -> usize {
    let quote = chars[i];
    let mut j = i + 1;
    while j < chars.len() && chars[j] != quote {
        if chars[j] == '\\' && quote != '`' {
            j += 1;
        }
        j += 1;
    }
    j + 1
}

/// Index after the `close` that ends the bracket at `i` (strings skipped).
fn skip_until(chars: &[char], i: usize, close: char) -> usize {
    let mut j = i + 1;
    while j < chars.len() && chars[j] != close {
        if matches!(chars[j], '"' | '\'' | '`') {
            j = skip_string(chars, j);
        } else {
            j += 1;
        }
    }
    j + 1
}

#[test]
fn the_scanner_finds_series_and_nothing_else() {
    let names = series_names(
        r#"sum by (job, le) (rate(a_bucket{route=~"$route", x="}"}[$__rate_interval] offset 5m)) / on (job) group_left b:c:d * 1e6 > 0.25 or up{job="x"} unless NaN # a comment names no series
        and time() - c > 3600"#,
    );
    let want: BTreeSet<String> = ["a_bucket", "b:c:d", "c", "up"].iter().map(|s| s.to_string()).collect();
    assert_eq!(names, want);
}
