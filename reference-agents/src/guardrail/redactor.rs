//! PII detectors: one regex per type, with checks that weed out false
//! positives (Luhn for cards, mod 97 for IBANs, SSA ranges for SSNs,
//! libphonenumber metadata for phone numbers: see [`phone`]), and the
//! [`Redactor`] applying them to text or to the string values of JSON.

use std::sync::LazyLock;

use regex::Regex;

use super::phone::{self, PhoneRegion};
use super::pii_json::redact_strings;
use policy_agents::PolicyError;

/// A kind of personal data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PiiType {
    /// E-mail addresses.
    Email,
    /// Card numbers passing the Luhn check.
    CreditCard,
    /// IBANs passing the mod-97 check.
    Iban,
    /// US social security numbers (`123-45-6789`).
    Ssn,
    /// IPv4 addresses.
    Ipv4,
    /// Phone numbers.
    Phone,
}

impl PiiType {
    /// Every type, in the order they are applied (broad patterns last).
    pub const ALL: [PiiType; 6] = [
        PiiType::Email,
        PiiType::CreditCard,
        PiiType::Iban,
        PiiType::Ssn,
        PiiType::Ipv4,
        PiiType::Phone,
    ];

    /// The name used in params, masks and metadata.
    pub fn as_str(self) -> &'static str {
        match self {
            PiiType::Email => "email",
            PiiType::CreditCard => "credit_card",
            PiiType::Iban => "iban",
            PiiType::Ssn => "ssn",
            PiiType::Ipv4 => "ipv4",
            PiiType::Phone => "phone",
        }
    }

    /// Parses a type name.
    pub fn parse(s: &str) -> Option<Self> {
        PiiType::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// Word boundaries are ASCII ones (`(?-u:\b)`): with a Unicode one
    /// the lazy DFA stops at the first non-ASCII byte and the search runs
    /// on the PikeVM (a 64 KiB text with one curly quote took 36 ms
    /// instead of 0.4 ms). Next to a non-ASCII letter this finds a match a
    /// Unicode boundary would miss ("müller@example.com" is redacted from
    /// "ller").
    pub(super) fn pattern(self) -> &'static str {
        match self {
            PiiType::Email => r"(?i)(?-u:\b)[a-z0-9._%+-]+@[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{2,}(?-u:\b)",
            PiiType::CreditCard => {
                r"(?-u:\b)(?:\d{4}[ -]){3}\d{4}(?-u:\b)|(?-u:\b)\d{4}[ -]\d{6}[ -]\d{5}(?-u:\b)|(?-u:\b)\d{12,19}(?-u:\b)"
            }
            PiiType::Iban => r"(?-u:\b)[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?(?-u:\b)",
            PiiType::Ssn => r"(?-u:\b)\d{3}-\d{2}-\d{4}(?-u:\b)",
            PiiType::Ipv4 => {
                r"(?-u:\b)(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?-u:\b)"
            }
            PiiType::Phone => phone::CANDIDATE,
        }
    }

    /// How much of the match `m` (at `start` in `text`) is this type's
    /// data, if any.
    fn accepts(self, text: &str, start: usize, m: &str, regions: &[PhoneRegion]) -> Option<usize> {
        let ok = match self {
            PiiType::CreditCard => card_ok(m),
            PiiType::Iban => iban_ok(m),
            PiiType::Ssn => ssn_ok(m),
            PiiType::Phone => return phone::confirm(text, start, m, regions),
            _ => true,
        };
        ok.then_some(m.len())
    }
}

