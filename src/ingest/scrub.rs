//! Secret scrubbing (SECURITY.md item 3): every log is scrubbed before it reaches the database or
//! the search index, and a repro script that contains a secret is refused rather than altered.
//!
//! The patterns are data (one table below). Scrubbing is one pass over the original text: a
//! [`RegexSet`] says which kinds occur at all (the common answer is "none", and then nothing is
//! copied), each hit kind collects its spans, overlapping spans merge, and the output is built
//! once. Working on the original text means a `[REDACTED:kind]` marker is never re-matched by a
//! later pattern, so scrubbing twice gives the same text.
//!
//! The false positives that matter are crash-log and script content: hex addresses, build ids,
//! `max_tokens=512`, `token_ids`, `pad_token='<pad>'`, `token = tokenizer.encode(x)`. Generic
//! `key=value` assignments therefore pass a plausibility check on the value.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::{Regex, RegexSet};

/// The result of [`scrub`]: the text with every secret replaced by `[REDACTED:<kind>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scrubbed<'a> {
    /// The scrubbed text; borrowed (no copy) when nothing was found.
    pub text: Cow<'a, str>,
    /// How many secrets were replaced.
    pub redactions: usize,
}

/// One kind of secret. When the pattern has a group named `s`, only that group is redacted and the
/// rest of the match (a key, `Bearer`, a URL scheme) is kept as context.
struct Pattern {
    kind: &'static str,
    regex: &'static str,
    check: Check,
}

/// Extra tests on a captured secret, for patterns whose syntax alone over-matches.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    /// The syntax is specific enough (a vendor prefix, a PEM armour line).
    None,
    /// URL userinfo: the password must not be a template or a mask.
    Userinfo,
    /// A generic `key = value`: the value must look like a literal, not code or a placeholder.
    Assignment,
}

/// `key = value` assignments: keeps the key, captures a value of 8+ characters.
macro_rules! assignment {
    ($keys:literal) => {
        concat!(
            r"(?i)(?:",
            $keys,
            r#")["']?[ \t]*[:=][ \t]*["']?(?P<s>[^\s"'&]{8,})"#
        )
    };
}

/// Most specific first: when two kinds cover the same span, the earlier one names it.
const PATTERNS: &[Pattern] = &[
    Pattern {
        kind: "private_key",
        regex: r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?s:.*?)(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\z)",
        check: Check::None,
    },
    Pattern {
        kind: "aws_access_key",
        regex: r"(?-u:\b)(?:AKIA|ASIA)[A-Z0-9]{16}(?-u:\b)",
        check: Check::None,
    },
    Pattern {
        kind: "aws_secret_key",
        regex: r#"(?i)aws_secret_access_key["']?[ \t]*[:=][ \t]*["']?(?P<s>[A-Za-z0-9/+=]{16,})"#,
        check: Check::None,
    },
    Pattern {
        kind: "github_token",
        regex: r"(?-u:\b)(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
        check: Check::None,
    },
    Pattern {
        kind: "slack_token",
        regex: r"(?-u:\b)xox[abprs]-[A-Za-z0-9-]{10,}",
        check: Check::None,
    },
    Pattern {
        kind: "slack_webhook",
        regex: r"(?i)hooks\.slack\.com/(?:services|workflows|triggers)/(?P<s>[A-Za-z0-9/_-]{8,})",
        check: Check::None,
    },
    Pattern {
        kind: "huggingface_token",
        regex: r"(?-u:\b)hf_[A-Za-z0-9]{30,}",
        check: Check::None,
    },
    Pattern {
        kind: "gpu_triage_token",
        regex: r"(?-u:\b)gtr_[0-9a-fA-F]{64}(?-u:\b)",
        check: Check::None,
    },
    Pattern {
        kind: "userinfo",
        regex: r#"(?i)(?-u:\b)[a-z][a-z0-9+.-]*://(?P<s>[^\s/?#@:"'<>]*:[^\s/?#@"'<>]+)@"#,
        check: Check::Userinfo,
    },
    Pattern {
        kind: "bearer",
        regex: r"(?i)(?-u:\b)bearer[ \t]+(?P<s>[A-Za-z0-9._~+/-]{16,}=*)",
        check: Check::None,
    },
    Pattern {
        kind: "authorization",
        regex: r#"(?i)(?-u:\b)authorization["']?[ \t]*:[ \t]*["']?(?:basic|token)[ \t]+(?P<s>[A-Za-z0-9._~+/-]{8,}=*)"#,
        check: Check::None,
    },
    Pattern {
        kind: "password",
        regex: assignment!("passwd|password"),
        check: Check::Assignment,
    },
    Pattern {
        kind: "secret",
        regex: assignment!("secret(?:[_-]?key)?"),
        check: Check::Assignment,
    },
    Pattern {
        kind: "api_key",
        regex: assignment!("api[_-]?key"),
        check: Check::Assignment,
    },
    Pattern {
        kind: "token",
        regex: assignment!("token"),
        check: Check::Assignment,
    },
];

