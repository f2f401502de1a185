'use strict';
// The `pgoutput` command (bin/pgoutput.js): found by npx, passing on arguments, the exit
// status and signals.

const assert = require('node:assert/strict');
const { execFile, spawn } = require('node:child_process');
const { once } = require('node:events');
const path = require('node:path');
const { test } = require('node:test');
const { promisify } = require('node:util');

const run = promisify(execFile);
const shim = path.join(path.dirname(require.resolve('pgoutput-codec/package.json')), 'bin', 'pgoutput.js');

test('npx pgoutput --help', async () => {
  const { stdout } = await run('npx', ['--offline', 'pgoutput', '--help']);
  assert.match(stdout, /Usage: pgoutput <COMMAND>/);
  assert.match(stdout, /serve/);
  const serve = await run('npx', ['--offline', 'pgoutput', 'serve', '--help']);
  assert.match(serve.stdout, /--control <ADDR>/);
});

test('the exit status is the program\'s', async () => {
  const error = await run(process.execPath, [shim, 'frobnicate']).catch((e) => e);
  assert.equal(error.code, 2); // clap's status for a usage error
  assert.match(error.stderr, /frobnicate/);
});

test('SIGINT to the command stops the program cleanly', async () => {
  const child = spawn(process.execPath, [shim, 'serve', '--listen', '127.0.0.1:0'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr.setEncoding('utf8');
  const listening = new Promise((resolve) => {
    child.stderr.on('data', (text) => {
      log += text;
      if (/control API|listening on/.test(log)) resolve();
    });
  });
  const exited = once(child, 'exit');
  const ended = once(child.stderr, 'end');
  await listening;
  child.kill('SIGINT'); // to the shim alone, not to a process group
  const [code, signal] = await exited;
  assert.deepEqual([code, signal], [0, null], log);
  await ended;
  assert.match(log, /pgoutput serve: stopping/);
});