/// Luhn check over the digits of `m`: 13-19 digits with a first digit of
/// 2-6, or the issuers with other lengths: Maestro (12 digits, 50 or
/// 56-69) and JCB's 15-digit 1800 and 2131 ranges.
pub(crate) fn card_ok(m: &str) -> bool {
    let digits: Vec<u32> = m.chars().filter_map(|c| c.to_digit(10)).collect();
    let prefix = |p: &str| {
        m.chars()
            .filter(char::is_ascii_digit)
            .collect::<String>()
            .starts_with(p)
    };
    let issuer = match digits.len() {
        12 => prefix("50") || (56..=69).contains(&(digits[0] * 10 + digits[1])),
        15 if prefix("1800") || prefix("2131") => true,
        13..=19 => (2..=6).contains(&digits[0]),
        _ => false,
    };
    if !issuer {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            if i % 2 == 1 {
                if d * 2 > 9 {
                    d * 2 - 9
                } else {
                    d * 2
                }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// ISO 13616 check: move the first four characters to the end, letters to
/// numbers (A=10), the result mod 97 must be 1.
pub(crate) fn iban_ok(m: &str) -> bool {
    let compact: Vec<char> = m.chars().filter(|c| !c.is_whitespace()).collect();
    if !(15..=34).contains(&compact.len()) {
        return false;
    }
    let mut rem: u32 = 0;
    for c in compact[4..].iter().chain(&compact[..4]) {
        let Some(v) = c.to_digit(36) else { return false };
        rem = if v >= 10 {
            (rem * 100 + v) % 97
        } else {
            (rem * 10 + v) % 97
        };
    }
    rem == 1
}

/// SSA rules: area not 000, 666 or 9xx; group not 00; serial not 0000.
pub(crate) fn ssn_ok(m: &str) -> bool {
    let parts: Vec<&str> = m.split('-').collect();
    match parts.as_slice() {
        [area, group, serial] => {
            *area != "000" && *area != "666" && !area.starts_with('9') && *group != "00" && *serial != "0000"
        }
        _ => false,
    }
}

/// The compiled detectors (compiled once per process).
pub struct Redactor {
    detectors: Vec<(PiiType, Regex)>,
}

static REDACTOR: LazyLock<Result<Redactor, regex::Error>> = LazyLock::new(|| {
    phone::warm()?;
    let detectors = PiiType::ALL
        .into_iter()
        .map(|t| Regex::new(t.pattern()).map(|r| (t, r)))
        .collect::<Result<_, _>>()?;
    Ok(Redactor { detectors })
});

/// Counts per type.
pub type Counts = Vec<(PiiType, usize)>;

impl Redactor {
    /// The shared redactor.
    pub fn shared() -> Result<&'static Redactor, PolicyError> {
        REDACTOR
            .as_ref()
            .map_err(|e| PolicyError::new(format!("PII patterns do not compile: {e}")))
    }

    /// Redacts `types` in plain text (phone numbers in the national
    /// formats of `regions`, and international ones); `None` when nothing
    /// matched.
    pub fn redact_text(
        &self,
        text: &str,
        types: &[PiiType],
        regions: &[PhoneRegion],
        counts: &mut Counts,
    ) -> Option<String> {
        let mut current: Option<String> = None;
        for (t, re) in self.detectors.iter().filter(|(t, _)| types.contains(t)) {
            let input = current.as_deref().unwrap_or(text);
            let mut n = 0;
            let mut out = String::new();
            let mut copied = 0;
            for m in re.find_iter(input) {
                let Some(len) = t.accepts(input, m.start(), m.as_str(), regions) else {
                    continue;
                };
                out.push_str(&input[copied..m.start()]);
                out.push_str("[REDACTED:");
                out.push_str(t.as_str());
                out.push(']');
                copied = m.start() + len;
                n += 1;
            }
            if n > 0 {
                out.push_str(&input[copied..]);
                current = Some(out);
                match counts.iter_mut().find(|(ct, _)| *ct == *t) {
                    Some((_, c)) => *c += n,
                    None => counts.push((*t, n)),
                }
            }
        }
        current
    }

    /// Redacts a body: string values of a JSON document, or the whole text.
    /// `None` when nothing changed (or the body is neither JSON nor UTF-8).
    pub fn redact_body(
        &self,
        body: &[u8],
        types: &[PiiType],
        regions: &[PhoneRegion],
        counts: &mut Counts,
    ) -> Option<String> {
        let text = std::str::from_utf8(body).ok()?;
        if serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() {
            redact_strings(text, |s| self.redact_text(s, types, regions, counts))
        } else {
            self.redact_text(text, types, regions, counts)
        }
    }
}
