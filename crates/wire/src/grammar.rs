//! Replication commands as the walsender's grammar (`repl_gram.y`, `repl_scanner.l`)
//! reads them: upper-case keywords, identifiers (unquoted ones folded to lower case,
//! `"quoted"` ones kept), `'strings'` with `''` for a quote, and `X/Y` positions.

use crate::error::{error, sqlstate, SqlError};
use pgoutput_codec::Lsn;

/// A token of the replication grammar.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// An unquoted word: keywords keep their case for matching, identifiers are folded.
    Word(String),
    /// A `"quoted identifier"`.
    Quoted(String),
    /// A `'string'`.
    Str(String),
    Number(String),
    Lsn(Lsn),
    Punct(char),
}

fn syntax_error() -> SqlError {
    error(sqlstate::SYNTAX_ERROR, "syntax error")
}

fn tokenize(text: &str) -> Result<Vec<Token>, SqlError> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '"' || c == '\'' {
            let mut value = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => {
                        return Err(error(sqlstate::SYNTAX_ERROR, "unterminated quoted string"))
                    }
                    Some(&q) if q == c => {
                        // Only single-quoted strings know the doubled-quote escape.
                        if c == '\'' && chars.get(i + 1) == Some(&'\'') {
                            value.push('\'');
                            i += 2;
                        } else {
                            i += 1;
                            break;
                        }
                    }
                    Some(&other) => {
                        value.push(other);
                        i += 1;
                    }
                }
            }
            tokens.push(if c == '"' {
                Token::Quoted(value)
            } else {
                Token::Str(value)
            });
        } else if c.is_ascii_hexdigit() {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric()
                    || chars[i] == '_'
                    || chars[i] == '$'
                    || chars[i] == '/')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if word.contains('/') {
                let lsn = word.parse::<Lsn>().map_err(|_| {
                    error(sqlstate::SYNTAX_ERROR, "invalid streaming start location")
                })?;
                tokens.push(Token::Lsn(lsn));
            } else if word.chars().all(|c| c.is_ascii_digit()) {
                tokens.push(Token::Number(word));
            } else if word.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                return Err(syntax_error());
            } else {
                tokens.push(Token::Word(word));
            }
        } else if c.is_alphabetic() || c == '_' || !c.is_ascii() {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric()
                    || chars[i] == '_'
                    || chars[i] == '$'
                    || !chars[i].is_ascii())
            {
                i += 1;
            }
            tokens.push(Token::Word(chars[start..i].iter().collect()));
        } else {
            tokens.push(Token::Punct(c));
            i += 1;
        }
    }
    if tokens.last() == Some(&Token::Punct(';')) {
        tokens.pop();
    }
    Ok(tokens)
}

/// A generic option: a name (lower case) and an optional value.
pub type Options = Vec<(String, Option<String>)>;

/// A replication command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    IdentifySystem,
    Show(String),
    CreateSlot {
        name: String,
        temporary: bool,
        plugin: String,
        options: Options,
    },
    CreatePhysicalSlot,
    DropSlot {
        name: String,
        wait: bool,
    },
    StartLogical {
        slot: String,
        lsn: Lsn,
        options: Options,
    },
    StartPhysical,
    /// Another command of the grammar this server does not serve (BASE_BACKUP, …).
    Unsupported(String),
}

/// The first word's keywords that make a query a replication command.
const COMMANDS: [&str; 10] = [
    "IDENTIFY_SYSTEM",
    "BASE_BACKUP",
    "START_REPLICATION",
    "CREATE_REPLICATION_SLOT",
    "DROP_REPLICATION_SLOT",
    "ALTER_REPLICATION_SLOT",
    "READ_REPLICATION_SLOT",
    "TIMELINE_HISTORY",
    "UPLOAD_MANIFEST",
    "SHOW",
];

