'use strict';
// startProxy in front of the PostgreSQL 15 this file starts: a pg-logical-replication consumer
// through it, its connection reset inside a transaction.

const assert = require('node:assert/strict');
const { after, before, test } = require('node:test');
const { lsnToBigInt, lsnToText, startProxy } = require('pgoutput-codec');
const { Consumer, createSlot } = require('./consumers.js');
const { query, startPostgres15, waitForConfirmed } = require('./postgres.js');

let postgres;
before(async () => {
  postgres = await startPostgres15();
});
after(() => postgres && postgres.stop());

test('a pg-logical-replication consumer through the proxy gets every row once through a reset inside a transaction', { timeout: 120000 }, async (t) => {
  const proxy = await startProxy({
    upstream: postgres.dsn,
    faults: [{ when: { on: 'change', transaction: 2, after: 1 }, then: { do: 'reset' }, slot: 'through' }],
  });
  t.after(() => proxy.close());
  assert.equal(proxy.upstream, postgres.dsn);
  // The upstream's words with the proxy's host and port.
  assert.equal(proxy.dsn, `user=postgres dbname=postgres host=127.0.0.1 port=${proxy.port}`);

  await createSlot(proxy.clientConfig, 'through');
  t.after(() => query(postgres.clientConfig,
    "SELECT pg_drop_replication_slot('through') FROM pg_replication_slots WHERE slot_name = 'through' AND NOT active"));
  for (let i = 0; i < 4; i++) {
    await query(postgres.clientConfig, "INSERT INTO t VALUES ($1, 'a'), ($2, 'b')", [100 + 2 * i, 101 + 2 * i]);
  }
  const consumer = new Consumer(proxy.clientConfig, 'through');
  await consumer.run((c) => c.applied.length === 4, async (c) => {
    const end = lsnToText(c.lastEnd);
    assert.ok(lsnToBigInt(await proxy.waitForFlush('through', end, 30000)) >= c.lastEnd);
  });

  assert.deepEqual(consumer.ids(), [[100, 101], [102, 103], [104, 105], [106, 107]]);
  // PostgreSQL's walsender may still hold the slot when the consumer comes back (it exits
  // once it notices the closed socket): a refusal (55006) is tried again, not a lost stream.
  assert.equal(consumer.disconnects, 1, consumer.lost.join('\n'));
  assert.deepEqual((await proxy.faults()).map((f) => f.fired), [1]);
  const connections = await proxy.connections();
  assert.ok(connections.some((c) => c.ended === 'a rule reset it'), JSON.stringify(connections));
  await proxy.assertNoFindings();
  // PostgreSQL itself gets the slot where the consumer confirmed it (the status update the
  // proxy saw reaches the walsender a moment later).
  await waitForConfirmed(postgres.clientConfig, 'through', consumer.lastEnd, 30000);
});

test('pg-logical-replication as its README shows it (the library acknowledges) is accused of nothing through the proxy\'s reset, probe armed', { timeout: 120000 }, async (t) => {
  const proxy = await startProxy({
    upstream: postgres.dsn,
    probe: 1,
    faults: [{ when: { on: 'change', transaction: 3, after: 1 }, then: { do: 'reset' }, slot: 'auto' }],
  });
  t.after(() => proxy.close());
  await createSlot(proxy.clientConfig, 'auto');
  t.after(() => query(postgres.clientConfig,
    "SELECT pg_drop_replication_slot('auto') FROM pg_replication_slots WHERE slot_name = 'auto' AND NOT active"));
  for (let i = 0; i < 4; i++) {
    await query(postgres.clientConfig, "INSERT INTO t VALUES ($1, 'a'), ($2, 'b')", [200 + 2 * i, 201 + 2 * i]);
  }
  // Its first status update after the reset is 0/1 (the library's 0/0 + 1 for a Relation),
  // which PostgreSQL ignores; each acknowledgement is a message's position + 1.
  const consumer = new Consumer(proxy.clientConfig, 'auto', { auto: true });
  await consumer.run((c) => c.applied.length === 4);

  assert.deepEqual(consumer.ids(), [[200, 201], [202, 203], [204, 205], [206, 207]]);
  // PostgreSQL's walsender may still hold the slot when the consumer comes back (it exits
  // once it notices the closed socket): a refusal (55006) is tried again, not a lost stream.
  assert.equal(consumer.disconnects, 1, consumer.lost.join('\n'));
  assert.deepEqual((await proxy.faults()).map((f) => f.fired), [1]);
  await proxy.assertNoFindings();
});

test('the upstream password is in no argument, log line or error of the proxy', { timeout: 60000 }, async (t) => {
  const fs = require('node:fs');
  const secret = 'hunter2-upstream-secret';
  const proxy = await startProxy({ upstream: `${postgres.dsn} password=${secret}` });
  t.after(() => proxy.close());
  const cmdline = fs.readFileSync(`/proc/${proxy._child.pid}/cmdline`, 'utf8');
  assert.ok(cmdline.includes('--upstream'), cmdline);
  assert.ok(!cmdline.includes(secret), cmdline);
  assert.ok(proxy.dsn.includes(secret), "the consumer's connection string keeps it");
  const error = await proxy.waitForFlush('nothing-streams-this', '0/1', 100).catch((e) => e);
  assert.ok(error instanceof Error, 'the wait timed out');
  assert.ok(!String(error.message).includes(secret) && !String(error.log || '').includes(secret), error.message);
  assert.ok(!proxy.log.includes(secret), proxy.log);
});
