'use strict';
// runTrial against the PostgreSQL 15 this file starts: the repository guide's psycopg2
// consumer passes, a variant that applies what is sent again fails with the duplicates
// named, a PostgreSQL subscriber is graded by its tables (sinkDatabase), a consumer
// already running is attached to (attach), and a trial that cannot run rejects with the
// reason.

const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { after, before, test } = require('node:test');
const { PgoutputError, TrialFailed, runTrial } = require('pgoutput-codec');
const { query, startPostgres15 } = require('./postgres.js');

// The consumers are the repository's (test/run names its root; the tests run from a
// project of their own).
const repo = process.env.PGOUTPUT_REPO || path.join(__dirname, '..', '..', '..');
const guide = path.join(repo, 'docs', 'examples', 'python', 'trial_consumer.py');
const buggy = path.join(repo, 'tests', 'trial', 'buggy_consumer.py');
const subscriber = path.join(repo, 'docs', 'examples', 'python', 'trial_subscriber.py');

let postgres;
before(async () => {
  postgres = await startPostgres15();
});
after(() => postgres && postgres.stop());

test("the guide's consumer passes the scenarios it is run through", { timeout: 300000 }, async () => {
  const report = await runTrial({ command: ['python3', guide], upstream: postgres.dsn, scenarios: ['baseline', 'killed-after-acknowledging'] });
  report.assertPassed({ allowWarn: false });
  assert.equal(report.verdict, 'pass');
  assert.equal(report.exitCode, 0);
  assert.deepEqual(report.scenarios.map((s) => s.name), ['baseline', 'killed-after-acknowledging']);
  assert.match(report.progress, /\[2\/2\] killed-after-acknowledging/);
});

test('a consumer that applies what is sent again fails with the duplicates named', { timeout: 300000 }, async () => {
  const report = await runTrial({ command: ['python3', buggy, 'applies-resent'], upstream: postgres.dsn, scenarios: ['baseline', 'crash-resends-confirmed'] });
  assert.equal(report.exitCode, 1);
  assert.equal(report.scenario('baseline').verdict, 'pass');
  const crash = report.scenario('crash-resends-confirmed');
  assert.equal(crash.verdict, 'fail');
  assert.deepEqual([...new Set(crash.kinds)], ['duplicated']);
  assert.match(crash.replay, /--scenario crash-resends-confirmed/);
  assert.throws(() => report.assertPassed(), (error) => error instanceof TrialFailed && /crash-resends-confirmed\s+fail/.test(error.message));
});

test('a trial that cannot run rejects with the reason', async () => {
  await assert.rejects(runTrial({ command: ['python3', guide], upstream: postgres.dsn, scenarios: ['nope'] }),
    (error) => error instanceof PgoutputError && /no scenario "nope"/.test(error.message));
});

test('a PostgreSQL subscriber is graded by its tables', { timeout: 300000 }, async () => {
  const { rows } = await query(postgres.clientConfig, "SELECT 1 FROM pg_database WHERE datname = 'pgoutput_trial_node_sink'");
  if (rows.length === 0) await query(postgres.clientConfig, 'CREATE DATABASE pgoutput_trial_node_sink');
  const sinkDatabase = postgres.dsn.replace('dbname=postgres', 'dbname=pgoutput_trial_node_sink');
  const report = await runTrial({ command: ['python3', subscriber], upstream: postgres.dsn, sinkDatabase, scenarios: ['baseline'] });
  report.assertPassed({ allowWarn: false });
  assert.match(report.scenario('baseline').sink, /the tables of pgoutput_trial_node_sink/);
  // The guide's JSON-lines consumer writes nothing there: every row is missing.
  const missing = await runTrial({ command: ['python3', guide], upstream: postgres.dsn, sinkDatabase, scenarios: ['baseline'] });
  assert.equal(missing.exitCode, 1);
  assert.deepEqual([...new Set(missing.scenario('baseline').kinds)], ['missing']);
});

test('a consumer already running is attached to', { timeout: 300000 }, async () => {
  // The guide's consumer under a supervisor of its own (started again whenever it exits,
  // as systemd's Restart=always does), started before the trial.
  const port = await new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port: free } = server.address();
      server.close(() => resolve(free));
    });
  });
  const sink = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'pgoutput-node-attach-')), 'sink.jsonl');
  const env = {
    ...process.env,
    PGOUTPUT_TRIAL_DSN: `host=127.0.0.1 port=${port} user=${postgres.clientConfig.user} dbname=postgres sslmode=disable`,
    PGOUTPUT_TRIAL_SLOT: 'pgoutput_trial_node',
    PGOUTPUT_TRIAL_PUBLICATION: 'pgoutput_trial',
    PGOUTPUT_TRIAL_SINK: sink,
  };
  let stopped = false;
  let child = null;
  const supervise = () => {
    if (stopped) return;
    child = spawn('python3', [guide], { env, stdio: 'ignore' });
    child.once('exit', () => setTimeout(supervise, 100));
  };
  supervise();
  let report;
  try {
    report = await runTrial({
      attach: `127.0.0.1:${port}`,
      slot: 'pgoutput_trial_node',
      sink,
      upstream: postgres.dsn,
      scenarios: ['baseline', 'killed-after-acknowledging', 'cut-inside-transaction'],
    });
  } finally {
    stopped = true;
    const last = child;
    if (last.exitCode === null && last.signalCode === null) {
      await new Promise((resolve) => {
        last.once('exit', resolve);
        last.kill('SIGKILL');
      });
    }
  }
  report.assertPassed({ allowWarn: false });
  assert.deepEqual(report.scenarios.map((s) => s.name), ['baseline', 'cut-inside-transaction']);
  assert.deepEqual(Object.keys(report.skipped), ['killed-after-acknowledging']);
  assert.match(report.skipped['killed-after-acknowledging'], /attached/);
  await assert.rejects(runTrial({ command: ['python3', guide], attach: `127.0.0.1:${port}` }), /not both/);
});
