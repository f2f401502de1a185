'use strict';
// pg-logical-replication against the test server: a correct consumer through a fault inside a
// transaction, and a buggy one the judge catches.

const assert = require('node:assert/strict');
const { test } = require('node:test');
const { FindingsError, lsnToText, startServer } = require('pgoutput-codec');
const { Consumer, ConfirmsAtBegin, createSlot, script } = require('./consumers.js');

// The connection is closed after the first change of transaction 2.
const CLOSE_IN_TRANSACTION_2 = {
  when: { on: 'change', transaction: 2, after: 1 },
  then: { do: 'close' },
  slot: 'js',
};

test('a pg-logical-replication consumer gets every row once through a close inside a transaction', { timeout: 120000 }, async (t) => {
  const server = await startServer({ script: script(4), publication: 'p', probe: 1, faults: [CLOSE_IN_TRANSACTION_2] });
  t.after(() => server.close());
  assert.equal(server.dsn, `host=127.0.0.1 port=${server.port} dbname=postgres user=postgres`);
  assert.deepEqual(await server.probe(), { every: 1, after: 1, wait_ms: 1000 });

  await createSlot(server.clientConfig, 'js');
  const consumer = new Consumer(server.clientConfig, 'js');
  const end = await server.walEnd();
  await consumer.run((c) => c.applied.length === 4,
    async () => assert.equal(await server.waitForFlush('js', end, 30000), end));

  assert.deepEqual(consumer.ids(), [[1, 2], [3, 4], [5, 6], [7, 8]]);
  assert.equal(consumer.disconnects, 1, consumer.lost.join('\n'));
  // The test server releases the slot before the client sees the connection end.
  assert.equal(consumer.refusals, 0, consumer.lost.join('\n'));
  assert.equal(lsnToText(consumer.lastEnd), end);
  assert.deepEqual((await server.faults()).map((f) => f.fired), [1]);

  await server.assertNoFindings();
  assert.deepEqual(await server.findings(), []);
  const facts = await server.facts('js');
  // Ended twice: by the fault, then by the consumer when it stopped.
  assert.deepEqual(facts.filter((f) => f.fact === 'ended').map((f) => f.how), ['fault', 'client']);
  assert.equal(facts.filter((f) => f.fact === 'started').length, 2);
  const slot = await server.slot('js');
  assert.equal(slot.confirmed_flush_lsn, end);
  assert.ok(slot.probes > 0 && slot.probes_answered === slot.probes, JSON.stringify(slot));
});

test('pg-logical-replication as its README shows it (the library acknowledges) is accused of nothing through a close inside a transaction', { timeout: 120000 }, async (t) => {
  const server = await startServer({ script: script(4), publication: 'p', probe: 1, faults: [{ ...CLOSE_IN_TRANSACTION_2, slot: 'auto' }] });
  t.after(() => server.close());
  await createSlot(server.clientConfig, 'auto');
  const consumer = new Consumer(server.clientConfig, 'auto', { auto: true });
  await consumer.run((c) => c.applied.length === 4);

  // Every transaction applied once, in order (one sent again after the close is known by
  // its end, and not applied twice).
  assert.deepEqual(consumer.ids(), [[1, 2], [3, 4], [5, 6], [7, 8]]);
  assert.equal(consumer.disconnects, 1, consumer.lost.join('\n'));
  // The test server releases the slot before the client sees the connection end.
  assert.equal(consumer.refusals, 0, consumer.lost.join('\n'));
  assert.deepEqual((await server.faults()).map((f) => f.fired), [1]);
  await server.assertNoFindings();
});

test('a consumer acknowledging at Begin fails assertNoFindings with the judge\'s account', { timeout: 120000 }, async (t) => {
  const server = await startServer({ script: script(3), publication: 'p', probe: 1 });
  t.after(() => server.close());
  await createSlot(server.clientConfig, 'bug');
  const consumer = new ConfirmsAtBegin(server.clientConfig, 'bug');
  await consumer.run((c) => c.applied.length === 3, () => server.waitForFlush('bug'));
  assert.deepEqual(consumer.ids(), [[1, 2], [3, 4], [5, 6]]);

  const error = await server.assertNoFindings().then(
    () => assert.fail('assertNoFindings resolved for a consumer that acknowledges at Begin'),
    (e) => e,
  );
  assert.ok(error instanceof FindingsError, String(error));
  assert.equal(error.code, 'ERR_ASSERTION');
  assert.equal(error.text, error.message);
  assert.match(error.text, /^\d+ findings? of pgoutput serve:\n- confirmed_unsent \(slot bug\): confirmed a flush position of /);
  assert.ok(error.findings.length >= 1);
  for (const finding of error.findings) {
    assert.equal(finding.finding, 'confirmed_unsent');
    assert.equal(finding.slot, 'bug');
    assert.ok(error.text.includes(finding.text));
  }
  // The slot's findings alone, and none of another slot.
  await assert.rejects(server.assertNoFindings('bug'), FindingsError);
  await server.assertNoFindings('another');
});
