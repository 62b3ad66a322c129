//! Phone numbers as people write them: a broad candidate pattern, then a
//! confirmation with the `phonenumber` crate (a port of Google's
//! libphonenumber and its metadata).
//!
//! A candidate is confirmed when it is
//! * international (`+CC…` or `00CC…`, in any region): the country code is
//!   known and the national number has a length possible for it (or is a
//!   valid number outright);
//! * or national, for one of the configured `regions`: written with the
//!   region's trunk prefix where it has one (`0` in GB, DE, FR…), with a
//!   length possible for the region; NANP regions (US, CA…) take ten digits
//!   (optionally after `1`) with an area code and exchange of 2-9, and a
//!   run of ten bare digits must be a valid number per the metadata.
//!
//! Dates (`2024-01-15`, `15.01.2024`, `01/15/2024`), decimals and
//! numbers glued to letters or to other numbers (`v1.2.3`, `ID-1234567`)
//! are never candidates, so order ids, dates and versions stay untouched.

use std::sync::LazyLock;

use phonenumber::metadata::DATABASE;

pub use phonenumber::country::Id as PhoneRegion;
use regex::Regex;
use PhoneRegion as Id;

/// The regions whose national formats are recognised by default.
pub const DEFAULT_REGIONS: [Id; 4] = [Id::US, Id::GB, Id::DE, Id::FR];

/// The candidate pattern: an optional `+`/`00` prefix, digits with the
/// separators people use (space, `.`, `-`, `/`, parentheses), an optional
/// extension (`x123`, `ext. 123`, `#123`).
pub(crate) const CANDIDATE: &str =
    r"(?i)(?:\+|(?-u:\b)00)?\(?\d[\d \t.\-/()]{5,24}\d(?:\s*(?:x|ext\.?|extn\.?|extension|\#)\s*\d{1,6}(?-u:\b))?";

static EXTENSION: LazyLock<Result<Regex, regex::Error>> =
    LazyLock::new(|| Regex::new(r"(?i)\s*(?:x|ext\.?|extn\.?|extension|#)\s*\d{1,6}$"));

/// Parses a region code (`US`, `gb`...).
pub fn parse_region(code: &str) -> Option<Id> {
    code.trim().to_ascii_uppercase().parse().ok()
}

/// Loads the phone-number metadata now (it is decoded on first use).
pub fn warm() -> Result<(), regex::Error> {
    let _ = DATABASE.by_id("US");
    EXTENSION.as_ref().map(|_| ()).map_err(Clone::clone)
}

/// Whether the candidate `m`, found at `start` in `text`, is a phone number.
/// Trailing groups swallowed by the broad pattern ("… 0123 2024") are
/// dropped one at a time before giving up; the confirmed length is returned.
pub(crate) fn confirm(text: &str, start: usize, m: &str, regions: &[Id]) -> Option<usize> {
    // Glued to a word, a number or a dotted/dashed token: not a phone number.
    if let Some(prev) = text[..start].chars().next_back() {
        if prev.is_alphanumeric() || matches!(prev, '_' | '.' | '-' | '/' | '+' | ',' | ':' | '#' | '$' | '€' | '£')
        {
            return None;
        }
    }
    let mut candidate = m;
    for _ in 0..3 {
        if is_phone(candidate, regions) {
            return Some(candidate.len());
        }
        // Drop the last group and its separators.
        let cut = candidate
            .trim_end_matches(|c: char| c.is_ascii_digit())
            .trim_end_matches(|c: char| !c.is_ascii_digit());
        if cut.len() == candidate.len() || cut.is_empty() {
            return None;
        }
        candidate = cut;
    }
    None
}

/// The digits of `s`.
fn digits(s: &str) -> String {
    s.chars().filter(char::is_ascii_digit).collect()
}

/// Whether the digit groups of `core` have the shape of a date or time.
fn looks_like_date(core: &str) -> bool {
    let groups: Vec<usize> = core
        .split(|c: char| !c.is_ascii_digit())
        .filter(|g| !g.is_empty())
        .map(str::len)
        .collect();
    match groups.as_slice() {
        [4, 2, 2] | [2, 2, 4] | [1 | 2, 1 | 2, 4] | [2, 2, 2] | [1 | 2, 1 | 2, 2] => true,
        [_, _] => core.contains('/') || (core.contains('.') && !core.contains(' ')),
        _ => false,
    }
}

fn is_phone(m: &str, regions: &[Id]) -> bool {
    let Ok(ext) = EXTENSION.as_ref() else { return false };
    let core = match ext.find(m) {
        Some(e) => &m[..e.start()],
        None => m,
    };
    let core = core.trim_end_matches(|c: char| c.is_whitespace() || matches!(c, '.' | '-' | '/' | '('));
    if core.matches('(').count() != core.matches(')').count() || looks_like_date(core) {
        return false;
    }
    let all = digits(core);
    if let Some(rest) = core.strip_prefix('+').or_else(|| core.strip_prefix("00")) {
        return international(rest);
    }
    if !(7..=15).contains(&all.len()) {
        return false;
    }
    let bare = core.chars().all(|c| c.is_ascii_digit());
    regions.iter().any(|&id| national(core, &all, bare, id))
}

