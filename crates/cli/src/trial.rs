//! `pgoutput trial`: a consumer run through the catalogue of the field's failures, graded
//! by what it applied, with a report card.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use pgoutput_trial::{catalogue, scenario, Progress, Scenario, Trial};

/// Seconds a consumer has for a scenario, unless told.
const DEFAULT_BUDGET: u64 = 30;

/// `pgoutput trial` arguments.
#[derive(Debug, Args)]
#[command(after_help = TRIAL_HELP)]
pub struct TrialArgs {
    /// The source: a libpq connection string of a user allowed to make tables,
    /// publications and replication slots (the trial makes and drops its own, all named
    /// `pgoutput_trial…`). Without it, a throwaway cluster is started from the
    /// PostgreSQL installation `--postgres` names, or the one on PATH.
    #[arg(long, value_name = "CONNINFO")]
    pub upstream: Option<String>,
    /// The PostgreSQL installation (its bin directory) for the throwaway cluster.
    #[arg(long, value_name = "DIR", conflicts_with = "upstream")]
    pub postgres: Option<PathBuf>,
    /// A sink of tables: a database (another than the source's) where the consumer
    /// writes the rows it applied, as a PostgreSQL subscriber does. The trial makes the
    /// source's tables there before each scenario and compares them with the source's at
    /// the end; the consumer finds it in PGOUTPUT_TRIAL_SINK_DATABASE. Its user needs the
    /// REPLICATION attribute (the trial speaks to it as the client does).
    #[arg(long, value_name = "CONNINFO")]
    pub sink_database: Option<String>,
    /// Only these scenarios (repeat the option, or separate names with commas).
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    pub scenario: Vec<String>,
    /// More scenarios, from a JSON file (an array, in the catalogue's format).
    #[arg(long, value_name = "FILE")]
    pub scenarios: Option<PathBuf>,
    /// Print the scenarios (name, class, what a correct consumer does) and stop.
    #[arg(long)]
    pub list: bool,
    /// The seed of the workloads' values (the report's replay command names it).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Seconds a consumer has to confirm the end of each scenario before it is `unknown`.
    #[arg(long, default_value_t = DEFAULT_BUDGET)]
    pub budget: u64,
    /// Where the sinks and the consumer's logs go (default: a new temporary directory,
    /// kept when a scenario does not pass).
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Also write the report as JSON to FILE (`-`: standard output, instead of the
    /// table).
    #[arg(long, value_name = "FILE")]
    pub json: Option<String>,
    /// Also write the report as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// A consumer already running, instead of a command: the trial's proxy listens at
    /// ADDR for every scenario, the consumer streams `--slot` and appends to `--sink`,
    /// and reconnects on its own when its connection is cut between scenarios. The
    /// scenarios that kill or start the consumer are skipped, and the report says so.
    #[arg(long, value_name = "ADDR", conflicts_with = "command")]
    pub attach: Option<std::net::SocketAddr>,
    /// With --attach: the slot the consumer streams (made afresh for each scenario).
    #[arg(long, value_name = "NAME", requires = "attach", default_value = ATTACHED_SLOT)]
    pub slot: String,
    /// With --attach: the JSON-lines file the consumer appends to (emptied in place
    /// before each scenario; default: attached.jsonl in the work directory).
    #[arg(long, value_name = "FILE", requires = "attach")]
    pub sink: Option<PathBuf>,
    /// The consumer under test: the command (after `--`) the trial starts for each
    /// scenario, and again when it exits.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// The slot an attached consumer streams, unless told.
const ATTACHED_SLOT: &str = "pgoutput_trial_attached";

const TRIAL_HELP: &str = r#"The consumer is told where to connect in its environment:
  PGOUTPUT_TRIAL_DSN           a libpq connection string through the trial's proxy
  PGOUTPUT_TRIAL_HOST, _PORT, _USER, _PASSWORD, _DBNAME   the same, part by part
  PGOUTPUT_TRIAL_SLOT          the slot to stream (made by the trial)
  PGOUTPUT_TRIAL_PUBLICATION   the publication
  PGOUTPUT_TRIAL_SINK          the JSON-lines file to append a line to per applied change:
    {"table": "pgoutput_trial_items", "op": "insert", "key": {"id": 7}, "values": {"version": 1, …}}
  PGOUTPUT_TRIAL_SINK_DATABASE with --sink-database: the database to write the rows to
  PGOUTPUT_TRIAL_SCENARIO      the scenario's name
Verdicts: pass; warn (a latent harm: the judge's findings); fail (lost, partial,
duplicated, reordered, aborted rows applied, wrong value, a crash loop); unknown (the
slot not confirmed to the end within the budget). Exit status: 0 every scenario passed
or warned, 1 one failed, 2 one is unknown (or the trial could not run).

Example (the crate's own consumer, from a checkout):
  pgoutput trial -- cargo run -q -p pgoutput-examples --example trial_consumer
Guide: docs/trial.md"#;

/// Runs `pgoutput trial`.
pub fn trial(args: &TrialArgs) -> Result<ExitCode, String> {
    let mut scenarios = catalogue();
    if let Some(path) = &args.scenarios {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let more = scenario::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        for extra in more {
            if scenarios.iter().any(|s| s.name == extra.name) {
                return Err(format!(
                    "{}: scenario {:?} is in the catalogue already",
                    path.display(),
                    extra.name
                ));
            }
            scenarios.push(extra);
        }
    }
    if !args.scenario.is_empty() {
        let mut chosen = Vec::new();
        for name in &args.scenario {
            let found = scenarios.iter().find(|s| &s.name == name).ok_or_else(|| {
                let names: Vec<&str> = scenarios.iter().map(|s| s.name.as_str()).collect();
                format!("no scenario {name:?}; there are: {}", names.join(", "))
            })?;
            chosen.push(found.clone());
        }
        scenarios = chosen;
    }
    if args.list {
        list(&scenarios);
        return Ok(ExitCode::SUCCESS);
    }
    if args.command.is_empty() && args.attach.is_none() {
        return Err(
            "no consumer to try: give its command after `--` (pgoutput trial -- python3 consumer.py), \
             or --attach ADDR for one already running"
                .into(),
        );
    }
    if args.attach.is_some() && !args.slot.starts_with("pgoutput_trial_") {
        return Err(format!(
            "--slot {:?}: the trial makes and drops only slots named pgoutput_trial_…",
            args.slot
        ));
    }
    // Ctrl-C or SIGTERM: the scenario under way is cleaned up, and the cluster stopped.
    let interrupt = crate::stop_signal()?;
    // The throwaway cluster lives as long as the trial.
    let (upstream, _cluster) = match &args.upstream {
        Some(upstream) => (upstream.clone(), None),
        None => {
            let cluster = crate::cluster::throwaway(args.postgres.as_deref(), &[])
                .map_err(|e| format!("{e}; or give the source with --upstream CONNINFO"))?;
            (cluster.conninfo("postgres", None), Some(cluster))
        }
    };
    let (work_dir, temporary) = match &args.work_dir {
        Some(dir) => (dir.clone(), false),
        None => (
            std::env::temp_dir().join(format!("pgoutput-trial-{}", std::process::id())),
            true,
        ),
    };
    let attach = args.attach.map(|listen| pgoutput_trial::Attached {
        listen,
        slot: args.slot.clone(),
        sink: args
            .sink
            .clone()
            .unwrap_or_else(|| work_dir.join("attached.jsonl")),
    });
    let command = match &attach {
        Some(a) => format!("the consumer attached at {}", a.listen),
        None => args
            .command
            .iter()
            .map(|word| shell_quote(word))
            .collect::<Vec<_>>()
            .join(" "),
    };
    let mut source = match (&args.upstream, &args.postgres) {
        (Some(upstream), _) => format!(" --upstream {}", shell_quote(upstream)),
        (None, Some(dir)) => format!(" --postgres {}", shell_quote(&dir.to_string_lossy())),
        (None, None) => String::new(),
    };
    if let Some(file) = &args.scenarios {
        source += &format!(" --scenarios {}", shell_quote(&file.to_string_lossy()));
    }
    if let Some(sink) = &args.sink_database {
        source += &format!(" --sink-database {}", shell_quote(sink));
    }
    if args.budget != DEFAULT_BUDGET {
        source += &format!(" --budget {}", args.budget);
    }
    let tail = match &attach {
        Some(a) => format!(
            " --attach {} --slot {} --sink {}",
            a.listen,
            shell_quote(&a.slot),
            shell_quote(&a.sink.to_string_lossy())
        ),
        None => format!(" -- {command}"),
    };
    let trial = Trial {
        upstream,
        consumer: command.clone(),
        scenarios,
        seed: args.seed,
        budget: Duration::from_secs(args.budget),
        sink_database: args.sink_database.clone(),
        work_dir: work_dir.clone(),
        replay: format!(
            "pgoutput trial{source} --seed {} --scenario {{scenario}}{tail}",
            args.seed
        ),
        interrupt,
        attach: attach.clone(),
    };
    if let Some(a) = &attach {
        std::fs::create_dir_all(&work_dir).map_err(|e| format!("{}: {e}", work_dir.display()))?;
        let info = pgoutput_client::ConnInfo::parse(Some(&trial.upstream), |_| None)
            .map_err(|e| e.to_string())?;
        eprintln!(
            "attach the consumer: it connects to {} (user {}, database {}), streams slot {} of \
             publication {} and appends to {}; as variables:",
            a.listen,
            info.user,
            info.dbname,
            a.slot,
            pgoutput_trial::schema::PUBLICATION,
            a.sink.display()
        );
        // The password, when there is one, is the consumer's own to give.
        let told = pgoutput_trial::supervise::Assignment {
            host: a.listen.ip().to_string(),
            port: a.listen.port(),
            user: info.user.clone(),
            dbname: info.dbname.clone(),
            ..Default::default()
        };
        eprintln!(
            "  PGOUTPUT_TRIAL_DSN={} PGOUTPUT_TRIAL_SLOT={} PGOUTPUT_TRIAL_PUBLICATION={} \
             PGOUTPUT_TRIAL_SINK={}",
            shell_quote(&told.dsn()),
            a.slot,
            pgoutput_trial::schema::PUBLICATION,
            shell_quote(&a.sink.to_string_lossy())
        );
    }
    let to_stdout = args.json.as_deref() == Some("-");
    let report = trial.run(|progress| {
        // Progress on standard error: standard output is the report.
        match progress {
            Progress::Started {
                number,
                total,
                scenario,
            } => eprint!("[{number}/{total}] {} … ", scenario.name),
            Progress::Finished(report) => eprintln!(
                "{} ({:.1} s)",
                report.verdict.name(),
                report.elapsed_ms as f64 / 1000.0
            ),
            Progress::Skipped(skipped) => eprintln!("skipped {}: {}", skipped.name, skipped.why),
        }
    })?;
    let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    let mut stdout = std::io::stdout();
    if to_stdout {
        writeln!(stdout, "{json}").map_err(|e| e.to_string())?;
    } else {
        write!(stdout, "{}", report.to_text()).map_err(|e| e.to_string())?;
        if let Some(path) = &args.json {
            std::fs::write(path, json + "\n").map_err(|e| format!("{path}: {e}"))?;
        }
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, report.to_junit()).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let verdict = report.verdict();
    if temporary && verdict == pgoutput_trial::Verdict::Pass {
        let _ = std::fs::remove_dir_all(&work_dir);
    }
    Ok(ExitCode::from(verdict.exit_code() as u8))
}

fn list(scenarios: &[Scenario]) {
    for s in scenarios {
        println!("{}\n  class:  {}\n  expect: {}", s.name, s.class, s.expect);
        if !s.reports.is_empty() {
            println!("  seen in: {}", s.reports.join(", "));
        }
    }
}

/// `word` as a POSIX shell word.
fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@%+".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}
