'use strict';
// A PostgreSQL 15 for the proxy to stand in front of (from PGOUTPUT_PG15_BIN, as the Rust and
// Python suites take it): logical replication on 127.0.0.1, table t (id int4 key, v text) in
// publication p. PostgreSQL refuses to run as root: as root, it runs as the `postgres` user
// Debian's package made.

const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const pg = require('pg');

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** Starts it; resolves with `{ dsn, clientConfig, stop() }`. */
async function startPostgres15() {
  const bin = process.env.PGOUTPUT_PG15_BIN;
  if (!bin) throw new Error("PGOUTPUT_PG15_BIN must name PostgreSQL 15's bin directory (scripts/install-postgres prints it)");
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'pgoutput-js-pg15-'));
  const data = path.join(root, 'data');
  const as = {};
  if (process.getuid() === 0) {
    as.uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }));
    as.gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }));
    fs.chownSync(root, as.uid, as.gid);
  }
  const run = (program, ...args) => execFileSync(path.join(bin, program), args, { ...as, cwd: root, stdio: 'pipe' });
  const port = await freePort();
  run('initdb', '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--locale=C', '-N', '-D', data);
  fs.appendFileSync(path.join(data, 'postgresql.conf'),
    `listen_addresses = '127.0.0.1'\nport = ${port}\nunix_socket_directories = '${root}'\n` +
    'wal_level = logical\nmax_replication_slots = 20\nmax_wal_senders = 20\n' +
    'fsync = off\nsynchronous_commit = off\nshared_buffers = 16MB\n');
  run('pg_ctl', '-D', data, '-l', path.join(root, 'log'), '-w', 'start');
  const stop = () => {
    try {
      run('pg_ctl', '-D', data, '-m', 'immediate', 'stop');
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  };
  const clientConfig = { host: '127.0.0.1', port, user: 'postgres', database: 'postgres' };
  try {
    await query(clientConfig, 'CREATE TABLE t (id int PRIMARY KEY, v text); CREATE PUBLICATION p FOR TABLE t');
  } catch (error) {
    stop();
    throw error;
  }
  return { dsn: `host=127.0.0.1 port=${port} user=postgres dbname=postgres`, clientConfig, stop };
}

/** Runs `sql` on a connection of its own. */
async function query(clientConfig, sql, values) {
  const client = new pg.Client(clientConfig);
  await client.connect();
  try {
    return await client.query(sql, values);
  } finally {
    await client.end();
  }
}

/**
 * Waits until PostgreSQL itself has `slot` confirmed at `lsn` (a BigInt) or past it, and
 * answers its `confirmed_flush_lsn` as text. A status update the proxy relayed reaches the
 * walsender a moment after the proxy saw it, so this is what a check of the real slot waits
 * on; it fails after `timeoutMs` with the position it last saw.
 */
async function waitForConfirmed(clientConfig, slot, lsn, timeoutMs) {
  const { lsnToBigInt } = require('pgoutput-codec');
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { rows } = await query(clientConfig,
      'SELECT confirmed_flush_lsn::text AS lsn FROM pg_replication_slots WHERE slot_name = $1', [slot]);
    const seen = rows.length ? rows[0].lsn : null;
    if (seen && lsnToBigInt(seen) >= lsn) {
      return seen;
    }
    if (Date.now() > deadline) {
      throw new Error(`slot ${slot} at ${seen}, not confirmed to ${lsn} after ${timeoutMs} ms`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

module.exports = { query, startPostgres15, waitForConfirmed };
