//! The pgoutput options a client asks for in START_REPLICATION, and the command that asks
//! for them. The test server parses the same type back (checked as PostgreSQL checks it),
//! so what a client sends and what the server understood are one value.

use pgoutput_codec::{Lsn, ProtocolVersion, Streaming};

/// What a client asked pgoutput for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamOptions {
    /// `proto_version`.
    pub proto_version: ProtocolVersion,
    /// `publication_names`, as identifiers (quoted names keep their case).
    pub publication_names: Vec<String>,
    /// `streaming`: off, on, or parallel.
    pub streaming: Streaming,
    /// `binary`: column values in binary form.
    pub binary: bool,
    /// `messages`: logical decoding messages.
    pub messages: bool,
    /// `two_phase`: prepared transactions as Begin Prepare … Prepare, then Commit or
    /// Rollback Prepared.
    pub two_phase: bool,
    /// `origin 'none'`: only changes that did not come from another origin.
    pub origin_none: bool,
    /// Further options, sent as they are after the ones above: for options this type
    /// does not model (a newer pgoutput's, say). The server says what it does not know.
    pub other: Vec<(String, String)>,
}

impl StreamOptions {
    /// `proto_version` and `publication_names`, nothing else.
    #[must_use]
    pub fn new(proto_version: ProtocolVersion, publications: &[&str]) -> StreamOptions {
        StreamOptions {
            proto_version,
            publication_names: publications.iter().map(|p| (*p).to_owned()).collect(),
            streaming: Streaming::Off,
            binary: false,
            messages: false,
            two_phase: false,
            origin_none: false,
            other: Vec::new(),
        }
    }

    /// Sets `streaming`.
    #[must_use]
    pub fn streaming(mut self, streaming: Streaming) -> StreamOptions {
        self.streaming = streaming;
        self
    }

    /// Sets `binary`.
    #[must_use]
    pub fn binary(mut self, binary: bool) -> StreamOptions {
        self.binary = binary;
        self
    }

    /// Sets `messages`.
    #[must_use]
    pub fn messages(mut self, messages: bool) -> StreamOptions {
        self.messages = messages;
        self
    }

    /// Sets `two_phase`.
    #[must_use]
    pub fn two_phase(mut self, two_phase: bool) -> StreamOptions {
        self.two_phase = two_phase;
        self
    }

    /// Sets `origin 'none'` (only changes that did not come from another origin).
    #[must_use]
    pub fn origin_none(mut self, origin_none: bool) -> StreamOptions {
        self.origin_none = origin_none;
        self
    }

    /// The parenthesised option list, in the order PostgreSQL's subscriber writes it:
    /// `(proto_version '4', streaming 'parallel', publication_names '"p"', binary 'true')`.
    /// Publication names are quoted, so they reach the server exactly as they are here.
    #[must_use]
    pub fn option_list(&self) -> String {
        let names: Vec<String> = self
            .publication_names
            .iter()
            .map(|name| quote_identifier(name))
            .collect();
        let mut list = vec![format!("proto_version '{}'", self.proto_version.number())];
        match self.streaming {
            Streaming::Off => {}
            Streaming::On => list.push("streaming 'on'".into()),
            Streaming::Parallel => list.push("streaming 'parallel'".into()),
        }
        if self.two_phase {
            list.push("two_phase 'on'".into());
        }
        if self.origin_none {
            list.push("origin 'none'".into());
        }
        list.push(format!(
            "publication_names {}",
            quote_literal(&names.join(","))
        ));
        if self.binary {
            list.push("binary 'true'".into());
        }
        if self.messages {
            list.push("messages 'true'".into());
        }
        for (name, value) in &self.other {
            list.push(format!(
                "{} {}",
                quote_identifier(name),
                quote_literal(value)
            ));
        }
        format!("({})", list.join(", "))
    }

    /// `START_REPLICATION SLOT "slot" LOGICAL start (options)`.
    #[must_use]
    pub fn start_replication(&self, slot: &str, start: Lsn) -> String {
        format!(
            "START_REPLICATION SLOT {} LOGICAL {start} {}",
            quote_identifier(slot),
            self.option_list()
        )
    }
}

/// `SplitIdentifierString(value, ',')`: comma-separated names, `"quoted"` ones kept as
/// they are (with `""` for a quote), others folded to lower case.
#[must_use]
pub fn parse_identifier_list(value: &str) -> Option<Vec<String>> {
    let mut names = Vec::new();
    let mut chars = value.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return if names.is_empty() { Some(names) } else { None };
        }
        let mut name = String::new();
        if chars.next_if_eq(&'"').is_some() {
            loop {
                match chars.next()? {
                    '"' if chars.next_if_eq(&'"').is_some() => name.push('"'),
                    '"' => break,
                    c => name.push(c),
                }
            }
            if name.is_empty() {
                return None;
            }
        } else {
            while let Some(c) = chars.next_if(|&c| c != ',' && !c.is_whitespace()) {
                name.push(c);
            }
            if name.is_empty() {
                return None;
            }
            name = name.to_lowercase();
        }
        names.push(name);
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        match chars.next() {
            None => return Some(names),
            Some(',') => continue,
            Some(_) => return None,
        }
    }
}

/// `name` as a quoted identifier of the replication grammar.
#[must_use]
pub fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `text` as a quoted string literal of the replication grammar and of SQL with
/// `standard_conforming_strings` (no backslash escapes).
#[must_use]
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifier_lists_follow_postgres() {
        assert_eq!(
            parse_identifier_list("\"p\",q, \"Mix\"\"ed\""),
            Some(vec!["p".into(), "q".into(), "Mix\"ed".into()])
        );
        assert_eq!(parse_identifier_list("MixPub"), Some(vec!["mixpub".into()]));
        assert_eq!(parse_identifier_list(""), Some(vec![]));
        assert_eq!(parse_identifier_list("a,,b"), None);
    }

    #[test]
    fn the_command_quotes_what_it_must() {
        let options = StreamOptions::new(ProtocolVersion::V4, &["p", "Mix\"ed"])
            .streaming(Streaming::Parallel)
            .binary(true)
            .origin_none(true);
        let mut with_other = options.clone();
        with_other.other.push(("future".into(), "it's".into()));
        assert!(with_other
            .option_list()
            .ends_with(", binary 'true', \"future\" 'it''s')"));
        assert_eq!(
            options.start_replication("my slot", Lsn(0)),
            "START_REPLICATION SLOT \"my slot\" LOGICAL 0/0 (proto_version '4', streaming 'parallel', origin 'none', publication_names '\"p\",\"Mix\"\"ed\"', binary 'true')"
        );
    }
}