struct Compiled {
    set: RegexSet,
    regexes: Vec<Regex>,
}

static COMPILED: LazyLock<Compiled> = LazyLock::new(compile);

#[allow(
    clippy::expect_used,
    reason = "the patterns are constants; every one is exercised by the unit tests"
)]
fn compile() -> Compiled {
    let sources = PATTERNS.iter().map(|p| p.regex);
    Compiled {
        set: RegexSet::new(sources.clone()).expect("constant secret patterns compile"),
        regexes: sources
            .map(|s| Regex::new(s).expect("constant secret pattern compiles"))
            .collect(),
    }
}

/// A value is a literal secret, not a placeholder, an already-redacted marker, a number or (when
/// unquoted) a piece of code such as `args.token`, `HF_TOKEN`, `tokenizer.encode(x)`.
fn value_is_literal(value: &str, quoted: bool) -> bool {
    let placeholder = value.starts_with(['$', '<', '[', '{', '%', '*'])
        || value
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == '-')
        || value.chars().all(|c| matches!(c, '*' | 'x' | 'X'));
    if placeholder {
        return false;
    }
    // A quoted value is a string literal whatever it looks like; an unquoted one may be code.
    let code =
        value.contains(['(', '[', '{']) || is_identifier_path(value) && value.contains(['.', '_']);
    quoted || !code
}

/// `args.token`, `HF_TOKEN`, `self.api_key`: identifiers joined by dots. Segments with digits
/// (`abc_123xyz`) do not count, since generated secrets usually mix digits in.
fn is_identifier_path(value: &str) -> bool {
    value.split('.').all(|seg| {
        seg.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && seg.chars().all(|c| c.is_ascii_alphabetic() || c == '_')
    })
}

/// `user:pass` is a credential unless the password is a template (`{password}`, `$PASS`) or a mask.
fn userinfo_is_literal(userinfo: &str) -> bool {
    let pass = userinfo.split_once(':').map_or("", |(_, p)| p);
    !(userinfo.contains(['{', '$', '%']) || pass.chars().all(|c| c == '*'))
}

/// A byte range of the input to replace, and the kind that names it.
struct SecretSpan {
    start: usize,
    end: usize,
    kind: &'static str,
}

/// Every secret in `text`, sorted by position, overlaps merged (the earlier-starting, then longer,
/// then more specific one keeps its kind).
fn spans(text: &str) -> Vec<SecretSpan> {
    let compiled = &*COMPILED;
    let mut found: Vec<(SecretSpan, usize)> = Vec::new();
    for idx in compiled.set.matches(text).iter() {
        let pattern = &PATTERNS[idx];
        for caps in compiled.regexes[idx].captures_iter(text) {
            let Some(m) = caps.name("s").or_else(|| caps.get(0)) else {
                continue;
            };
            let (start, mut end) = (m.start(), m.end());
            let quoted = text[..start].ends_with(['"', '\'']);
            if pattern.check == Check::Assignment && !quoted {
                // An unquoted value ends before closing punctuation: `login(token=abc123def)`.
                end = start
                    + text[start..end]
                        .trim_end_matches([')', ']', '}', ',', ';'])
                        .len();
            }
            let secret = &text[start..end];
            let plausible = match pattern.check {
                Check::None => true,
                Check::Userinfo => userinfo_is_literal(secret),
                Check::Assignment => secret.len() >= 8 && value_is_literal(secret, quoted),
            };
            if plausible {
                found.push((
                    SecretSpan {
                        start,
                        end,
                        kind: pattern.kind,
                    },
                    idx,
                ));
            }
        }
    }
    found.sort_by_key(|(s, idx)| (s.start, std::cmp::Reverse(s.end), *idx));
    let mut merged: Vec<SecretSpan> = Vec::with_capacity(found.len());
    for (span, _) in found {
        match merged.last_mut() {
            Some(last) if span.start < last.end => last.end = last.end.max(span.end),
            _ => merged.push(span),
        }
    }
    merged
}

