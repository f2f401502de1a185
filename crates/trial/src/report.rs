//! The report card in the forms people read it in: a table for the terminal, JUnit XML
//! for CI (the JSON form is the [`Report`]'s serde form).

use std::fmt::Write;

use crate::run::{Report, ScenarioReport};
use crate::verdict::Verdict;

impl Report {
    /// The terminal's table: a line per scenario, then the evidence of each that did not
    /// pass, then the tally.
    #[must_use]
    pub fn to_text(&self) -> String {
        let width = self
            .scenarios
            .iter()
            .map(|s| s.name.len())
            .max()
            .unwrap_or(8)
            .max(8);
        let mut out = String::new();
        let _ = writeln!(out, "{:<width$}  {:<7}  summary", "scenario", "verdict");
        for s in &self.scenarios {
            let _ = writeln!(
                out,
                "{:<width$}  {:<7}  {}",
                s.name,
                s.verdict.name(),
                s.summary
            );
        }
        for s in self.scenarios.iter().filter(|s| s.verdict != Verdict::Pass) {
            let _ = write!(out, "\n{}", evidence(s));
        }
        if !self.skipped.is_empty() {
            out.push('\n');
        }
        for s in &self.skipped {
            let _ = writeln!(out, "{} (skipped): {}", s.name, s.why);
        }
        let count = |v: Verdict| self.scenarios.iter().filter(|s| s.verdict == v).count();
        let _ = writeln!(
            out,
            "\n{} scenarios: {} pass, {} warn, {} fail, {} unknown{} (seed {})",
            self.scenarios.len(),
            count(Verdict::Pass),
            count(Verdict::Warn),
            count(Verdict::Fail),
            count(Verdict::Unknown),
            if self.skipped.is_empty() {
                String::new()
            } else {
                format!("; {} skipped", self.skipped.len())
            },
            self.seed
        );
        out
    }

    /// JUnit XML: a test case per scenario; fail a `<failure>`, unknown an `<error>`, warn
    /// a pass with its finding in `<system-out>`.
    #[must_use]
    pub fn to_junit(&self) -> String {
        let count = |v: Verdict| self.scenarios.iter().filter(|s| s.verdict == v).count();
        let seconds: f64 = self
            .scenarios
            .iter()
            .map(|s| s.elapsed_ms as f64)
            .sum::<f64>()
            / 1000.0;
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = writeln!(
            out,
            "<testsuites><testsuite name=\"pgoutput trial\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{seconds:.3}\">",
            self.scenarios.len() + self.skipped.len(),
            count(Verdict::Fail),
            count(Verdict::Unknown),
            self.skipped.len()
        );
        for s in &self.scenarios {
            let _ = write!(
                out,
                "  <testcase classname=\"pgoutput.trial\" name=\"{}\" time=\"{:.3}\">",
                xml(&s.name),
                s.elapsed_ms as f64 / 1000.0
            );
            match s.verdict {
                Verdict::Pass => {}
                Verdict::Warn => {
                    let _ = write!(out, "<system-out>{}</system-out>", xml(&evidence(s)));
                }
                Verdict::Fail => {
                    let _ = write!(
                        out,
                        "<failure message=\"{}\">{}</failure>",
                        xml(&s.summary),
                        xml(&evidence(s))
                    );
                }
                Verdict::Unknown => {
                    let _ = write!(
                        out,
                        "<error message=\"{}\">{}</error>",
                        xml(&s.summary),
                        xml(&evidence(s))
                    );
                }
            }
            out.push_str("</testcase>\n");
        }
        for s in &self.skipped {
            let _ = writeln!(
                out,
                "  <testcase classname=\"pgoutput.trial\" name=\"{}\" time=\"0.000\"><skipped message=\"{}\"/></testcase>",
                xml(&s.name),
                xml(&s.why)
            );
        }
        out.push_str("</testsuite></testsuites>\n");
        out
    }
}

/// A scenario's evidence: each anomaly and finding, where the consumer stood, its
/// output's end, and the command that replays it.
fn evidence(s: &ScenarioReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} ({}): {}", s.name, s.verdict.name(), s.class);
    for problem in &s.problems {
        let _ = writeln!(out, "  problem: {problem}");
    }
    for anomaly in &s.anomalies {
        let _ = writeln!(out, "  {anomaly}");
    }
    for judged in &s.findings {
        let _ = writeln!(out, "  finding: {} ({})", judged.finding, judged.means);
    }
    let position =
        |lsn: Option<pgoutput_codec::Lsn>| lsn.map_or_else(|| "nothing".into(), |l| l.to_string());
    let _ = writeln!(
        out,
        "  source: {} transactions, {} rows ({} rolled back), end {}; consumer confirmed {}, started {} times, exited {} times{}",
        s.transactions,
        s.rows,
        s.aborted_rows,
        position(s.end),
        position(s.confirmed),
        s.consumer.starts,
        s.consumer.exits,
        s.consumer
            .last_exit
            .as_ref()
            .map_or_else(String::new, |e| format!(" (last: {e})"))
    );
    let torn = s
        .torn_line
        .map_or_else(String::new, |n| format!(", line {n} torn"));
    let _ = writeln!(out, "  sink: {} ({} changes{torn})", s.sink, s.sink_lines);
    if !s.consumer.log_tail.is_empty() {
        let _ = writeln!(out, "  consumer's output (last lines):");
        for line in s.consumer.log_tail.lines() {
            let _ = writeln!(out, "    | {line}");
        }
    }
    let _ = writeln!(out, "  replay: {}", s.replay);
    out
}

/// `text` escaped for XML text and attributes.
fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 has no form for the other control characters.
            c if c.is_control() && !matches!(c, '\n' | '\t' | '\r') => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_text_is_escaped() {
        assert_eq!(xml("a<b & \"c\"\u{1}"), "a&lt;b &amp; &quot;c&quot;?");
    }
}
