//! Text that came from outside certgen, made safe to print for people: control characters
//! escaped, and names (certificate subjects) bounded in length.
//!
//! Certificates, files and API answers are written by others: a subject holding terminal
//! escapes could clear the screen and print a fake "Healthy" line, and a 64 KB common name
//! would fill a screen with one line. Text reports and error lines go through [`printable`];
//! names through [`bounded`]. JSON escapes control characters itself. A leaf module: it imports
//! nothing of certgen.

/// The most characters of one name (a certificate's subject or issuer) shown.
pub const MAX_NAME: usize = 256;

/// `text` with every control character but newline and tab written as an escape (`\x1b`,
/// `\u{202e}`): C0 and C1 controls, DEL, and the Unicode bidirectional overrides and isolates,
/// which reorder what a terminal shows.
pub fn printable(text: &str) -> String {
    if !text.chars().any(needs_escape) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if needs_escape(c) {
            match u32::from(c) {
                n @ 0..=0xff => out.push_str(&format!("\\x{n:02x}")),
                n => out.push_str(&format!("\\u{{{n:x}}}")),
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn needs_escape(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A name for messages: control characters escaped ([`printable`], newlines and tabs too) and
/// at most [`MAX_NAME`] characters, the rest counted.
pub fn bounded(name: &str) -> String {
    let escaped = printable(name).replace('\n', "\\n").replace('\t', "\\t");
    let total = escaped.chars().count();
    if total <= MAX_NAME {
        return escaped;
    }
    let kept: String = escaped.chars().take(MAX_NAME).collect();
    format!("{kept}... ({} more characters)", total - MAX_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_lines_kept() {
        let fake = "CN=x\u{1b}[2J\u{1b}[H\rHealthy: nothing is due.\u{7}\u{9b}\u{202e}";
        assert_eq!(
            printable(&format!("a\n\tb {fake}")),
            "a\n\tb CN=x\\x1b[2J\\x1b[H\\x0dHealthy: nothing is due.\\x07\\x9b\\u{202e}"
        );
        assert_eq!(printable("plain text, ünïcode"), "plain text, ünïcode");
    }

    #[test]
    fn names_are_bounded_and_on_one_line() {
        assert_eq!(bounded("CN=a\nb"), "CN=a\\nb");
        let long = format!("CN={}", "a".repeat(65_536));
        let shown = bounded(&long);
        assert!(shown.starts_with("CN=aaa"));
        assert!(
            shown.ends_with("... (65283 more characters)"),
            "{}",
            &shown[250..]
        );
        assert!(shown.len() < 300);
        assert_eq!(bounded("CN=short"), "CN=short");
    }
}