/// Replaces every secret in `text` with `[REDACTED:<kind>]`, keeping the context around it (the
/// key of an assignment, the word `Bearer`, a URL's scheme and host). Borrows when nothing is found.
#[must_use]
pub fn scrub(text: &str) -> Scrubbed<'_> {
    if !COMPILED.set.is_match(text) {
        return Scrubbed {
            text: Cow::Borrowed(text),
            redactions: 0,
        };
    }
    let spans = spans(text);
    if spans.is_empty() {
        return Scrubbed {
            text: Cow::Borrowed(text),
            redactions: 0,
        };
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for span in &spans {
        out.push_str(&text[at..span.start]);
        out.push_str("[REDACTED:");
        out.push_str(span.kind);
        out.push(']');
        at = span.end;
    }
    out.push_str(&text[at..]);
    Scrubbed {
        text: Cow::Owned(out),
        redactions: spans.len(),
    }
}

/// Whether `text` may hold a secret: `false` means [`scrub`] would return it unchanged. One pass
/// over the text, so a caller can check a large block before scrubbing it line by line.
#[must_use]
pub fn might_contain_secret(text: &str) -> bool {
    COMPILED.set.is_match(text)
}

/// The kind of the first secret in `text` (by position), if any: a repro script with a secret is
/// refused (422) instead of being silently altered.
#[must_use]
pub fn find_secret(text: &str) -> Option<&'static str> {
    if !COMPILED.set.is_match(text) {
        return None;
    }
    spans(text).first().map(|s| s.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GHP: &str = "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5";
    const HF: &str = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567";
    const GTR: &str = "gtr_0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

    #[test]
    fn every_kind_is_redacted_with_its_context_kept() {
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAz9\nq7Zk3v==\n-----END RSA PRIVATE KEY-----";
        let ghp = format!("git clone with {GHP}!");
        let hf = format!("HF_TOKEN={HF}");
        let gtr = format!("Authorization: Bearer {GTR}");
        // (input, expected output, a piece of the secret that must be gone)
        #[rustfmt::skip]
        let cases: &[(&str, &str, &str)] = &[
            ("key AKIAIOSFODNN7EXAMPLE used", "key [REDACTED:aws_access_key] used", "AKIAIOSF"),
            ("ASIAY34FZKBOKMUTVV7A", "[REDACTED:aws_access_key]", "ASIAY34F"),
            ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
             "aws_secret_access_key = [REDACTED:aws_secret_key]", "wJalrXUtnFEMI"),
            (&ghp, "git clone with [REDACTED:github_token]!", GHP),
            ("GH=github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMN",
             "GH=[REDACTED:github_token]", "github_pat_11"),
            ("slack xoxb-1234567890-0987654321-AbCdEfGhIjKl", "slack [REDACTED:slack_token]", "xoxb-"),
            ("POST https://hooks.slack.com/services/T0000000/B0000000/XXXXXXXXXXXXXXXX failed",
             "POST https://hooks.slack.com/services/[REDACTED:slack_webhook] failed", "T0000000"),
            (&hf, "HF_TOKEN=[REDACTED:huggingface_token]", HF),
            (pem, "[REDACTED:private_key]", "MIIEow"),
            ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nAAAA (truncated)",
             "[REDACTED:private_key]", "b3Blbn"),
            ("fatal: https://alice:s3cr3t-pw@github.com/org/repo.git not found",
             "fatal: https://[REDACTED:userinfo]@github.com/org/repo.git not found", "s3cr3t"),
            ("DATABASE_URL=postgres://triage:hunter22@db:5432/triage",
             "DATABASE_URL=postgres://[REDACTED:userinfo]@db:5432/triage", "hunter22"),
            ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc-_def",
             "Authorization: Bearer [REDACTED:bearer]", "eyJhbGci"),
            ("authorization: Basic dXNlcjpwYXNzd29yZA==",
             "authorization: Basic [REDACTED:authorization]", "dXNlcjpw"),
            ("--password=Tr0ub4dor&3", "--password=[REDACTED:password]&3", "Tr0ub4dor"),
            ("DB_PASSWD: correcthorsebattery", "DB_PASSWD: [REDACTED:password]", "correcthorse"),
            ("client_secret = \"my_client_secret\"", "client_secret = \"[REDACTED:secret]\"", "my_client"),
            ("SECRET_KEY='django-insecure-x8k2'", "SECRET_KEY='[REDACTED:secret]'", "django"),
            ("{\"api_key\": \"sk-live-4f9a8b7c6d\"}", "{\"api_key\": \"[REDACTED:api_key]\"}", "sk-live"),
            ("Api-Key: 9f8e7d6c5b4a3210ff", "Api-Key: [REDACTED:api_key]", "9f8e7d6c"),
            ("http://127.0.0.1:8888/lab?token=5f2c0e9a7b3d4c1e8f6a",
             "http://127.0.0.1:8888/lab?token=[REDACTED:token]", "5f2c0e9a"),
            ("login(token=abc123def456)", "login(token=[REDACTED:token])", "abc123"),
            // The specific kind wins over `Bearer` for the same span.
            (&gtr, "Authorization: Bearer [REDACTED:gpu_triage_token]", GTR),
        ];
        for (input, want, secret) in cases {
            let got = scrub(input);
            assert_eq!(got.text, *want, "{input}");
            assert_eq!(got.redactions, 1, "{input}");
            assert!(!got.text.contains(secret), "{input}");
            assert!(matches!(got.text, Cow::Owned(_)));
        }
    }

    #[test]
    fn crash_log_content_is_left_alone() {
        #[rustfmt::skip]
        let cases: &[&str] = &[
            "#3 0x7f8f788e56bb in c10::cuda::c10_cuda_check_implementation(int, char const*, bool)",
            "Build id 3f2a9c7e1d0b4a5f6e7d8c9b0a1f2e3d4c5b6a79, commit 8d1e0b5",
            "  File \"/opt/conda/lib/python3.10/site-packages/torch/nn/functional.py\", line 2264, in embedding",
            "TypeError: expected torch.cuda.FloatTensor (got torch.FloatTensor)",
            "NCCL version 2.7.8+cuda11.1",
            "RuntimeError: CUDA error: device-side assert triggered",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has 79.15 GiB",
            "token_ids = tokenizer(batch)['input_ids']; max_tokens=512",
            "token = tokenizer.encode(text)",
            "token = args.token",
            "login(token=HF_TOKEN)",
            "password = os.environ[\"DB_PASSWORD\"]",
            "pad_token='<|endoftext|>', unk_token=\"[UNK]\", eos_token: </s>",
            "token: 123456789012, seq 42",
            "password=${DB_PASSWORD} secret=**********",
            "url = f\"https://{user}:{password}@host/x\"",
            "Looking in indexes: https://user:****@pypi.example.com/simple",
            "ssh://git@github.com/org/repo.git and git@github.com:org/repo",
            "Bearer {token}",
            "password=[REDACTED:password]",
            "model.safetensors: 100%|██████████| 4.98G/4.98G [00:41<00:00, 121MB/s]",
            "",
        ];
        for input in cases {
            let got = scrub(input);
            assert!(
                matches!(got.text, Cow::Borrowed(_)),
                "{input} -> {}",
                got.text
            );
            assert_eq!(got.redactions, 0, "{input}");
            assert_eq!(find_secret(input), None, "{input}");
        }
    }

    #[test]
    fn multiple_secrets_are_counted_and_overlaps_merge() {
        let input = format!("a {GHP} b\n[rank0]: HF_TOKEN={HF}\ntoken={GHP} https://u:{GHP}@h/");
        let got = scrub(&input);
        let want = "a [REDACTED:github_token] b\n[rank0]: HF_TOKEN=[REDACTED:huggingface_token]\n\
                    token=[REDACTED:github_token] https://[REDACTED:userinfo]@h/";
        assert_eq!(got.text, want);
        assert_eq!(got.redactions, 4);
        assert_eq!(
            scrub(&got.text).text,
            got.text,
            "scrubbing twice changes nothing"
        );
    }

    #[test]
    fn pem_block_across_lines_keeps_the_text_around_it() {
        let input = "loading key\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n\
                     BKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----\nTraceback (most recent call last):\n";
        let got = scrub(input);
        let want = "loading key\n[REDACTED:private_key]\nTraceback (most recent call last):\n";
        assert_eq!(got.text, want);
        assert_eq!(got.redactions, 1);
    }

    #[test]
    fn find_secret_names_the_first_kind() {
        #[rustfmt::skip]
        let cases: &[(&str, Option<&str>)] = &[
            ("import torch\nx = torch.randn(4, device='cuda')\n", None),
            ("HfApi(token='hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567')", Some("huggingface_token")),
            ("boto3.client(aws_access_key_id='AKIAIOSFODNN7EXAMPLE')", Some("aws_access_key")),
            ("get(u, headers={'Authorization': 'Bearer abcdefghijklmnop1234'})", Some("bearer")),
            ("PASSWORD = 'p4ssw0rd!'\nGH = 'ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5'", Some("password")),
        ];
        for (input, want) in cases {
            assert_eq!(find_secret(input), *want, "{input}");
        }
    }
}
