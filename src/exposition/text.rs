//! The Prometheus text exposition format (version 0.0.4): metric families of gauges, each with
//! its `# HELP` and `# TYPE` line, label values escaped as the format requires.
//!
//! Families are plain values built by the caller and rendered here; nothing is registered
//! globally and nothing is read or written. What certgen exposes is all gauges (state at the
//! time of the run or check), plus the counters of `certgen exporter`'s own work.

use std::fmt::Write;

/// One sample: its label pairs (in order) and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: Vec<(&'static str, String)>,
    pub value: f64,
}

/// A metric family: name, help, type (`gauge` or `counter`) and samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: &'static str,
    pub samples: Vec<Sample>,
}

impl Family {
    /// An empty gauge family.
    pub fn gauge(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            kind: "gauge",
            samples: Vec::new(),
        }
    }

    /// An empty counter family (its name ends in `_total`).
    pub fn counter(name: &'static str, help: &'static str) -> Self {
        debug_assert!(name.ends_with("_total"), "{name}");
        Self {
            kind: "counter",
            ..Self::gauge(name, help)
        }
    }

    /// Adds a sample.
    pub fn push(&mut self, labels: Vec<(&'static str, String)>, value: f64) {
        self.samples.push(Sample { labels, value });
    }
}

/// Renders `families` in the text format; families without samples are left out.
pub fn render(families: &[Family]) -> String {
    let mut out = String::new();
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(f.help));
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for s in &f.samples {
            out.push_str(f.name);
            if !s.labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in s.labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{k}=\"{}\"", escape_label(v));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {}", value(s.value));
        }
    }
    out
}

fn value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_help_type_and_escaped_labels() {
        let mut f = Family::gauge("certgen_x_seconds", "A help\nline with \\.");
        f.push(vec![("a", "q\"u\\o\nte".into()), ("b", "2".into())], 1.5);
        f.push(vec![], 1_764_000_000.0);
        let empty = Family::gauge("certgen_empty", "Nothing.");
        assert_eq!(
            render(&[f, empty]),
            "# HELP certgen_x_seconds A help\\nline with \\\\.\n\
             # TYPE certgen_x_seconds gauge\n\
             certgen_x_seconds{a=\"q\\\"u\\\\o\\nte\",b=\"2\"} 1.5\n\
             certgen_x_seconds 1764000000\n"
        );
    }

    #[test]
    fn special_values() {
        assert_eq!(value(f64::NAN), "NaN");
        assert_eq!(value(f64::INFINITY), "+Inf");
        assert_eq!(value(-3.0), "-3");
        assert_eq!(value(0.25), "0.25");
    }
}

/// The families of each member of a set of clusters as one exposition: every sample gets
/// the label `cluster` (the member's context) first, and each family appears once, its
/// samples member by member. Families come in the order they first appear.
pub fn by_cluster(members: Vec<(String, Vec<Family>)>) -> Vec<Family> {
    let mut out: Vec<Family> = Vec::new();
    for (cluster, families) in members {
        for f in families {
            let samples = f.samples.into_iter().map(|mut s| {
                s.labels.insert(0, ("cluster", cluster.clone()));
                s
            });
            match out.iter_mut().find(|o| o.name == f.name) {
                Some(o) => o.samples.extend(samples),
                None => out.push(Family {
                    samples: samples.collect(),
                    ..f
                }),
            }
        }
    }
    out
}

#[cfg(test)]
mod by_cluster_tests {
    use super::*;

    #[test]
    fn each_family_once_with_every_members_samples_labelled() {
        let member = |v: f64| {
            let mut f = Family::gauge("certgen_x", "X.");
            f.push(vec![("secret", "a".into())], v);
            let mut g = Family::gauge("certgen_y", "Y.");
            g.push(vec![], v);
            vec![f, g]
        };
        let text = render(&by_cluster(vec![
            ("east".into(), member(1.0)),
            ("west".into(), member(2.0)),
        ]));
        assert_eq!(
            text,
            "# HELP certgen_x X.\n# TYPE certgen_x gauge\ncertgen_x{cluster=\"east\",secret=\"a\"} 1\ncertgen_x{cluster=\"west\",secret=\"a\"} 2\n# HELP certgen_y Y.\n# TYPE certgen_y gauge\ncertgen_y{cluster=\"east\"} 1\ncertgen_y{cluster=\"west\"} 2\n"
        );
    }
}
