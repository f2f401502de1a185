'use strict';
// postgres.js (the `postgres` package) as its README shows `sql.subscribe` with a named slot
// (at-least-once: a transaction is confirmed once its handlers have finished, a quiet slot up
// to the server's WAL end), through a fault inside a transaction with the probe armed, on the
// test server and through the proxy in front of the PostgreSQL 15 this file starts: every row
// arrives, and the judge accuses it of nothing.

const assert = require('node:assert/strict');
const { after, before, test } = require('node:test');
const { lsnToBigInt, lsnToText, startProxy, startServer } = require('pgoutput-codec');
const { createSlot, script } = require('./consumers.js');
const { query, startPostgres15 } = require('./postgres.js');

let postgres;
before(async () => {
  postgres = await startPostgres15();
});
after(() => postgres && postgres.stop());

/**
 * Subscribes to publication p through `clientConfig` on slot `slot`, as postgres.js's README
 * does, with an async handler, until `count` distinct ids have come (a transaction sent
 * again after a fault comes twice: delivery is at least once); then waits for
 * `confirmed(lsn)` (`lsn`: the last row's transaction, as postgres.js gives it) while still
 * subscribed, and ends the subscription as its README says (`sql.end()`).
 */
async function subscribe(clientConfig, slot, count, confirmed) {
  const { default: postgresjs } = await import('postgres');
  const sql = postgresjs({
    host: clientConfig.host,
    port: clientConfig.port,
    user: clientConfig.user,
    database: clientConfig.database,
    publications: 'p',
    slot,
    onnotice: () => {},
  });
  const ids = [];
  const errors = [];
  let connects = 0;
  let done;
  const all = new Promise((resolve) => { done = resolve; });
  try {
    // The schema named: postgres.js's pattern takes a one-letter `insert:t` for a key.
    await sql.subscribe(
      'insert:public.t',
      async (row, { lsn }) => {
        ids.push(row.id);
        if (distinct(ids).length === count) done(lsn);
      },
      () => { connects += 1; },
      (error) => errors.push(error),
    );
    await confirmed(await all);
  } finally {
    await sql.end();
  }
  return { ids, errors, connects };
}

/** Each id once, in order, whatever was delivered twice. */
function distinct(ids) {
  return [...new Set(ids)];
}

test('postgres.js subscribe with a slot gets every row through a close inside a transaction on the test server, accused of nothing', { timeout: 120000 }, async (t) => {
  const server = await startServer({
    script: script(4),
    publication: 'p',
    probe: 1,
    faults: [{ when: { on: 'change', transaction: 2, after: 1 }, then: { do: 'close' }, slot: 'pjs' }],
  });
  t.after(() => server.close());
  // It confirms the last transaction once its handler has finished: the slot reaches the
  // WAL end while it is subscribed.
  const end = await server.walEnd();
  const { ids, connects } = await subscribe(server.clientConfig, 'pjs', 8,
    async () => assert.equal(await server.waitForFlush('pjs', end, 30000), end));

  assert.deepEqual(distinct(ids), [1, 2, 3, 4, 5, 6, 7, 8]);
  assert.equal(connects, 2, 'connected, then again after the close');
  assert.deepEqual((await server.faults()).map((f) => f.fired), [1]);
  await server.assertNoFindings();
});

test('postgres.js subscribe with a slot gets every row through the proxy\'s reset inside a transaction, accused of nothing', { timeout: 120000 }, async (t) => {
  const proxy = await startProxy({
    upstream: postgres.dsn,
    probe: 1,
    faults: [{ when: { on: 'change', transaction: 2, after: 1 }, then: { do: 'reset' }, slot: 'pjs' }],
  });
  t.after(() => proxy.close());
  t.after(() => query(postgres.clientConfig,
    "SELECT pg_drop_replication_slot('pjs') FROM pg_replication_slots WHERE slot_name = 'pjs' AND NOT active"));
  // The slot made beforehand, as a deployment does (postgres.js then finds it there and
  // starts where it was confirmed), and four transactions of two rows waiting in it.
  await createSlot(proxy.clientConfig, 'pjs');
  for (let i = 0; i < 4; i++) {
    await query(postgres.clientConfig, "INSERT INTO t VALUES ($1, 'a'), ($2, 'b')", [300 + 2 * i, 301 + 2 * i]);
  }
  // Confirmed past the last transaction's commit (postgres.js gives the position of its
  // commit record) while subscribed.
  const { ids, connects } = await subscribe(proxy.clientConfig, 'pjs', 8, async (lsn) => {
    const past = lsnToText(lsnToBigInt(lsn) + 1n);
    assert.ok(lsnToBigInt(await proxy.waitForFlush('pjs', past, 30000)) > lsnToBigInt(lsn));
  });

  assert.deepEqual(distinct(ids), [300, 301, 302, 303, 304, 305, 306, 307]);
  assert.ok(connects >= 2, `connected again after the reset (${connects})`);
  assert.deepEqual((await proxy.faults()).map((f) => f.fired), [1]);
  const connections = await proxy.connections();
  assert.ok(connections.some((c) => c.ended === 'a rule reset it'), JSON.stringify(connections));
  await proxy.assertNoFindings();
});