/// The replication command `text` is, or `None` if it is SQL (decided by its first word,
/// as the walsender does).
pub fn parse(text: &str) -> Option<Result<Command, SqlError>> {
    let tokens = match tokenize(text) {
        Ok(tokens) => tokens,
        Err(err) => {
            return text
                .split_whitespace()
                .next()
                .filter(|w| COMMANDS.contains(w))
                .map(|_| Err(err))
        }
    };
    let Some(Token::Word(first)) = tokens.first().cloned() else {
        return None;
    };
    if !COMMANDS.contains(&first.as_str()) {
        return None;
    }
    let mut parser = Parser { tokens, at: 1 };
    Some(parser.command(&first))
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        token
    }

    fn keyword(&mut self, keyword: &str) -> bool {
        if matches!(self.peek(), Some(Token::Word(w)) if w == keyword) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect_keyword(&mut self, keyword: &str) -> Result<(), SqlError> {
        self.keyword(keyword).then_some(()).ok_or_else(syntax_error)
    }

    fn punct(&mut self, c: char) -> bool {
        if self.peek() == Some(&Token::Punct(c)) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    /// An identifier: a quoted one as it is, an unquoted one folded to lower case. Upper-
    /// case keywords are not identifiers.
    fn ident(&mut self) -> Result<String, SqlError> {
        match self.next() {
            Some(Token::Quoted(name)) => Ok(name),
            Some(Token::Word(word)) if !is_keyword(&word) => Ok(word.to_lowercase()),
            _ => Err(syntax_error()),
        }
    }

    fn end(&self) -> Result<(), SqlError> {
        if self.at == self.tokens.len() {
            Ok(())
        } else {
            Err(syntax_error())
        }
    }

    fn command(&mut self, first: &str) -> Result<Command, SqlError> {
        let command = match first {
            "IDENTIFY_SYSTEM" => Command::IdentifySystem,
            "SHOW" => {
                let mut name = self.ident()?;
                while self.punct('.') {
                    name.push('.');
                    name.push_str(&self.ident()?);
                }
                Command::Show(name)
            }
            "CREATE_REPLICATION_SLOT" => {
                let name = self.ident()?;
                let temporary = self.keyword("TEMPORARY");
                if self.keyword("PHYSICAL") {
                    self.at = self.tokens.len();
                    return Ok(Command::CreatePhysicalSlot);
                }
                self.expect_keyword("LOGICAL")?;
                let plugin = self.ident()?;
                let options = self.create_options()?;
                Command::CreateSlot {
                    name,
                    temporary,
                    plugin,
                    options,
                }
            }
            "DROP_REPLICATION_SLOT" => {
                let name = self.ident()?;
                let wait = self.keyword("WAIT");
                Command::DropSlot { name, wait }
            }
            "START_REPLICATION" => {
                if !self.keyword("SLOT") {
                    return Ok(Command::StartPhysical);
                }
                let slot = self.ident()?;
                if !self.keyword("LOGICAL") {
                    return Ok(Command::StartPhysical);
                }
                let Some(Token::Lsn(lsn)) = self.next() else {
                    return Err(syntax_error());
                };
                let mut options = Vec::new();
                if self.punct('(') {
                    loop {
                        let name = self.ident()?;
                        let value = match self.peek() {
                            Some(Token::Str(_)) => match self.next() {
                                Some(Token::Str(v)) => Some(v),
                                _ => unreachable!("peeked a string"),
                            },
                            _ => None,
                        };
                        options.push((name, value));
                        if self.punct(')') {
                            break;
                        }
                        if !self.punct(',') {
                            return Err(syntax_error());
                        }
                    }
                }
                Command::StartLogical { slot, lsn, options }
            }
            other => {
                self.at = self.tokens.len();
                Command::Unsupported(other.to_owned())
            }
        };
        self.end()?;
        Ok(command)
    }

    /// `( name [value], … )` or the legacy keywords.
    fn create_options(&mut self) -> Result<Options, SqlError> {
        let mut options = Vec::new();
        if self.punct('(') {
            loop {
                let name = match self.next() {
                    Some(Token::Word(w)) => w.to_lowercase(),
                    Some(Token::Quoted(q)) => q,
                    _ => return Err(syntax_error()),
                };
                let value = match self.peek() {
                    Some(Token::Str(_) | Token::Number(_)) => match self.next() {
                        Some(Token::Str(v) | Token::Number(v)) => Some(v),
                        _ => unreachable!("peeked a value"),
                    },
                    Some(Token::Word(w)) if !is_keyword(w) => {
                        let w = w.to_lowercase();
                        self.at += 1;
                        Some(w)
                    }
                    _ => None,
                };
                options.push((name, value));
                if self.punct(')') {
                    break;
                }
                if !self.punct(',') {
                    return Err(syntax_error());
                }
            }
            return Ok(options);
        }
        loop {
            let option = if self.keyword("EXPORT_SNAPSHOT") {
                ("snapshot", Some("export"))
            } else if self.keyword("NOEXPORT_SNAPSHOT") {
                ("snapshot", Some("nothing"))
            } else if self.keyword("USE_SNAPSHOT") {
                ("snapshot", Some("use"))
            } else if self.keyword("TWO_PHASE") {
                ("two_phase", None)
            } else if self.keyword("RESERVE_WAL") {
                ("reserve_wal", None)
            } else {
                return Ok(options);
            };
            options.push((option.0.to_owned(), option.1.map(str::to_owned)));
        }
    }
}

/// The grammar's keywords (upper case only: the scanner is case-sensitive).
fn is_keyword(word: &str) -> bool {
    matches!(
        word,
        "BASE_BACKUP"
            | "IDENTIFY_SYSTEM"
            | "READ_REPLICATION_SLOT"
            | "SHOW"
            | "TIMELINE"
            | "START_REPLICATION"
            | "CREATE_REPLICATION_SLOT"
            | "DROP_REPLICATION_SLOT"
            | "ALTER_REPLICATION_SLOT"
            | "TIMELINE_HISTORY"
            | "PHYSICAL"
            | "RESERVE_WAL"
            | "LOGICAL"
            | "SLOT"
            | "TEMPORARY"
            | "TWO_PHASE"
            | "EXPORT_SNAPSHOT"
            | "NOEXPORT_SNAPSHOT"
            | "USE_SNAPSHOT"
            | "WAIT"
            | "UPLOAD_MANIFEST"
    )
}

/// `defGetBoolean`: no value is true; otherwise `true`/`false`/`on`/`off` in any case.
pub fn boolean(name: &str, value: Option<&str>) -> Result<bool, SqlError> {
    match value.map(str::to_ascii_lowercase).as_deref() {
        None | Some("true") | Some("on") => Ok(true),
        Some("false") | Some("off") => Ok(false),
        _ => Err(error(
            sqlstate::SYNTAX_ERROR,
            format!("{name} requires a Boolean value"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(text: &str) -> Command {
        parse(text).expect("a replication command").expect("valid")
    }

    #[test]
    fn forms_real_clients_send() {
        assert_eq!(
            command("START_REPLICATION SLOT \"s_rl18\" LOGICAL 0/0 (\"proto_version\" '4', \"publication_names\" 'p', \"streaming\" 'on')"),
            Command::StartLogical {
                slot: "s_rl18".into(),
                lsn: Lsn(0),
                options: vec![
                    ("proto_version".into(), Some("4".into())),
                    ("publication_names".into(), Some("p".into())),
                    ("streaming".into(), Some("on".into())),
                ]
            }
        );
        assert_eq!(
            command("START_REPLICATION SLOT \"s\" LOGICAL 0/00000000 (proto_version '1', publication_names '\"p\"')"),
            Command::StartLogical {
                slot: "s".into(),
                lsn: Lsn(0),
                options: vec![
                    ("proto_version".into(), Some("1".into())),
                    ("publication_names".into(), Some("\"p\"".into())),
                ]
            }
        );
        assert_eq!(
            command("CREATE_REPLICATION_SLOT \"s_rl18\" LOGICAL \"pgoutput\" ( FAILOVER,  TWO_PHASE,  SNAPSHOT 'nothing')"),
            Command::CreateSlot {
                name: "s_rl18".into(),
                temporary: false,
                plugin: "pgoutput".into(),
                options: vec![
                    ("failover".into(), None),
                    ("two_phase".into(), None),
                    ("snapshot".into(), Some("nothing".into())),
                ]
            }
        );
        assert_eq!(
            command("CREATE_REPLICATION_SLOT \"x\" LOGICAL pgoutput"),
            Command::CreateSlot {
                name: "x".into(),
                temporary: false,
                plugin: "pgoutput".into(),
                options: vec![]
            }
        );
        assert_eq!(
            command("DROP_REPLICATION_SLOT \"pg_1_sync_2_3\" WAIT"),
            Command::DropSlot {
                name: "pg_1_sync_2_3".into(),
                wait: true
            }
        );
        assert_eq!(
            command("DROP_REPLICATION_SLOT MySlot;"),
            Command::DropSlot {
                name: "myslot".into(),
                wait: false
            }
        );
        assert_eq!(
            command("SHOW data_directory_mode"),
            Command::Show("data_directory_mode".into())
        );
        assert!(parse("SELECT 1").is_none());
        assert!(parse("identify_system").is_none());
        assert_eq!(
            parse("START_REPLICATION SLOT s LOGICAL"),
            Some(Err(syntax_error()))
        );
        assert_eq!(
            parse("START_REPLICATION SLOT s LOGICAL 0/0 (a 'x)")
                .unwrap()
                .unwrap_err()
                .message,
            "unterminated quoted string"
        );
    }

    #[test]
    fn booleans() {
        assert_eq!(boolean("binary", Some("ON")), Ok(true));
        assert!(boolean("binary", Some("1")).is_err());
        assert_eq!(boolean("binary", None), Ok(true));
    }
}