/// `+CC…`: a known country code and a possible (or valid) national number.
fn international(rest: &str) -> bool {
    // `+49 (0) 6018…`: the trunk prefix in parentheses is not dialled.
    let rest = rest.replacen("(0)", "", 1);
    let all = digits(&rest);
    if !(8..=15).contains(&all.len()) {
        return false;
    }
    // NANP (+1): ten digits with an area code and exchange of 2-9, as
    // national numbers (the metadata knows only assigned area codes).
    if all.len() == 11 && all.starts_with('1') && nanp_shape(&all[1..]) {
        return true;
    }
    phonenumber::parse(None, format!("+{rest}")).is_ok_and(|n| n.is_valid() || possible_length(&n))
}

/// Ten digits with an area code and an exchange starting with 2-9.
fn nanp_shape(ten: &str) -> bool {
    let b = ten.as_bytes();
    b.len() == 10 && b[0] >= b'2' && b[3] >= b'2'
}

/// A national-format number of region `id`.
fn national(core: &str, all: &str, bare: bool, id: Id) -> bool {
    let Some(meta) = DATABASE.by_id(id.as_ref()) else {
        return false;
    };
    if meta.country_code() == 1 {
        let ten = match all.len() {
            10 => all,
            11 if all.starts_with('1') => &all[1..],
            _ => return false,
        };
        if !nanp_shape(ten) {
            return false;
        }
        if !bare {
            return true;
        }
    } else {
        match meta.national_prefix() {
            Some(prefix) if !prefix.is_empty() => {
                if !all.starts_with(prefix) || all.starts_with("00") || all.len() < 9 {
                    return false;
                }
            }
            // No trunk prefix: only numbers the metadata calls valid.
            _ => {
                return phonenumber::parse(Some(id), core).is_ok_and(|n| n.is_valid());
            }
        }
    }
    let Ok(number) = phonenumber::parse(Some(id), core) else {
        return false;
    };
    // A bare run of ten NANP digits could be any id: only valid numbers.
    if bare && meta.country_code() == 1 {
        return number.is_valid();
    }
    number.is_valid() || possible_length(&number)
}

/// Whether the national number's length is possible for its country.
fn possible_length(number: &phonenumber::PhoneNumber) -> bool {
    let len = number.national().to_string().len() as u16;
    let Some(metas) = DATABASE.by_code(&number.code().value()) else {
        return false;
    };
    metas.iter().any(|meta| {
        let d = meta.descriptors();
        // The metadata keeps possible lengths per number type.
        [
            Some(d.general()),
            d.fixed_line(),
            d.mobile(),
            d.toll_free(),
            d.premium_rate(),
            d.shared_cost(),
            d.personal_number(),
            d.voip(),
            d.uan(),
        ]
        .into_iter()
        .flatten()
        .any(|desc| desc.possible_length().contains(&len))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Option<String> {
        let re = Regex::new(CANDIDATE).unwrap();
        let hit = re.find_iter(text).find_map(|m| {
            confirm(text, m.start(), m.as_str(), &DEFAULT_REGIONS).map(|n| text[m.start()..m.start() + n].to_string())
        });
        hit
    }

    #[test]
    fn people_write_numbers_in_many_formats() {
        for (text, number) in [
            ("call 297-867-1900x3076 now", "297-867-1900x3076"),
            ("call +1-374-525-1639x919 now", "+1-374-525-1639x919"),
            ("call (415)555-2671 now", "(415)555-2671"),
            ("call 001-370-865-3801x856", "001-370-865-3801x856"),
            ("call 405.726.8424 x13164", "405.726.8424 x13164"),
            ("Tel: +49 (0) 6018 159083", "+49 (0) 6018 159083"),
            ("Tel: 0519321223.", "0519321223"),
            ("Tel: 01 42 68 53 00", "01 42 68 53 00"),
            ("ring (0113) 496 0123 or", "(0113) 496 0123"),
            ("ring +44(0)7700 900 123 or", "+44(0)7700 900 123"),
            ("Rufen Sie 030 12345678 an", "030 12345678"),
            ("+33 (0)5 45 10 58 17", "+33 (0)5 45 10 58 17"),
            ("text 2025550143", "2025550143"),
        ] {
            assert_eq!(found(text).as_deref(), Some(number), "{text}");
        }
    }

    #[test]
    fn order_ids_dates_versions_stay_untouched() {
        for text in [
            "Order #15947233 shipped on 2005-05-06.",
            "The meeting moved to 14:30 on 15.01.2024.",
            "Upgrade to version 10.2.145 before 03/15/2024.",
            "Ref. 510291259 / 1993, amount 56419.00",
            "ISBN 978-1-4028-9462-6 costs 12.50 USD.",
            "tracking 1234567890",
            "Lat 0.959345, long 90.273583",
            "Ticket INC-16098816 was opened on 14/09/1989 at 01:26:49.",
            "The population grew from 97,469 in 1956 to 2,756,276 in 2013.",
            "Invoice 934223 of 1995-11-02: 68 items, EUR 5837,64.",
        ] {
            assert_eq!(found(text), None, "{text}");
        }
    }

    #[test]
    fn regions_parse() {
        assert_eq!(parse_region("gb"), Some(Id::GB));
        assert_eq!(parse_region("XX"), None);
    }
}
