//! The pgoutput options of START_REPLICATION, checked as pgoutput checks them
//! (`parse_output_parameters` and `pgoutput_startup`), with the same messages and
//! SQLSTATEs for the server version announced (the test server's, or the upstream's behind
//! the proxy).

use pgoutput_client::{parse_identifier_list, StreamOptions};
use pgoutput_codec::{ProtocolVersion, Streaming};
use pgoutput_wire::error::{error, sqlstate, SqlError};
use pgoutput_wire::grammar::{boolean, Options};

/// Parses and checks START_REPLICATION's options as a server of major version
/// `major` does.
pub(crate) fn parse(options: &Options, major: u32) -> Result<StreamOptions, SqlError> {
    // From 16 on, pgoutput takes `streaming` as a mode (off, on, parallel) and knows
    // `origin`, protocol 4 and an empty publication list; 15 takes a Boolean.
    let since_16 = major >= 16;
    let mut seen: Vec<&str> = Vec::new();
    let mut proto: Option<u32> = None;
    let mut publications: Option<Vec<String>> = None;
    let mut streaming = Streaming::Off;
    let (mut binary, mut messages, mut two_phase, mut origin_none) = (false, false, false, false);
    for (name, value) in options {
        if seen.contains(&name.as_str()) {
            return Err(error(
                sqlstate::SYNTAX_ERROR,
                "conflicting or redundant options",
            ));
        }
        seen.push(name);
        let value = value.as_deref();
        match name.as_str() {
            "proto_version" => {
                let text = value.unwrap_or("");
                let number: u64 =
                    text.trim_start()
                        .trim_start_matches('+')
                        .parse()
                        .map_err(|_| {
                            error(sqlstate::INVALID_PARAMETER_VALUE, "invalid proto_version")
                        })?;
                let number = u32::try_from(number).map_err(|_| {
                    error(
                        sqlstate::INVALID_PARAMETER_VALUE,
                        format!("proto_version \"{text}\" out of range"),
                    )
                })?;
                proto = Some(number);
            }
            "publication_names" => {
                publications =
                    Some(parse_identifier_list(value.unwrap_or("")).ok_or_else(|| {
                        error(sqlstate::INVALID_NAME, "invalid publication_names syntax")
                    })?);
            }
            "binary" => binary = boolean(name, value)?,
            "messages" => messages = boolean(name, value)?,
            "two_phase" => two_phase = boolean(name, value)?,
            "streaming" if since_16 => {
                streaming = match value.map(str::to_ascii_lowercase).as_deref() {
                    None | Some("true") | Some("on") => Streaming::On,
                    Some("false") | Some("off") => Streaming::Off,
                    Some("parallel") => Streaming::Parallel,
                    _ => {
                        return Err(error(
                            sqlstate::SYNTAX_ERROR,
                            "streaming requires a Boolean value or \"parallel\"",
                        ))
                    }
                }
            }
            "streaming" => {
                streaming = if boolean(name, value)? {
                    Streaming::On
                } else {
                    Streaming::Off
                }
            }
            "origin" if since_16 => {
                let value = value
                    .ok_or_else(|| error(sqlstate::SYNTAX_ERROR, "origin requires a parameter"))?;
                origin_none = match value.to_ascii_lowercase().as_str() {
                    "none" => true,
                    "any" => false,
                    _ => {
                        return Err(error(
                            sqlstate::INVALID_PARAMETER_VALUE,
                            format!("unrecognized origin value: \"{value}\""),
                        ))
                    }
                };
            }
            other => {
                return Err(error(
                    sqlstate::INTERNAL_ERROR,
                    format!("unrecognized pgoutput option: {other}"),
                ))
            }
        }
    }
    if since_16 {
        for (given, name) in [
            (proto.is_some(), "proto_version"),
            (publications.is_some(), "publication_names"),
        ] {
            if !given {
                return Err(error(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!("option \"{name}\" missing"),
                ));
            }
        }
    }
    let proto = proto.unwrap_or(0);
    let max = if since_16 { 4 } else { 3 };
    let who = if since_16 {
        "server only supports"
    } else {
        "we only support"
    };
    if proto > max {
        return Err(error(
            sqlstate::FEATURE_NOT_SUPPORTED,
            format!("client sent proto_version={proto} but {who} protocol {max} or lower"),
        ));
    }
    let Some(version) = ProtocolVersion::from_number(proto) else {
        return Err(error(
            sqlstate::FEATURE_NOT_SUPPORTED,
            format!("client sent proto_version={proto} but {who} protocol 1 or higher"),
        ));
    };
    let publication_names = publications.unwrap_or_default();
    if !since_16 && publication_names.is_empty() {
        return Err(error(
            sqlstate::INVALID_PARAMETER_VALUE,
            "publication_names parameter missing",
        ));
    }
    if streaming == Streaming::On && proto < 2 {
        return Err(error(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("requested proto_version={proto} does not support streaming, need 2 or higher"),
        ));
    }
    if streaming == Streaming::Parallel && proto < 4 {
        return Err(error(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("requested proto_version={proto} does not support parallel streaming, need 4 or higher"),
        ));
    }
    if two_phase && proto < 3 {
        return Err(error(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("requested proto_version={proto} does not support two-phase commit, need 3 or higher"),
        ));
    }
    Ok(StreamOptions {
        proto_version: version,
        publication_names,
        streaming,
        binary,
        messages,
        two_phase,
        origin_none,
        other: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(options: &[(&str, Option<&str>)], major: u32) -> Result<StreamOptions, SqlError> {
        let options: Options = options
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned)))
            .collect();
        super::parse(&options, major)
    }

    #[test]
    fn as_postgres_checks_them() {
        let ok = parse(
            &[
                ("proto_version", Some("4")),
                ("streaming", Some("parallel")),
                ("origin", Some("any")),
                ("publication_names", Some("\"p\"")),
                ("binary", Some("true")),
            ],
            18,
        )
        .unwrap();
        assert_eq!(ok.streaming, Streaming::Parallel);
        assert!(ok.binary);
        assert_eq!(ok.publication_names, ["p"]);
        let err = parse(
            &[
                ("proto_version", Some("4")),
                ("publication_names", Some("p")),
            ],
            15,
        )
        .unwrap_err();
        assert_eq!(
            (err.code.as_ref(), err.message.as_str()),
            (
                "0A000",
                "client sent proto_version=4 but we only support protocol 3 or lower"
            )
        );
        let err = parse(
            &[
                ("proto_version", Some("3")),
                ("publication_names", Some("p")),
                ("streaming", Some("parallel")),
            ],
            18,
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "requested proto_version=3 does not support parallel streaming, need 4 or higher"
        );
        let err = parse(
            &[
                ("proto_version", Some("1")),
                ("publication_names", Some("p")),
                ("origin", Some("any")),
            ],
            15,
        )
        .unwrap_err();
        assert_eq!(
            (err.code.as_ref(), err.message.as_str()),
            ("XX000", "unrecognized pgoutput option: origin")
        );
        let err = parse(&[("publication_names", Some("p"))], 18).unwrap_err();
        assert_eq!(err.message, "option \"proto_version\" missing");
        let err = parse(
            &[("proto_version", Some("1")), ("proto_version", Some("1"))],
            18,
        )
        .unwrap_err();
        assert_eq!(err.message, "conflicting or redundant options");
        let err = parse(
            &[
                ("proto_version", Some("2")),
                ("publication_names", Some("p")),
                ("two_phase", Some("on")),
            ],
            18,
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "requested proto_version=2 does not support two-phase commit, need 3 or higher"
        );
    }
}
